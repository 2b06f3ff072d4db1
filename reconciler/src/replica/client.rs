//! The follower's client of the leader's replication endpoint: mutual TLS with the install's
//! CA (the leader's certificate must name its pod IP), HTTP/1.1, one connection reused for the
//! long polls.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use kdoctor_transport::tls::{ServerTrust, client_config};
use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

use super::Replication;

/// Why a call to the leader failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// TCP, TLS or HTTP failed.
    #[error("replication with {addr}: {problem}")]
    Transport {
        /// The leader's address.
        addr: SocketAddr,
        /// What failed.
        problem: String,
    },
    /// No answer in time.
    #[error("replication with {addr}: no answer within {timeout:?}")]
    Timeout {
        /// The leader's address.
        addr: SocketAddr,
        /// The limit.
        timeout: Duration,
    },
}

/// Makes connections to leaders.
#[derive(Clone)]
pub struct PeerClient {
    connector: TlsConnector,
    timeout: Duration,
}

impl PeerClient {
    /// A client with the replica's certificate, trusting the install's CA.
    pub fn new(replication: &Replication) -> Result<PeerClient, kdoctor_transport::tls::TlsError> {
        let config = client_config(
            ServerTrust::Roots(replication.roots.clone()),
            Some(replication.client.clone()),
            &[b"http/1.1"],
        )?;
        Ok(PeerClient {
            connector: TlsConnector::from(Arc::new(config)),
            timeout: Duration::from_secs(5),
        })
    }

    /// Opens a connection to the leader at `addr`.
    pub async fn connect(&self, addr: SocketAddr) -> Result<PeerConnection, PeerError> {
        let fail = |problem: String| PeerError::Transport { addr, problem };
        let connect = async {
            let tcp = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| fail(format!("connect: {e}")))?;
            let _ = tcp.set_nodelay(true);
            let tls = self
                .connector
                .connect(ServerName::IpAddress(addr.ip().into()), tcp)
                .await
                .map_err(|e| fail(format!("TLS: {e}")))?;
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .map_err(|e| fail(format!("HTTP: {e}")))?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok(PeerConnection { addr, sender })
        };
        tokio::time::timeout(self.timeout, connect)
            .await
            .map_err(|_| PeerError::Timeout {
                addr,
                timeout: self.timeout,
            })?
    }

    /// Has the leader at `addr` purge task `uid` (or one round of it); returns the leader's
    /// resourceVersion after the purge.
    pub async fn purge(
        &self,
        addr: SocketAddr,
        uid: &str,
        round: Option<u64>,
    ) -> Result<u64, String> {
        let mut connection = self.connect(addr).await.map_err(|e| e.to_string())?;
        let mut path = format!("/replication/v1/purge?uid={}", encode(uid));
        if let Some(round) = round {
            path.push_str(&format!("&round={round}"));
        }
        let (status, _, body) = connection
            .call(Method::POST, &path, Duration::from_secs(30))
            .await
            .map_err(|e| e.to_string())?;
        let body = read_all(body, 4096, addr)
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&body).trim().to_string();
        if status != StatusCode::OK {
            return Err(format!("the leader answered {status}: {text}"));
        }
        text.parse()
            .map_err(|_| format!("the leader answered {text:?}, not a resourceVersion"))
    }
}

/// Percent-encodes a query value (UIDs are safe already; anything else is escaped).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Reads a body whole, up to `limit` bytes.
pub async fn read_all(body: Incoming, limit: usize, addr: SocketAddr) -> Result<Bytes, PeerError> {
    http_body_util::Limited::new(body, limit)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| PeerError::Transport {
            addr,
            problem: format!("reading the answer: {e}"),
        })
}

/// One open connection to the leader.
pub struct PeerConnection {
    addr: SocketAddr,
    sender: SendRequest<Empty<Bytes>>,
}

impl PeerConnection {
    /// The leader's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends a request; the answer's head must come within `timeout` (its body is the
    /// caller's to read, with its own bounds).
    pub async fn call(
        &mut self,
        method: Method,
        path: &str,
        timeout: Duration,
    ) -> Result<(StatusCode, HeaderMap, Incoming), PeerError> {
        let addr = self.addr;
        let fail = |problem: String| PeerError::Transport { addr, problem };
        let exchange = async {
            self.sender
                .ready()
                .await
                .map_err(|e| fail(format!("HTTP: {e}")))?;
            let request = Request::builder()
                .method(method)
                .uri(path)
                .header(http::header::HOST, addr.to_string())
                .body(Empty::new())
                .map_err(|e| fail(e.to_string()))?;
            let response = self
                .sender
                .send_request(request)
                .await
                .map_err(|e| fail(format!("HTTP: {e}")))?;
            let (parts, body) = response.into_parts();
            Ok((parts.status, parts.headers, body))
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| PeerError::Timeout { addr, timeout })?
    }
}

/// The next piece of a streamed body, within `timeout`; `None` at its end.
pub async fn next_chunk(
    body: &mut Incoming,
    timeout: Duration,
    addr: SocketAddr,
) -> Result<Option<Bytes>, PeerError> {
    loop {
        let frame = tokio::time::timeout(timeout, body.frame())
            .await
            .map_err(|_| PeerError::Timeout { addr, timeout })?;
        match frame {
            None => return Ok(None),
            Some(Err(e)) => {
                return Err(PeerError::Transport {
                    addr,
                    problem: format!("reading the answer: {e}"),
                });
            }
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}
