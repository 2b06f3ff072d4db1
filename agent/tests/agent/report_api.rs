//! The report spool and the report API: mutual TLS with the install's CA, list, fetch,
//! acknowledge; a killed writer leaves only complete reports.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use kdoctor_agent::agent::{RunningAgent, start};
use kdoctor_agent::config::AgentArgs;
use kdoctor_agent::report_api::HARVESTER_NAME;
use kdoctor_agent::spool::{Spool, TEMP_PREFIX};
use kdoctor_api::report::Report;
use kdoctor_api::task::TaskKind;
use kdoctor_transport::report_client::{MAX_ANSWER_BYTES, ReportClient, ReportClientError};
use kdoctor_transport::tls::{Identity, ServerTrust, client_config};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{PrivateKeyDer, ServerName};
use tokio::net::TcpStream;

use crate::peers::TempDir;

/// A CA: its PEM certificate and an issuer for client certificates.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

fn client_identity(ca: &Ca, name: &str) -> Identity {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    Identity {
        certs: vec![cert.der().clone()],
        key: PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
    }
}

fn report(round: i64) -> Report {
    let mut r = kdoctor_api::fixtures::net_reach_report("node-1", round, 3, round as u64);
    r.round_number = round;
    r
}

/// One request; `Err` when the TLS handshake or the request fails.
async fn call(
    addr: SocketAddr,
    identity: Option<Identity>,
    method: &str,
    path: &str,
) -> Result<(u16, String), String> {
    let config =
        client_config(ServerTrust::Any, identity, &[b"http/1.1"]).map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::from(addr.ip()), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (mut sender, conn) = http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "agent")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// An agent on localhost with its spool in `dir` and the report API trusting `install`.
