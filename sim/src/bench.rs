//! `kube-sim bench`: N nodes and a DaemonSet, timed until every pod is Ready, with W watchers
//! of pods over HTTPS counting what they receive, and the process's peak RSS.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, WatchEvent, WatchParams};
use serde_json::{Value, json};

use crate::cluster::WriteOptions;
use crate::controllers::eligibility::node_ready;
use crate::controllers::podtemplate::pod_ready;
use crate::sim::{Sim, SimConfig, SimError};

/// What the benchmark measured.
#[derive(Debug, Clone)]
pub struct BenchResult {
    /// Nodes simulated.
    pub nodes: usize,
    /// Watchers of pods.
    pub watchers: usize,
    /// From start until every node is Ready.
    pub nodes_ready: Duration,
    /// From creating the DaemonSet until every pod is Ready in the store.
    pub pods_ready: Duration,
    /// From creating the DaemonSet until every watcher has seen every pod Ready.
    pub watchers_caught_up: Duration,
    /// Watch events each watcher received (min, max).
    pub events_per_watcher: (usize, usize),
    /// Peak resident set size of the process, KiB.
    pub peak_rss_kib: u64,
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

async fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> Result<(), SimError> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > limit {
            return Err(SimError::Client(
                "benchmark condition not reached in time".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// Runs the benchmark.
pub async fn run(nodes: usize, watchers: usize) -> Result<BenchResult, SimError> {
    let t0 = Instant::now();
    let sim = Sim::start(SimConfig {
        nodes,
        ..Default::default()
    })
    .await?;
    let c = sim.cluster().clone();
    wait_until(Duration::from_secs(120), || {
        let (ns, _) = c.store.list("core/nodes", None);
        ns.len() == nodes && ns.iter().all(|n| node_ready(n))
    })
    .await?;
    let nodes_ready = t0.elapsed();

    let client = sim.client().await?;
    let pods: Api<Pod> = Api::all(client);
    let rv = c.store.rv().to_string();
    let ready_seen: Vec<Arc<AtomicUsize>> = (0..watchers)
        .map(|_| Arc::new(AtomicUsize::new(0)))
        .collect();
    let events_seen: Vec<Arc<AtomicUsize>> = (0..watchers)
        .map(|_| Arc::new(AtomicUsize::new(0)))
        .collect();
    let mut tasks = Vec::new();
    for i in 0..watchers {
        let (pods, rv) = (pods.clone(), rv.clone());
        let (ready, events) = (ready_seen[i].clone(), events_seen[i].clone());
        tasks.push(tokio::spawn(async move {
            let Ok(stream) = pods.watch(&WatchParams::default().timeout(290), &rv).await else {
                return;
            };
            let mut stream = stream.boxed();
            let mut ready_pods = std::collections::HashSet::new();
            while let Some(Ok(ev)) = stream.next().await {
                events.fetch_add(1, Ordering::Relaxed);
                if let WatchEvent::Added(p) | WatchEvent::Modified(p) = ev
                    && let Ok(v) = serde_json::to_value(&p)
                    && pod_ready(&v)
                {
                    ready_pods.insert(p.metadata.name.unwrap_or_default());
                    ready.store(ready_pods.len(), Ordering::Relaxed);
                }
            }
        }));
    }
    // Let every watch reach the server before the burst.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let ds = c
        .builtin("apps", "DaemonSet")
        .map_err(SimError::Bootstrap)?;
    let t1 = Instant::now();
    c.create(
        &ds,
        "default",
        json!({
            "metadata": {"name": "bench"},
            "spec": {
                "selector": {"matchLabels": {"app": "bench"}},
                "template": {"metadata": {"labels": {"app": "bench"}},
                    "spec": {"containers": [{"name": "agent", "image": "kdoctor:bench"}]}}
            }
        }),
        &WriteOptions::manager("bench"),
    )
    .map_err(SimError::Bootstrap)?;
    wait_until(Duration::from_secs(300), || {
        c.store
            .get("apps/daemonsets", "default", "bench")
            .and_then(|d| d.pointer("/status/numberReady").and_then(Value::as_u64))
            == Some(nodes as u64)
    })
    .await?;
    let pods_ready = t1.elapsed();
    wait_until(Duration::from_secs(300), || {
        ready_seen
            .iter()
            .all(|r| r.load(Ordering::Relaxed) >= nodes)
    })
    .await?;
    let watchers_caught_up = t1.elapsed();
    let counts: Vec<usize> = events_seen
        .iter()
        .map(|e| e.load(Ordering::Relaxed))
        .collect();
    for t in tasks {
        t.abort();
    }
    let result = BenchResult {
        nodes,
        watchers,
        nodes_ready,
        pods_ready,
        watchers_caught_up,
        events_per_watcher: (
            counts.iter().copied().min().unwrap_or(0),
            counts.iter().copied().max().unwrap_or(0),
        ),
        peak_rss_kib: peak_rss_kib(),
    };
    sim.stop().await;
    Ok(result)
}
