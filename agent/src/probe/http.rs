//! The HTTP prober: hyper 1.x client connections driven directly (oha's approach), so the
//! prober decides about connection reuse and times the connect itself. HTTP/1.1, HTTP/2 over
//! TLS by ALPN or as prior knowledge over plain TCP, TLS by rustls.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
pub use http::Method;
use http::header::{HOST, HeaderName, HeaderValue};
use http::{HeaderMap, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use super::Prober;
use super::outcome::{Attempt, Code, ErrorClass, Phases, ProbeError};

/// What to send to an HTTP target.
#[derive(Clone, Debug)]
pub struct HttpRequestSpec {
    /// `http://` or `https://` URL; `http://` is assumed when no scheme is given.
    pub url: String,
    /// Method.
    pub method: Method,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// Request body.
    pub body: Bytes,
    /// Offer HTTP/2 (ALPN over TLS; prior knowledge over plain TCP).
    pub http2: bool,
    /// Reuse connections (keep-alive); otherwise one new connection per request.
    pub keep_alive: bool,
    /// The status every answer must have; without it 2xx and 3xx succeed.
    pub expected_status: Option<u16>,
}

/// Why a prober cannot be built; names the field.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HttpSetupError {
    /// The URL does not parse or is not http/https.
    #[error("url {url:?}: {problem}")]
    Url {
        /// The URL given.
        url: String,
        /// What is wrong.
        problem: String,
    },
    /// A header name or value is invalid.
    #[error("header {name:?}: {problem}")]
    Header {
        /// The header name.
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// An https URL without a TLS configuration.
    #[error("url {0:?}: https needs a TLS client configuration")]
    NoTls(String),
}

enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

impl Sender {
    fn is_closed(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }
}

#[derive(Default)]
struct Pool {
    idle_h1: Vec<http1::SendRequest<Full<Bytes>>>,
    h2: Option<http2::SendRequest<Full<Bytes>>>,
}

/// Probes one HTTP target.
pub struct HttpProber {
    spec: HttpRequestSpec,
    host: String,
    port: u16,
    ip: Option<IpAddr>,
    authority: HeaderValue,
    origin_form: Uri,
    absolute: Uri,
    headers: HeaderMap,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    pool: Mutex<Pool>,
    connection_slots: Arc<Semaphore>,
}

/// Default limit of kept-alive HTTP/1.1 connections per target.
pub const DEFAULT_MAX_CONNECTIONS: usize = 128;

/// Parses the URL the way AppHttpHealthy's `host` is read: `http://` when no scheme.
pub fn parse_url(url: &str) -> Result<Uri, HttpSetupError> {
    let fail = |problem: &str| HttpSetupError::Url {
        url: url.to_string(),
        problem: problem.to_string(),
    };
    let full = if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    };
    let uri: Uri = full.parse().map_err(|e| fail(&format!("{e}")))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(fail("the scheme must be http or https")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(fail("no host"));
    }
    Ok(uri)
}

/// ALPN list a client offers.
pub fn client_alpn(http2: bool) -> &'static [&'static [u8]] {
    if http2 {
        &[b"h2", b"http/1.1"]
    } else {
        &[b"http/1.1"]
    }
}

impl HttpProber {
    /// A prober for `spec`; `tls` is required for https URLs (its ALPN list should come from
    /// [`client_alpn`]).
    pub fn new(
        spec: HttpRequestSpec,
        tls: Option<Arc<ClientConfig>>,
    ) -> Result<HttpProber, HttpSetupError> {
        let uri = parse_url(&spec.url)?;
        let https = uri.scheme_str() == Some("https");
        let raw_host = uri.host().unwrap_or_default();
        let host = raw_host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or(raw_host);
        let authority = HeaderValue::from_str(authority).map_err(|e| HttpSetupError::Url {
            url: spec.url.clone(),
            problem: e.to_string(),
        })?;
        let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let origin_form: Uri = path.parse().map_err(|_| HttpSetupError::Url {
            url: spec.url.clone(),
            problem: "bad path".to_string(),
        })?;
        let mut headers = HeaderMap::new();
        for (name, value) in &spec.headers {
            let header = |problem: String| HttpSetupError::Header {
                name: name.clone(),
                problem,
            };
            let n = HeaderName::from_bytes(name.as_bytes()).map_err(|e| header(e.to_string()))?;
            let v = HeaderValue::from_str(value).map_err(|e| header(e.to_string()))?;
            headers.append(n, v);
        }
        let tls = if https {
            let config = tls.ok_or_else(|| HttpSetupError::NoTls(spec.url.clone()))?;
            let name = ServerName::try_from(host.clone()).map_err(|e| HttpSetupError::Url {
                url: spec.url.clone(),
                problem: format!("not a TLS server name: {e}"),
            })?;
            Some((TlsConnector::from(config), name))
        } else {
            None
        };
        Ok(HttpProber {
            ip: host.parse().ok(),
            host,
            port,
            authority,
            origin_form,
            absolute: uri,
            headers,
            tls,
            pool: Mutex::new(Pool::default()),
            connection_slots: Arc::new(Semaphore::new(DEFAULT_MAX_CONNECTIONS)),
            spec,
        })
    }

