//! The built-in controllers with the default stages: DaemonSets, Deployments, scheduling,
//! Services (ClusterIP, NodePort, LoadBalancer), Endpoints/EndpointSlices, Ingress status,
//! fault annotations, replaceable stages.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_sim::{Sim, SimConfig};
use serde_json::json;

use crate::support::eventually;

async fn sim_with_nodes(n: usize) -> (Sim, kube::Client) {
    let sim = Sim::start(SimConfig {
        nodes: n,
        ..Default::default()
    })
    .await
    .expect("sim");
    let client = sim.client().await.expect("client");
    (sim, client)
}

fn daemonset(name: &str, annotations: serde_json::Value) -> DaemonSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {"containers": [{"name": "agent", "image": "kdoctor:dev", "ports": [{"name": "http", "containerPort": 5710}]}]}
            }
        }
    }))
    .expect("daemonset")
}

#[tokio::test]
async fn daemonset_runs_one_ready_pod_per_node_and_goes_with_its_pods() {
    let (_sim, client) = sim_with_nodes(5).await;
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(10, || {
        let nodes = nodes.clone();
        async move {
            let list = nodes.list(&ListParams::default()).await.expect("nodes");
            let ready = list.items.iter().filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            });
            (ready.count() == 5).then_some(())
        }
    })
    .await;
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    dss.create(&PostParams::default(), &daemonset("agent", json!({})))
        .await
        .expect("create");
    let status = eventually(10, || {
        let dss = dss.clone();
        async move {
            let s = dss.get("agent").await.expect("get").status?;
            (s.number_ready == 5).then_some(s)
        }
    })
    .await;
    assert_eq!(status.desired_number_scheduled, 5);
    assert_eq!(status.updated_number_scheduled, Some(5));
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let list = pods
        .list(&ListParams::default().labels("app=agent"))
        .await
        .expect("pods");
    let mut nodes_used: Vec<_> = list
        .items
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    nodes_used.sort();
    nodes_used.dedup();
    assert_eq!(nodes_used.len(), 5);
    let mut ips: Vec<_> = list
        .items
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 5);
    assert!(ips.iter().all(|ip| ip.starts_with("127.")), "{ips:?}");
    let on_node_1 = pods
        .list(&ListParams::default().fields("spec.nodeName=node-1"))
        .await
        .expect("by node");
    assert_eq!(on_node_1.items.len(), 1);

    dss.delete("agent", &DeleteParams::foreground())
        .await
        .expect("delete");
    eventually(10, || {
        let (pods, dss) = (pods.clone(), dss.clone());
        async move {
            let left = pods
                .list(&ListParams::default().labels("app=agent"))
                .await
                .expect("pods");
            (left.items.is_empty() && dss.get_opt("agent").await.expect("get").is_none())
                .then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn deployments_scale_and_roll_through_replicasets() {
    let (_sim, client) = sim_with_nodes(2).await;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}
        }
    }))
    .expect("deployment");
    deploys
        .create(&PostParams::default(), &d)
        .await
        .expect("create");
    let ready = |n: i32| {
        let deploys = deploys.clone();
        async move {
            eventually(10, || {
                let deploys = deploys.clone();
                async move {
                    let s = deploys.get("web").await.expect("get").status?;
                    (s.ready_replicas == Some(n)
                        && s.updated_replicas == Some(n)
                        && s.replicas == Some(n))
                    .then_some(())
                }
            })
            .await
        }
    };
    ready(3).await;
    deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}})),
        )
        .await
        .expect("new image");
    ready(3).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    eventually(10, || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .expect("pods");
            let images: Vec<_> = list
                .items
                .iter()
                .filter_map(|p| p.spec.as_ref()?.containers.first()?.image.clone())
                .collect();
            (images.len() == 3 && images.iter().all(|i| i == "nginx:2")).then_some(())
        }
    })
    .await;
    deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("scale");
    ready(1).await;
}

