//! The UDP echo prober: each request is one datagram to an agent's UDP echo port
//! (crate::udp_echo), answered by its echo. Beyond the latency of each, the stream shows what
//! only datagrams show: loss, duplicates, reordering, the jitter of the path to the target
//! (from the target's kernel receive times) and how many routers each way.
//!
//! One connected socket per target carries every datagram, so the kernel drops anything not
//! from the target and an ICMP "port unreachable" comes back as a refusal. There is no reader
//! task: whichever request is waiting reads the socket and hands each echo to the request it
//! belongs to (often itself), so an echo wakes one task, not two.

mod ancillary;
pub mod sequence;
pub mod socket;
pub mod tally;
pub mod wire;

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;

use tokio::net::UdpSocket;
use tokio::sync::{OnceCell, oneshot};

use super::Prober;
use super::http::classify_io;
use super::outcome::{Attempt, ErrorClass, ProbeError};
use super::record::Recorder;
use sequence::{Arrival, Book};
use tally::EchoReading;
use wire::{HEADER_BYTES, MAX_BYTES, Request};

/// The datagram size when none is asked for: a small probe, as most application traffic.
pub const DEFAULT_PAYLOAD_BYTES: usize = 64;

/// Echoes drained from the socket when the run ends (late ones and duplicates still queued).
const MAX_DRAINED: usize = 10_000;

/// The requests waiting for their echoes, and the stream's book.
#[derive(Default)]
struct Waiting {
    book: Book,
    waiters: HashMap<u64, oneshot::Sender<EchoReading>>,
}

/// Probes one UDP echo port.
pub struct UdpProber {
    addr: SocketAddr,
    payload_bytes: usize,
    stream: u64,
    socket: OnceCell<UdpSocket>,
    waiting: Mutex<Waiting>,
}

/// Why a UDP prober cannot be built.
#[derive(Debug, thiserror::Error)]
#[error("payload size {0}: must be between {HEADER_BYTES} and {MAX_BYTES} bytes")]
pub struct PayloadSizeError(pub usize);

impl UdpProber {
    /// A prober of `addr` sending `payload_bytes` per datagram.
    pub fn new(addr: SocketAddr, payload_bytes: usize) -> Result<UdpProber, PayloadSizeError> {
        if !(HEADER_BYTES..=MAX_BYTES).contains(&payload_bytes) {
            return Err(PayloadSizeError(payload_bytes));
        }
        Ok(UdpProber {
            addr,
            payload_bytes,
            stream: rand::random(),
            socket: OnceCell::new(),
            waiting: Mutex::new(Waiting::default()),
        })
    }

    /// The address probed.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn open(&self) -> io::Result<UdpSocket> {
        let local: SocketAddr = match self.addr {
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(self.addr),
            socket2::Type::DGRAM,
            None,
        )?;
        socket.set_nonblocking(true)?;
        socket.bind(&local.into())?;
        socket.connect(&self.addr.into())?;
        socket::enable_receive_info(&socket, self.addr.is_ipv6())?;
        UdpSocket::from_std(socket.into())
    }

    async fn socket(&self) -> io::Result<&UdpSocket> {
        self.socket.get_or_try_init(|| async { self.open() }).await
    }

    /// Hands an echo read off the socket to the request awaiting it, or counts it.
    fn dispatch(&self, echo: &[u8], return_ttl: Option<u8>) {
        let Some(echo) = wire::read_echo(echo).filter(|e| e.request.stream == self.stream) else {
            return;
        };
        let seq = echo.request.seq;
        let mut waiting = self.waiting();
        let waiter = waiting.waiters.remove(&seq);
        if let Arrival::First { reordered } = waiting.book.arrive(seq, waiter.is_some())
            && let Some(waiter) = waiter
        {
            // A request dropped by its timeout just now lost its echo: it counts as a loss.
            let _ = waiter.send(EchoReading {
                transit_ns: echo.received_ns.wrapping_sub(echo.request.sent_ns) as i64,
                forward_hops: echo.ttl.and_then(socket::hops),
                return_hops: return_ttl.and_then(socket::hops),
                reordered,
            });
        }
    }

    async fn exchange(&self) -> Result<EchoReading, ProbeError> {
        let socket = self.socket().await.map_err(|e| classify_io(&e))?;
        let (seq, answer) = {
            let (sender, answer) = oneshot::channel();
            let mut waiting = self.waiting();
            let seq = waiting.book.send();
            waiting.waiters.insert(seq, sender);
            (seq, answer)
        };
        // A request dropped by the engine's timeout stops waiting: its echo, if it ever
        // comes, is late.
        let _unregister = Unregister { prober: self, seq };
        let mut datagram = vec![0u8; self.payload_bytes];
        Request {
            stream: self.stream,
            seq,
            sent_ns: socket::wall_ns(),
        }
        .write(&mut datagram);
        socket.send(&datagram).await.map_err(|e| classify_io(&e))?;
        let mut buf = vec![0u8; self.payload_bytes + 1];
        tokio::pin!(answer);
        loop {
            tokio::select! {
                biased;
                reading = &mut answer => {
                    return reading.map_err(|_| ProbeError::new(ErrorClass::Other, "echo lost"));
                }
                read = socket::recv(socket, &mut buf) => match read {
                    Ok(d) if !d.truncated => self.dispatch(&buf[..d.len], d.info.ttl),
                    Ok(_) => {}
                    Err(e) => return Err(classify_io(&e)),
                },
            }
        }
    }
}

/// Removes a request's waiter when it stops waiting.
struct Unregister<'a> {
    prober: &'a UdpProber,
    seq: u64,
}

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        self.prober.waiting().waiters.remove(&self.seq);
    }
}

impl Prober for UdpProber {
    fn kind(&self) -> &'static str {
        "udp"
    }

    async fn probe(&self) -> Attempt {
        match self.exchange().await {
            Ok(reading) => Attempt {
                result: Ok(()),
                code: None,
                bytes: self.payload_bytes as u64,
                connect: None,
                queued: std::time::Duration::ZERO,
                phases: Default::default(),
                echo: Some(reading),
            },
            Err(error) => Attempt::failed(error),
        }
    }

    /// Reads the echoes still queued (late ones, duplicates) and adds the stream's counts.
    fn finish(&self, recorder: &mut Recorder) {
        if let Some(socket) = self.socket.get() {
            let mut buf = vec![0u8; self.payload_bytes + 1];
            for _ in 0..MAX_DRAINED {
                match socket::try_recv(socket, &mut buf) {
                    Ok(d) if !d.truncated => self.dispatch(&buf[..d.len], d.info.ttl),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {}
                }
            }
        }
        let waiting = self.waiting();
        let tally = recorder.datagrams.get_or_insert_default();
        tally.payload_bytes = self.payload_bytes as u64;
        tally.duplicates = waiting.book.duplicates;
        tally.late = waiting.book.late;
    }
}

#[cfg(test)]
mod tests;
