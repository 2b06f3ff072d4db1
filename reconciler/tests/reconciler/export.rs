//! Report export end to end: the controller pushes every stored report to a local HTTPS
//! receiver (its own CA, trusted through the export CA option), exactly once per round and
//! node despite refused, dropped and timed-out requests, signed with the shared secret, and
//! without delaying rounds.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use kdoctor_api::task::{LastRoundStatus, NetReach, TaskKind};
use kdoctor_reconciler::export::ExportConfig;
use kdoctor_transport::pki::Ca;
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::flow::{apply, net_reach, status_when};
use crate::support::{Cluster, ClusterConfig, eventually};

const SECRET: &[u8] = b"export-test-shared-secret";

/// What the receiver does with the request numbered `n` (from 1).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    Accept,
    Unavailable,
    DropConnection,
    /// Answers 503 only after the sender's timeout.
    Slow,
}

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Delivery {
    id: String,
    status: u16,
    signed: bool,
    content_type: String,
    event: serde_json::Value,
}

/// A local HTTPS receiver with a certificate of its own CA.
struct Receiver {
    addr: SocketAddr,
    ca: String,
    log: Arc<Mutex<Vec<Delivery>>>,
    server: JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The receiver's check, written from the documented recipe (not with the sender's code):
/// `sha256=` + hex(HMAC-SHA256(secret, timestamp + "." + body)), and a recent timestamp.
fn verify(headers: &http::HeaderMap, body: &[u8]) -> bool {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (Some(timestamp), Some(signature)) =
        (header("x-kdoctor-timestamp"), header("x-kdoctor-signature"))
    else {
        return false;
    };
    let Ok(seconds) = timestamp.parse::<i64>() else {
        return false;
    };
    if (jiff::Timestamp::now().as_second() - seconds).abs() > 300 {
        return false;
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET).unwrap();
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    signature == format!("sha256={}", hex(&mac.finalize().into_bytes()))
}

impl Receiver {
    /// Starts a receiver answering request `n` with `plan(n)`.
    async fn start(plan: impl Fn(usize) -> Answer + Send + Sync + 'static) -> Receiver {
        let ca = Ca::generate("export-receiver-ca").expect("CA");
        let serving = ca
            .serving(&["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("serving certificate");
        let identity = kdoctor_transport::tls::parse_identity(
            serving.cert.as_bytes(),
            serving.key.as_bytes(),
            "receiver",
        )
        .expect("identity");
        let config = kdoctor_transport::tls::server_config(identity, None).expect("TLS");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().unwrap();
        let log: Arc<Mutex<Vec<Delivery>>> = Arc::default();
        let plan = Arc::new(plan);
        let count = Arc::new(AtomicUsize::new(0));
        let server = {
            let log = log.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let (acceptor, log, plan, count) =
                        (acceptor.clone(), log.clone(), plan.clone(), count.clone());
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                            let (log, plan, count) = (log.clone(), plan.clone(), count.clone());
                            async move {
                                let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                                let (parts, body) = request.into_parts();
                                let body = body
                                    .collect()
                                    .await
                                    .map_err(std::io::Error::other)?
                                    .to_bytes();
                                let signed = verify(&parts.headers, &body);
                                let event: serde_json::Value =
                                    serde_json::from_slice(&body).unwrap_or_default();
                                let status = match plan(n) {
                                    Answer::Accept if signed => StatusCode::ACCEPTED,
                                    Answer::Accept => StatusCode::UNAUTHORIZED,
                                    Answer::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                                    Answer::DropConnection => {
                                        return Err(std::io::Error::other("dropped"));
                                    }
                                    Answer::Slow => {
                                        tokio::time::sleep(Duration::from_secs(3)).await;
                                        StatusCode::SERVICE_UNAVAILABLE
                                    }
                                };
                                log.lock().unwrap().push(Delivery {
                                    id: event["id"].as_str().unwrap_or_default().to_string(),
                                    status: status.as_u16(),
                                    signed,
                                    content_type: parts
                                        .headers
                                        .get(http::header::CONTENT_TYPE)
                                        .and_then(|v| v.to_str().ok())
                                        .unwrap_or_default()
                                        .to_string(),
                                    event,
                                });
                                Ok::<_, std::io::Error>(
                                    Response::builder()
                                        .status(status)
                                        .body(Full::new(Bytes::from_static(b"ok")))
                                        .unwrap(),
                                )
                            }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    });
                }
            })
        };
        Receiver {
            addr,
            ca: ca.pem.cert,
            log,
            server,
        }
    }

    fn deliveries(&self) -> Vec<Delivery> {
        self.log.lock().unwrap().clone()
    }
}

