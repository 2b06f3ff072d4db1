//! The controller as the install runs it: a StatefulSet of `--replicas` pods, placed by the
//! scheduler and given addresses by kube-sim (the pods are simulated), each pod's `kdoctor
//! controller` a process of this benchmark bound to its pod's address with the pod's name, UID
//! and IP as the downward API gives them. The replicas find each other through their pods and
//! form their Raft cluster; the Service has no selector, as installed, and the leader keeps
//! its endpoints, so kube-apiserver's aggregation layer reaches the replicas as in a cluster.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams, PostParams};

use crate::NAMESPACE;

/// The StatefulSet's name, as installed (the replicas' member names derive from it).
pub const STATEFULSET: &str = "kdoctor-controller";
/// The replicas' pods' label (what each replica watches to find the others).
const APP: &str = "kdoctor-controller";
/// Ports, as manifests/controller.yaml names them; the report API's is not the install's 6443,
/// which kube-apiserver holds on every address of the namespace the simulated pods share.
pub const API_PORT: u16 = 16443;
pub const METRICS_PORT: u16 = 5721;
pub const REPLICATION_PORT: u16 = 5722;
/// The Lease that names the leading replica.
const LEASE: &str = "kdoctor-controller-lease";

/// One replica's pod: name, UID and address.
#[derive(Clone, Debug)]
pub struct ReplicaPod {
    pub name: String,
    pub uid: String,
    pub ip: IpAddr,
}

fn statefulset(replicas: usize) -> StatefulSet {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": STATEFULSET, "namespace": NAMESPACE,
                     "labels": {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": "controller"}},
        "spec": {
            "replicas": replicas,
            "serviceName": STATEFULSET,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app.kubernetes.io/name": APP}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": "controller"}},
                "spec": {
                    "serviceAccountName": "kdoctor-controller",
                    "containers": [{"name": "controller", "image": "kdoctor", "ports": [
                        {"name": "https", "containerPort": API_PORT},
                        {"name": "metrics", "containerPort": METRICS_PORT},
                        {"name": "replication", "containerPort": REPLICATION_PORT},
                    ]}],
                    "tolerations": [{"operator": "Exists"}]
                }
            }
        }
    }))
    .expect("StatefulSet")
}

/// The report API's Service as manifests/controller.yaml has it: no selector (the leading
/// replica keeps its endpoints).
fn service() -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": STATEFULSET, "namespace": NAMESPACE,
                     "labels": {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": "controller"}},
        "spec": {"type": "ClusterIP",
                 "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]}
    }))
    .expect("Service")
}

/// Creates the StatefulSet and the Service; returns the replicas' pods once each has an
/// address.
pub async fn create(admin: &kube::Client, replicas: usize) -> Vec<ReplicaPod> {
    Api::<StatefulSet>::namespaced(admin.clone(), NAMESPACE)
        .create(&PostParams::default(), &statefulset(replicas))
        .await
        .expect("the controller's StatefulSet");
    Api::<Service>::namespaced(admin.clone(), NAMESPACE)
        .create(&PostParams::default(), &service())
        .await
        .expect("the controller's Service");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let started = Instant::now();
    loop {
        let list = pods
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={APP}")))
            .await
            .expect("the replicas' pods");
        let mut found: Vec<ReplicaPod> = list
            .items
            .iter()
            .filter_map(|p| {
                Some(ReplicaPod {
                    name: p.metadata.name.clone()?,
                    uid: p.metadata.uid.clone()?,
                    ip: p.status.as_ref()?.pod_ip.as_ref()?.parse().ok()?,
                })
            })
            .collect();
        if found.len() == replicas {
            found.sort_by(|a, b| a.name.cmp(&b.name));
            return found;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "only {} of {replicas} controller pods have an address",
            found.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The flags that make `kdoctor controller` the replica of `pod`.
pub fn args(pod: &ReplicaPod) -> Vec<String> {
    let at = |port: u16| std::net::SocketAddr::new(pod.ip, port).to_string();
    vec![
        format!("--listen={}", at(API_PORT)),
        format!("--metrics-listen={}", at(METRICS_PORT)),
        format!("--replication-listen={}", at(REPLICATION_PORT)),
        format!("--pod-ip={}", pod.ip),
        format!("--pod-name={}", pod.name),
        format!("--pod-uid={}", pod.uid),
        "--leader-elect=true".into(),
    ]
}

/// The leading replica's name, once the Lease names one (within `limit`; else the replicas'
/// logs end the run).
pub async fn leader(admin: &kube::Client, limit: Duration, logs: &[std::path::PathBuf]) -> String {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NAMESPACE);
    let started = Instant::now();
    loop {
        if let Some(holder) = leases
            .get_opt(LEASE)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty())
        {
            return holder;
        }
        if started.elapsed() > limit {
            for log in logs {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                eprintln!("== {} (last lines)", log.display());
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
            panic!("no controller replica leads after {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
