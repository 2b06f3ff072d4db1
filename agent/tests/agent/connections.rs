//! What one client may hold of the agent's servers (issue 36): any pod of the cluster can
//! connect to an agent's echo targets and DNS test server, so a client that sends half a
//! request, or nothing, or stays idle on a kept-alive connection is dropped at the header
//! deadline, and clients holding every connection slot make the next one wait, not fail.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kdoctor_agent::dns_server::{Counters, serve_tcp};
use kdoctor_agent::echo::Echo;
use kdoctor_agent::metrics::Metrics;
use kdoctor_agent::server::{bind, serve};
use kdoctor_transport::limits::ServeLimits;
use kdoctor_transport::tls::{Identity, ServerTrust, client_config, server_config};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LIMITS: ServeLimits = ServeLimits {
    handshake_timeout: Duration::from_millis(400),
    header_timeout: Duration::from_millis(400),
    max_connections: 4,
};

/// Longer than any deadline above, far shorter than a client left alone would live.
const SOON: Duration = Duration::from_secs(5);

fn identity() -> Identity {
    Identity::self_signed(&["127.0.0.1".to_string()]).expect("a self-signed identity")
}

/// The echo target on 127.0.0.1, plain or TLS, with `LIMITS`.
async fn echo_target(tls: bool) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = bind("test echo target", "127.0.0.1:0".parse().expect("address"))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let tls = tls.then(|| Arc::new(server_config(identity(), None).expect("server config")));
    let metrics = Metrics::new();
    let router = Echo::new("kdoctor-agent-test", metrics.clone()).router();
    (addr, serve(listener, router, tls, metrics, LIMITS))
}

/// How long until the server closes `stream`, reading (and dropping) whatever it sends.
async fn closed_after(mut stream: impl AsyncReadExt + Unpin) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(SOON, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => continue,
            Err(_) => return SOON,
        }
    }
}

fn within_deadline(took: Duration) -> bool {
    took >= Duration::from_millis(300) && took < SOON
}

#[tokio::test]
async fn a_half_sent_request_header_is_dropped_at_the_deadline() {
    let (addr, server) = echo_target(false).await;
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    stream
        .write_all(b"GET /?task=slow HTTP/1.1\r\nHost: agent\r\nX-Half: ")
        .await
        .expect("writes half a header");
    let took = closed_after(stream).await;
    assert!(
        within_deadline(took),
        "a half-sent header held its connection {took:?}"
    );
    server.abort();
}

#[tokio::test]
async fn a_client_that_sends_nothing_is_dropped_plain_and_over_tls() {
    let (addr, server) = echo_target(false).await;
    let took = closed_after(TcpStream::connect(addr).await.expect("connects")).await;
    assert!(
        within_deadline(took),
        "a silent plain client lived {took:?}"
    );
    server.abort();

    let (addr, server) = echo_target(true).await;
    // No handshake at all.
    let took = closed_after(TcpStream::connect(addr).await.expect("connects")).await;
    assert!(
        within_deadline(took),
        "a client that never shook hands lived {took:?}"
    );
    // A handshake, then nothing: neither an HTTP/1.1 request nor HTTP/2's preface.
    for alpn in [&b"http/1.1"[..], &b"h2"[..]] {
        let config = client_config(ServerTrust::Any, None, &[alpn]).expect("client config");
        let tcp = TcpStream::connect(addr).await.expect("connects");
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
            .await
            .expect("handshake");
        let took = closed_after(tls).await;
        assert!(
            within_deadline(took),
            "a silent {} client after its handshake lived {took:?}",
            String::from_utf8_lossy(alpn)
        );
    }
    server.abort();
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_at_the_deadline() {
    let (addr, server) = echo_target(false).await;
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    stream
        .write_all(b"GET /?task=idle HTTP/1.1\r\nHost: agent\r\n\r\n")
        .await
        .expect("writes a request");
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.expect("reads the answer");
        assert!(n > 0, "closed before answering");
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let took = closed_after(stream).await;
    assert!(
        within_deadline(took),
        "an idle kept-alive connection lived {took:?} after its answer"
    );
    server.abort();
}

#[tokio::test]
async fn clients_holding_every_slot_make_the_next_wait_not_fail() {
    let (addr, server) = echo_target(false).await;
    let mut held = Vec::new();
    for _ in 0..LIMITS.max_connections {
        held.push(TcpStream::connect(addr).await.expect("connects"));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    // Accepted by the kernel into the backlog, served once a held slot is freed.
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    stream
        .write_all(b"GET /?task=waiting HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
        .await
        .expect("writes a request");
    let mut answer = Vec::new();
    tokio::time::timeout(SOON, stream.read_to_end(&mut answer))
        .await
        .expect("answered in time")
        .expect("reads the answer");
    let waited = started.elapsed();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert!(
        waited >= Duration::from_millis(250),
        "answered in {waited:?} while every connection slot was held"
    );
    // Closed at their deadline, which freed the slot the request waited for.
    for stream in held {
        let took = closed_after(stream).await;
        assert!(took < SOON, "a silent client held its slot {took:?} more");
    }
    server.abort();
}

#[tokio::test]
async fn a_dns_query_cut_short_over_tcp_is_dropped_at_the_deadline() {
    let listener = bind("test DNS server", "127.0.0.1:0".parse().expect("address"))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let server = serve_tcp(listener, None, Counters::default(), None, LIMITS);
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    // A length of 40 bytes, then 10 of them.
    stream
        .write_all(&40u16.to_be_bytes())
        .await
        .expect("writes");
    stream.write_all(&[0u8; 10]).await.expect("writes");
    let took = closed_after(stream).await;
    assert!(
        within_deadline(took),
        "a query cut short held its connection {took:?}"
    );
    server.abort();
}