    /// The target's IP address when its URL names one (not a host name).
    pub fn ip(&self) -> Option<IpAddr> {
        self.ip
    }

    /// Limits kept-alive HTTP/1.1 connections to `max` (at least 1).
    pub fn with_max_connections(mut self, max: usize) -> HttpProber {
        self.connection_slots = Arc::new(Semaphore::new(max.clamp(1, Semaphore::MAX_PERMITS)));
        self
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        // The pool holds only connection handles: a poisoned lock still holds valid ones.
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn request(&self, h2: bool) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(self.spec.body.clone()));
        *request.method_mut() = self.spec.method.clone();
        if h2 {
            *request.uri_mut() = self.absolute.clone();
        } else {
            *request.uri_mut() = self.origin_form.clone();
            request.headers_mut().insert(HOST, self.authority.clone());
        }
        for (name, value) in &self.headers {
            request.headers_mut().append(name, value.clone());
        }
        request
    }

    /// The open HTTP/2 connection, shared by every request.
    fn shared_h2(&self) -> Option<Sender> {
        let mut pool = self.pool();
        if let Some(h2) = &pool.h2 {
            if !h2.is_closed() {
                return Some(Sender::H2(h2.clone()));
            }
            pool.h2 = None;
        }
        None
    }

    /// An idle connection, if one is open.
    fn take_idle(&self) -> Option<Sender> {
        if let Some(h2) = self.shared_h2() {
            return Some(h2);
        }
        let mut pool = self.pool();
        while let Some(h1) = pool.idle_h1.pop() {
            if !h1.is_closed() {
                return Some(Sender::H1(h1));
            }
        }
        None
    }

    fn put_idle(&self, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut pool = self.pool();
        match sender {
            Sender::H1(h1) => pool.idle_h1.push(h1),
            Sender::H2(h2) => pool.h2 = Some(h2),
        }
    }

    async fn resolve(&self) -> Result<Vec<SocketAddr>, ProbeError> {
        if let Some(ip) = self.ip {
            return Ok(vec![SocketAddr::new(ip, self.port)]);
        }
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| ProbeError::new(ErrorClass::Dns, e.to_string()))?
            .collect();
        if addrs.is_empty() {
            return Err(ProbeError::new(ErrorClass::Dns, "no address for the host"));
        }
        Ok(addrs)
    }

    /// Opens a connection: resolve, TCP, TLS (ALPN), HTTP handshake; with the whole time and
    /// its TCP (with resolution) and TLS parts.
    async fn connect(&self) -> Result<(Sender, Duration, Phases), ProbeError> {
        let began = Instant::now();
        let mut last = None;
        let mut tcp = None;
        for addr in self.resolve().await? {
            match TcpStream::connect(addr).await {
                Ok(stream) => {
                    tcp = Some(stream);
                    break;
                }
                Err(e) => last = Some(classify_io(&e)),
            }
        }
        let Some(tcp) = tcp else {
            return Err(last.unwrap_or_else(|| ProbeError::new(ErrorClass::Other, "no address")));
        };
        let connected = Instant::now();
        let mut phases = Phases {
            tcp: Some(connected - began),
            ..Phases::default()
        };
        let _ = tcp.set_nodelay(true);
        let sender = match &self.tls {
            Some((connector, name)) => {
                let tls = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| classify_tls(&e))?;
                phases.tls = Some(connected.elapsed());
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                handshake(TokioIo::new(tls), h2).await?
            }
            None => handshake(TokioIo::new(tcp), self.spec.http2).await?,
        };
        Ok((sender, began.elapsed(), phases))
    }

    async fn send(
        &self,
        sender: &mut Sender,
    ) -> Result<http::Response<hyper::body::Incoming>, hyper::Error> {
        match sender {
            Sender::H1(s) => {
                s.ready().await?;
                s.send_request(self.request(false)).await
            }
            Sender::H2(s) => {
                s.ready().await?;
                s.send_request(self.request(true)).await
            }
        }
    }

    async fn attempt(&self) -> Attempt {
        // With keep-alive, HTTP/1.1 connections are limited: a request waits for a free one
        // (the wait counts in its response time, as in any pooled client) instead of opening
        // ever more connections when the target slows down, which would slow it further.
        let mut slot = None;
        let waiting = Instant::now();
        let idle = if self.spec.keep_alive {
            match self.shared_h2() {
                Some(h2) => Some(h2),
                None => {
                    match self.connection_slots.clone().acquire_owned().await {
                        Ok(permit) => slot = Some(permit),
                        Err(_) => {
                            return Attempt::failed(ProbeError::new(
                                ErrorClass::Other,
                                "prober closed",
                            ));
                        }
                    }
                    self.take_idle()
                }
            }
        } else {
            None
        };
        let queued = waiting.elapsed();
        let reused = idle.is_some();
        let (mut sender, mut connect, mut phases) = match idle {
            Some(s) => (s, None, Phases::default()),
            None => match self.connect().await {
                Ok((s, took, phases)) => (s, Some(took), phases),
                Err(e) => return with_connect(Attempt::failed(e), None, queued),
            },
        };
        let mut sending = Instant::now();
        let response = match self.send(&mut sender).await {
            Ok(r) => r,
            // A kept-alive connection the server closed meanwhile: what any client does is
            // retry once on a fresh connection; the extra time stays in the measurement.
            Err(e) if reused && (e.is_canceled() || e.is_incomplete_message() || e.is_closed()) => {
                match self.connect().await {
                    Ok((s, took, fresh)) => {
                        sender = s;
                        connect = Some(took);
                        phases = fresh;
                        sending = Instant::now();
                        match self.send(&mut sender).await {
                            Ok(r) => r,
                            Err(e) => {
                                return with_connect(
                                    Attempt::failed(classify_hyper(&e)),
                                    connect,
                                    queued,
                                )
                                .with_phases(phases);
                            }
                        }
                    }
                    Err(e) => return with_connect(Attempt::failed(e), None, queued),
                }
            }
            Err(e) => {
                return with_connect(Attempt::failed(classify_hyper(&e)), connect, queued)
                    .with_phases(phases);
            }
        };
        phases.first_byte = Some(sending.elapsed());
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut bytes = 0u64;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => {
                    if let Some(data) = frame.data_ref() {
                        bytes += data.len() as u64;
                    }
                }
                Err(e) => {
                    let mut error = classify_hyper(&e);
                    error.detail = format!("answer body cut short: {}", error.detail);
                    return Attempt {
                        result: Err(error),
                        code: Some(Code::Http(status)),
                        bytes,
                        connect,
                        queued,
                        phases,
                        echo: None,
                    };
                }
            }
        }
        if self.spec.keep_alive {
            self.put_idle(sender);
        }
        drop(slot);
        let ok = match self.spec.expected_status {
            Some(expected) => status == expected,
            None => (200..400).contains(&status),
        };
        Attempt {
            result: if ok {
                Ok(())
            } else {
                Err(ProbeError::new(ErrorClass::Status(status), ""))
            },
            code: Some(Code::Http(status)),
            bytes,
            connect,
            queued,
            phases,
            echo: None,
        }
    }
}