#[tokio::test]
async fn services_get_addresses_endpoints_and_load_balancers() {
    let (_sim, client) = sim_with_nodes(3).await;
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    dss.create(&PostParams::default(), &daemonset("agent", json!({})))
        .await
        .expect("ds");
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "agent"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
    }))
    .expect("svc");
    let created = svcs
        .create(&PostParams::default(), &svc)
        .await
        .expect("create svc");
    let spec = created.spec.expect("spec");
    assert!(
        spec.cluster_ip
            .as_deref()
            .is_some_and(|ip| ip.starts_with("127.96.")),
        "{:?}",
        spec.cluster_ip
    );
    let node_port = spec.ports.expect("ports")[0].node_port.expect("nodePort");
    assert!((30000..=32767).contains(&node_port));
    let lb = eventually(10, || {
        let svcs = svcs.clone();
        async move {
            svcs.get("agent")
                .await
                .expect("get")
                .status?
                .load_balancer?
                .ingress?
                .first()?
                .ip
                .clone()
        }
    })
    .await;
    assert!(lb.starts_with("127.200."), "{lb}");
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let subset = eventually(10, || {
        let eps = eps.clone();
        async move {
            let s = eps
                .get_opt("agent")
                .await
                .expect("get")?
                .subsets?
                .into_iter()
                .next()?;
            (s.addresses.as_ref().map(Vec::len) == Some(3)).then_some(s)
        }
    })
    .await;
    assert_eq!(
        subset.ports.expect("ports")[0].port,
        5710,
        "named targetPort resolved"
    );
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let list = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=agent"))
        .await
        .expect("slices");
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].endpoints.len(), 3);
    let dup: Service = serde_json::from_value(json!({
        "metadata": {"name": "dup"},
        "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": node_port}]}
    }))
    .expect("svc");
    let err = svcs
        .create(&PostParams::default(), &dup)
        .await
        .expect_err("port taken");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422 && s.message.contains("provided port is already allocated")),
        "{err}"
    );

    let ings: Api<Ingress> = Api::namespaced(client.clone(), "default");
    let ing: Ingress = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"rules": [{"host": "agent.example", "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "agent", "port": {"number": 80}}}}]}}]}
    }))
    .expect("ingress");
    ings.create(&PostParams::default(), &ing)
        .await
        .expect("ingress");
    let ing_ip = eventually(10, || {
        let ings = ings.clone();
        async move {
            ings.get("agent")
                .await
                .expect("get")
                .status?
                .load_balancer?
                .ingress?
                .first()?
                .ip
                .clone()
        }
    })
    .await;
    assert_ne!(ing_ip, lb);

    svcs.delete("agent", &DeleteParams::default())
        .await
        .expect("delete svc");
    eventually(10, || {
        let (eps, slices) = (eps.clone(), slices.clone());
        async move {
            let gone = eps.get_opt("agent").await.expect("get").is_none()
                && slices
                    .list(&ListParams::default().labels("kubernetes.io/service-name=agent"))
                    .await
                    .expect("slices")
                    .items
                    .is_empty();
            gone.then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn fault_annotations_pick_fault_stages() {
    let (_sim, client) = sim_with_nodes(2).await;
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(
            "node-2",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"kube-sim.kdoctor.io/fault": "not-ready"}}}),
            ),
        )
        .await
        .expect("annotate node");
    eventually(10, || {
        let nodes = nodes.clone();
        async move {
            let n = nodes.get("node-2").await.expect("node");
            let cs = n.status?.conditions?;
            cs.iter()
                .any(|c| c.type_ == "Ready" && c.status == "False")
                .then_some(())
        }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, fault) in [("stuck", "stuck-pending"), ("crash", "crash-loop")] {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {"kube-sim.kdoctor.io/fault": fault}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox:1"}]}
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &p).await.expect("pod");
    }
    let stuck = eventually(10, || {
        let pods = pods.clone();
        async move {
            pods.get("stuck")
                .await
                .expect("get")
                .status
                .filter(|s| s.container_statuses.is_some())
        }
    })
    .await;
    assert_eq!(stuck.phase.as_deref(), Some("Pending"));
    let reason = stuck.container_statuses.expect("statuses")[0]
        .state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone());
    assert_eq!(reason.as_deref(), Some("ContainerCreating"));
    let crash = eventually(10, || {
        let pods = pods.clone();
        async move {
            pods.get("crash")
                .await
                .expect("get")
                .status
                .filter(|s| s.container_statuses.is_some())
        }
    })
    .await;
    let cs = &crash.container_statuses.expect("statuses")[0];
    assert!(!cs.ready);
    assert_eq!(
        cs.state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.as_deref()),
        Some("CrashLoopBackOff")
    );
}

#[tokio::test]
async fn stages_are_chosen_per_test() {
    let sim = Sim::start(SimConfig {
        nodes: 1,
        stages: Some(Vec::new()),
        ..Default::default()
    })
    .await
    .expect("sim");
    let client = sim.client().await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox:1"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &p).await.expect("pod");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let status = pods.get("p").await.expect("get").status.expect("status");
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert!(status.pod_ip.is_none(), "no stages, no kubelet");
    sim.set_stages(kube_sim::stages::default_stages().expect("defaults"));
    // The engine plays the new stages on the next change of the object.
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"nudge": "1"}}})),
    )
    .await
    .expect("nudge");
    eventually(10, || {
        let pods = pods.clone();
        async move { pods.get("p").await.expect("get").status?.pod_ip }
    })
    .await;
}

#[tokio::test]
async fn stage_delays_and_weights_are_honoured() {
    // A kwok delay annotation holds pod-ready back.
    let (sim, client) = sim_with_nodes(1).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "slow", "annotations": {"pod-ready.stage.kwok.x-k8s.io/delay": "700ms"}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox:1"}]}
    }))
    .expect("pod");
    let start = std::time::Instant::now();
    pods.create(&PostParams::default(), &p).await.expect("pod");
    eventually(10, || {
        let pods = pods.clone();
        async move { pods.get("slow").await.expect("get").status?.pod_ip }
    })
    .await;
    let waited = start.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(650),
        "ready after {waited:?}"
    );

    // Weighted stages: one in four pods fails (seeded, so the split is reproducible).
    let stages = kube_sim::stages::parse_stages(
        r#"
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: ok}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  weight: 3
  selector:
    matchExpressions:
    - {key: .spec.nodeName, operator: Exists}
    - {key: .status.phase, operator: In, values: [Pending]}
  next:
    statusTemplate: |
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: fail}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  weight: 1
  selector:
    matchExpressions:
    - {key: .spec.nodeName, operator: Exists}
    - {key: .status.phase, operator: In, values: [Pending]}
  next:
    statusTemplate: |
      phase: Failed
      reason: SimulatedFailure
"#,
    )
    .expect("stages");
    sim.set_stages(stages);
    for i in 0..200 {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("w{i}")},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox:1"}]}
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &p).await.expect("pod");
    }
    let failed = eventually(20, || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default()).await.expect("pods");
            let phases: Vec<String> = list
                .items
                .iter()
                .filter(|p| {
                    p.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with('w'))
                })
                .filter_map(|p| p.status.as_ref()?.phase.clone())
                .collect();
            let done = phases.iter().filter(|p| *p != "Pending").count() == 200;
            done.then(|| phases.iter().filter(|p| *p == "Failed").count())
        }
    })
    .await;
    assert!(
        (30..=70).contains(&failed),
        "about a quarter failed: {failed}"
    );
}
