//! The client of the report API (the controller's harvester uses it): list, fetch and
//! acknowledge an agent's spooled reports over HTTPS with a client certificate of the install's
//! CA. Kept next to the server so the wire contract lives in one crate.
//!
//! The agent's server certificate is not verified: agents hold no CA key, so their certificates
//! are self-signed. The agent authenticates the controller (mutual TLS); the channel is
//! encrypted; the agent proves which pod it is with its pod-bound ServiceAccount token
//! ([`AgentConnection::identity`]), which the harvester has the API server review.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

use crate::connect::{ConnectError, http1};
use crate::report_api::{AgentIdentity, Entry, MAX_TOKEN_BYTES, RoundWait};
use crate::tls::{Identity, ServerTrust, TlsError, client_config};

/// The largest answer read from an agent: a round report of 100,000 targets fits, and a
/// hostile or broken peer cannot push more into the controller's memory.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// Agents whose TLS session is kept for resumption. A harvest meets every agent once a round,
/// in turn: with rustls' default of 256, a cluster of more agents never met one whose session
/// was still kept, and every handshake signed and checked certificates on both sides again.
/// A kept session is about 1 KB (its ticket and the agent's certificate).
pub const RESUMED_AGENTS: usize = 10_000;

/// Why a report API call failed.
#[derive(Debug, thiserror::Error)]
pub enum ReportClientError {
    /// No TCP connection (refused, unreachable).
    #[error("connecting to {addr}: {source}")]
    Connect {
        /// The agent.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS handshake failed (e.g. the agent refused the client certificate).
    #[error("TLS handshake with {addr}: {source}")]
    Handshake {
        /// The agent.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("{addr}: {source}")]
    Http {
        /// The agent.
        addr: SocketAddr,
        /// Why.
        source: hyper::Error,
    },
    /// The agent answered with an error.
    #[error("{addr} {path}: HTTP {status}: {body}")]
    Status {
        /// The agent.
        addr: SocketAddr,
        /// The request path.
        path: String,
        /// The status.
        status: StatusCode,
        /// The error body.
        body: String,
    },
    /// The answer is not what the API promises.
    #[error("{addr} {path}: {problem}")]
    Decode {
        /// The agent.
        addr: SocketAddr,
        /// The request path.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// No answer in time.
    #[error("{addr}: no answer within {0:?}", .timeout)]
    Timeout {
        /// The agent.
        addr: SocketAddr,
        /// The limit.
        timeout: Duration,
    },
    /// The client certificate is unusable.
    #[error("report API client certificate: {0}")]
    Tls(#[from] TlsError),
}

impl ReportClientError {
    /// Whether the agent answered 404 (the report is gone).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReportClientError::Status { status, .. } if *status == StatusCode::NOT_FOUND)
    }
}

/// A client of agents' report APIs.
#[derive(Clone)]
pub struct ReportClient {
    connector: TlsConnector,
    port: u16,
    timeout: Duration,
}

impl std::fmt::Debug for ReportClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReportClient")
            .field("port", &self.port)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl ReportClient {
    /// A client that presents `identity` to agents listening on `port`; every call (connect,
    /// handshake and exchange) is bounded by `timeout`.
    pub fn new(identity: Identity, port: u16, timeout: Duration) -> Result<Self, TlsError> {
        let mut config = client_config(ServerTrust::Any, Some(identity), &[b"http/1.1"])?;
        config.resumption = rustls::client::Resumption::in_memory_sessions(RESUMED_AGENTS);
        Ok(ReportClient {
            connector: TlsConnector::from(Arc::new(config)),
            port,
            timeout,
        })
    }

    /// Opens a connection to the agent at `ip`; several calls can share it.
    pub async fn connect(&self, ip: IpAddr) -> Result<AgentConnection, ReportClientError> {
        let addr = SocketAddr::new(ip, self.port);
        let timeout = self.timeout;
        let connect = async {
            let tls = (&self.connector, ServerName::IpAddress(ip.into()));
            let sender = http1(addr, Some(tls)).await.map_err(|e| match e {
                ConnectError::Tcp(source) => ReportClientError::Connect { addr, source },
                ConnectError::Tls(source) => ReportClientError::Handshake { addr, source },
                ConnectError::Http(source) => ReportClientError::Http { addr, source },
            })?;
            Ok(AgentConnection {
                addr,
                sender,
                timeout,
            })
        };
        tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| ReportClientError::Timeout { addr, timeout })?
    }
}

/// One open connection to an agent's report API.
pub struct AgentConnection {
    addr: SocketAddr,
    sender: SendRequest<Empty<Bytes>>,
    timeout: Duration,
}

impl AgentConnection {
    async fn call(&mut self, method: Method, path: &str) -> Result<Bytes, ReportClientError> {
        self.call_within(method, path, self.timeout).await
    }

    async fn call_within(
        &mut self,
        method: Method,
        path: &str,
        timeout: Duration,
    ) -> Result<Bytes, ReportClientError> {
        let addr = self.addr;
        let exchange = async {
            self.sender
                .ready()
                .await
                .map_err(|source| ReportClientError::Http { addr, source })?;
            let request = Request::builder()
                .method(method)
                .uri(path)
                .header(http::header::HOST, addr.to_string())
                .body(Empty::new())
                .map_err(|e| ReportClientError::Decode {
                    addr,
                    path: path.to_string(),
                    problem: e.to_string(),
                })?;
            let response = self
                .sender
                .send_request(request)
                .await
                .map_err(|source| ReportClientError::Http { addr, source })?;
            let status = response.status();
            // An agent's pod address can be taken by anything on the network: its answer is
            // read up to a bound, never whole on trust.
            let body = http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| ReportClientError::Decode {
                    addr,
                    path: path.to_string(),
                    problem: if e.is::<http_body_util::LengthLimitError>() {
                        format!("answer larger than {MAX_ANSWER_BYTES} bytes")
                    } else {
                        e.to_string()
                    },
                })?
                .to_bytes();
            if status.is_success() {
                Ok(body)
            } else {
                Err(ReportClientError::Status {
                    addr,
                    path: path.to_string(),
                    status,
                    body: String::from_utf8_lossy(&body).into_owned(),
                })
            }
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| ReportClientError::Timeout { addr, timeout })?
    }

    /// The agent's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `GET /v1/reports`: every spooled report.
    pub async fn list(&mut self) -> Result<Vec<Entry>, ReportClientError> {
        self.listing("/v1/reports".to_string(), self.timeout).await
    }

    /// `GET /v1/reports` held by the agent until it has spooled `wait`'s round report (or the
    /// wait is over): every spooled report then. The call's timeout is the client's plus the
    /// wait.
    pub async fn list_waiting(
        &mut self,
        wait: &RoundWait,
    ) -> Result<Vec<Entry>, ReportClientError> {
        let timeout = self.timeout + wait.wait;
        self.listing(format!("/v1/reports?{}", wait.query()), timeout)
            .await
    }

    async fn listing(
        &mut self,
        path: String,
        timeout: Duration,
    ) -> Result<Vec<Entry>, ReportClientError> {
        #[derive(serde::Deserialize)]
        struct Listing {
            items: Vec<Entry>,
        }
        let body = self.call_within(Method::GET, &path, timeout).await?;
        serde_json::from_slice::<Listing>(&body)
            .map(|l| l.items)
            .map_err(|e| ReportClientError::Decode {
                addr: self.addr,
                path,
                problem: e.to_string(),
            })
    }

    /// `GET /v1/identity`: the agent's pod-bound token, to be reviewed by the API server.
    pub async fn identity(&mut self) -> Result<String, ReportClientError> {
        let path = "/v1/identity";
        let body = self.call(Method::GET, path).await?;
        let problem = |problem: String| ReportClientError::Decode {
            addr: self.addr,
            path: path.to_string(),
            problem,
        };
        if body.len() > MAX_TOKEN_BYTES + 64 {
            return Err(problem(format!(
                "identity larger than {MAX_TOKEN_BYTES} bytes"
            )));
        }
        serde_json::from_slice::<AgentIdentity>(&body)
            .map(|i| i.token)
            .map_err(|e| problem(e.to_string()))
    }

    /// `GET /v1/reports/{name}`: the report's JSON.
    pub async fn fetch(&mut self, name: &str) -> Result<Bytes, ReportClientError> {
        self.call(
            Method::GET,
            &format!("/v1/reports/{}", encode_segment(name)),
        )
        .await
    }

    /// `POST /v1/reports/{name}/ack`: the report is stored; the agent may drop it.
    pub async fn acknowledge(&mut self, name: &str) -> Result<(), ReportClientError> {
        self.call(
            Method::POST,
            &format!("/v1/reports/{}/ack", encode_segment(name)),
        )
        .await
        .map(|_| ())
    }
}

/// Percent-encodes what may not appear in a path segment (report names carry `:` and `+`).
fn encode_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Instant;

