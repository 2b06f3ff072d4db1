//! What a NetReach round costs the Kubernetes API on 1,000 nodes: the controller's requests
//! and status writes, and the real agents' requests, per round — counted from the real
//! kube-apiserver's audit log per user and held to exactly the requests each is known to need.
//! Only two grow with the node count, once: a TokenReview per agent at its first harvest, and
//! the pages of each agent's first list of the carrier's pods.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;

use kdoctor_api::task::{LastRoundStatus, NetReach, TaskKind};
use kdoctor_store::RoundResult;

use crate::flow::{apply, net_reach, status_when};
use crate::support::{
    AGENT_USER, CONTROLLER_USER, Cluster, ClusterConfig, eventually, raise_open_files,
};

const NODES: usize = 1000;
const REAL_AGENTS: usize = 3;

/// Requests so far by (user, "verb resource"), for the controller and the agents.
fn requests(cluster: &Cluster) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for user in [CONTROLLER_USER, AGENT_USER] {
        for (what, n) in cluster.requests(user) {
            out.insert((user.to_string(), what), n);
        }
    }
    out
}

/// The requests of `user` between two snapshots, by verb and resource.
fn between(
    before: &BTreeMap<(String, String), u64>,
    after: &BTreeMap<(String, String), u64>,
    user: &str,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter(|((u, _), _)| u == user)
        .filter_map(|((_, what), n)| {
            let earlier = before.get(&(user.to_string(), what.clone())).copied();
            let grew = n - earlier.unwrap_or(0);
            (grew > 0).then(|| (what.clone(), grew))
        })
        .collect()
}

/// The failed reports of a round of the task: the node, and each failed probe's URL with
/// what its requests met (errors, status codes, latencies) — a reason alone ("Success Rate 0.5")
/// does not say whether the target, the prober or the machine's load failed it.
fn failures(cluster: &Cluster, round: u64) -> Vec<String> {
    let id = cluster.store.find(TaskKind::NetReach, "scale")[0].id;
    let mut out = Vec::new();
    for meta in cluster.store.reports(id, round).expect("reports") {
        if meta.result == RoundResult::Succeed {
            continue;
        }
        let report = cluster.store.report(id, round, &meta.node).ok().flatten();
        let details = report
            .as_ref()
            .and_then(|r| r.task_net_reach.as_ref())
            .map(|r| r.round_task_detail.as_slice())
            .unwrap_or_default();
        out.push(format!(
            "{}: {:?}",
            meta.node,
            report.as_ref().and_then(|r| r.failed_reason.as_deref())
        ));
        for d in details.iter().filter(|d| !d.request_succeed) {
            let m = &d.request_target_metrics;
            out.push(format!(
                "  {} {}..{}: {}",
                d.url,
                m.requests.request_start_time.0,
                m.requests.request_end_time.0,
                m.met()
            ));
        }
    }
    out
}

