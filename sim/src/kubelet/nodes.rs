//! The nodes kube-sim is the kubelet of: their Node objects (registered with a Ready status, as
//! a kubelet registers itself), their Leases in kube-node-lease (renewed, which is how the node
//! lifecycle controller of kube-controller-manager knows they live), and the pod CIDRs that
//! kube-controller-manager allocates to them.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use futures::StreamExt;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Label of the nodes whose pods run as real processes.
pub const PROCESS_NODE_LABEL: &str = "kube-sim.kdoctor.io/processes";
/// Taint of the nodes whose pods are only simulated.
pub const SIMULATED_TAINT: &str = "kube-sim.kdoctor.io/simulated";
/// How long a node's Lease is valid (as the kubelet's default).
pub const LEASE_SECONDS: u64 = 40;

/// One node kube-sim plays the kubelet of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// node-1, node-2, ...
    pub name: String,
    /// InternalIP addresses, IPv4 first.
    pub ips: Vec<IpAddr>,
    /// Whether its pods run as real processes (else they are simulated: an address and a
    /// Running status, no process).
    pub processes: bool,
}

/// The nodes of a cluster: `node-1..=count`, the first `processes` of them running processes.
pub fn plan(count: usize, processes: usize, ranges: &[IpNet]) -> Vec<NodeSpec> {
    (1..=count)
        .map(|i| NodeSpec {
            name: format!("node-{i}"),
            ips: ranges
                .iter()
                .filter_map(|r| super::address::node_ip(r, i))
                .collect(),
            processes: i <= processes,
        })
        .collect()
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The MicroTime of now, as Leases want it.
pub fn micro_now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

/// A healthy kubelet's node conditions: type, status, reason, message.
const CONDITIONS: [(&str, &str, &str, &str); 4] = [
    (
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    (
        "DiskPressure",
        "False",
        "KubeletHasNoDiskPressure",
        "kubelet has no disk pressure",
    ),
    (
        "PIDPressure",
        "False",
        "KubeletHasSufficientPID",
        "kubelet has sufficient PID available",
    ),
    (
        "Ready",
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
    ),
];

/// The node's conditions at `t`; `transition`: with `t` as their last transition too (a new
/// node, or one whose kubelet is back after the node controller marked it Unknown).
fn conditions(t: &str, transition: bool) -> Vec<Value> {
    CONDITIONS
        .iter()
        .map(|(kind, status, reason, message)| {
            let mut c = json!({"type": kind, "status": status, "reason": reason,
                               "message": message, "lastHeartbeatTime": t});
            if transition {
                c["lastTransitionTime"] = json!(t);
            }
            c
        })
        .collect()
}

/// The Node object a kubelet would register for `n`.
pub fn node_object(n: &NodeSpec, kubelet_version: &str) -> Value {
    let t = now();
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), n.name.clone()),
        ("kubernetes.io/os".into(), "linux".into()),
        ("kubernetes.io/arch".into(), "amd64".into()),
        ("beta.kubernetes.io/os".into(), "linux".into()),
        ("beta.kubernetes.io/arch".into(), "amd64".into()),
    ]);
    if n.processes {
        labels.insert(PROCESS_NODE_LABEL.into(), "true".into());
    }
    let mut addresses: Vec<Value> = n
        .ips
        .iter()
        .map(|ip| json!({"type": "InternalIP", "address": ip.to_string()}))
        .collect();
    addresses.push(json!({"type": "Hostname", "address": n.name}));
    // A /26 per node leaves 61 pod addresses; the capacity says fewer.
    let resources = json!({"cpu": "4", "memory": "8Gi", "pods": "60", "ephemeral-storage": "20Gi"});
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": n.name, "labels": labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": if n.processes { json!({}) } else {
            // Only pods that tolerate it (DaemonSets tolerating everything, as kdoctor's agents
            // do) go to a node where nothing runs.
            json!({"taints": [{"key": SIMULATED_TAINT, "value": "true", "effect": "NoSchedule"}]})
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": conditions(&t, true),
            "addresses": addresses,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": super::KUBELET_PORT}},
            "nodeInfo": {
                "machineID": format!("kube-sim-{}", n.name),
                "systemUUID": format!("kube-sim-{}", n.name),
                "bootID": format!("kube-sim-{}", n.name),
                "kernelVersion": kernel_version(),
                "osImage": if n.processes { "kube-sim (pods run as processes)" } else { "kube-sim (simulated pods)" },
                "containerRuntimeVersion": concat!("kube-sim://", env!("CARGO_PKG_VERSION")),
                "kubeletVersion": kubelet_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    })
}

fn kernel_version() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn kubelet_post() -> PostParams {
    PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    }
}

fn kubelet_patch() -> PatchParams {
    PatchParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    }
}

/// The field manager of what the kubelet writes.
const MANAGER: &str = "kubelet";

/// How often a node's status is written even when nothing changed (the kubelet's
/// nodeStatusReportFrequency).
const STATUS_REPORT: Duration = Duration::from_secs(300);