    use rustls::HandshakeKind;
    use rustls::server::ServerSessionMemoryCache;
    use tokio_rustls::TlsAcceptor;

    use super::*;
    use crate::pki::Ca;
    use crate::tls::{parse_roots, server_config};

    /// The address a handshake reached, and what kind it was.
    type Handshake = (IpAddr, Option<HandshakeKind>);

    /// More agents than rustls keeps sessions of by default (256).
    const AGENTS: u16 = 300;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_agent_met_again_after_hundreds_of_others_resumes_its_tls_session() {
        let ca = Ca::generate("test CA").expect("CA");
        let roots = parse_roots(ca.pem.cert.as_bytes(), "CA").expect("roots");
        let serving = Identity::self_signed(&["kdoctor-agent".to_string()]).expect("cert");
        let mut server = server_config(serving, Some(roots)).expect("server config");
        // One server stands for every agent: it keeps as many sessions as they would together.
        server.session_storage = ServerSessionMemoryCache::new(4096);
        let acceptor = TlsAcceptor::from(Arc::new(server));
        // Every address of 127.0.0.0/8 reaches a listener on all of them.
        let listener = tokio::net::TcpListener::bind("0.0.0.0:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let kinds: Arc<Mutex<Vec<Handshake>>> = Arc::default();
        let seen = kinds.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, seen) = (acceptor.clone(), seen.clone());
                tokio::spawn(async move {
                    let local = tcp.local_addr().expect("local").ip();
                    let _ = tcp.set_nodelay(true);
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let kind = tls.get_ref().1.handshake_kind();
                        seen.lock().expect("kinds").push((local, kind));
                        // An empty list for each request, until the client goes.
                        let mut tls = tls;
                        let mut request = [0u8; 1024];
                        while tokio::io::AsyncReadExt::read(&mut tls, &mut request)
                            .await
                            .is_ok_and(|n| n > 0)
                        {
                            let answer =
                                b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n{\"items\":[]}";
                            if tokio::io::AsyncWriteExt::write_all(&mut tls, answer)
                                .await
                                .is_err()
                            {
                                break;
                            }
                        }
                    }
                });
            }
        });
        let client_cert = ca.client("kdoctor-controller", &[]).expect("client cert");
        let client = ReportClient::new(
            client_cert.identity().expect("identity"),
            port,
            Duration::from_secs(10),
        )
        .expect("client");
        let agent = |i: u16| IpAddr::from([127, 1 + (i / 200) as u8, 0, (i % 200) as u8 + 1]);
        // A round: every agent once, then the first of them again.
        for i in (1..=AGENTS).chain([1]) {
            // A harvest's first exchange also reads the session tickets the agent sent.
            let mut connection = client.connect(agent(i)).await.expect("connect");
            assert!(connection.list().await.expect("list").is_empty());
            drop(connection);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while kinds.lock().expect("kinds").len() < usize::from(AGENTS) + 1 {
            assert!(Instant::now() < deadline, "the server saw every handshake");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let kinds = kinds.lock().expect("kinds");
        let first: Vec<_> = kinds.iter().filter(|(ip, _)| *ip == agent(1)).collect();
        assert_eq!(first.len(), 2, "{first:?}");
        assert_eq!(first[0].1, Some(HandshakeKind::Full));
        assert_eq!(
            first[1].1,
            Some(HandshakeKind::Resumed),
            "the first agent, met again after {AGENTS} others, resumed its session"
        );
    }
}
