//! The API server's connections, as hostile or careless clients use them (issue 20): silent
//! clients cannot hold it (M4), and what the HTTP layer refuses — a body on a read-only path, a
//! request hyper cannot parse — is still answered with a Status (L3).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kdoctor_apiserver::serve::ServeLimits;
use kdoctor_apiserver::server::{RunningServer, ServerOptions, start};
use kdoctor_store::{Store, StoreConfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::scratch;

const LIMITS: ServeLimits = ServeLimits {
    handshake_timeout: Duration::from_millis(400),
    header_timeout: Duration::from_millis(400),
    max_connections: 4,
};

/// A TLS connection (no ALPN: HTTP/1.1) to the server whose CA is under `dir`.
async fn tls_connect(
    dir: &std::path::Path,
    address: std::net::SocketAddr,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    let ca_pem = std::fs::read(dir.join("server").join("pki").join("ca.crt")).expect("ca");
    for cert in CertificateDer::pem_slice_iter(&ca_pem) {
        roots.add(cert.expect("pem")).expect("root");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(address).await.expect("connects");
    connector
        .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
        .await
        .expect("handshake")
}

/// Reads until the server closes the connection; how long that took.
async fn closed_after(mut read: impl AsyncReadExt + Unpin) -> Duration {
    let started = Instant::now();
    let mut buffer = [0u8; 256];
    loop {
        match tokio::time::timeout(Duration::from_secs(20), read.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
            Err(_) => panic!("the server kept a silent connection open for 20 s"),
        }
    }
}

/// A standalone API server with a store under `dir`, on a free loopback port.
async fn serve(dir: &std::path::Path, limits: ServeLimits) -> RunningServer {
    let store = Arc::new(Store::open(StoreConfig::new(dir.join("store"))).expect("store"));
    start(ServerOptions {
        store: Some(store),
        limits,
        ..ServerOptions::standalone(dir.join("server"), "127.0.0.1:0".parse().expect("addr"))
    })
    .await
    .expect("starts")
}

/// Runs curl with `args` off the runtime's threads.
async fn curl(args: Vec<std::ffi::OsString>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(args)
            .output()
            .expect("curl runs (install curl)")
    })
    .await
    .expect("ran")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_clients_are_dropped_and_cannot_starve_the_server() {
    let dir = scratch("connections");
    let server = serve(&dir, LIMITS).await;

    // Every slot taken by a client that never starts its handshake.
    let mut idle = Vec::new();
    for _ in 0..LIMITS.max_connections {
        idle.push(TcpStream::connect(server.address).await.expect("connects"));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let ca = dir.join("server").join("pki").join("ca.crt");
    let url = format!("{}/healthz", server.url());
    let out = curl(vec![
        "-s".into(),
        "--max-time".into(),
        "15".into(),
        "-w".into(),
        "\n%{http_code}".into(),
        "--cacert".into(),
        ca.into(),
        url.into(),
    ])
    .await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    let (code, body) = (code.trim(), body);
    let waited = started.elapsed();
    assert_eq!((code, body), ("200", "ok"));
    // The probe waited for a slot: the cap holds, and the handshake deadline freed it.
    assert!(
        waited >= Duration::from_millis(250),
        "answered in {waited:?} while every connection slot was held"
    );
    for stream in idle {
        let took = closed_after(stream).await;
        assert!(
            took < Duration::from_secs(5),
            "an idle connection lived {took:?}"
        );
    }

    // A client that finishes its handshake and sends no request is closed at the header deadline.
    let mut tls = tls_connect(&dir, server.address).await;
    tls.flush().await.expect("flush");
    let took = closed_after(tls).await;
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(5),
        "a connection without a request was closed after {took:?}"
    );
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The operations listener (metrics and health, plain HTTP, reachable by any pod) has the same
/// bounds: a client that sends half a request head is closed at the header deadline, and one
/// that holds every slot delays a probe only until that deadline frees one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operations_listener_drops_half_sent_requests_and_caps_connections() {
    let dir = scratch("operations-connections");
    let server = serve(&dir, LIMITS).await;
    let ops = kdoctor_apiserver::ops::serve(
        "127.0.0.1:0".parse().expect("addr"),
        server.state.clone(),
        LIMITS,
    )
    .await
    .expect("operations listener");

    let mut half = TcpStream::connect(ops).await.expect("connects");
    half.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .expect("half a head");
    let took = closed_after(half).await;
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(5),
        "a half-sent request head was kept {took:?}"
    );

    let mut held = Vec::new();
    for _ in 0..LIMITS.max_connections {
        held.push(TcpStream::connect(ops).await.expect("connects"));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let out = curl(vec![
        "-s".into(),
        "--max-time".into(),
        "15".into(),
        format!("http://{ops}/healthz").into(),
    ])
    .await;
    let waited = started.elapsed();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok");
    assert!(
        waited >= Duration::from_millis(250),
        "answered in {waited:?} while every connection slot was held"
    );
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 20 L3: a body sent with a method this API does not take is read (up to kube-apiserver's
/// 3 MiB) before the answer, so an HTTP/2 client gets its 405 Status rather than a reset
/// stream; a larger body is refused with 413.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_http2_get_a_status_not_a_reset() {
    let dir = scratch("bodies");
    let server = serve(&dir, ServeLimits::default()).await;
    let client = server
        .client_cert("admin", &["system:masters"])
        .expect("cert");
    std::fs::write(dir.join("client.crt"), &client.cert).expect("cert");
    std::fs::write(dir.join("client.key"), &client.key).expect("key");
    let ca = dir.join("server").join("pki").join("ca.crt");
    let url = format!(
        "{}/apis/system.kdoctor.io/v1beta1/kdoctorreports/x",
        server.url()
    );
    for (size, code, reason) in [
        (2 << 20, "405", "MethodNotAllowed"),
        (4 << 20, "413", "RequestEntityTooLarge"),
    ] {
        let body = dir.join("body");
        std::fs::write(&body, vec![b' '; size]).expect("body");
        let out = curl(vec![
            "-sS".into(),
            "--http2".into(),
            "-X".into(),
            "POST".into(),
            "--max-time".into(),
            "20".into(),
            "--cacert".into(),
            ca.clone().into(),
            "--cert".into(),
            dir.join("client.crt").into(),
            "--key".into(),
            dir.join("client.key").into(),
            "--data-binary".into(),
            format!("@{}", body.display()).into(),
            "-w".into(),
            "\n%{http_code} %{http_version}".into(),
            url.clone().into(),
        ])
        .await;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, last) = text.rsplit_once('\n').unwrap_or(("", ""));
        assert_eq!(
            last,
            format!("{code} 2"),
            "{size} bytes: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let status: serde_json::Value = serde_json::from_str(body).expect("a Status");
        assert_eq!(status["reason"], reason, "{status}");
    }
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends `request` on a new HTTP/1.1 connection and reads the answer until the server closes.
async fn exchange(
    dir: &std::path::Path,
    address: std::net::SocketAddr,
    request: Vec<u8>,
) -> String {
    let tls = tls_connect(dir, address).await;
    let (mut read, mut write) = tokio::io::split(tls);
    // The server may answer before it has read everything: the write's fate is not the test's.
    let writer = tokio::spawn(async move {
        let _ = write.write_all(&request).await;
        let _ = write.flush().await;
        write
    });
    let mut answer = Vec::new();
    let mut buffer = [0u8; 16 << 10];
    loop {
        match tokio::time::timeout(Duration::from_secs(20), read.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => answer.extend_from_slice(&buffer[..n]),
            Err(_) => panic!("no answer within 20 s"),
        }
        if answer.windows(4).any(|w| w == b"\r\n\r\n") && answer_complete(&answer) {
            break;
        }
    }
    writer.abort();
    String::from_utf8_lossy(&answer).into_owned()
}

/// Whether `answer` holds a whole response with a Content-Length.
fn answer_complete(answer: &[u8]) -> bool {
    let text = String::from_utf8_lossy(answer);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    head.lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|n| n.trim().parse::<usize>().ok())
        .is_some_and(|n| body.len() >= n)
}

/// Issue 20 L3: a request hyper cannot parse (URI over 65,534 bytes, headers over 1 MiB or more
/// than 100, a malformed header) is answered with a Status, not hyper's empty 414/431/400; and
/// headers up to kube-apiserver's 1 MiB are taken, over HTTP/2 as well (hyper's 16 KiB default
/// there refused anything longer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparsable_requests_get_a_status() {
    let dir = scratch("unparsable");
    let server = serve(&dir, ServeLimits::default()).await;
    let many: String = (0..101).map(|i| format!("x-h{i}: v\r\n")).collect();
    let cases = [
        (
            format!(
                "GET /healthz?q={} HTTP/1.1\r\nhost: a\r\n\r\n",
                "a".repeat(70_000)
            ),
            414,
            "URI is longer",
        ),
        (
            format!("GET /healthz HTTP/1.1\r\nhost: a\r\n{many}\r\n"),
            431,
            "more than 100 fields",
        ),
        (
            format!(
                "GET /healthz HTTP/1.1\r\nhost: a\r\nx-big: {}\r\n\r\n",
                "b".repeat(3 << 19)
            ),
            431,
            "over 1048576 bytes",
        ),
        (
            "GET /healthz HTTP/1.1\r\nhost: a\r\nno colon here\r\n\r\n".to_string(),
            400,
            "not valid HTTP/1.1",
        ),
    ];
    for (request, code, message) in cases {
        let what = format!("{code} ({} bytes)", request.len());
        let answer = exchange(&dir, server.address, request.into_bytes()).await;
        let (head, body) = answer
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("{what}: no answer head in {answer:?}"));
        assert!(
            head.starts_with(&format!("HTTP/1.1 {code} ")),
            "{what}: {head}"
        );
        assert!(
            head.contains("content-type: application/json"),
            "{what}: {head}"
        );
        let status: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: {e}: {body:?}"));
        assert_eq!(
            (status["kind"].as_str(), status["code"].as_u64()),
            (Some("Status"), Some(code)),
            "{what}: {status}"
        );
        assert!(
            status["message"]
                .as_str()
                .is_some_and(|m| m.contains(message)),
            "{what}: {status}"
        );
    }

    // Within the limits: a 60,000-byte URI and 900 KiB of headers over HTTP/1.1.
    let answer = exchange(
        &dir,
        server.address,
        format!(
            "GET /healthz?q={} HTTP/1.1\r\nhost: a\r\nx-big: {}\r\nconnection: close\r\n\r\n",
            "a".repeat(60_000),
            "b".repeat(900 << 10)
        )
        .into_bytes(),
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 200 "),
        "{}",
        &answer[..answer.len().min(200)]
    );
    assert!(
        answer.ends_with("ok"),
        "{}",
        &answer[..answer.len().min(200)]
    );

    // And three times hyper's default over HTTP/2.
    let ca = dir.join("server").join("pki").join("ca.crt");
    let url = format!("{}/healthz", server.url());
    // 48 KiB in three fields (curl's HTTP/2 library sends at most 64 KiB of headers).
    let mut args: Vec<std::ffi::OsString> = vec![
        "-sS".into(),
        "--http2".into(),
        "--max-time".into(),
        "20".into(),
        "--cacert".into(),
        ca.into(),
    ];
    for i in 0..3 {
        args.push("-H".into());
        args.push(format!("x-big-{i}: {}", "b".repeat(16 << 10)).into());
    }
    args.extend([
        "-w".into(),
        "\n%{http_code} %{http_version}".into(),
        url.into(),
    ]);
    let out = curl(args).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok\n200 2",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Only hyper's own bodiless answer is replaced: the API's answers carry a content type, and
/// a body or a partial head is never taken for one.
#[test]
fn only_hyper_s_automatic_answers_are_replaced() {
    use kdoctor_apiserver::parse_errors::automatic_answer;
    let hyper_s = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: Thu, 26 Nov 2026 02:15:49 GMT\r\n\r\n";
    assert_eq!(
        automatic_answer(hyper_s),
        Some(axum::http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
    );
    let ours =
        b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\ncontent-length: 0\r\n\r\n";
    assert_eq!(automatic_answer(ours), None);
    let success = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
    assert_eq!(automatic_answer(success), None);
    let partial = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n";
    assert_eq!(automatic_answer(partial), None);
    assert_eq!(automatic_answer(b"{\"kind\":\"Status\"}"), None);
}

/// Connections on threads of their own (nginx's worker model): every connection is answered,
/// whichever thread it was given to, and the threads end with the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_on_their_own_threads_are_answered_and_end_with_the_server() {
    let dir = scratch("connection-threads");
    let store = Arc::new(Store::open(StoreConfig::new(dir.join("store"))).expect("store"));
    let server = start(ServerOptions {
        store: Some(store),
        connection_threads: 2,
        ..ServerOptions::standalone(dir.join("server"), "127.0.0.1:0".parse().expect("addr"))
    })
    .await
    .expect("starts");
    let threads = server.threads.clone();
    assert_eq!((threads.count(), threads.running()), (2, 2));
    // More connections than threads, open at once: each thread serves several.
    let mut open = Vec::new();
    for _ in 0..6 {
        open.push(tls_connect(&dir, server.address).await);
    }
    for tls in &mut open {
        tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        tls.flush().await.expect("flush");
    }
    for tls in &mut open {
        let mut answer = Vec::new();
        let mut buffer = [0u8; 1024];
        while !(answer.windows(4).any(|w| w == b"\r\n\r\n") && answer_complete(&answer)) {
            let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buffer))
                .await
                .expect("answered within 10 s")
                .expect("read");
            assert!(n > 0, "closed before answering");
            answer.extend_from_slice(&buffer[..n]);
        }
        let answer = String::from_utf8_lossy(&answer).into_owned();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");
    }
    drop(open);
    server.stop().await;
    // Stopped: the connections are gone, so the threads end without waiting out the drain.
    let deadline = Instant::now() + Duration::from_secs(4);
    while threads.running() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(threads.running(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}
