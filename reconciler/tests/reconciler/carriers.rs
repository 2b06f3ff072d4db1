//! Per-task carriers: DaemonSet and Deployment, their Services, removal after the grace period
//! and with the task.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Service;
use kdoctor_api::task::{NetReach, RoundStatus, RuntimeStatus, TaskKind};
use kube::Api;
use kube::api::DeleteParams;

use crate::flow::{apply, net_reach, status_when};
use crate::support::{Cluster, ClusterConfig, NAMESPACE, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonset_carrier_is_created_used_and_deleted_after_the_grace_period() {
    let cluster = Cluster::start(ClusterConfig {
        default_agent: false,
        ..ClusterConfig::default()
    })
    .await;
    let task = net_reach(
        "own",
        serde_json::json!({"agentSpec": {"kind": "DaemonSet", "terminationGracePeriodMinutes": 0}}),
    );
    apply::<NetReach>(&cluster, "own", &task).await;

    // The carrier: a DaemonSet owned by the task, a Service per enabled family owned by it.
    let dss: Api<DaemonSet> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let services: Api<Service> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let ds = eventually(Duration::from_secs(10), "the carrier DaemonSet", || async {
        dss.get_opt("kdoctor-netreach-own").await.ok().flatten()
    })
    .await;
    let owner = &ds.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("NetReach", "own")
    );
    assert_eq!(owner.controller, Some(true));
    let labels = ds.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("kdoctor.io/task-kind").map(String::as_str),
        Some("NetReach")
    );
    assert_eq!(
        labels.get("kdoctor.io/task-name").map(String::as_str),
        Some("own")
    );
    let args = ds
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .args
        .clone()
        .unwrap_or_default();
    assert!(
        args.contains(&"--task-kind=NetReach".to_string()),
        "{args:?}"
    );
    assert!(args.contains(&"--task-name=own".to_string()), "{args:?}");
    let v4 = eventually(Duration::from_secs(10), "the IPv4 Service", || async {
        services
            .get_opt("kdoctor-netreach-own-ipv4")
            .await
            .ok()
            .flatten()
    })
    .await;
    let owner = &v4.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("DaemonSet", "kdoctor-netreach-own")
    );
    assert!(
        services
            .get_opt("kdoctor-netreach-own-ipv6")
            .await
            .unwrap()
            .is_none(),
        "IPv6 is disabled"
    );

    // The round runs on the carrier's agents; then, grace 0, the carrier goes.
    let status = status_when(
        &cluster,
        "own",
        Duration::from_secs(30),
        "the carrier to be deleted",
        |s| {
            s.resource
                .as_ref()
                .is_some_and(|r| r.runtime_status == RuntimeStatus::Deleted)
        },
    )
    .await;
    let record = &status.history.as_ref().unwrap()[0];
    assert_eq!(record.status, RoundStatus::Succeed, "{record:?}");
    assert_eq!(record.succeed_agent_node_list.len(), 3);
    eventually(
        Duration::from_secs(10),
        "the DaemonSet and its Service to go",
        || async {
            let ds = dss.get_opt("kdoctor-netreach-own").await.ok()?;
            let svc = services.get_opt("kdoctor-netreach-own-ipv4").await.ok()?;
            (ds.is_none() && svc.is_none()).then_some(())
        },
    )
    .await;
    // What was harvested stays.
    let id = cluster.store.find(TaskKind::NetReach, "own")[0].id;
    assert_eq!(cluster.store.reports(id, 1).unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_carrier_runs_its_replicas_and_goes_with_the_task() {
    let cluster = Cluster::start(ClusterConfig {
        default_agent: false,
        ..ClusterConfig::default()
    })
    .await;
    let task = net_reach(
        "dep",
        serde_json::json!({
            "agentSpec": {"kind": "Deployment", "deploymentReplicas": 2},
            "schedule": {"schedule": "0 1", "roundTimeoutMinute": 1, "roundNumber": 2},
        }),
    );
    apply::<NetReach>(&cluster, "dep", &task).await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let status = status_when(
        &cluster,
        "dep",
        Duration::from_secs(30),
        "round 1 to finish",
        |s| s.done_round == Some(1),
    )
    .await;
    let record = &status.history.as_ref().unwrap()[1];
    assert_eq!(record.round_number, 1);
    assert_eq!(record.status, RoundStatus::Succeed, "{record:?}");
    assert_eq!(
        record.expected_actor_number,
        Some(2),
        "one agent per replica's node"
    );
    let deployment = deployments
        .get("kdoctor-netreach-dep")
        .await
        .expect("Deployment");
    assert_eq!(deployment.spec.unwrap().replicas, Some(2));

    // Deleting the task removes its carrier at once (ownerReference), long before round 2.
    Api::<NetReach>::all(cluster.client.clone())
        .delete("dep", &DeleteParams::default())
        .await
        .expect("delete task");
    eventually(Duration::from_secs(10), "the Deployment to go", || async {
        deployments
            .get_opt("kdoctor-netreach-dep")
            .await
            .ok()
            .and_then(|d| d.is_none().then_some(()))
    })
    .await;
    let tasks = cluster.store.find(TaskKind::NetReach, "dep");
    eventually(
        Duration::from_secs(10),
        "the store to mark the task deleted",
        || async { cluster.store.by_uid(&tasks[0].uid).and_then(|t| t.deleted) },
    )
    .await;
    assert_eq!(
        cluster.store.reports(tasks[0].id, 1).unwrap().len(),
        2,
        "harvested reports stay"
    );
}
