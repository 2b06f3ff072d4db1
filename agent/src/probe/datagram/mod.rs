//! The datagram echo probers: each request is one datagram, answered by its echo — a UDP
//! datagram to an agent's UDP echo port (crate::udp_echo), or an ICMP echo request to any
//! address. Beyond the latency of each, the stream shows what only datagrams show: loss,
//! duplicates, reordering, jitter and how many routers each way.
//!
//! One connected socket per target carries every datagram, so the kernel drops anything not
//! from the target (and, for UDP, an ICMP "port unreachable" comes back as a refusal). There is
//! no reader task: whichever request is waiting reads the socket and hands each echo to the
//! request it belongs to (often itself), so an echo wakes one task, not two. What differs
//! between UDP and ICMP — the socket, the datagram around kdoctor's header, what the echo tells
//! — is an [`EchoCodec`].

mod ancillary;
pub mod icmp;
mod interface;
pub mod pmtu;
pub mod sequence;
pub mod socket;
pub mod tally;
pub mod udp;
pub mod wire;

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Mutex;

use tokio::net::UdpSocket;
use tokio::sync::{OnceCell, oneshot};

use super::Prober;
use super::http::classify_io;
use super::outcome::{Attempt, ErrorClass, ProbeError};
use super::record::Recorder;
pub use icmp::IcmpEcho;
use sequence::{Arrival, Book};
use tally::EchoReading;
pub use udp::UdpEcho;
use wire::{HEADER_BYTES, MAX_BYTES, Request};

/// The datagram size when none is asked for: a small probe, as most application traffic.
pub const DEFAULT_PAYLOAD_BYTES: usize = 64;

/// What an echo said, read by a codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The request it echoes.
    pub request: Request,
    /// TTL or hop limit the target read on the request (UDP echo ports write it in).
    pub target_ttl: Option<u8>,
    /// The target's receive time (ns, its clock), when the target writes it in.
    pub target_received_ns: Option<u64>,
}

/// How one kind of echo is carried.
pub trait EchoCodec: Send + Sync + 'static {
    /// `udp` or `icmp` (metric label).
    const KIND: &'static str;
    /// Bytes the codec puts around kdoctor's header.
    const OVERHEAD: usize;
    /// Bytes a read may carry before the echo (a raw socket's IP header).
    const HEADROOM: usize = 0;
    /// A socket of the target's family, not yet connected.
    fn open(addr: SocketAddr) -> io::Result<socket2::Socket>;
    /// The datagram of `request`, `size` bytes long, to an IPv6 target or not.
    fn encode(request: &Request, size: usize, ipv6: bool) -> Vec<u8>;
    /// The echo in `datagram`, if it is one.
    fn decode(datagram: &[u8]) -> Option<Decoded>;
}

/// Echoes drained from the socket when the run ends (late ones and duplicates still queued).
const MAX_DRAINED: usize = 10_000;

/// The requests waiting for their echoes, and the stream's book.
#[derive(Default)]
struct Waiting {
    book: Book,
    waiters: HashMap<u64, oneshot::Sender<EchoReading>>,
}

/// Probes one target with echoes carried by `C`.
pub struct DatagramProber<C> {
    codec: std::marker::PhantomData<C>,
    addr: SocketAddr,
    payload_bytes: usize,
    stream: u64,
    socket: OnceCell<UdpSocket>,
    waiting: Mutex<Waiting>,
}

/// Probes one UDP echo port.
pub type UdpProber = DatagramProber<UdpEcho>;
/// Probes one address with ICMP echo requests.
pub type IcmpProber = DatagramProber<IcmpEcho>;

/// Why a datagram prober cannot be built.
#[derive(Debug, thiserror::Error)]
#[error("payload size {size}: must be between {min} and {max} bytes")]
pub struct PayloadSizeError {
    /// The size asked for.
    pub size: usize,
    /// The smallest the codec takes.
    pub min: usize,
    /// The largest.
    pub max: usize,
}

