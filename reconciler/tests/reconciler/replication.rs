//! Issue 31 on a real control plane: three controllers, each with a replica of the report
//! store under Raft (openraft; mutual-TLS HTTPS between them on the namespace's loopback).
//! One leads and alone writes; when it crashes mid-round another takes over, finishes the
//! round once, and every report an agent had been told to drop is in every surviving store.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kdoctor_api::task::{NetReach, RoundStatus, TaskKind};
use kdoctor_reconciler::announce::LEASE_NAME;
use kdoctor_store::{RoundResult, Store};
use kube::Api;

use crate::flow::{apply, net_reach, status_when};
use crate::support::{CONTROLLER_USER, Cluster, ClusterConfig, NAMESPACE, eventually, ever_is};

fn nodes_of(store: &Store, round: u64) -> Vec<String> {
    let Some(task) = store.find(TaskKind::NetReach, "ha").first().cloned() else {
        return vec![];
    };
    let mut nodes: Vec<String> = store
        .reports(task.id, round)
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.node)
        .collect();
    nodes.sort();
    nodes
}

/// The acknowledged reports of task `ha` that `store` does not hold.
fn lost(store: &Store, acknowledged: &BTreeSet<(String, String, u64)>) -> Vec<String> {
    acknowledged
        .iter()
        .filter(|(_, task, _)| task == "ha")
        .filter(|(node, _, round)| !nodes_of(store, *round).contains(node))
        .map(|(node, _, round)| format!("{node} round {round}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_crashes_mid_round_and_another_replica_finishes_it_with_every_acknowledged_report()
 {
    let mut cluster = Cluster::start(ClusterConfig {
        replicas: 3,
        ..ClusterConfig::default()
    })
    .await;
    let first = cluster.leader(Duration::from_secs(60)).await;
    // While the first leads, no other replica's controller runs, not for a moment.
    let others: Vec<_> = (0..3)
        .filter(|i| *i != first)
        .map(|i| ever_is(&cluster.replicas[i].leading, true))
        .collect();

    // Round 1 runs; node-1 reports before the leader crashes, node-2 and node-3 after.
    for node in ["node-1", "node-2", "node-3"] {
        cluster.agents.silence(node);
    }
    apply::<NetReach>(&cluster, "ha", &net_reach("ha", serde_json::json!({}))).await;
    status_when(
        &cluster,
        "ha",
        Duration::from_secs(30),
        "round 1 to run",
        |s| {
            s.history
                .as_ref()
                .is_some_and(|h| h.iter().any(|r| r.status == RoundStatus::Ongoing))
        },
    )
    .await;
    cluster.agents.unsilence("node-1");
    eventually(
        Duration::from_secs(30),
        "node-1's report acknowledged to its agent",
        || async {
            cluster
                .agents
                .acknowledged()
                .iter()
                .any(|(node, task, _)| node == "node-1" && task == "ha")
                .then_some(())
        },
    )
    .await;
    // Acknowledged only once a majority had it: at least one other replica has it already.
    let acknowledged = cluster.agents.acknowledged();
    let holding = (0..3)
        .filter(|i| *i != first && lost(&cluster.replicas[*i].store, &acknowledged).is_empty())
        .count();
    assert!(
        holding >= 1,
        "an acknowledged report is on a majority of replicas"
    );
    for (i, watch) in others.iter().enumerate() {
        assert!(!watch.is_finished(), "replica {i} led while another did");
    }

    cluster.crash(first).await;
    for node in ["node-2", "node-3"] {
        cluster.agents.unsilence(node);
    }
    let second = cluster.leader(Duration::from_secs(60)).await;
    assert_ne!(second, first);
    let status = status_when(
        &cluster,
        "ha",
        Duration::from_secs(90),
        "the new leader to finish round 1",
        |s| s.finish,
    )
    .await;
    let history = status.history.as_ref().expect("history");
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].status, RoundStatus::Succeed, "{history:?}");
    assert_eq!(history[0].succeed_agent_node_list.len(), 3, "{history:?}");

    // Every surviving store: every acknowledged report, the round once, finalised.
    let acknowledged = cluster.agents.acknowledged();
    let survivors: Vec<usize> = (0..3).filter(|i| *i != first).collect();
    for &i in &survivors {
        let store = cluster.replicas[i].store.clone();
        eventually(
            Duration::from_secs(20),
            "the round finalised in every surviving store",
            || async {
                let task = store.find(TaskKind::NetReach, "ha").first().cloned()?;
                store.round(task.id, 1).ok()??.summary.map(|_| ())
            },
        )
        .await;
        assert_eq!(
            lost(&store, &acknowledged),
            Vec::<String>::new(),
            "replica {i}"
        );
        assert_eq!(nodes_of(&store, 1), ["node-1", "node-2", "node-3"]);
        let task = store.find(TaskKind::NetReach, "ha")[0].clone();
        assert_eq!(store.round_numbers(task.id), [1]);
        let summary = store
            .round(task.id, 1)
            .expect("round 1")
            .and_then(|r| r.summary)
            .expect("finalised");
        assert_eq!(summary.result, RoundResult::Succeed);
        assert_eq!(summary.succeeded_nodes, 3);
    }
    // The same versions on both survivors, once both applied everything.
    let (a, b) = (
        cluster.replicas[survivors[0]].store.clone(),
        cluster.replicas[survivors[1]].store.clone(),
    );
    eventually(Duration::from_secs(20), "the survivors agree", || async {
        (a.resource_version() == b.resource_version()).then_some(())
    })
    .await;
    // The Lease names the new leader, for people.
    let name = cluster.replicas[second].name.clone();
    lease_names(&cluster, &name, Duration::from_secs(20)).await;
}

/// Waits until the Lease names `name` (within `limit`).
async fn lease_names(cluster: &Cluster, name: &str, limit: Duration) {
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    eventually(limit, "the Lease names the leader", || async {
        let lease = leases.get(LEASE_NAME).await.ok()?;
        (lease.spec?.holder_identity? == name).then_some(())
    })
    .await;
}

/// A cluster whose controller is one replica of the store under Raft.
async fn one_replica() -> Cluster {
    Cluster::start(ClusterConfig {
        replicas: 1,
        ..ClusterConfig::default()
    })
    .await
}

/// One replica is a valid small install: a cluster of one under Raft leads at once and runs
/// tasks as the three do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_replica_is_a_cluster_of_one_that_runs_tasks() {
    let cluster = one_replica().await;
    assert_eq!(cluster.leader(Duration::from_secs(60)).await, 0);
    let raft = cluster.replicas[0].raft.clone().expect("replicated");
    assert_eq!(raft.voters().len(), 1);
    apply::<NetReach>(&cluster, "ha", &net_reach("ha", serde_json::json!({}))).await;
    let status = status_when(
        &cluster,
        "ha",
        Duration::from_secs(60),
        "the task to finish",
        |s| s.finish,
    )
    .await;
    assert_eq!(
        status.history.as_ref().map(|h| h[0].status),
        Some(RoundStatus::Succeed)
    );
    assert_eq!(
        nodes_of(&cluster.replicas[0].store, 1),
        ["node-1", "node-2", "node-3"]
    );
}

/// The leader names itself in the Lease with one request a renewal (every 5 s): a replace by
/// the resourceVersion it last wrote, not a read and then a write each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_renews_the_lease_without_reading_it_each_time() {
    let cluster = one_replica().await;
    cluster.leader(Duration::from_secs(60)).await;
    lease_names(&cluster, "controller-0", Duration::from_secs(30)).await;
    let before = cluster.requests(CONTROLLER_USER);
    tokio::time::sleep(Duration::from_secs(16)).await;
    let after = cluster.requests(CONTROLLER_USER);
    let grew =
        |what: &str| after.get(what).copied().unwrap_or(0) - before.get(what).copied().unwrap_or(0);
    assert_eq!(grew("get leases"), 0, "before {before:?}, after {after:?}");
    assert!(
        (2..=4).contains(&grew("update leases")),
        "about one renewal every 5 s: before {before:?}, after {after:?}"
    );
}
