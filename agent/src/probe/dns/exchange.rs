//! One query and its answer over UDP, TCP or TLS, all in the request's own task. hickory's
//! client passed each query to a background task over a channel and the answer back over
//! another, and those wake-ups were most of the latency the prober reported (a mean of
//! 170 µs against unbound's 40 µs at 5,000 q/s; docs/benchmarks.md#agent). Here the request
//! opens its socket, sends, and is woken once, by the answer.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::Instant;

use super::question::{MAX_DATAGRAM, Question, Reading};
use crate::probe::http::{classify_io, classify_tls};
use crate::probe::outcome::{ErrorClass, ProbeError};

/// An answer received.
#[derive(Debug)]
pub struct Answered {
    /// Its RCODE.
    pub rcode: ResponseCode,
    /// Its size in bytes (without the stream's length prefix).
    pub bytes: u64,
    /// Time to connect (and shake hands, for TLS); `None` over UDP.
    pub connect: Option<Duration>,
}

/// A failure, with the connect time when the connection was made.
pub type Failed = (ProbeError, Option<Duration>);

/// A fresh ID per query: with the kernel's random source port, what an off-path forger has to
/// guess (RFC 5452).
fn next_id() -> u16 {
    rand::random()
}

/// Connected UDP sockets to one server, kept between queries as upstream keeps them (its pool
/// holds one per query per second). A fresh socket per query cost three more system calls and
/// an event-loop registration each, and capped the prober at a third of what unbound answers
/// (docs/benchmarks.md#agent). A socket is back in the pool only after its query was answered;
/// one whose query failed or timed out is closed, and a stray datagram left in a kept socket is
/// skipped by its ID.
pub struct UdpPool {
    server: SocketAddr,
    idle: Mutex<Vec<UdpSocket>>,
}

/// Most idle sockets kept per server: enough for the answers in flight at the highest rates a
/// prober holds, few enough for many targets under the agent's descriptor limit.
const MAX_IDLE: usize = 256;

impl UdpPool {
    /// An empty pool for `server`.
    pub fn new(server: SocketAddr) -> UdpPool {
        UdpPool {
            server,
            idle: Mutex::new(Vec::new()),
        }
    }

    fn take(&self) -> Option<UdpSocket> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn give_back(&self, socket: UdpSocket) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(socket);
        }
    }

    /// One query: on a kept socket, or on a new one (the kernel picks a random source port and
    /// drops datagrams from any address but the server's). Datagrams with another ID or
    /// question are skipped. A lost query or answer is left to the engine's timeout: no retry.
    pub async fn query(&self, question: &Question) -> Result<Answered, Failed> {
        let id = next_id();
        let datagram = question.datagram(id);
        let failed = |e: io::Error| (classify_io(&e), None);
        let socket = match self.take() {
            Some(socket) => {
                socket.send(&datagram).await.map_err(failed)?;
                socket
            }
            None => send_udp(self.server, &datagram).map_err(failed)?,
        };
        let mut buffer = [0u8; MAX_DATAGRAM];
        loop {
            let len = socket.recv(&mut buffer).await.map_err(failed)?;
            match question.read(id, &buffer[..len]) {
                Reading::Answer(rcode) => {
                    self.give_back(socket);
                    return Ok(Answered {
                        rcode,
                        bytes: len as u64,
                        connect: None,
                    });
                }
                Reading::NotOurs(_) => continue,
                Reading::Malformed(why) => {
                    return Err((ProbeError::new(ErrorClass::Protocol, why), None));
                }
            }
        }
    }
}

/// Opens a connected socket and sends `datagram` before the socket joins the runtime: tokio
/// knows nothing of a new socket's readiness, so an async send would first wait a turn of the
/// event loop for "writable" (one more wake-up, in the measured latency). A fresh socket's
/// send buffer is empty: the send does not block. The answer cannot be missed either:
/// registering a socket reports data already queued on it.
fn send_udp(server: SocketAddr, datagram: &[u8]) -> io::Result<UdpSocket> {
    // socket2 opens it non-blocking and close-on-exec in one call; connecting binds it.
    let socket = Socket::new(
        Domain::for_address(server),
        Type::DGRAM.nonblocking(),
        Some(Protocol::UDP),
    )?;
    socket.connect(&server.into())?;
    let sent = socket.send(datagram)?;
    if sent != datagram.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("sent {sent} of {} bytes", datagram.len()),
        ));
    }
    UdpSocket::from_std(socket.into())
}

/// One query over a new TCP connection.
pub async fn tcp(server: SocketAddr, question: &Question) -> Result<Answered, Failed> {
    let began = Instant::now();
    let stream = open_tcp(server)
        .await
        .map_err(|e| (classify_io(&e), None))?;
    let connect = Some(began.elapsed());
    over_stream(stream, question, connect).await
}

/// One query over a new TLS connection (DNS over TLS, RFC 7858).
pub async fn tls(
    server: SocketAddr,
    question: &Question,
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
) -> Result<Answered, Failed> {
    let began = Instant::now();
    let tcp = open_tcp(server)
        .await
        .map_err(|e| (classify_io(&e), None))?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| (classify_tls(&e), None))?;
    let connect = Some(began.elapsed());
    over_stream(stream, question, connect).await
}

async fn open_tcp(server: SocketAddr) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(server).await?;
    // The query is one small write: send it now rather than wait for an acknowledgement.
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A stream a query goes over: the TCP socket under it, and how its errors are classified.
trait Transport {
    fn tcp(&self) -> &TcpStream;
    fn classify(e: &io::Error) -> ProbeError;
}

impl Transport for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
    fn classify(e: &io::Error) -> ProbeError {
        classify_io(e)
    }
}

impl Transport for tokio_rustls::client::TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
    fn classify(e: &io::Error) -> ProbeError {
        classify_tls(e)
    }
}

fn quick_ack(stream: &impl Transport) {
    // Best effort: without it the answer may only come later.
    let _ = socket2::SockRef::from(stream.tcp()).set_tcp_quickack(true);
}

/// Sends the query framed by its length and reads one framed answer (at most 65,535 bytes,
/// the most a length prefix can say).
async fn over_stream<S: AsyncRead + AsyncWrite + Unpin + Transport>(
    mut stream: S,
    question: &Question,
    connect: Option<Duration>,
) -> Result<Answered, Failed> {
    let failed = |e: io::Error| (S::classify(&e), connect);
    let id = next_id();
    stream
        .write_all(&question.framed(id))
        .await
        .map_err(failed)?;
    stream.flush().await.map_err(failed)?;
    // Acknowledge what comes back at once. Sending the query puts the connection in the
    // kernel's interactive mode, which delays ACKs; a server without TCP_NODELAY (unbound over
    // TLS sends its session tickets, then the answer) holds the answer until that ACK, 40 ms
    // that the report would blame on the server.
    quick_ack(&stream);
    let mut prefix = [0u8; 2];
    stream.read_exact(&mut prefix).await.map_err(failed)?;
    let mut answer = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
    stream.read_exact(&mut answer).await.map_err(failed)?;
    match question.read(id, &answer) {
        Reading::Answer(rcode) => Ok(Answered {
            rcode,
            bytes: answer.len() as u64,
            connect,
        }),
        // On a connection of our own, anything but the answer is the server's error.
        Reading::NotOurs(why) => Err((ProbeError::new(ErrorClass::Protocol, why), connect)),
        Reading::Malformed(why) => Err((ProbeError::new(ErrorClass::Protocol, why), connect)),
    }
}