/// Waits (bounded) until the task's RoundSucceeded Event counts `round` rounds: the Event of a
/// finished round is published after its status is written, so a snapshot of the requests
/// taken when the status shows the end would race it.
async fn round_succeeded_event(cluster: &Cluster, round: i32) {
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), "default");
    eventually(
        Duration::from_secs(30),
        "the round's RoundSucceeded Event",
        || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("scale"))
                .filter(|e| e.reason.as_deref() == Some("RoundSucceeded"))
                .any(|e| e.series.as_ref().map_or(1, |s| s.count) == round)
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_1000_nodes_a_round_costs_the_api_a_few_requests_not_one_per_node() {
    // About five sockets per in-process agent (report API, echo HTTP and HTTPS, health,
    // metrics) and their connections: 5,200 open files at the peak, measured.
    let open_files = raise_open_files();
    assert!(
        open_files >= 8 * NODES as u64,
        "this test needs about {} open files; this machine allows {open_files} (ulimit -Hn)",
        8 * NODES
    );
    let cluster = Cluster::start(ClusterConfig {
        nodes: NODES,
        real_agent_nodes: REAL_AGENTS,
        ..ClusterConfig::default()
    })
    .await;
    // Two rounds a minute apart; real agents probe two peers each (stand-ins serve the echo
    // targets), stand-ins spool fixture reports.
    let task = net_reach(
        "scale",
        serde_json::json!({
            "schedule": {"schedule": "0 1", "roundTimeoutMinute": 1, "roundNumber": 2},
            "request": {"durationInSecond": 1, "qps": 2, "perRequestTimeoutInMS": 1000},
            "target": {"endpoint": true, "clusterIP": false, "nodePort": false,
                       "ipv4": true, "ipv6": false, "maxPeers": 2},
        }),
    );
    // In a cluster a Ready pod serves; here the harness starts each pod's agent after
    // kube-sim made it Ready, so wait until all serve before the round probes them.
    eventually(Duration::from_secs(120), "every agent serving", || async {
        (cluster.agents.serving() == NODES).then_some(())
    })
    .await;
    let start = requests(&cluster);
    apply::<NetReach>(&cluster, "scale", &task).await;
    let first = status_when(
        &cluster,
        "scale",
        Duration::from_secs(120),
        "round 1 to end",
        |s| s.done_round == Some(1),
    )
    .await;
    assert_eq!(
        first.last_round_status,
        Some(LastRoundStatus::Succeed),
        "round 1 failed:\n{}",
        failures(&cluster, 1).join("\n")
    );
    round_succeeded_event(&cluster, 1).await;
    let after_first = requests(&cluster);
    let status = status_when(
        &cluster,
        "scale",
        Duration::from_secs(150),
        "round 2 to end",
        |s| s.finish,
    )
    .await;
    round_succeeded_event(&cluster, 2).await;
    let end = requests(&cluster);
    assert_eq!(
        status.last_round_status,
        Some(LastRoundStatus::Succeed),
        "round 2 failed:\n{}",
        failures(&cluster, 2).join("\n")
    );

    // Every node's report of the second round is stored, three of them from real agents.
    let id = cluster.store.find(TaskKind::NetReach, "scale")[0].id;
    let reports = cluster.store.reports(id, 2).expect("reports");
    assert_eq!(reports.len(), NODES);
    for node in (1..=REAL_AGENTS).map(|i| format!("node-{i}")) {
        let report = cluster
            .store
            .report(id, 2, &node)
            .expect("read")
            .expect("report");
        let probed = report.task_net_reach.expect("result").round_task_detail;
        // Real probes of two peers' pod addresses (stand-ins' fixture reports name 10.x ones).
        assert_eq!(probed.len(), 2, "{node} probes maxPeers peers: {probed:?}");
        assert!(
            probed.iter().all(|d| d.url.contains("://198.19.")),
            "{node}: {probed:?}"
        );
    }

    let controller_first = between(&start, &after_first, CONTROLLER_USER);
    let controller_second = between(&after_first, &end, CONTROLLER_USER);
    let agents_first = between(&start, &after_first, AGENT_USER);
    let agents_second = between(&after_first, &end, AGENT_USER);
    let total = |m: &BTreeMap<String, u64>| m.values().sum::<u64>();
    eprintln!(
        "{NODES} nodes: controller requests {controller_first:?} (first round), \
         {controller_second:?} (second); {REAL_AGENTS} real agents: {agents_first:?} (first), \
         {agents_second:?} (second)"
    );
    // Exact, whatever the node count: what each request is for is known, and one more is a
    // change to look at, not noise.
    let counts = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    };
    // The controller, round 1: which agent answers costs one TokenReview per agent and token
    // (a token lives an hour); the status is written for the plan, the round's start and its
    // end; one Event for the start and one for the end, each created.
    assert_eq!(
        controller_first,
        counts(&[
            ("create events", 2),
            ("create tokenreviews", NODES as u64),
            ("patch netreaches/status", 3),
        ]),
        "the controller's requests in round 1"
    );
    // Round 2: the round's start and end written, the same two Events counted again (a
    // patch each); no review, nothing per node — harvesting goes to the agents' report API.
    assert_eq!(
        controller_second,
        counts(&[("patch events", 2), ("patch netreaches/status", 2)]),
        "the controller's requests in round 2"
    );
    // The agents, at their first round, each: the carrier's selector, their node's zone, and
    // one watch of the carrier's pods, its first list paged by 500 as kube-rs pages; nothing
    // after that — no periodic lists.
    let agents = REAL_AGENTS as u64;
    assert_eq!(
        agents_first,
        counts(&[
            ("get daemonsets", agents),
            ("get nodes", agents),
            ("list pods", agents * NODES.div_ceil(500) as u64),
            ("watch pods", agents),
        ]),
        "the agents' requests in round 1"
    );
    assert_eq!(total(&agents_second), 0, "{agents_second:?}");
}
