//! Failures around a round: the task deleted or re-created mid-round, the controller killed and
//! restarted mid-round, an agent dying mid-round, a second controller replica.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kdoctor_api::task::{NetReach, RoundStatus, TaskKind};
use kdoctor_reconciler::reconcile::FAILURE_REASON_TASK_DELETED;
use kdoctor_store::RoundResult;
use kube::Api;
use kube::api::{DeleteParams, ListParams};

use crate::flow::{apply, net_reach, status_when};
use crate::support::{Cluster, ClusterConfig, eventually};

fn ongoing(s: &kdoctor_api::task::TaskStatus) -> bool {
    s.history
        .as_ref()
        .and_then(|h| h.first())
        .is_some_and(|r| r.status == RoundStatus::Ongoing)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_deleted_mid_round_keeps_its_reports_and_a_re_created_one_is_a_new_series() {
    let cluster = Cluster::start(ClusterConfig::default()).await;
    cluster.agents.silence("node-3");
    apply::<NetReach>(
        &cluster,
        "again",
        &net_reach("again", serde_json::json!({})),
    )
    .await;
    status_when(
        &cluster,
        "again",
        Duration::from_secs(20),
        "round 1 to run",
        ongoing,
    )
    .await;
    let first = cluster.store.find(TaskKind::NetReach, "again")[0].clone();
    eventually(Duration::from_secs(20), "two nodes' reports", || async {
        (cluster.store.reports(first.id, 1).ok()?.len() == 2).then_some(())
    })
    .await;

    Api::<NetReach>::all(cluster.client.clone())
        .delete("again", &DeleteParams::default())
        .await
        .expect("delete");
    let summary = eventually(
        Duration::from_secs(10),
        "the round recorded as failed",
        || async {
            let task = cluster.store.by_uid(&first.uid)?;
            task.deleted?;
            cluster.store.round(first.id, 1).ok()??.summary
        },
    )
    .await;
    assert_eq!(summary.result, RoundResult::Fail);
    assert_eq!(
        summary.failure_reason.as_deref(),
        Some(FAILURE_REASON_TASK_DELETED)
    );
    assert_eq!(summary.succeeded_nodes, 2);
    assert_eq!(summary.not_reported, ["node-3"]);

    // The same name again: a new incarnation with its own rounds; the old one stays readable.
    apply::<NetReach>(
        &cluster,
        "again",
        &net_reach("again", serde_json::json!({})),
    )
    .await;
    status_when(
        &cluster,
        "again",
        Duration::from_secs(20),
        "the new round to run",
        ongoing,
    )
    .await;
    let both = cluster.store.find(TaskKind::NetReach, "again");
    assert_eq!(both.len(), 2, "{both:?}");
    let second = both
        .iter()
        .find(|t| t.uid != first.uid)
        .expect("new incarnation");
    assert!(second.deleted.is_none());
    eventually(
        Duration::from_secs(20),
        "the new incarnation's reports",
        || async { (cluster.store.reports(second.id, 1).ok()?.len() == 2).then_some(()) },
    )
    .await;
    assert_eq!(
        cluster.store.reports(first.id, 1).unwrap().len(),
        2,
        "nothing mixed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_restarted_mid_round_resumes_without_duplicating_or_skipping() {
    let mut cluster = Cluster::start(ClusterConfig::default()).await;
    cluster.agents.silence("node-1");
    cluster.agents.silence("node-2");
    cluster.agents.silence("node-3");
    let task = net_reach(
        "resume",
        serde_json::json!({"schedule": {"schedule": "0 1", "roundTimeoutMinute": 1, "roundNumber": 2}}),
    );
    apply::<NetReach>(&cluster, "resume", &task).await;
    status_when(
        &cluster,
        "resume",
        Duration::from_secs(20),
        "round 1 to run",
        ongoing,
    )
    .await;
    cluster.kill_controller().await;
    // While the controller is away, the agents finish their round.
    let agents = cluster.agents.clone();
    for node in ["node-1", "node-2", "node-3"] {
        agents.unsilence(node);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.restart_controller();
    let status = status_when(
        &cluster,
        "resume",
        Duration::from_secs(30),
        "round 1 to finish",
        |s| s.done_round == Some(1),
    )
    .await;
    let history = status.history.as_ref().unwrap();
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[0].round_number, 2);
    assert_eq!(history[0].status, RoundStatus::Notstarted);
    assert_eq!(history[1].status, RoundStatus::Succeed, "{:?}", history[1]);
    assert_eq!(history[1].succeed_agent_node_list.len(), 3);
    let id = cluster.store.find(TaskKind::NetReach, "resume")[0].id;
    assert_eq!(cluster.store.round_numbers(id), [1]);
    // One report per node, stored once, and round 1 once in the status history.
    let reports = cluster.store.reports(id, 1).expect("round 1's reports");
    let mut nodes: Vec<String> = reports.iter().map(|r| r.node.clone()).collect();
    nodes.sort();
    assert_eq!(nodes, ["node-1", "node-2", "node-3"], "{nodes:?}");
    let round_1 = history.iter().filter(|r| r.round_number == 1).count();
    assert_eq!(round_1, 1, "{history:?}");
    let summary = cluster
        .store
        .round(id, 1)
        .expect("round 1")
        .and_then(|r| r.summary)
        .expect("round 1 finalised");
    assert_eq!(summary.result, RoundResult::Succeed);
    assert_eq!(summary.succeeded_nodes, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_dying_mid_round_fails_only_its_node_at_the_deadline() {
    let cluster = Cluster::start(ClusterConfig::default()).await;
    // node-2's agent serves and has not reported yet when it dies, mid-round.
    cluster.agents.silence("node-2");
    cluster.agents.fail("node-3");
    apply::<NetReach>(&cluster, "dies", &net_reach("dies", serde_json::json!({}))).await;
    status_when(
        &cluster,
        "dies",
        Duration::from_secs(20),
        "round 1 to run",
        ongoing,
    )
    .await;
    eventually(Duration::from_secs(20), "three agents serving", || async {
        (cluster.agents.serving() == 3).then_some(())
    })
    .await;
    cluster.agents.kill("node-2");
    assert_eq!(cluster.agents.serving(), 2);
    // roundTimeoutMinute is at least 1: the deadline comes a minute after the start.
    let status = status_when(
        &cluster,
        "dies",
        Duration::from_secs(90),
        "the deadline",
        |s| s.finish,
    )
    .await;
    let record = &status.history.as_ref().unwrap()[0];
    assert_eq!(record.status, RoundStatus::Fail);
    assert_eq!(record.succeed_agent_node_list, ["node-1"]);
    assert_eq!(record.failed_agent_node_list, ["node-3"]);
    assert_eq!(record.not_report_agent_node_list, ["node-2"]);
    assert_eq!(record.failure_reason.as_deref(), Some("some agents failed"));
    // Events tell the story. The round's Event is created after its status is written, so it is
    // waited for (bounded) rather than expected in the same instant.
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), "default");
    let reasons = eventually(
        Duration::from_secs(10),
        "the RoundStarted and RoundFailed Events",
        || async {
            let reasons: Vec<String> = events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("dies"))
                .filter_map(|e| e.reason)
                .collect();
            (reasons.iter().any(|r| r == "RoundStarted")
                && reasons.iter().any(|r| r == "RoundFailed"))
            .then_some(reasons)
        },
    )
    .await;
    assert!(reasons.contains(&"RoundStarted".to_string()), "{reasons:?}");
    assert!(reasons.contains(&"RoundFailed".to_string()), "{reasons:?}");
}

/// Issue 20 M5: the harvester reads reports only from the pod it meant to reach. The agent on
/// node-2 shows node-1's agent's (valid, pod-bound) token: the API server's review names
/// another pod, so none of its reports is stored, the round ends with node-2 not reported, and
/// the failure is counted as an identity failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_shows_another_pods_identity_is_not_harvested() {
    let cluster = Cluster::start(ClusterConfig::default()).await;
    eventually(Duration::from_secs(20), "three agents serving", || async {
        (cluster.agents.serving() == 3).then_some(())
    })
    .await;
    cluster.agents.impersonate("node-2", "node-1");
    apply::<NetReach>(
        &cluster,
        "who",
        &net_reach(
            "who",
            serde_json::json!({"schedule": {"schedule": "0 1", "roundTimeoutMinute": 1, "roundNumber": 1}}),
        ),
    )
    .await;
    let id = eventually(Duration::from_secs(20), "the task in the store", || async {
        cluster
            .store
            .find(TaskKind::NetReach, "who")
            .first()
            .map(|t| t.id)
    })
    .await;
    eventually(
        Duration::from_secs(30),
        "the honest agents' reports",
        || async { (cluster.store.reports(id, 1).ok()?.len() == 2).then_some(()) },
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "an identity failure counted",
        || async {
            cluster
                .metrics_text()
                .lines()
                .any(|l| {
                    l.starts_with("kdoctor_controller_harvest_failures_total{reason=\"identity\"}")
                })
                .then_some(())
        },
    )
    .await;
    let nodes: Vec<String> = cluster
        .store
        .reports(id, 1)
        .unwrap()
        .into_iter()
        .map(|r| r.node)
        .collect();
    assert_eq!(
        nodes,
        ["node-1", "node-3"],
        "nothing stored from the impostor"
    );
    let status = cluster
        .task::<NetReach>("who")
        .await
        .and_then(|t| t.status)
        .expect("status");
    let round = &status.history.as_ref().expect("history")[0];
    assert!(
        round
            .not_report_agent_node_list
            .contains(&"node-2".to_string()),
        "{round:?}"
    );
}

