//! Per-task carriers: DaemonSet and Deployment, their Services, removal after the grace period
//! and with the task.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Service;
use kdoctor_api::task::{NetReach, RoundStatus, RuntimeStatus, TaskKind};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};

use crate::flow::{apply, net_reach, status_when};
use crate::support::{CONTROLLER_USER, Cluster, ClusterConfig, NAMESPACE, eventually};

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
    // The controller deletes the DaemonSet; its Service follows by ownerReference, through
    // kube-controller-manager's garbage collector, whose pace on a loaded 2-core CI machine is
    // not ours (10 s was once too short in CI): the bound is for "gone", not for speed.
    eventually(
        Duration::from_secs(60),
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
    // Garbage collection by kube-controller-manager, as above.
    eventually(Duration::from_secs(60), "the Deployment to go", || async {
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

/// Writes of the controller to carrier objects so far, by "verb resource".
fn carrier_writes(cluster: &Cluster) -> BTreeMap<String, u64> {
    cluster
        .requests(CONTROLLER_USER)
        .into_iter()
        .filter(|(what, _)| {
            let mut words = what.split(' ');
            let verb = words.next().unwrap_or_default();
            let resource = words.next().unwrap_or_default();
            ["create", "update", "patch", "delete"].contains(&verb)
                && ["daemonsets", "deployments", "services", "ingresses"].contains(&resource)
        })
        .collect()
}

fn container_image(ds: &DaemonSet) -> String {
    ds.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .image
        .clone()
        .unwrap_or_default()
}

/// A Service labelled as the carrier of the NetReach task `task`, with no owner.
fn carrier_service(name: &str, task: &str) -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {
            "app.kubernetes.io/managed-by": "kdoctor",
            "app.kubernetes.io/component": "agent",
            "kdoctor.io/task-kind": "NetReach",
            "kdoctor.io/task-name": task,
        }},
        "spec": {"ports": [{"name": "http", "port": 80}], "selector": {"app": "none"}},
    }))
    .expect("a Service")
}

/// Waits until the Service `name` is gone.
async fn gone(services: &Api<Service>, name: &str, what: &str) {
    eventually(Duration::from_secs(15), what, || async {
        services
            .get_opt(name)
            .await
            .ok()
            .and_then(|s| s.is_none().then_some(()))
    })
    .await;
}

/// The live task's carrier stays, and the controller's metrics show `line`.
async fn kept_and_counted(
    cluster: &Cluster,
    (dss, ds_name): (&Api<DaemonSet>, &str),
    (services, service): (&Api<Service>, &str),
    line: &str,
) {
    assert!(dss.get_opt(ds_name).await.unwrap().is_some());
    assert!(services.get_opt(service).await.unwrap().is_some());
    let metrics = cluster.metrics_text();
    assert!(metrics.contains(line), "{line} in {metrics}");
}

