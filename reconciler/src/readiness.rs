//! Reading a carrier's state from its objects (pure): whether the workload is ready, and which
//! agents run where.

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Pod;
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

/// Nodes with a ready agent: the nodes a round that starts now expects to report (one per node,
/// however many agent pods it runs — as upstream counts).
pub fn ready_nodes<'a>(agents: impl IntoIterator<Item = &'a AgentPod>) -> BTreeSet<String> {
    agents
        .into_iter()
        .filter(|a| a.ready)
        .map(|a| a.node.clone())
        .collect()
}
