//! The real kubectl (1.32, pinned) against the server over TLS: get, get -o yaml, -l, -w,
//! api-resources, explain, delete, and the exact error lines for a missing name and a forbidden
//! user. kubectl is installed on these machines and in CI; its absence fails the test.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use kdoctor_api::fixtures::net_reach_report;
use kdoctor_apiserver::auth::Auth;
use kdoctor_apiserver::auth::config::AuthnConfig;
use kdoctor_apiserver::auth::x509::CaPool;
use kdoctor_apiserver::server::{AuthMode, RunningServer, ServerOptions, start};
use kdoctor_store::{Store, StoreConfig};

use crate::support::{fill, reviews, scratch};

fn kubectl_path() -> std::path::PathBuf {
    kube_sim::testcluster::pinned_kubectl()
}

struct Cluster {
    server: RunningServer,
    store: Arc<Store>,
    kubeconfig: PathBuf,
    /// Bob's kubeconfig: the server's CA and a bearer token, no client certificate.
    bob: PathBuf,
    cache: PathBuf,
}

impl Cluster {
    fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with(&self.kubeconfig, args)
    }

    fn kubectl_with(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        Command::new(kubectl_path())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("kubectl runs")
    }
}

/// A server over a filled store; users authenticate with the server's client certificates, or
/// with tokens the test reviews answer (`bob-token` may only get and list).
async fn cluster(test: &str) -> Cluster {
    let dir = scratch(test);
    let store = Arc::new(Store::open(StoreConfig::new(dir.join("store"))).expect("store"));
    fill(&store);
    let data = dir.join("server");
    let ca = kdoctor_transport::pki::Ca::load_or_create(&data.join("pki"), "test-ca").expect("ca");
    let auth = Auth::delegated(
        AuthnConfig {
            client_ca: Some(CaPool::from_pem(ca.pem.cert.as_bytes()).expect("pool")),
            requestheader: None,
        },
        Arc::new(reviews()),
    );
    let options = ServerOptions {
        auth: AuthMode::Custom(Arc::new(auth)),
        store: Some(store.clone()),
        ..ServerOptions::standalone(&data, "127.0.0.1:0".parse().expect("addr"))
    };
    let server = start(options).await.expect("server starts");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig().expect("kubeconfig")).expect("written");
    let bob = dir.join("bob.kubeconfig");
    let bob_config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: bob\n  user:\n    token: bob-token\ncontexts:\n- name: c\n  context: {{cluster: c, user: bob}}\ncurrent-context: c\n",
        server.url(),
        data.join("pki").join("ca.crt").display()
    );
    std::fs::write(&bob, bob_config).expect("written");
    Cluster {
        server,
        store,
        kubeconfig,
        bob,
        cache: dir.join("cache"),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_get_prints_the_server_side_table() {
    let c = cluster("kubectl-get").await;
    let out = tokio::task::spawn_blocking(move || c.kubectl(&["get", "kdoctorreports"]))
        .await
        .expect("ran");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let header: Vec<&str> = stdout
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME", "KIND", "TASK", "ROUNDS", "STATUS", "LAST", "RESULT", "NODES", "TASK", "CR",
            "AGE"
        ]
    );
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    assert_eq!(
        rows[1][..8],
        [
            "netreach-task",
            "NetReach",
            "task",
            "2/3",
            "NotFinished",
            "fail",
            "1/1/1",
            "Present"
        ]
    );
    assert_eq!(rows[2][0], "netreach-task.0d1ca000");
    assert_eq!(rows[2][7], "Deleted");
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_get_yaml_labels_api_resources_and_explain() {
    let c = Arc::new(cluster("kubectl-yaml").await);
    let k = c.clone();
    let (yaml, names, resources, explain, wide) = tokio::task::spawn_blocking(move || {
        (
            k.kubectl(&["get", "kdr", "netreach-task.round-1", "-o", "yaml"]),
            k.kubectl(&[
                "get",
                "kdoctorreport",
                "-l",
                "kdoctor.io/last-result=fail",
                "-o",
                "name",
            ]),
            k.kubectl(&["api-resources", "--api-group", "system.kdoctor.io"]),
            k.kubectl(&["explain", "kdoctorreport.status"]),
            k.kubectl(&["get", "kdoctor", "-o", "wide"]),
        )
    })
    .await
    .expect("ran");
    let yaml = text(&yaml.stdout);
    assert!(
        yaml.contains("kind: KdoctorReport") && yaml.contains("name: netreach-task.round-1"),
        "{yaml}"
    );
    assert!(
        yaml.contains("latestRoundReport:") && yaml.contains("roundNumber: 1"),
        "{yaml}"
    );
    assert_eq!(
        text(&names.stdout),
        "kdoctorreport.system.kdoctor.io/netreach-task\n"
    );
    let resources = text(&resources.stdout);
    assert!(
        resources.contains("kdoctorreports")
            && resources.contains("kdr")
            && resources.contains("KdoctorReport"),
        "{resources}"
    );
    let explain = text(&explain.stdout);
    assert!(
        explain.contains("retainedRounds") && explain.contains("roundFinishedNumber"),
        "{explain}"
    );
    let wide = text(&wide.stdout);
    assert!(wide.lines().next().unwrap_or("").contains("UID"), "{wide}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_prints_the_exact_not_found_and_forbidden_lines() {
    let c = Arc::new(cluster("kubectl-errors").await);
    let k = c.clone();
    let (missing, forbidden, allowed) = tokio::task::spawn_blocking(move || {
        (
            k.kubectl(&["get", "kdr", "netreach-nope"]),
            k.kubectl_with(&k.bob, &["delete", "kdr", "netreach-task"]),
            k.kubectl_with(&k.bob, &["get", "kdr", "netreach-task", "-o", "name"]),
        )
    })
    .await
    .expect("ran");
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(
        text(&missing.stderr),
        "Error from server (NotFound): kdoctorreports.system.kdoctor.io \"netreach-nope\" not found\n"
    );
    assert_eq!(forbidden.status.code(), Some(1));
    assert_eq!(
        text(&forbidden.stderr),
        "Error from server (Forbidden): kdoctorreports.system.kdoctor.io \"netreach-task\" is forbidden: User \"bob\" cannot delete resource \"kdoctorreports\" in API group \"system.kdoctor.io\" at the cluster scope\n"
    );
    assert_eq!(
        text(&allowed.stdout),
        "kdoctorreport.system.kdoctor.io/netreach-task\n",
        "{}",
        text(&allowed.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_watch_shows_a_report_as_it_is_stored_and_delete_purges() {
    let c = cluster("kubectl-watch").await;
    let mut child = Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .arg("--cache-dir")
        .arg(&c.cache)
        .args(["get", "kdr", "netreach-task", "-w", "--output-watch-events"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl starts");
    let stdout = child.stdout.take().expect("stdout");
    // Lines arrive on a tokio channel: blocking a runtime worker here would stall the server.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut next_line = async || {
        tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .ok()
            .flatten()
    };
    let header = next_line().await.expect("a header");
    assert!(header.contains("NAME"), "{header}");
    let first = next_line().await.expect("the current row");
    assert!(
        first.contains("netreach-task") && first.contains("2/3"),
        "{first}"
    );
    // Once the watch is open (and its initial event sent), a new round's report arrives:
    // kubectl prints the updated row. (A change before the watch opens is folded into the
    // initial event, which kubectl does not print again.)
    for _ in 0..100 {
        if c.server.state.metrics.watches.get() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let id = c
        .store
        .find(kdoctor_api::task::TaskKind::NetReach, "task")
        .last()
        .expect("task")
        .id;
    let store = c.store.clone();
    tokio::task::spawn_blocking(move || {
        store
            .put_report(id, &net_reach_report("node-c", 3, 2, 5))
            .expect("put")
    })
    .await
    .expect("stored");
    let update = next_line().await.expect("an update");
    assert!(update.contains("netreach-task"), "{update}");
    let _ = child.kill();
    let _ = child.wait();

    let c2 = Arc::new(c);
    let k = c2.clone();
    let deleted =
        tokio::task::spawn_blocking(move || k.kubectl(&["delete", "kdr", "netreach-task.round-1"]))
            .await
            .expect("ran");
    assert_eq!(
        text(&deleted.stdout),
        "kdoctorreport.system.kdoctor.io \"netreach-task.round-1\" deleted\n",
        "{}",
        text(&deleted.stderr)
    );
    assert!(c2.store.round(id, 1).expect("read").is_none());
    let _ = &c2.server;
}
