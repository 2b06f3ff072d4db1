//! Issue 20 M4: clients that connect and then say nothing cannot hold the server. A handshake
//! and request headers have deadlines, and connections are capped, so a health probe is
//! answered once the idle clients' deadlines pass.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kdoctor_apiserver::serve::ServeLimits;
use kdoctor_apiserver::server::{ServerOptions, start};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_clients_are_dropped_and_cannot_starve_the_server() {
    let dir = scratch("connections");
    let store = Arc::new(Store::open(StoreConfig::new(dir.join("store"))).expect("store"));
    let server = start(ServerOptions {
        store: Some(store),
        limits: LIMITS,
        ..ServerOptions::standalone(dir.join("server"), "127.0.0.1:0".parse().expect("addr"))
    })
    .await
    .expect("starts");

    // Every slot taken by a client that never starts its handshake.
    let mut idle = Vec::new();
    for _ in 0..LIMITS.max_connections {
        idle.push(TcpStream::connect(server.address).await.expect("connects"));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let ca = dir.join("server").join("pki").join("ca.crt");
    let url = format!("{}/healthz", server.url());
    let (code, body) = tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("curl")
            .args(["-s", "--max-time", "15", "-w", "\n%{http_code}", "--cacert"])
            .arg(&ca)
            .arg(&url)
            .output()
            .expect("curl runs (install curl)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().to_string(), body.to_string())
    })
    .await
    .expect("ran");
    let waited = started.elapsed();
    assert_eq!((code.as_str(), body.as_str()), ("200", "ok"));
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
    let tcp = TcpStream::connect(server.address).await.expect("connects");
    let mut tls = connector
        .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
        .await
        .expect("handshake");
    tls.flush().await.expect("flush");
    let took = closed_after(tls).await;
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(5),
        "a connection without a request was closed after {took:?}"
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
    let store = Arc::new(Store::open(StoreConfig::new(dir.join("store"))).expect("store"));
    let server = start(ServerOptions {
        store: Some(store),
        ..ServerOptions::standalone(dir.join("server"), "127.0.0.1:0".parse().expect("addr"))
    })
    .await
    .expect("starts");
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
        let (dir, ca, url) = (dir.clone(), ca.clone(), url.clone());
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("curl")
                .args(["-sS", "--http2", "-X", "POST", "--max-time", "20"])
                .arg("--cacert")
                .arg(&ca)
                .arg("--cert")
                .arg(dir.join("client.crt"))
                .arg("--key")
                .arg(dir.join("client.key"))
                .arg("--data-binary")
                .arg(format!("@{}", body.display()))
                .args(["-w", "\n%{http_code} %{http_version}"])
                .arg(&url)
                .output()
                .expect("curl runs (install curl)")
        })
        .await
        .expect("ran");
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