fn with_connect(mut attempt: Attempt, connect: Option<Duration>, queued: Duration) -> Attempt {
    attempt.connect = connect;
    attempt.queued = queued;
    attempt
}

async fn handshake<T>(io: TokioIo<T>, h2: bool) -> Result<Sender, ProbeError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    if h2 {
        let (sender, conn) = http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(|e| classify_hyper(&e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Sender::H2(sender))
    } else {
        let (sender, conn) = http1::handshake(io).await.map_err(|e| classify_hyper(&e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Sender::H1(sender))
    }
}

/// Classifies a socket error.
pub fn classify_io(e: &std::io::Error) -> ProbeError {
    use std::io::ErrorKind::*;
    let class = match e.kind() {
        ConnectionRefused => ErrorClass::Refused,
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => ErrorClass::Reset,
        TimedOut => ErrorClass::Timeout,
        _ => ErrorClass::Other,
    };
    ProbeError::new(class, e.to_string())
}

/// Classifies an error of the TLS handshake: rustls' own errors are TLS failures, a closed or
/// reset socket is a reset.
pub fn classify_tls(e: &std::io::Error) -> ProbeError {
    if let Some(inner) = e.get_ref()
        && inner.downcast_ref::<rustls::Error>().is_some()
    {
        return ProbeError::new(ErrorClass::Tls, inner.to_string());
    }
    if e.kind() == std::io::ErrorKind::InvalidData {
        return ProbeError::new(ErrorClass::Tls, e.to_string());
    }
    let mut error = classify_io(e);
    if error.class == ErrorClass::Other {
        error.class = ErrorClass::Tls;
    }
    error
}

/// Classifies a hyper error by its cause.
pub fn classify_hyper(e: &hyper::Error) -> ProbeError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            let mut error = classify_io(io);
            error.detail = e.to_string();
            return error;
        }
        source = s.source();
    }
    let class = if e.is_timeout() {
        ErrorClass::Timeout
    } else if e.is_incomplete_message()
        || e.is_canceled()
        || e.is_closed()
        || e.is_body_write_aborted()
    {
        ErrorClass::Reset
    } else if e.is_parse() || e.is_parse_status() || e.is_user() {
        ErrorClass::Protocol
    } else {
        ErrorClass::Other
    };
    ProbeError::new(class, e.to_string())
}