/// A metric's value in the Prometheus text format (0 when absent).
/// Export to `receiver`, with timeouts and backoff short enough for a test.
fn quick_export(receiver: &Receiver) -> ExportConfig {
    let url = format!("https://localhost:{}/events", receiver.addr.port());
    let mut export =
        ExportConfig::new(&url, SECRET, Some(receiver.ca.as_bytes()), false).expect("export");
    export.timeout = Duration::from_secs(1);
    export.backoff_initial = Duration::from_millis(50);
    export.backoff_max = Duration::from_millis(200);
    export
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok())?
        })
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_delivers_every_report_exactly_once_despite_failures_signed_and_without_delaying_the_round()
 {
    let mut cluster = Cluster::start(ClusterConfig::default()).await;
    // Every request refused (503) until the test opens the gate, which it does only once the
    // round has finished: a round that waited for its export would never finish. After the
    // gate, one request dropped without an answer and one answered after the sender gave up
    // waiting; then accepted. It listens where the controller runs: in the cluster's network
    // namespace.
    let gate = Arc::new(AtomicUsize::new(0));
    let plan = {
        let gate = gate.clone();
        move |n: usize| match gate.load(Ordering::SeqCst) {
            0 => Answer::Unavailable,
            opened_after if n <= opened_after => Answer::Unavailable,
            opened_after if n == opened_after + 1 => Answer::DropConnection,
            opened_after if n == opened_after + 2 => Answer::Slow,
            _ => Answer::Accept,
        }
    };
    let receiver = cluster.inside(Receiver::start(plan)).await;
    let mut export = quick_export(&receiver);
    export.backoff_max = Duration::from_millis(400);
    cluster.restart_controller_with_export(export).await;

    apply::<NetReach>(&cluster, "exp", &net_reach("exp", serde_json::json!({}))).await;
    let status = status_when(
        &cluster,
        "exp",
        Duration::from_secs(30),
        "the round to finish while the receiver refuses every report",
        |s| s.finish,
    )
    .await;
    assert_eq!(status.last_round_status, Some(LastRoundStatus::Succeed));
    // The export was trying meanwhile, and failing.
    eventually(
        Duration::from_secs(20),
        "two refused deliveries",
        || async {
            (receiver
                .deliveries()
                .iter()
                .filter(|d| d.status == 503)
                .count()
                >= 2)
                .then_some(())
        },
    )
    .await;
    gate.store(receiver.deliveries().len(), Ordering::SeqCst);

    let task = cluster.task::<NetReach>("exp").await.expect("task");
    let uid = task.metadata.uid.clone().expect("uid");
    let expected: BTreeSet<String> = ["node-1", "node-2", "node-3"]
        .iter()
        .map(|node| format!("{uid}/1/{node}"))
        .collect();
    let accepted = |deliveries: &[Delivery]| -> BTreeSet<String> {
        deliveries
            .iter()
            .filter(|d| (200..300).contains(&d.status))
            .map(|d| d.id.clone())
            .collect()
    };
    eventually(
        Duration::from_secs(20),
        "every report to be accepted",
        || async { (accepted(&receiver.deliveries()) == expected).then_some(()) },
    )
    .await;
    // Nothing more comes later (no duplicate from a late retry or another harvest).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let deliveries = receiver.deliveries();

    let mut acceptances: BTreeMap<&str, usize> = BTreeMap::new();
    for d in deliveries.iter().filter(|d| (200..300).contains(&d.status)) {
        *acceptances.entry(&d.id).or_default() += 1;
    }
    assert_eq!(
        acceptances
            .keys()
            .map(|k| k.to_string())
            .collect::<BTreeSet<_>>(),
        expected,
        "{deliveries:#?}"
    );
    assert!(
        acceptances.values().all(|n| *n == 1),
        "an id accepted twice: {acceptances:?}"
    );
    assert!(
        deliveries.iter().all(|d| d.signed),
        "every request verifies with the shared secret: {deliveries:#?}"
    );
    // The failures were real: refused twice, and retried.
    assert!(
        deliveries.iter().filter(|d| d.status == 503).count() >= 2,
        "{deliveries:#?}"
    );

    let id = cluster.store.find(TaskKind::NetReach, "exp")[0].id;
    for d in deliveries.iter().filter(|d| d.status == 202) {
        assert!(
            d.content_type.starts_with("application/cloudevents+json"),
            "{d:?}"
        );
        let event = &d.event;
        assert_eq!(event["specversion"], "1.0");
        assert_eq!(event["type"], "io.kdoctor.report.v1");
        assert_eq!(
            event["source"],
            "/apis/system.kdoctor.io/v1beta1/kdoctorreports/netreach-exp"
        );
        assert_eq!(event["datacontenttype"], "application/json");
        assert!(
            event["time"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some(),
            "{event}"
        );
        let data = &event["data"];
        assert_eq!(data["task"]["kind"], "NetReach");
        assert_eq!(data["task"]["name"], "exp");
        assert_eq!(data["task"]["uid"], uid.as_str());
        assert_eq!(data["round"], 1);
        let node = data["node"].as_str().expect("node");
        let stored = cluster
            .store
            .report_json(id, 1, node)
            .expect("store")
            .expect("stored report");
        let stored: serde_json::Value = serde_json::from_slice(&stored).unwrap();
        assert_eq!(data["report"], stored, "the report as stored");
    }

    let text = cluster.metrics_text();
    assert_eq!(
        metric(&text, "kdoctor_controller_export_sent_total"),
        3.0,
        "{text}"
    );
    let failed = |reason: &str| {
        metric(
            &text,
            &format!("kdoctor_controller_export_failed_attempts_total{{reason=\"{reason}\"}}"),
        )
    };
    assert!(failed("status") >= 2.0, "{text}");
    assert!(failed("http") >= 1.0, "{text}");
    assert!(failed("timeout") >= 1.0, "{text}");
    assert_eq!(metric(&text, "kdoctor_controller_export_queue_length"), 0.0);
    assert!(
        !text.contains("kdoctor_controller_export_dropped_total{"),
        "nothing dropped: {text}"
    );
}

/// Issue 18: what was not acknowledged when the controller stops is delivered by the next one.
/// The first receiver refuses everything; the controller is killed; the next controller,
/// exporting to a receiver that accepts, delivers every report of the round once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_not_yet_exported_when_the_controller_stops_are_delivered_by_the_next() {
    let mut cluster = Cluster::start(ClusterConfig::default()).await;
    let refusing = cluster
        .inside(Receiver::start(|_| Answer::Unavailable))
        .await;
    cluster
        .restart_controller_with_export(quick_export(&refusing))
        .await;
    apply::<NetReach>(&cluster, "keep", &net_reach("keep", serde_json::json!({}))).await;
    status_when(
        &cluster,
        "keep",
        Duration::from_secs(30),
        "the round to finish",
        |s| s.finish,
    )
    .await;
    eventually(Duration::from_secs(20), "refused deliveries", || async {
        (refusing
            .deliveries()
            .iter()
            .filter(|d| d.status == 503)
            .count()
            >= 3)
            .then_some(())
    })
    .await;
    assert_eq!(cluster.store.outbox(None, 100).len(), 3, "all three wait");
    cluster.kill_controller().await;

    let accepting = cluster.inside(Receiver::start(|_| Answer::Accept)).await;
    cluster
        .restart_controller_with_export(quick_export(&accepting))
        .await;
    let task = cluster.task::<NetReach>("keep").await.expect("task");
    let uid = task.metadata.uid.clone().expect("uid");
    let expected: Vec<String> = ["node-1", "node-2", "node-3"]
        .iter()
        .map(|node| format!("{uid}/1/{node}"))
        .collect();
    let accepted = eventually(
        Duration::from_secs(20),
        "the waiting reports to be delivered",
        || async {
            let mut ids: Vec<String> = accepting
                .deliveries()
                .iter()
                .filter(|d| d.status == 202)
                .map(|d| d.id.clone())
                .collect();
            ids.sort();
            (ids.len() >= 3).then_some(ids)
        },
    )
    .await;
    // Nothing more comes later, and the outbox is empty.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(accepted, expected);
    assert_eq!(accepting.deliveries().len(), 3, "each once");
    assert!(cluster.store.outbox(None, 100).is_empty());
}

