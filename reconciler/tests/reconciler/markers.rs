//! Marker policies: Node conditions, labels and annotations after runs of failed or good rounds,
//! written only on flips, and removed when the task is deleted.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kdoctor_api::task::{MarkerPolicy, NetReach, RoundStatus, StatusHistoryRecord, TaskKind};
use kdoctor_reconciler::markers::{mark, unmark};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};

use crate::flow::{apply, net_reach, status_when};
use crate::support::{Cluster, ClusterConfig, NAMESPACE, eventually};

const CONDITION: &str = "kdoctor.io/NetReachHealthy";

fn policy(failures: u32, successes: u32) -> MarkerPolicy {
    serde_json::from_value(serde_json::json!({
        "conditionType": CONDITION,
        "failureThreshold": failures,
        "successThreshold": successes,
        "unhealthy": {"labels": {"kdoctor.io/unhealthy": "true"}},
        "healthy": {"annotations": {"kdoctor.io/checked": "ok"}}
    }))
    .expect("policy")
}

fn round(n: i64, ok: &[&str], failed: &[&str]) -> StatusHistoryRecord {
    let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
    StatusHistoryRecord {
        status: if failed.is_empty() {
            RoundStatus::Succeed
        } else {
            RoundStatus::Fail
        },
        failure_reason: None,
        round_number: n,
        start_time_stamp: Time(jiff::Timestamp::now()),
        end_time_stamp: None,
        duration: None,
        dead_line_time_stamp: Time(jiff::Timestamp::now()),
        expected_actor_number: None,
        succeed_agent_node_list: list(ok),
        failed_agent_node_list: list(failed),
        not_report_agent_node_list: vec![],
    }
}

