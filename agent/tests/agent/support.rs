//! Helpers: start the agent's servers, fetch a URL with a plain hyper client.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kdoctor_agent::agent::{RunningAgent, start};
use kdoctor_agent::config::AgentArgs;
use kdoctor_transport::tls::{ServerTrust, client_config};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

/// Serves `app` on a free port of 127.0.0.1 (a task of the caller's runtime); its address.
pub async fn serve_on_loopback(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// The agent's servers on 127.0.0.1 and ::1, every port chosen by the OS.
pub async fn agent() -> RunningAgent {
    let args = AgentArgs::ephemeral(vec![
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ]);
    start(&args).await.expect("agent servers start")
}

/// The first address of `addrs` of the given family.
pub fn pick(addrs: &[SocketAddr], v6: bool) -> SocketAddr {
    *addrs
        .iter()
        .find(|a| a.is_ipv6() == v6)
        .expect("an address of the family")
}

/// An answer as the test sees it.
#[derive(Debug)]
pub struct Fetched {
    pub status: u16,
    pub version: http::Version,
    pub body: String,
}

/// Sends one request with a fresh connection; `tls` with `h2` offers HTTP/2 by ALPN.
pub async fn fetch(method: &str, addr: SocketAddr, path: &str, tls: bool, h2: bool) -> Fetched {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let request = |absolute: bool| {
        let uri = if absolute {
            format!("https://{addr}{path}")
        } else {
            path.to_string()
        };
        http::Request::builder()
            .method(method)
            .uri(uri)
            .header("host", addr.to_string())
            .header("x-probe", "one")
            .body(Full::new(Bytes::from_static(b"{\"test1\":\"a\"}")))
            .expect("request")
    };
    let response = if tls {
        let alpn: &[&[u8]] = if h2 {
            &[b"h2", b"http/1.1"]
        } else {
            &[b"http/1.1"]
        };
        let config = client_config(ServerTrust::Any, None, alpn).expect("client config");
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let name = ServerName::from(addr.ip());
        let stream = connector.connect(name, tcp).await.expect("TLS handshake");
        let negotiated_h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        assert_eq!(negotiated_h2, h2, "ALPN result");
        if negotiated_h2 {
            let (mut sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .expect("h2 handshake");
            tokio::spawn(conn);
            sender.send_request(request(true)).await.expect("response")
        } else {
            let (mut sender, conn) = http1::handshake(TokioIo::new(stream)).await.expect("h1");
            tokio::spawn(conn);
            sender.send_request(request(false)).await.expect("response")
        }
    } else {
        let (mut sender, conn) = http1::handshake(TokioIo::new(tcp)).await.expect("h1");
        tokio::spawn(conn);
        sender.send_request(request(false)).await.expect("response")
    };
    let status = response.status().as_u16();
    let version = response.version();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    Fetched {
        status,
        version,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

use std::time::Duration;

use kdoctor_agent::probe::dns::{DnsProber, DnsProtocol, DnsRequestSpec};
use kdoctor_agent::probe::http::{HttpProber, HttpRequestSpec, client_alpn};
use kdoctor_agent::probe::{Measurement, Plan, Progress, run};
use kdoctor_transport::tls::Identity;

/// Timed tests hold this lock for writing, every other test for reading: a timed test runs
/// alone in this binary, so the two cores carry no other test's load while it measures.
pub static TIMED: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The guard of an untimed test (see [`TIMED`]).
pub async fn shared() -> tokio::sync::RwLockReadGuard<'static, ()> {
    TIMED.read().await
}

/// A GET of `url` with keep-alive, no expected status.
pub fn http_spec(url: &str) -> HttpRequestSpec {
    HttpRequestSpec {
        url: url.to_string(),
        method: http::Method::GET,
        headers: vec![],
        body: Bytes::new(),
        http2: false,
        keep_alive: true,
        expected_status: None,
    }
}

/// Runs an HTTP probe; `trust` defaults to accepting any certificate.
pub async fn probe_http(
    spec: HttpRequestSpec,
    trust: Option<ServerTrust>,
    client: Option<Identity>,
    qps: f64,
    duration: Duration,
    timeout: Duration,
) -> Measurement {
    let config = client_config(
        trust.unwrap_or(ServerTrust::Any),
        client,
        client_alpn(spec.http2),
    )
    .expect("client config");
    let prober = HttpProber::new(spec, Some(Arc::new(config))).expect("prober");
    let plan = Plan::new(qps, duration, timeout).expect("plan");
    run(Arc::new(prober), plan, Arc::new(Progress::default()), None).await
}

/// A DNS query spec.
pub fn dns_spec(server: SocketAddr, domain: &str, protocol: DnsProtocol) -> DnsRequestSpec {
    DnsRequestSpec {
        server,
        domain: domain.to_string(),
        record_type: hickory_proto::rr::RecordType::A,
        protocol,
        tls_server_name: None,
    }
}

/// Runs a DNS probe with a timeout of 500 ms per query.
pub async fn probe_dns(
    spec: DnsRequestSpec,
    trust: Option<ServerTrust>,
    qps: f64,
    duration: Duration,
) -> Measurement {
    probe_dns_within(spec, trust, qps, duration, Duration::from_millis(500)).await
}

/// Runs a DNS probe with `timeout` per query.
pub async fn probe_dns_within(
    spec: DnsRequestSpec,
    trust: Option<ServerTrust>,
    qps: f64,
    duration: Duration,
    timeout: Duration,
) -> Measurement {
    let config =
        client_config(trust.unwrap_or(ServerTrust::Any), None, &[]).expect("client config");
    let prober = DnsProber::new(spec, Some(Arc::new(config))).expect("prober");
    let plan = Plan::new(qps, duration, timeout).expect("plan");
    run(Arc::new(prober), plan, Arc::new(Progress::default()), None).await
}

/// The error keys of a measurement, for assertion messages.
pub fn errors(m: &Measurement) -> String {
    format!("{:?}", m.recorder.errors)
}

/// Milliseconds of a microsecond value.
pub fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}