impl Prober for HttpProber {
    fn kind(&self) -> &'static str {
        "http"
    }

    fn probe(&self) -> impl std::future::Future<Output = Attempt> + Send {
        self.attempt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_default_to_http_and_reject_other_schemes() {
        assert_eq!(
            parse_url("example.com/x").unwrap().to_string(),
            "http://example.com/x"
        );
        assert_eq!(
            parse_url("https://[::1]:8443/").unwrap().port_u16(),
            Some(8443)
        );
        let err = parse_url("ftp://x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "url \"ftp://x\": the scheme must be http or https"
        );
        assert!(parse_url("http://").is_err());
    }

    fn spec(url: &str) -> HttpRequestSpec {
        HttpRequestSpec {
            url: url.to_string(),
            method: Method::GET,
            headers: vec![],
            body: Bytes::new(),
            http2: false,
            keep_alive: true,
            expected_status: None,
        }
    }

    #[test]
    fn builds_requests_in_origin_form_with_host() {
        let mut s = spec("http://[::1]:8080/kdoctoragent?task=a");
        s.headers = vec![("X-Test".into(), "1".into())];
        let p = HttpProber::new(s, None).unwrap();
        assert_eq!(p.host, "::1");
        assert_eq!(p.ip(), Some("::1".parse().unwrap()));
        assert_eq!(
            HttpProber::new(spec("http://app.example/"), None)
                .unwrap()
                .ip(),
            None
        );
        let r = p.request(false);
        assert_eq!(r.uri().to_string(), "/kdoctoragent?task=a");
        assert_eq!(r.headers()[HOST], "[::1]:8080");
        assert_eq!(r.headers()["x-test"], "1");
        let r = p.request(true);
        assert_eq!(r.uri().to_string(), "http://[::1]:8080/kdoctoragent?task=a");
    }

    #[test]
    fn setup_errors_name_the_field() {
        let mut s = spec("http://x");
        s.headers = vec![("Bad Name".into(), "v".into())];
        assert!(
            matches!(HttpProber::new(s, None), Err(HttpSetupError::Header { name, .. }) if name == "Bad Name")
        );
        assert!(matches!(
            HttpProber::new(spec("https://x"), None),
            Err(HttpSetupError::NoTls(_))
        ));
    }

    #[test]
    fn io_errors_are_classified() {
        use std::io::{Error, ErrorKind};
        assert_eq!(
            classify_io(&Error::from(ErrorKind::ConnectionRefused)).class,
            ErrorClass::Refused
        );
        assert_eq!(
            classify_io(&Error::from(ErrorKind::ConnectionReset)).class,
            ErrorClass::Reset
        );
        assert_eq!(
            classify_io(&Error::from(ErrorKind::TimedOut)).class,
            ErrorClass::Timeout
        );
        let tls = Error::new(ErrorKind::InvalidData, rustls::Error::DecryptError);
        assert_eq!(classify_tls(&tls).class, ErrorClass::Tls);
        assert_eq!(
            classify_tls(&Error::from(ErrorKind::UnexpectedEof)).class,
            ErrorClass::Reset
        );
    }
}
