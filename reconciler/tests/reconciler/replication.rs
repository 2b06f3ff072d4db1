//! Issue 18 item 1: two replicas, each with its own store. The follower keeps a current copy of
//! the leader's store (the same reports under the same resourceVersions) and stays ready; when
//! the leader dies mid-round, the follower takes the Lease with the leader's data, finishes the
//! round, and no report, round or status record is lost or duplicated.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kdoctor_api::task::{NetReach, RoundStatus, TaskKind};
use kdoctor_reconciler::controller::LEASE_NAME;
use kdoctor_reconciler::replica::ADDRESS_ANNOTATION;
use kdoctor_store::{RoundResult, Store};
use kube::Api;

use crate::flow::{apply, net_reach, status_when};
use crate::support::{Cluster, ClusterConfig, NAMESPACE, eventually, ever_is, turns_true};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_keeps_the_leaders_store_and_takes_over_mid_round_with_it() {
    let mut cluster = Cluster::start(ClusterConfig {
        election: true,
        replication: true,
        ..ClusterConfig::default()
    })
    .await;
    turns_true(
        &cluster.leading,
        Duration::from_secs(20),
        "the first replica leads",
    )
    .await;
    let (follower, store) = cluster.spawn_follower("controller-b").await;
    // From here to the end, any moment the follower's copy is not current counts (it would be
    // unready: the APIService would have one replica less, and none during the failover).
    let stale_meanwhile = ever_is(&follower.current, false);

    // Round 1 runs; node-1 reports before the leader dies, node-2 and node-3 after.
    for node in ["node-1", "node-2", "node-3"] {
        cluster.agents.silence(node);
    }
    apply::<NetReach>(&cluster, "ha", &net_reach("ha", serde_json::json!({}))).await;
    status_when(
        &cluster,
        "ha",
        Duration::from_secs(20),
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
        Duration::from_secs(20),
        "node-1's report in the follower's store",
        || async { (nodes_of(&store, 1) == ["node-1"]).then_some(()) },
    )
    .await;
    // The same history under the same versions (the leader may have written more since).
    let leader_rv = cluster.store.resource_version();
    eventually(
        Duration::from_secs(10),
        "the follower at the leader's resourceVersion",
        || async { (store.resource_version() >= leader_rv).then_some(()) },
    )
    .await;
    assert_eq!(nodes_of(&cluster.store, 1), nodes_of(&store, 1));

    cluster.kill_controller().await;
    let killed_at = store.resource_version();
    for node in ["node-2", "node-3"] {
        cluster.agents.unsilence(node);
    }
    turns_true(
        &follower.leading,
        Duration::from_secs(40),
        "the follower takes over once the Lease expires",
    )
    .await;
    let status = status_when(
        &cluster,
        "ha",
        Duration::from_secs(60),
        "the new leader to finish round 1",
        |s| s.finish,
    )
    .await;
    assert!(
        !stale_meanwhile.is_finished(),
        "the follower's copy was never stale, before, during or after the failover"
    );
    stale_meanwhile.abort();

    let history = status.history.as_ref().expect("history");
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].status, RoundStatus::Succeed, "{history:?}");
    assert_eq!(history[0].succeed_agent_node_list.len(), 3, "{history:?}");
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
    // Versions continue from the old leader's: a client never sees them go back.
    assert!(store.resource_version() > killed_at);
    // Followers find the new leader where the Lease says.
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let lease = leases.get(LEASE_NAME).await.expect("Lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("controller-b")
    );
    let address = lease
        .metadata
        .annotations
        .and_then(|a| a.get(ADDRESS_ANNOTATION).cloned())
        .expect("the leader's replication address");
    assert!(address.starts_with("https://127.0.0.1:"), "{address}");
    follower.handle.abort();
}