/// Registers the nodes (creating them with their status, as kubelets do; an existing node gets
/// its status refreshed) and their Leases.
pub async fn register(
    client: &Client,
    nodes: &[NodeSpec],
    kubelet_version: &str,
) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-node-lease");
    for n in nodes {
        let object = node_object(n, kubelet_version);
        let mut bare = object.clone();
        bare["status"] = json!({});
        let node: Node = serde_json::from_value(bare).map_err(kube::Error::SerdeError)?;
        let created = match api.create(&kubelet_post(), &node).await {
            Ok(created) => created,
            Err(kube::Error::Api(e)) if e.code == 409 => api.get(&n.name).await?,
            Err(e) => return Err(e),
        };
        // The status through its subresource, so that the kubelet owns its fields, as a real
        // kubelet's first status update makes it: a create's status has no owner, and the
        // server-side apply of a manager that owns nothing else in it (a marker's condition)
        // would then, when withdrawn, take the whole status with it.
        let status = json!({"status": object["status"]});
        api.patch_status(&n.name, &kubelet_patch(), &Patch::Merge(&status))
            .await?;
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": n.name, "namespace": "kube-node-lease",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": n.name,
                                     "uid": created.metadata.uid}]},
            "spec": {"holderIdentity": n.name, "leaseDurationSeconds": LEASE_SECONDS,
                     "renewTime": micro_now()},
        });
        leases
            .patch(
                &n.name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&lease),
            )
            .await?;
    }
    Ok(())
}

/// Renewals in flight at once: a thousand nodes renew within the interval even when each
/// request waits on a busy API server.
const RENEWALS_IN_FLIGHT: usize = 32;

/// Renews one node's Lease, and every [`STATUS_REPORT`] (or at once when it is `back` from
/// being down) its status: the conditions of a healthy kubelet, whatever the node controller
/// wrote meanwhile.
async fn renew(
    leases: &Api<k8s_openapi::api::coordination::v1::Lease>,
    nodes: &Api<Node>,
    name: &str,
    report: bool,
    back: bool,
) {
    let patch = json!({"spec": {"renewTime": micro_now(), "holderIdentity": name}});
    if let Err(e) = leases
        .patch(name, &kubelet_patch(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(node = %name, error = %e, "renewing the node's Lease");
    }
    if report || back {
        let heartbeat = json!({"status": {"conditions": conditions(&now(), back)}});
        if let Err(e) = nodes
            .patch_status(name, &kubelet_patch(), &Patch::Strategic(&heartbeat))
            .await
        {
            tracing::warn!(node = %name, error = %e, "reporting the node's status");
        }
    }
}

/// Renews every node's Lease each `every` (a few dozen at a time, so that a round of a
/// thousand nodes fits in the interval), except those `down`, until `shutdown`; warns when a
/// round overran.
pub async fn heartbeat(
    client: Client,
    names: Vec<String>,
    every: Duration,
    down: super::down::Down,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(client);
    let mut reported = tokio::time::Instant::now();
    let mut was_down: Vec<String> = Vec::new();
    loop {
        let round = tokio::time::Instant::now();
        let report = reported.elapsed() >= STATUS_REPORT;
        if report {
            reported = round;
        }
        let (now_down, up): (Vec<String>, Vec<String>) =
            names.iter().cloned().partition(|n| down.is_down(n));
        let back: Vec<String> = up
            .iter()
            .filter(|n| was_down.contains(n))
            .cloned()
            .collect();
        was_down = now_down;
        let renewals = futures::stream::iter(up)
            .map(|name| {
                let (leases, nodes) = (leases.clone(), nodes.clone());
                let back = back.contains(&name);
                async move { renew(&leases, &nodes, &name, report, back).await }
            })
            .buffer_unordered(RENEWALS_IN_FLIGHT)
            .collect::<Vec<()>>();
        tokio::select! {
            _ = renewals => {}
            _ = super::stopped(&mut shutdown) => return,
        }
        if round.elapsed() > every {
            tracing::warn!(
                nodes = names.len(),
                seconds = round.elapsed().as_secs_f64(),
                "renewing every node's Lease took longer than the interval"
            );
        }
        tokio::select! {
            _ = tokio::time::sleep_until(round + every) => {}
            _ = super::stopped(&mut shutdown) => return,
        }
    }
}

/// The pod networks of a node as kube-controller-manager allocated them (`spec.podCIDRs`).
pub fn pod_cidrs(node: &Node) -> Vec<IpNet> {
    node.spec
        .as_ref()
        .and_then(|s| s.pod_cidrs.clone())
        .unwrap_or_default()
        .iter()
        .filter_map(|c| c.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_gives_addresses_and_process_nodes() {
        let ranges: Vec<IpNet> = vec![
            "198.18.0.0/20".parse().expect("net"),
            "fd6b:6474::/64".parse().expect("net"),
        ];
        let nodes = plan(3, 1, &ranges);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].name, "node-1");
        assert!(nodes[0].processes && !nodes[1].processes);
        assert_eq!(
            nodes[2].ips,
            vec![
                "198.18.0.13".parse::<IpAddr>().expect("ip"),
                "fd6b:6474::d".parse().expect("ip")
            ]
        );
    }

    #[test]
    fn node_objects_are_ready_and_labelled() {
        let n = &plan(1, 1, &["198.18.0.0/20".parse().expect("net")])[0];
        let o = node_object(n, "v1.34.4");
        assert_eq!(o["metadata"]["labels"][PROCESS_NODE_LABEL], "true");
        let ready = o["status"]["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .find(|c| c["type"] == "Ready")
            .expect("Ready");
        assert_eq!(ready["status"], "True");
        assert_eq!(o["status"]["addresses"][0]["address"], "198.18.0.11");
        assert_eq!(o["status"]["nodeInfo"]["kubeletVersion"], "v1.34.4");
        // It parses as a Node.
        serde_json::from_value::<Node>(o).expect("a Node");
    }
}
