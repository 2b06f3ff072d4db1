//! NetReach: every agent probes every agent (pod IPs, Service ClusterIP/NodePort/LoadBalancer,
//! Ingress) over HTTP.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{AgentSpec, NetHttpRequest, NetSuccessCondition, SchedulePlan};
use super::isolation::Isolation;
use super::status::TaskStatus;

fn yes() -> bool {
    true
}

/// Spec of a NetReach task.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "kdoctor.io",
    version = "v1beta1",
    kind = "NetReach",
    plural = "netreaches",
    singular = "netreach",
    shortname = "nr",
    category = "kdoctor",
    status = "TaskStatus",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct NetReachSpec {
    /// Run on a dedicated carrier instead of the default agent DaemonSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_spec: Option<AgentSpec>,
    /// Mark Nodes with the results (a Node condition, labels, annotations); beyond upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marker_policy: Option<super::MarkerPolicy>,
    /// When rounds run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<SchedulePlan>,
    /// What to probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<NetReachTarget>,
    /// How hard to probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<NetHttpRequest>,
    /// When a target is healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<NetSuccessCondition>,
    /// Peers that must NOT be reachable from any agent (beyond upstream): each round every
    /// agent tries each of them a few times, and the round fails when one gets through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new("self.all(a, self.exists_one(b, b.name == a.name))")
        .message("each isolation entry needs a name of its own"))]
    pub isolation: Option<Vec<Isolation>>,
}

/// `spec.target` of NetReach: which address types of the carrier to probe.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.ipv4 || self.ipv6").message("at least one of ipv4 and ipv6 must be true"))]
#[x_kube(validation = Rule::new("self.endpoint || self.clusterIP || self.nodePort || self.loadBalancer || self.ingress")
    .message("at least one of endpoint, clusterIP, nodePort, loadBalancer and ingress must be true"))]
#[x_kube(validation = Rule::new("!self.ingress || self.ipv4").message("ingress targets are IPv4 only: ingress requires ipv4").field_path(".ingress"))]
#[x_kube(validation = Rule::new("!self.multusInterface || self.endpoint").message("multusInterface adds secondary pod IPs: it requires endpoint").field_path(".multusInterface"))]
#[x_kube(validation = Rule::new("!has(self.udp) || !self.udp || self.endpoint").message("udp sends echoes to the agent pods' IPs: it requires endpoint").field_path(".udp"))]
#[x_kube(validation = Rule::new("!has(self.icmp) || !self.icmp || self.endpoint").message("icmp sends echoes to the agent pods' IPs: it requires endpoint").field_path(".icmp"))]
#[x_kube(validation = Rule::new("!has(self.pathMTU) || !self.pathMTU || (has(self.udp) && self.udp)").message("pathMTU is searched with UDP echoes: it requires udp").field_path(".pathMTU"))]
pub struct NetReachTarget {
    /// Probe IPv4 addresses.
    #[serde(default = "yes")]
    pub ipv4: bool,
    /// Probe IPv6 addresses.
    #[serde(default)]
    pub ipv6: bool,
    /// Probe every carrier pod IP.
    #[serde(default = "yes")]
    pub endpoint: bool,
    /// Also probe multus secondary IPs of the carrier pods.
    #[serde(default)]
    pub multus_interface: bool,
    /// Probe the carrier Service ClusterIP.
    #[serde(default = "yes", rename = "clusterIP")]
    pub cluster_ip: bool,
    /// Probe the local node IP on the carrier Service NodePort.
    #[serde(default = "yes")]
    pub node_port: bool,
    /// Probe the carrier Service LoadBalancer address.
    #[serde(default)]
    pub load_balancer: bool,
    /// Probe the carrier Ingress.
    #[serde(default)]
    pub ingress: bool,
    /// Also time a TCP connect (SYN to established) to every target's address and port, at
    /// the request's rate, beside its HTTP requests (beyond upstream): each target gets a second
    /// entry in the report, named `TCP_<its name>`, judged by the same `expect`.
    // Left out when false, so that an upstream task or report round-trips key for key.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tcp: bool,
    /// Also send UDP echo datagrams to every agent pod's UDP echo port, at the request's rate
    /// (beyond upstream): each pod IP target gets a third entry, named `UDP_<its name>`, with
    /// loss, duplicates, reordering, one-way jitter and hop counts, judged by the same `expect`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub udp: bool,
    /// Also send ICMP echo requests (ping) to every agent pod IP, at the request's rate
    /// (beyond upstream): each pod IP target gets an entry named `ICMP_<its name>`, with loss,
    /// duplicates, reordering, round-trip jitter and the hops back, judged by the same
    /// `expect`. The agents need `net.ipv4.ping_group_range` to include their group (the
    /// chart sets it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub icmp: bool,
    /// Also find the path MTU to every agent pod's UDP echo port each round (beyond upstream;
    /// needs `udp`): the largest packet that passes with don't-fragment set, and whether larger
    /// ones meet a router's "fragmentation needed" or a black hole, in each UDP entry.
    #[serde(
        default,
        rename = "pathMTU",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub path_mtu: bool,
    /// Report the full latency distribution, not only the mean.
    #[serde(default)]
    pub enable_latency_metric: bool,
    /// Probe at most this many other agents' pods per round (beyond upstream): a rotating,
    /// balanced subset instead of the full mesh, covering every pair within
    /// ceil((agents - 1) / maxPeers) rounds. Omitted: every pod, as upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_peers: Option<u32>,
}

impl Default for NetReachTarget {
    /// The CRD defaults, as when `target: {}` is applied.
    fn default() -> Self {
        NetReachTarget {
            ipv4: true,
            ipv6: false,
            endpoint: true,
            multus_interface: false,
            cluster_ip: true,
            node_port: true,
            load_balancer: false,
            ingress: false,
            tcp: false,
            udp: false,
            icmp: false,
            path_mtu: false,
            enable_latency_metric: false,
            max_peers: None,
        }
    }
}