/// Issue 18 item 2, across a leader change (issue 31: three replicas under Raft): the outbox
/// is part of the replicated store, so the reports the old leader could not deliver are
/// delivered by the replica that takes over, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_waiting_for_export_when_the_leader_dies_are_delivered_by_the_next_leader() {
    let mut cluster = Cluster::start(ClusterConfig {
        replicas: 3,
        ..ClusterConfig::default()
    })
    .await;
    let accept = Arc::new(AtomicBool::new(false));
    let receiver = {
        let accept = accept.clone();
        cluster
            .inside(Receiver::start(move |_| {
                if accept.load(Ordering::SeqCst) {
                    Answer::Accept
                } else {
                    Answer::Unavailable
                }
            }))
            .await
    };
    // Every replica's controller exports to the receiver.
    cluster.export = Some(quick_export(&receiver));
    cluster.restart_controllers().await;
    let leader = cluster.leader(Duration::from_secs(60)).await;

    apply::<NetReach>(&cluster, "move", &net_reach("move", serde_json::json!({}))).await;
    status_when(
        &cluster,
        "move",
        Duration::from_secs(30),
        "the round to finish",
        |s| s.finish,
    )
    .await;
    // Refused by the receiver, waiting in the leader's outbox — and in every replica's.
    for replica in &cluster.replicas {
        let store = replica.store.clone();
        eventually(Duration::from_secs(20), "the outbox replicated", || async {
            (store.outbox(None, 100).len() == 3).then_some(())
        })
        .await;
    }

    cluster.crash(leader).await;
    accept.store(true, Ordering::SeqCst);
    let next = cluster.leader(Duration::from_secs(60)).await;
    assert_ne!(next, leader);
    let task = cluster.task::<NetReach>("move").await.expect("task");
    let uid = task.metadata.uid.clone().expect("uid");
    let expected: Vec<String> = ["node-1", "node-2", "node-3"]
        .iter()
        .map(|node| format!("{uid}/1/{node}"))
        .collect();
    let accepted = || {
        let mut ids: Vec<String> = receiver
            .deliveries()
            .iter()
            .filter(|d| d.status == 202)
            .map(|d| d.id.clone())
            .collect();
        ids.sort();
        ids
    };
    eventually(
        Duration::from_secs(30),
        "the next leader to deliver them",
        || async { (accepted().len() >= 3).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(accepted(), expected, "each report accepted once");
    let store = cluster.replicas[next].store.clone();
    eventually(Duration::from_secs(20), "the outbox emptied", || async {
        store.outbox(None, 100).is_empty().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_to_a_receiver_that_never_answers_delays_no_round_and_gives_up_after_the_attempts() {
    let mut cluster = Cluster::start(ClusterConfig::default()).await;
    // Accepts connections and never answers (not even the TLS handshake), where the
    // controller runs: in the cluster's network namespace.
    let held: Arc<Mutex<Vec<tokio::net::TcpStream>>> = Arc::default();
    let (port, stalled) = {
        let held = held.clone();
        cluster
            .inside(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                let port = listener.local_addr().unwrap().port();
                let stalled = tokio::spawn(async move {
                    while let Ok((tcp, _)) = listener.accept().await {
                        held.lock().unwrap().push(tcp);
                    }
                });
                (port, stalled)
            })
            .await
    };
    let ca = Ca::generate("unused-ca").expect("CA");
    let mut export = ExportConfig::new(
        &format!("https://127.0.0.1:{port}/events"),
        SECRET,
        Some(ca.pem.cert.as_bytes()),
        false,
    )
    .expect("export");
    // Each attempt hangs longer than the whole round takes.
    export.timeout = Duration::from_secs(12);
    export.max_attempts = 2;
    export.backoff_initial = Duration::from_millis(100);
    cluster.restart_controller_with_export(export).await;
    apply::<NetReach>(
        &cluster,
        "stall",
        &net_reach("stall", serde_json::json!({})),
    )
    .await;
    let status = status_when(
        &cluster,
        "stall",
        Duration::from_secs(30),
        "the round to finish",
        |s| s.finish,
    )
    .await;
    assert_eq!(status.last_round_status, Some(LastRoundStatus::Succeed));
    let record = &status.history.as_ref().unwrap()[0];
    assert_eq!(record.succeed_agent_node_list.len(), 3, "{record:?}");
    // The round ended while the three events still hang in their first attempt.
    let text = cluster.metrics_text();
    assert_eq!(
        metric(
            &text,
            "kdoctor_controller_reports_stored_total{kind=\"NetReach\"}"
        ),
        3.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, "kdoctor_controller_export_sent_total"),
        0.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "kdoctor_controller_export_failed_attempts_total{reason=\"timeout\"}"
        ),
        0.0,
        "the round finished before any attempt timed out: {text}"
    );

    // Two attempts each, then given up and counted.
    let text = eventually(
        Duration::from_secs(60),
        "the events to be given up",
        || async {
            let text = cluster.metrics_text();
            (metric(
                &text,
                "kdoctor_controller_export_dropped_total{reason=\"attempts\"}",
            ) == 3.0)
                .then_some(text)
        },
    )
    .await;
    assert_eq!(
        metric(
            &text,
            "kdoctor_controller_export_failed_attempts_total{reason=\"timeout\"}"
        ),
        6.0,
        "{text}"
    );
    assert_eq!(metric(&text, "kdoctor_controller_export_queue_length"), 0.0);
    stalled.abort();
}
