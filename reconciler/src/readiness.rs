//! Reading a carrier's state from its objects (pure): whether the workload is ready, and which
//! agents run where.

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// Whether a DaemonSet runs a ready agent on every node it is scheduled to (and at least one):
/// upstream's rule, plus the status being for the current spec.
pub fn daemonset_ready(ds: &DaemonSet) -> bool {
    let Some(status) = &ds.status else {
        return false;
    };
    let current = match (status.observed_generation, ds.metadata.generation) {
        (Some(seen), Some(generation)) => seen >= generation,
        (_, None) => true,
        (None, Some(_)) => false,
    };
    current
        && status.desired_number_scheduled > 0
        && status.number_ready >= status.desired_number_scheduled
}

/// Whether every replica of a Deployment is ready.
pub fn deployment_ready(deployment: &Deployment) -> bool {
    let wanted = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let Some(status) = &deployment.status else {
        return false;
    };
    let current = match (status.observed_generation, deployment.metadata.generation) {
        (Some(seen), Some(generation)) => seen >= generation,
        (_, None) => true,
        (None, Some(_)) => false,
    };
    current && wanted > 0 && status.ready_replicas.unwrap_or(0) >= wanted
}

/// The ready endpoints of Service `service` across its EndpointSlices (an endpoint whose
/// `ready` is unset counts as ready, as kube-proxy reads it).
pub fn ready_endpoints<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    service: &str,
) -> usize {
    slices
        .into_iter()
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"))
                .map(String::as_str)
                == Some(service)
        })
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .count()
}

/// One agent pod the controller can harvest from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AgentPod {
    /// Pod name.
    pub name: String,
    /// Pod UID (its identity token names it).
    pub uid: String,
    /// Node it runs on.
    pub node: String,
    /// Its address (the report API listens there).
    pub ip: IpAddr,
    /// Ready and not terminating.
    pub ready: bool,
}

/// Whether the pod's Ready condition is True (what its kubelet, or the node controller, says).
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The agent a pod is, if it is scheduled and has an address.
pub fn agent_pod(pod: &Pod) -> Option<AgentPod> {
    let name = pod.metadata.name.clone()?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let node = pod.spec.as_ref()?.node_name.clone()?;
    let status = pod.status.as_ref()?;
    let ip = status.pod_ip.as_deref()?.parse().ok()?;
    let ready = pod.metadata.deletion_timestamp.is_none() && pod_ready(pod);
    Some(AgentPod {
        name,
        uid,
        node,
        ip,
        ready,
    })
}

/// An agent pod as the controller's cache keeps it: what [`agent_pod`] and the node markers
/// read (name, namespace, UID, labels, deletion, node, addresses, conditions), without the
/// managed fields, annotations, containers, volumes and container statuses that make up most of
/// a pod — at 5,000 nodes the cache holds 5,000 of them.
pub fn trim_pod(pod: &mut Pod) {
    let meta = &mut pod.metadata;
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
    if let Some(spec) = pod.spec.as_mut() {
        *spec = PodSpec {
            node_name: spec.node_name.take(),
            ..PodSpec::default()
        };
    }
    if let Some(status) = pod.status.as_mut() {
        *status = PodStatus {
            pod_ip: status.pod_ip.take(),
            pod_ips: status.pod_ips.take(),
            conditions: status.conditions.take(),
            ..PodStatus::default()
        };
    }
}

/// Nodes with a ready agent: the nodes a round that starts now expects to report (one per node,
/// however many agent pods it runs — as upstream counts).
pub fn ready_nodes<'a>(agents: impl IntoIterator<Item = &'a AgentPod>) -> BTreeSet<String> {
    agents
        .into_iter()
        .filter(|a| a.ready)
        .map(|a| a.node.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent pod as kube-apiserver serves it: a DaemonSet's pod, scheduled, Ready.
    fn agent() -> Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "kdoctor-agent-x7k2p", "namespace": "kdoctor", "uid": "u-1",
                "resourceVersion": "4711",
                "labels": {"app.kubernetes.io/component": "agent", "controller-revision-hash": "7c9"},
                "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-28T10:00:00Z"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                    "name": "kdoctor-agent", "uid": "ds-1", "controller": true}],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                    "apiVersion": "v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}],
            },
            "spec": {
                "nodeName": "node-17",
                "serviceAccountName": "kdoctor-agent",
                "containers": [{"name": "agent", "image": "kdoctor:dev",
                    "args": ["agent", "--listen=:5710"],
                    "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                    "ports": [{"containerPort": 5710}]}],
                "volumes": [{"name": "token", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}}],
            },
            "status": {
                "phase": "Running", "podIP": "10.0.17.5", "podIPs": [{"ip": "10.0.17.5"}],
                "hostIP": "172.18.0.17",
                "conditions": [{"type": "Ready", "status": "True"},
                               {"type": "kdoctor.io/Healthy", "status": "True"}],
                "containerStatuses": [{"name": "agent", "ready": true, "restartCount": 0,
                    "image": "kdoctor:dev", "imageID": "sha256:0", "started": true}],
            },
        }))
        .expect("a pod")
    }

    #[test]
    fn a_trimmed_pod_is_the_same_agent_to_the_controller_and_a_third_of_the_bytes_or_less() {
        let whole = agent();
        let mut kept = whole.clone();
        trim_pod(&mut kept);
        assert_eq!(agent_pod(&kept), agent_pod(&whole));
        assert!(agent_pod(&kept).is_some_and(|a| a.ready && a.node == "node-17"));
        // What the markers and the selector read.
        assert_eq!(kept.metadata.labels, whole.metadata.labels);
        assert_eq!(kept.metadata.namespace, whole.metadata.namespace);
        assert_eq!(
            kept.status.as_ref().and_then(|s| s.conditions.clone()),
            whole.status.as_ref().and_then(|s| s.conditions.clone())
        );
        // The reflector keys and versions by these.
        assert_eq!(kept.metadata.name, whole.metadata.name);
        assert_eq!(
            kept.metadata.resource_version,
            whole.metadata.resource_version
        );
        let size = |pod: &Pod| serde_json::to_vec(pod).expect("json").len();
        assert!(
            size(&kept) * 3 <= size(&whole),
            "{} of {} bytes kept",
            size(&kept),
            size(&whole)
        );
    }
}