async fn agent_with_report_api(dir: &TempDir, install: &Ca) -> (RunningAgent, Arc<Spool>) {
    let ca_file = dir.0.join("ca.crt");
    std::fs::write(&ca_file, &install.pem).unwrap();
    let mut args = AgentArgs::ephemeral(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    args.report_dir = Some(dir.0.join("spool"));
    args.tls_ca_cert = ca_file;
    let agent = start(&args).await.expect("agent with report API");
    let spool = agent.spool.clone().expect("spool");
    (agent, spool)
}

#[tokio::test]
async fn harvester_lists_fetches_and_acknowledges_with_a_ca_signed_certificate() {
    let _shared = crate::support::shared().await;
    let dir = TempDir::new("report-api");
    let install = ca("kdoctor-ca");
    let other = ca("someone-else");
    let (agent, spool) = agent_with_report_api(&dir, &install).await;
    let expiry = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3600);
    let a = spool
        .write(TaskKind::NetReach, "reach", "node-1", &report(1), expiry)
        .unwrap();
    let b = spool
        .write(TaskKind::NetReach, "reach", "node-1", &report(2), expiry)
        .unwrap();
    let addr = agent.reports[0];

    // Refused without a certificate, and with one from another CA.
    let none = call(addr, None, "GET", "/v1/reports").await;
    assert!(none.is_err(), "no client certificate: {none:?}");
    let foreign = call(
        addr,
        Some(client_identity(&other, HARVESTER_NAME)),
        "GET",
        "/v1/reports",
    )
    .await;
    assert!(foreign.is_err(), "certificate of another CA: {foreign:?}");
    // The install's CA, but not the harvester's name: nothing may be read or dropped.
    let stranger = || Some(client_identity(&install, "kdoctor-agent"));
    for (method, path) in [
        ("GET", "/v1/reports".to_string()),
        ("GET", format!("/v1/reports/{a}")),
        // b: the report the harvester will not acknowledge, so that the stranger's attempt
        // is the only one that could mark it.
        ("POST", format!("/v1/reports/{b}/ack")),
    ] {
        let (status, body) = call(addr, stranger(), method, &path).await.unwrap();
        assert_eq!(status, 403, "{method} {path} by another name: {body}");
        assert!(body.contains(HARVESTER_NAME), "{body}");
    }

    let me = || Some(client_identity(&install, HARVESTER_NAME));
    let (status, body) = call(addr, me(), "GET", "/v1/reports").await.unwrap();
    assert_eq!(status, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec![a.as_str(), b.as_str()]);
    assert_eq!(list["items"][0]["kind"], "NetReach");
    assert_eq!(list["items"][1]["round"], 2);

    let (status, body) = call(addr, me(), "GET", &format!("/v1/reports/{a}"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    let fetched: Report = serde_json::from_str(&body).unwrap();
    assert_eq!(fetched, report(1));

    let (status, _) = call(addr, me(), "POST", &format!("/v1/reports/{a}/ack"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    let (_, body) = call(addr, me(), "GET", "/v1/reports").await.unwrap();
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(list["items"][0]["acknowledged"].is_string(), "{body}");
    // Only the harvester's own acknowledgement counted (b was "acknowledged" by the stranger
    // alone).
    assert!(list["items"][1].get("acknowledged").is_none(), "{body}");

    let (status, _) = call(
        addr,
        me(),
        "GET",
        "/v1/reports/NetReach_x_round9_node-1_2026-01-01T00:00:00Z",
    )
    .await
    .unwrap();
    assert_eq!(status, 404);
    let (status, _) = call(addr, me(), "GET", "/v1/reports/..%2Fca.crt")
        .await
        .unwrap();
    assert_eq!(status, 400);
    let (status, _) = call(addr, me(), "DELETE", &format!("/v1/reports/{b}"))
        .await
        .unwrap();
    assert_eq!(status, 405, "nothing but list, fetch and acknowledge");
}

/// A list held for a round answers the moment the agent writes that round's report (not a
/// report of an earlier round, and not only when the wait is over); with nothing written it
/// answers when the wait is over; the wait's parameters go together.
#[tokio::test]
async fn a_list_held_for_a_round_answers_as_soon_as_its_report_is_written() {
    let _shared = crate::support::shared().await;
    let dir = TempDir::new("report-api-held");
    let install = ca("kdoctor-ca");
    let (agent, spool) = agent_with_report_api(&dir, &install).await;
    let expiry = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3600);
    let addr = agent.reports[0];
    let me = || Some(client_identity(&install, HARVESTER_NAME));

    let asked = Instant::now();
    let held = tokio::spawn(call(
        addr,
        me(),
        "GET",
        "/v1/reports?kind=NetReach&task=reach&round=2&waitMs=20000",
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !held.is_finished(),
        "answered before any report was written"
    );
    spool
        .write(TaskKind::NetReach, "reach", "node-1", &report(1), expiry)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!held.is_finished(), "answered on an earlier round's report");
    let written = Instant::now();
    let second = spool
        .write(TaskKind::NetReach, "reach", "node-1", &report(2), expiry)
        .unwrap();
    let (status, body) = tokio::time::timeout(Duration::from_secs(5), held)
        .await
        .expect("an answer within 5 s of the report, not at the end of the 20 s wait")
        .unwrap()
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&second), "{body}");
    assert!(
        written.elapsed() < Duration::from_secs(5) && asked.elapsed() >= Duration::from_secs(1),
        "held {:?}, answered {:?} after the write",
        asked.elapsed(),
        written.elapsed()
    );

    // Nothing for round 3 comes: the answer, with what there is, when the wait is over.
    let asked = Instant::now();
    let (status, body) = call(
        addr,
        me(),
        "GET",
        "/v1/reports?kind=NetReach&task=reach&round=3&waitMs=700",
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&second), "{body}");
    assert!(
        asked.elapsed() >= Duration::from_millis(700),
        "{:?}",
        asked.elapsed()
    );

    let (status, body) = call(addr, me(), "GET", "/v1/reports?kind=NetReach&round=3")
        .await
        .unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("given only kind, round"), "{body}");
}

/// The agent shows the harvester, and only the harvester, its pod's identity token as the
/// kubelet projected it (re-read on every request: the kubelet rotates it); without the file it
/// says what is missing instead of answering anything.
#[tokio::test]
async fn the_identity_token_is_shown_to_the_harvester_only() {
    let _shared = crate::support::shared().await;
    let dir = TempDir::new("report-identity");
    let install = ca("kdoctor-ca");
    let ca_file = dir.0.join("ca.crt");
    std::fs::write(&ca_file, &install.pem).unwrap();
    let token_file = dir.0.join("token");
    let mut args = AgentArgs::ephemeral(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    args.report_dir = Some(dir.0.join("spool"));
    args.tls_ca_cert = ca_file;
    args.report_token = token_file.clone();
    let agent = start(&args).await.expect("agent with report API");
    let addr = agent.reports[0];
    let me = || Some(client_identity(&install, HARVESTER_NAME));

    let (status, body) = call(addr, me(), "GET", "/v1/identity").await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains(&token_file.display().to_string()), "{body}");

    std::fs::write(&token_file, "first.jwt\n").unwrap();
    let client = ReportClient::new(
        client_identity(&install, HARVESTER_NAME),
        addr.port(),
        Duration::from_secs(5),
    )
    .unwrap();
    let mut connection = client.connect(addr.ip()).await.unwrap();
    assert_eq!(connection.identity().await.unwrap(), "first.jwt");
    std::fs::write(&token_file, "rotated.jwt").unwrap();
    assert_eq!(connection.identity().await.unwrap(), "rotated.jwt");

    let (status, body) = call(
        addr,
        Some(client_identity(&install, "kdoctor-agent")),
        "GET",
        "/v1/identity",
    )
    .await
    .unwrap();
    assert_eq!(status, 403, "another name of the install's CA: {body}");
    assert!(!body.contains("rotated"), "{body}");
    std::fs::write(
        &token_file,
        "x".repeat(kdoctor_transport::report_api::MAX_TOKEN_BYTES + 1),
    )
    .unwrap();
    let error = connection.identity().await.unwrap_err();
    assert!(error.to_string().contains("larger than"), "{error}");
}