/// Issue 15: harvesting runs on its own loop. The agent on node-3 hangs (connections accepted,
/// never answered): two tasks' rounds still get the other agents' reports at once, and both
/// end at their deadline with node-3 not reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_never_answers_holds_up_no_round_and_is_not_reported_at_the_deadline() {
    let cluster = Cluster::start(ClusterConfig::default()).await;
    eventually(Duration::from_secs(20), "three agents serving", || async {
        (cluster.agents.serving() == 3).then_some(())
    })
    .await;
    cluster.hang_agent("node-3").await;
    let names = ["stuck-a", "stuck-b"];
    for name in names {
        apply::<NetReach>(&cluster, name, &net_reach(name, serde_json::json!({}))).await;
    }
    for name in names {
        let id = eventually(Duration::from_secs(20), "the task in the store", || async {
            cluster
                .store
                .find(TaskKind::NetReach, name)
                .first()
                .map(|t| t.id)
        })
        .await;
        let started = std::time::Instant::now();
        status_when(
            &cluster,
            name,
            Duration::from_secs(20),
            "the round",
            ongoing,
        )
        .await;
        eventually(
            Duration::from_secs(15),
            "the answering agents' reports",
            || async { (cluster.store.reports(id, 1).ok()?.len() == 2).then_some(()) },
        )
        .await;
        eprintln!(
            "{name}: two reports {:?} after the round was seen ongoing",
            started.elapsed()
        );
    }
    for name in names {
        let status = status_when(
            &cluster,
            name,
            Duration::from_secs(100),
            "the round to end at its deadline",
            |s| s.finish,
        )
        .await;
        let round = &status.history.as_ref().expect("history")[0];
        assert_eq!(round.status, RoundStatus::Fail, "{round:?}");
        assert_eq!(round.not_report_agent_node_list, ["node-3"], "{round:?}");
        assert_eq!(
            round.succeed_agent_node_list,
            ["node-1", "node-2"],
            "{round:?}"
        );
    }
    let metrics = cluster.metrics_text();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("kdoctor_controller_harvest_failures_total{reason=\"timeout\"}")),
        "{metrics}"
    );
}