/// A carrier is declared, not created once: a steady state costs no write, a deleted Service
/// and an edited DaemonSet come back as declared, a controller with a new agent image updates
/// the running carrier, an object with the task's labels that it no longer declares is deleted,
/// and carrier objects of a task that no longer exists are deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carrier_converges_to_its_declaration_and_leftovers_and_orphans_are_removed() {
    let mut cluster = Cluster::start(ClusterConfig {
        default_agent: false,
        ..ClusterConfig::default()
    })
    .await;
    let task = net_reach(
        "kept",
        serde_json::json!({"agentSpec": {"kind": "DaemonSet", "terminationGracePeriodMinutes": 60}}),
    );
    apply::<NetReach>(&cluster, "kept", &task).await;
    status_when(
        &cluster,
        "kept",
        Duration::from_secs(30),
        "the round to finish on the carrier",
        |s| s.finish,
    )
    .await;
    let dss: Api<DaemonSet> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let services: Api<Service> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let tasks: Api<NetReach> = Api::all(cluster.client.clone());

    // Steady state: reconciles (each nudged by a metadata change) write nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = carrier_writes(&cluster);
    for i in 0..3 {
        let nudge = serde_json::json!({"metadata": {"annotations": {"test/nudge": i.to_string()}}});
        tasks
            .patch("kept", &PatchParams::default(), &Patch::Merge(&nudge))
            .await
            .expect("annotate the task");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        carrier_writes(&cluster),
        before,
        "no carrier writes on a steady state"
    );

    // A deleted Service is restored.
    let service = "kdoctor-netreach-kept-ipv4";
    let old_uid = services.get(service).await.expect("Service").metadata.uid;
    services
        .delete(service, &DeleteParams::default())
        .await
        .expect("delete the Service");
    let restored = eventually(
        Duration::from_secs(15),
        "the Service to be restored",
        || async {
            let found = services.get_opt(service).await.ok().flatten()?;
            (found.metadata.uid != old_uid).then_some(found)
        },
    )
    .await;
    let owner = &restored.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(owner.name, "kdoctor-netreach-kept");

    // An edited DaemonSet is put back.
    let ds_name = "kdoctor-netreach-kept";
    let declared = container_image(&dss.get(ds_name).await.expect("DaemonSet"));
    let edit = serde_json::json!({"spec": {"template": {"spec": {"containers": [
        {"name": "agent", "image": "edited.example/agent:1"}
    ]}}}});
    let edited = dss
        .patch(ds_name, &PatchParams::default(), &Patch::Strategic(&edit))
        .await
        .expect("edit the DaemonSet");
    assert_eq!(container_image(&edited), "edited.example/agent:1");
    eventually(
        Duration::from_secs(15),
        "the DaemonSet's image to be declared again",
        || async {
            let ds = dss.get(ds_name).await.ok()?;
            (container_image(&ds) == declared).then_some(())
        },
    )
    .await;

    // A controller upgrade with another agent image reaches the running carrier.
    let applies = cluster.metrics_text();
    for kind in ["DaemonSet", "Service"] {
        // Created once, written once more to undo the deletion or the edit: nothing else.
        let line = format!("kdoctor_controller_carrier_applies_total{{kind=\"{kind}\"}} 2");
        assert!(applies.contains(&line), "{line} in {applies}");
    }
    cluster.kill_controller().await;
    cluster.options.agent_image = "registry.example/kdoctor:next".to_string();
    // The new controller's metrics, not the stopped one's.
    cluster.registry = prometheus::Registry::new();
    cluster.restart_controller();
    eventually(
        Duration::from_secs(20),
        "the carrier to run the new image",
        || async {
            let ds = dss.get(ds_name).await.ok()?;
            (container_image(&ds) == "registry.example/kdoctor:next").then_some(())
        },
    )
    .await;

    // Carrier objects of a task that does not exist (no ownerReference: the garbage collector
    // cannot see them) are deleted.
    services
        .create(
            &Default::default(),
            &carrier_service("kdoctor-netreach-gone-ipv4", "gone"),
        )
        .await
        .expect("create the orphan");
    gone(
        &services,
        "kdoctor-netreach-gone-ipv4",
        "the orphan to be deleted",
    )
    .await;
    // The live task's carrier stays.
    kept_and_counted(
        &cluster,
        (&dss, ds_name),
        (&services, service),
        "kdoctor_controller_orphans_deleted_total{kind=\"Service\"} 1",
    )
    .await;
    // An object with the live task's labels that the task does not declare (an older
    // controller's Service, say) goes at the task's next reconcile; the sweep leaves it, since
    // its task exists.
    services
        .create(
            &Default::default(),
            &carrier_service("kdoctor-netreach-kept-old", "kept"),
        )
        .await
        .expect("create the leftover");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let nudge = serde_json::json!({"metadata": {"annotations": {"test/nudge": "leftover"}}});
    tasks
        .patch("kept", &PatchParams::default(), &Patch::Merge(&nudge))
        .await
        .expect("annotate the task");
    gone(
        &services,
        "kdoctor-netreach-kept-old",
        "the leftover to be deleted",
    )
    .await;
    kept_and_counted(
        &cluster,
        (&dss, ds_name),
        (&services, service),
        "kdoctor_controller_carrier_leftovers_deleted_total{kind=\"Service\"} 1",
    )
    .await;
}