/// Issue 20 M5: whatever answers on an agent's address cannot push more than
/// [`MAX_ANSWER_BYTES`] into the harvester: a peer that streams without end is cut off.
#[tokio::test]
async fn the_harvester_reads_a_bounded_answer() {
    let identity =
        kdoctor_transport::tls::Identity::self_signed(&["127.0.0.1".to_string()]).unwrap();
    let config = kdoctor_transport::tls::server_config(identity, None).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (tcp, _) = listener.accept().await.unwrap();
        let mut tls = acceptor.accept(tcp).await.unwrap();
        let mut request = [0u8; 4096];
        let _ = tls.read(&mut request).await;
        let _ = tls
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100000000000\r\n\r\n")
            .await;
        let chunk = vec![b' '; 1 << 20];
        while tls.write_all(&chunk).await.is_ok() {
            counter.fetch_add(chunk.len(), std::sync::atomic::Ordering::Relaxed);
        }
    });
    let install = ca("kdoctor-ca");
    let client = ReportClient::new(
        client_identity(&install, HARVESTER_NAME),
        port,
        Duration::from_secs(60),
    )
    .unwrap();
    let mut connection = client
        .connect(IpAddr::V4(Ipv4Addr::LOCALHOST))
        .await
        .unwrap();
    let started = Instant::now();
    let error = connection
        .fetch("NetReach_x_round1_node-1")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ReportClientError::Decode { problem, .. } if problem.contains("larger than")),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    // The peer was cut off near the bound (socket buffers hold a few MiB more), not read on.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pushed = sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        pushed < MAX_ANSWER_BYTES + (32 << 20),
        "the peer pushed {pushed} bytes"
    );
}

const CHILD_DIR: &str = "KDOCTOR_SPOOL_WRITER_DIR";

fn count_reports(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        })
        .unwrap_or(0)
}

/// Run as a child (the env var set), this test writes reports until it is killed; as the
/// parent, it kills such a writer three times mid-flight and checks what a restarted agent sees.
#[test]
fn killed_writer_leaves_only_complete_reports() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        // The child: write until killed (no lock: it is its own process).
        let spool = Spool::open(&dir).unwrap();
        let expiry = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3600);
        for round in 1.. {
            // Big reports (many targets) so that a kill often lands inside a write.
            let r = kdoctor_api::fixtures::net_reach_report("node-1", round, 300, round as u64);
            let task = format!("t{}", std::process::id());
            spool
                .write(TaskKind::NetReach, &task, "node-1", &r, expiry)
                .unwrap();
        }
        return;
    }
    let _shared = crate::support::TIMED.blocking_read();
    let dir = TempDir::new("spool-kill");
    let spool_dir = dir.0.join("spool");
    let exe = std::env::current_exe().unwrap();
    let mut expected_at_least = 0;
    for _ in 0..3 {
        let mut child = std::process::Command::new(&exe)
            .args([
                "--exact",
                "report_api::killed_writer_leaves_only_complete_reports",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_DIR, &spool_dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while count_reports(&spool_dir) < expected_at_least + 20 {
            assert!(
                Instant::now() < deadline,
                "the writer did not write 20 reports in 30 s"
            );
            assert!(
                child.try_wait().unwrap().is_none(),
                "the writer exited on its own"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let spool = Spool::open(&spool_dir).unwrap();
        let entries = spool.list().unwrap();
        assert!(entries.len() >= expected_at_least + 20);
        for entry in &entries {
            let bytes = spool.read(&entry.name).unwrap();
            let report: Report = serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("{} is not a complete report: {e}", entry.name));
            assert_eq!(report.round_number as u64, entry.round);
        }
        let leftovers = std::fs::read_dir(&spool_dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(TEMP_PREFIX))
            .count();
        assert_eq!(
            leftovers, 0,
            "reopening removes half-written temporary files"
        );
        expected_at_least = entries.len();
    }
}