impl<C: EchoCodec> DatagramProber<C> {
    /// A prober of `addr` sending `payload_bytes` per datagram (the transport's payload:
    /// UDP's, or ICMP's with its 8-byte header).
    pub fn new(addr: SocketAddr, payload_bytes: usize) -> Result<Self, PayloadSizeError> {
        let (min, max) = (HEADER_BYTES + C::OVERHEAD, MAX_BYTES);
        if !(min..=max).contains(&payload_bytes) {
            return Err(PayloadSizeError {
                size: payload_bytes,
                min,
                max,
            });
        }
        Ok(DatagramProber {
            codec: std::marker::PhantomData,
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
        let socket = socket::connected(C::open(self.addr)?, self.addr)?;
        socket::enable_receive_info(&socket, self.addr.is_ipv6())?;
        UdpSocket::from_std(socket.into())
    }

    async fn socket(&self) -> io::Result<&UdpSocket> {
        self.socket.get_or_try_init(|| async { self.open() }).await
    }

    /// Hands an echo read off the socket to the request awaiting it, or counts it.
    fn dispatch(&self, echo: &[u8], received: ancillary::Received) {
        let Some(echo) = C::decode(echo).filter(|e| e.request.stream == self.stream) else {
            return;
        };
        // One-way from the target's receive time when it writes it in (UDP), else the round
        // trip to this kernel's receive time (ICMP): either way differences between echoes are
        // the path's jitter, and clock offsets cancel.
        let arrived = echo
            .target_received_ns
            .or(received.kernel_time_ns)
            .unwrap_or_else(socket::wall_ns);
        let seq = echo.request.seq;
        let mut waiting = self.waiting();
        let waiter = waiting.waiters.remove(&seq);
        if let Arrival::First { reordered } = waiting.book.arrive(seq, waiter.is_some())
            && let Some(waiter) = waiter
        {
            // A request dropped by its timeout just now lost its echo: it counts as a loss.
            let _ = waiter.send(EchoReading {
                transit_ns: arrived.wrapping_sub(echo.request.sent_ns) as i64,
                forward_hops: echo.target_ttl.and_then(socket::hops),
                return_hops: received.ttl.and_then(socket::hops),
                reordered,
                round_trip: round_trip(echo.request.sent_ns, received.kernel_time_ns),
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
        let request = Request {
            stream: self.stream,
            seq,
            sent_ns: socket::wall_ns(),
        };
        let datagram = C::encode(&request, self.payload_bytes, self.addr.is_ipv6());
        socket.send(&datagram).await.map_err(|e| classify_io(&e))?;
        let mut buf = vec![0u8; self.payload_bytes + C::HEADROOM + 1];
        tokio::pin!(answer);
        loop {
            tokio::select! {
                biased;
                reading = &mut answer => {
                    return reading.map_err(|_| ProbeError::new(ErrorClass::Other, "echo lost"));
                }
                read = socket::recv(socket, &mut buf) => match read {
                    Ok(d) if !d.truncated => self.dispatch(&buf[..d.len], d.info),
                    Ok(_) => {}
                    Err(e) => return Err(classify_io(&e)),
                },
            }
        }
    }
}

/// The round trip from the send (wall clock, read just before it) to the kernel's receive time
/// of the echo (the same clock): `None` without a kernel time, or when the clock was stepped
/// between the two (a negative or implausible span).
fn round_trip(sent_ns: u64, received_ns: Option<u64>) -> Option<std::time::Duration> {
    let span = received_ns?.checked_sub(sent_ns)?;
    (span < MAX_ROUND_TRIP_NS).then(|| std::time::Duration::from_nanos(span))
}

/// A round trip longer than this is a stepped clock, not a path (the engine's timeout is
/// shorter in any plan the validation admits).
const MAX_ROUND_TRIP_NS: u64 = 3_600 * 1_000_000_000;

/// Removes a request's waiter when it stops waiting.
struct Unregister<'a, C: EchoCodec> {
    prober: &'a DatagramProber<C>,
    seq: u64,
}

impl<C: EchoCodec> Drop for Unregister<'_, C> {
    fn drop(&mut self) {
        self.prober.waiting().waiters.remove(&self.seq);
    }
}

impl<C: EchoCodec> Prober for DatagramProber<C> {
    fn kind(&self) -> &'static str {
        C::KIND
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
            let mut buf = vec![0u8; self.payload_bytes + C::HEADROOM + 1];
            for _ in 0..MAX_DRAINED {
                match socket::try_recv(socket, &mut buf) {
                    Ok(d) if !d.truncated => self.dispatch(&buf[..d.len], d.info),
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
pub(crate) mod tests;