/// (condition status, its lastTransitionTime, labels, annotations) of a node.
async fn marks(
    cluster: &Cluster,
    node: &str,
) -> (Option<String>, Option<Time>, Option<String>, Option<String>) {
    let n = Api::<Node>::all(cluster.client.clone())
        .get(node)
        .await
        .expect("node");
    let condition = n
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == CONDITION));
    (
        condition.as_ref().map(|c| c.status.clone()),
        condition.and_then(|c| c.last_transition_time),
        n.metadata
            .labels
            .and_then(|l| l.get("kdoctor.io/unhealthy").cloned()),
        n.metadata
            .annotations
            .and_then(|a| a.get("kdoctor.io/checked").cloned()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_flip_only_after_their_thresholds_and_lose_every_mark_on_unmark() {
    let cluster = Cluster::start(ClusterConfig::default()).await;
    let client = &cluster.client;
    let p = policy(2, 2);
    // node-1 fails twice: unhealthy; node-2 passed once: not yet healthy.
    let mut history = vec![
        round(2, &["node-2"], &["node-1"]),
        round(1, &[], &["node-1"]),
    ];
    let flips = mark(client, TaskKind::NetReach, "mesh", &p, &history, &[])
        .await
        .unwrap();
    assert_eq!(flips.len(), 1, "{flips:?}");
    let (status, since, label, annotation) = marks(&cluster, "node-1").await;
    assert_eq!(status.as_deref(), Some("False"));
    assert_eq!(label.as_deref(), Some("true"));
    assert_eq!(annotation, None);
    assert_eq!(marks(&cluster, "node-2").await.0, None);

    // Alternating results: no flip, lastTransitionTime kept.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    history.insert(0, round(3, &["node-1", "node-2"], &[]));
    history.insert(0, round(4, &["node-2"], &["node-1"]));
    let flips = mark(client, TaskKind::NetReach, "mesh", &p, &history, &[])
        .await
        .unwrap();
    assert_eq!(
        flips.iter().map(|f| f.node.as_str()).collect::<Vec<_>>(),
        ["node-2"],
        "node-2 passed twice in a row now; node-1 flapped"
    );
    let (status, again, _, _) = marks(&cluster, "node-1").await;
    assert_eq!(status.as_deref(), Some("False"));
    assert_eq!(again, since, "no flip, no new lastTransitionTime");
    let (status, _, label, annotation) = marks(&cluster, "node-2").await;
    assert_eq!(status.as_deref(), Some("True"));
    assert_eq!((label, annotation.as_deref()), (None, Some("ok")));

    // node-1 recovers: the unhealthy label goes, the healthy annotation comes.
    history.insert(0, round(5, &["node-1", "node-2"], &[]));
    history.insert(0, round(6, &["node-1", "node-2"], &[]));
    mark(client, TaskKind::NetReach, "mesh", &p, &history, &[])
        .await
        .unwrap();
    let (status, _, label, annotation) = marks(&cluster, "node-1").await;
    assert_eq!(status.as_deref(), Some("True"));
    assert_eq!((label, annotation.as_deref()), (None, Some("ok")));

    // Another task's marks are its own.
    let other = MarkerPolicy {
        condition_type: "kdoctor.io/OtherHealthy".into(),
        ..policy(1, 1)
    };
    mark(client, TaskKind::Netdns, "dns", &other, &history, &[])
        .await
        .unwrap();
    assert_eq!(
        unmark(client, TaskKind::NetReach, "mesh", Some(&p), NAMESPACE)
            .await
            .unwrap(),
        2
    );
    for node in ["node-1", "node-2"] {
        // The condition and label go; the annotation both policies set stays, since the other
        // task's field manager still applies it (server-side apply's shared ownership, as the
        // real kube-apiserver keeps it).
        assert_eq!(
            marks(&cluster, node).await,
            (None, None, None, Some("ok".to_string())),
            "{node}"
        );
        let n = Api::<Node>::all(client.clone()).get(node).await.unwrap();
        let conditions = n.status.unwrap().conditions.unwrap_or_default();
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "kdoctor.io/OtherHealthy"),
            "the other task's condition stays on {node}"
        );
        assert!(
            conditions.iter().any(|c| c.type_ == "Ready"),
            "the kubelet's stay"
        );
    }
    // With the other task's marks gone too, nothing of either remains.
    assert_eq!(
        unmark(client, TaskKind::Netdns, "dns", Some(&other), NAMESPACE)
            .await
            .unwrap(),
        2
    );
    for node in ["node-1", "node-2"] {
        assert_eq!(
            marks(&cluster, node).await,
            (None, None, None, None),
            "{node}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_marks_failing_nodes_and_its_deletion_removes_the_marks() {
    let cluster = Cluster::start(ClusterConfig::default()).await;
    cluster.agents.fail("node-2");
    let task = net_reach(
        "marked",
        serde_json::json!({"markerPolicy": {
            "conditionType": CONDITION, "failureThreshold": 1, "successThreshold": 1,
            "unhealthy": {"labels": {"kdoctor.io/unhealthy": "true"}},
            "taint": {"key": TAINT}, "markPods": true
        }}),
    );
    apply::<NetReach>(&cluster, "marked", &task).await;
    status_when(
        &cluster,
        "marked",
        Duration::from_secs(30),
        "the round",
        |s| s.finish,
    )
    .await;
    let node2 = eventually(Duration::from_secs(10), "node-2 marked", || async {
        let m = marks(&cluster, "node-2").await;
        (m.0.as_deref() == Some("False")).then_some(m)
    })
    .await;
    assert_eq!(node2.2.as_deref(), Some("true"));
    assert_eq!(marks(&cluster, "node-1").await.0.as_deref(), Some("True"));
    // Markers that act: the default effect, and the agent pod of the failing node.
    assert_eq!(taints(&cluster, "node-2").await.0, ["PreferNoSchedule"]);
    assert_eq!(taints(&cluster, "node-1").await.0, Vec::<String>::new());
    assert_eq!(
        pod_marks(&cluster, "node-2").await,
        (Some("False".into()), Some("true".into()))
    );
    // The task's own series say the same.
    let metrics = cluster.metrics_text();
    for line in [
        r#"kdoctor_task_last_round_success{kind="NetReach",task="marked"} 0"#,
        r#"kdoctor_task_last_round_failing_nodes{kind="NetReach",task="marked"} 1"#,
        r#"kdoctor_task_node_consecutive_failures{kind="NetReach",node="node-2",task="marked"} 1"#,
        r#"kdoctor_task_rounds_total{kind="NetReach",result="fail",task="marked"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    let api: Api<NetReach> = Api::all(cluster.client.clone());
    let live = api.get("marked").await.unwrap();
    assert!(
        live.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"kdoctor.io/markers".to_string())
    );
    api.delete("marked", &DeleteParams::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the task gone", || async {
        api.get_opt("marked")
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
    for node in ["node-1", "node-2", "node-3"] {
        assert_eq!(
            marks(&cluster, node).await,
            (None, None, None, None),
            "{node}"
        );
        assert_eq!(
            taints(&cluster, node).await.0,
            Vec::<String>::new(),
            "{node}"
        );
        assert_eq!(pod_marks(&cluster, node).await, (None, None), "{node}");
    }
    eventually(
        Duration::from_secs(10),
        "the task's series removed",
        || async { (!cluster.metrics_text().contains(r#"task="marked""#)).then_some(()) },
    )
    .await;
}

const TAINT: &str = "kdoctor.io/netreach-failing";

/// The marker taints of `node` (key `TAINT`) and every other taint's key.
async fn taints(cluster: &Cluster, node: &str) -> (Vec<String>, Vec<String>) {
    let n = Api::<Node>::all(cluster.client.clone())
        .get(node)
        .await
        .expect("node");
    let all: Vec<Taint> = n.spec.and_then(|s| s.taints).unwrap_or_default();
    let (ours, theirs): (Vec<Taint>, Vec<Taint>) = all.into_iter().partition(|t| t.key == TAINT);
    (
        ours.into_iter().map(|t| t.effect).collect(),
        theirs.into_iter().map(|t| t.key).collect(),
    )
}

/// (condition status, unhealthy label) of the agent pod on `node`.
async fn pod_marks(cluster: &Cluster, node: &str) -> (Option<String>, Option<String>) {
    let pods = Api::<Pod>::namespaced(cluster.client.clone(), NAMESPACE)
        .list(&ListParams::default().labels("app.kubernetes.io/component=agent"))
        .await
        .expect("pods");
    let pod = pods
        .items
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .expect("an agent pod on the node");
    let condition = pod
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == CONDITION))
        .map(|c| c.status);
    let label = pod
        .metadata
        .labels
        .and_then(|l| l.get("kdoctor.io/unhealthy").cloned());
    (condition, label)
}

/// Markers that act: the policy's taint goes on a failing node (every other taint kept) and
/// comes off when it passes again, the agent pod of the node carries the condition and label,
/// and unmark takes everything off nodes and pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_node_is_tainted_and_its_agent_pod_marked_until_it_passes_again() {
    let cluster = Cluster::start(ClusterConfig::default()).await;
    eventually(
        Duration::from_secs(30),
        "an agent pod on every node",
        || async { (cluster.agents.serving() == 3).then_some(()) },
    )
    .await;
    let client = &cluster.client;
    let nodes: Api<Node> = Api::all(client.clone());
    // Someone else's taint on node-1, which must survive every write.
    let foreign = serde_json::json!({"spec": {"taints": [
        {"key": "example.com/maintenance", "effect": "PreferNoSchedule"}
    ]}});
    nodes
        .patch("node-1", &PatchParams::default(), &Patch::Merge(&foreign))
        .await
        .expect("foreign taint");
    let p: MarkerPolicy = serde_json::from_value(serde_json::json!({
        "conditionType": CONDITION, "failureThreshold": 1, "successThreshold": 1,
        "unhealthy": {"labels": {"kdoctor.io/unhealthy": "true"}},
        "taint": {"key": TAINT, "effect": "NoSchedule"},
        "markPods": true,
    }))
    .expect("policy");
    let pods = || async {
        let list = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
            .list(&ListParams::default().labels("app.kubernetes.io/component=agent"))
            .await
            .expect("pods");
        list.items.into_iter().map(Arc::new).collect::<Vec<_>>()
    };
    let failing = vec![round(1, &["node-2"], &["node-1"])];
    mark(
        client,
        TaskKind::NetReach,
        "act",
        &p,
        &failing,
        &pods().await,
    )
    .await
    .unwrap();
    assert_eq!(
        taints(&cluster, "node-1").await,
        (
            vec!["NoSchedule".to_string()],
            vec!["example.com/maintenance".to_string()]
        )
    );
    assert_eq!(taints(&cluster, "node-2").await.0, Vec::<String>::new());
    assert_eq!(
        pod_marks(&cluster, "node-1").await,
        (Some("False".into()), Some("true".into()))
    );
    assert_eq!(
        pod_marks(&cluster, "node-2").await,
        (Some("True".into()), None)
    );
    // Removed by hand: declared again at the next finished round.
    nodes
        .patch("node-1", &PatchParams::default(), &Patch::Merge(&foreign))
        .await
        .expect("our taint removed by hand");
    mark(
        client,
        TaskKind::NetReach,
        "act",
        &p,
        &failing,
        &pods().await,
    )
    .await
    .unwrap();
    assert_eq!(taints(&cluster, "node-1").await.0, ["NoSchedule"]);

    // node-1 passes again: the taint and the pod's label go, its condition turns True.
    let passing = vec![round(2, &["node-1", "node-2"], &[]), failing[0].clone()];
    mark(
        client,
        TaskKind::NetReach,
        "act",
        &p,
        &passing,
        &pods().await,
    )
    .await
    .unwrap();
    assert_eq!(
        taints(&cluster, "node-1").await,
        (vec![], vec!["example.com/maintenance".to_string()])
    );
    assert_eq!(
        pod_marks(&cluster, "node-1").await,
        (Some("True".into()), None)
    );

    // Failing again, then the task goes: nothing of it stays on nodes or pods.
    let again = vec![round(3, &["node-2"], &["node-1"]), passing[0].clone()];
    mark(client, TaskKind::NetReach, "act", &p, &again, &pods().await)
        .await
        .unwrap();
    assert_eq!(taints(&cluster, "node-1").await.0, ["NoSchedule"]);
    unmark(client, TaskKind::NetReach, "act", Some(&p), NAMESPACE)
        .await
        .unwrap();
    for node in ["node-1", "node-2", "node-3"] {
        assert_eq!(
            taints(&cluster, node).await.0,
            Vec::<String>::new(),
            "{node}"
        );
        assert_eq!(pod_marks(&cluster, node).await, (None, None), "{node}");
        assert_eq!(
            marks(&cluster, node).await,
            (None, None, None, None),
            "{node}"
        );
    }
    assert_eq!(
        taints(&cluster, "node-1").await.1,
        ["example.com/maintenance"]
    );
}
