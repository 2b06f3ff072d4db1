//! Tasks end to end in the simulated cluster: apply → carrier → rounds → reports in the store.

use std::time::Duration;

use kdoctor_api::task::{
    LastRoundStatus, NetReach, RoundStatus, RuntimeStatus, TaskKind, TaskStatus,
};
use kdoctor_reconciler::task::TaskObject;
use kdoctor_store::RoundResult;
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::support::{Cluster, ClusterConfig};

/// A NetReach task as a user writes it.
pub fn net_reach(name: &str, extra_spec: serde_json::Value) -> serde_json::Value {
    let mut spec = serde_json::json!({
        "schedule": {"schedule": "0 1", "roundTimeoutMinute": 1, "roundNumber": 1},
        "request": {"durationInSecond": 1, "qps": 2, "perRequestTimeoutInMS": 500},
        "target": {"endpoint": true, "clusterIP": true, "nodePort": false}
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    serde_json::json!({
        "apiVersion": "kdoctor.io/v1beta1",
        "kind": "NetReach",
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// Applies a task (server-side apply, as `kubectl apply --server-side` does).
pub async fn apply<K>(cluster: &Cluster, name: &str, object: &serde_json::Value)
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    Api::<K>::all(cluster.client.clone())
        .patch(name, &PatchParams::apply("test"), &Patch::Apply(object))
        .await
        .expect("apply task");
}

/// Waits until the NetReach task's status satisfies `done`.
pub async fn status_when(
    cluster: &Cluster,
    name: &str,
    limit: Duration,
    what: &str,
    done: impl Fn(&TaskStatus) -> bool,
) -> TaskStatus {
    kind_status_when::<NetReach>(cluster, name, limit, what, done).await
}

/// Waits until the status of the task of kind `K` satisfies `done`.
pub async fn kind_status_when<K: TaskObject>(
    cluster: &Cluster,
    name: &str,
    limit: Duration,
    what: &str,
    done: impl Fn(&TaskStatus) -> bool,
) -> TaskStatus {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let status = cluster
            .task::<K>(name)
            .await
            .and_then(|t| t.task_status().cloned());
        if let Some(status) = status.as_ref().filter(|s| done(s)) {
            return status.clone();
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "timed out after {limit:?} waiting for {what}; last status: {}\n{}",
                serde_json::to_string_pretty(&status).unwrap_or_default(),
                cluster.dump().await
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_net_reach_task_on_the_default_agent_runs_its_round_and_every_node_report_is_stored() {
    let cluster = Cluster::start(ClusterConfig::default()).await;
    apply::<NetReach>(
        &cluster,
        "reach",
        &net_reach("reach", serde_json::json!({})),
    )
    .await;
    let status = status_when(
        &cluster,
        "reach",
        Duration::from_secs(30),
        "the round to finish",
        |s| s.finish,
    )
    .await;

    assert_eq!(status.expected_round, Some(1));
    assert_eq!(status.done_round, Some(1));
    assert_eq!(status.last_round_status, Some(LastRoundStatus::Succeed));
    let record = &status.history.as_ref().expect("history")[0];
    assert_eq!(record.status, RoundStatus::Succeed, "{record:?}");
    assert_eq!(
        record.succeed_agent_node_list,
        ["node-1", "node-2", "node-3"]
    );
    assert!(record.not_report_agent_node_list.is_empty());
    assert_eq!(record.expected_actor_number, Some(3));
    let resource = status.resource.as_ref().expect("resource");
    assert_eq!(resource.runtime_name, "kdoctor-agent");
    assert_eq!(resource.runtime_status, RuntimeStatus::Created);

    // The store holds the incarnation, the round's summary and one report per node.
    let tasks = cluster.store.find(TaskKind::NetReach, "reach");
    assert_eq!(tasks.len(), 1);
    let id = tasks[0].id;
    let round = cluster.store.round(id, 1).expect("read").expect("round 1");
    let summary = round.summary.expect("summary");
    assert_eq!(summary.result, RoundResult::Succeed);
    assert_eq!(summary.succeeded_nodes, 3);
    let reports = cluster.store.reports(id, 1).expect("reports");
    let nodes: Vec<&str> = reports.iter().map(|r| r.node.as_str()).collect();
    assert_eq!(nodes, ["node-1", "node-2", "node-3"]);
    // Harvested reports are acknowledged on the agents.
    // The controller alone writes the status, a constant number of times per round whatever
    // the number of nodes: first sight (plan), start, end.
    let status_writes: u64 = cluster
        .requests(crate::support::CONTROLLER_USER)
        .iter()
        .filter(|(what, _)| what.ends_with(" netreaches/status") && !what.starts_with("get "))
        .map(|(_, n)| n)
        .sum();
    assert!(
        (2..=4).contains(&status_writes),
        "{status_writes} status writes for one round"
    );
    let stored = cluster
        .store
        .report(id, 1, "node-2")
        .expect("read")
        .expect("node-2");
    assert_eq!(stored.task_uid.as_deref(), tasks[0].uid.as_str().into());
}

/// The stand-in agents do not probe: they write the report of the task's own kind that they are
/// told to (real agents probing these kinds: real_agents.rs). So this test aims at no target at
/// all and checks what the controller does with such reports: it plans each kind's round on the
/// default agent, harvests one report per node in the kind's shape, and takes the round's result
/// from them (node-2 reports a failed round, so both rounds fail naming node-2 alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_http_healthy_and_netdns_rounds_take_their_result_from_the_default_agents_reports() {
    use kdoctor_api::task::{AppHttpHealthy, Netdns};
    let cluster = Cluster::start(ClusterConfig::default()).await;
    cluster.agents.fail("node-2");
    let http = serde_json::json!({
        "apiVersion": "kdoctor.io/v1beta1", "kind": "AppHttpHealthy",
        "metadata": {"name": "web"},
        "spec": {
            "target": {"host": "http://web.invalid/", "method": "GET"},
            "request": {"durationInSecond": 1, "qps": 2, "perRequestTimeoutInMS": 500},
            "schedule": {"schedule": "0 1", "roundTimeoutMinute": 1, "roundNumber": 1},
        }
    });
    let dns = serde_json::json!({
        "apiVersion": "kdoctor.io/v1beta1", "kind": "Netdns",
        "metadata": {"name": "dns"},
        "spec": {
            "target": {"targetDns": {"testIPv4": true, "testIPv6": false}},
            "request": {"domain": "kubernetes.default.svc.cluster.local", "durationInSecond": 1, "qps": 2},
            "schedule": {"schedule": "0 1", "roundTimeoutMinute": 1, "roundNumber": 1},
        }
    });
    apply::<AppHttpHealthy>(&cluster, "web", &http).await;
    apply::<Netdns>(&cluster, "dns", &dns).await;
    for (kind, name) in [(TaskKind::AppHttpHealthy, "web"), (TaskKind::Netdns, "dns")] {
        let status = match kind {
            TaskKind::AppHttpHealthy => {
                kind_status_when::<AppHttpHealthy>(
                    &cluster,
                    name,
                    Duration::from_secs(30),
                    "the round",
                    |s| s.finish,
                )
                .await
            }
            _ => {
                kind_status_when::<Netdns>(
                    &cluster,
                    name,
                    Duration::from_secs(30),
                    "the round",
                    |s| s.finish,
                )
                .await
            }
        };
        assert_eq!(
            status.last_round_status,
            Some(LastRoundStatus::Fail),
            "{kind}: {status:?}"
        );
        let record = &status.history.as_ref().expect("history")[0];
        assert_eq!(
            (
                record.failure_reason.as_deref(),
                record.failed_agent_node_list.clone(),
                record.not_report_agent_node_list.clone(),
            ),
            (
                Some("some agents failed"),
                vec!["node-2".to_string()],
                vec![]
            ),
            "{kind}"
        );
        let task = &cluster.store.find(kind, name)[0];
        assert_eq!(
            cluster.store.reports(task.id, 1).unwrap().len(),
            3,
            "{kind}"
        );
        for node in ["node-1", "node-2", "node-3"] {
            let report = cluster
                .store
                .report(task.id, 1, node)
                .expect("read")
                .unwrap_or_else(|| panic!("{kind}: no report of {node}"));
            let shaped = match kind {
                TaskKind::AppHttpHealthy => report.task_app_http_healthy.is_some(),
                _ => report.task_net_dns.is_some(),
            };
            assert!(
                shaped && report.task_net_reach.is_none(),
                "{kind}: the report of {node} is not in the kind's shape"
            );
        }
    }
}
