//! `spec.isolation` of NetReach (beyond upstream): peers that must NOT be reachable from any
//! agent. A NetworkPolicy that should keep agents away from a database is checked each round
//! beside the paths that must work: the round fails when a packet gets through.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Most isolation entries a task may have: each adds a target per selected pod to every
/// agent's round.
pub const MAX_ISOLATIONS: usize = 16;
/// Most pods one entry checks per round (the first ones by name); more are reported, not
/// probed.
pub const MAX_ISOLATED_PODS: usize = 64;
/// Longest entry name: it is part of every report entry's name.
pub const MAX_ISOLATION_NAME: usize = 32;

/// The DNS-1123 label pattern (RFC 1123): names, namespaces and Services.
const LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// One set of peers that must be unreachable from every agent of the task, on one protocol
/// and port.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.podSelector) != has(self.service)")
    .message("exactly one of podSelector and service names the peers"))]
#[x_kube(validation = Rule::new("self.protocol == 'ICMP' ? !has(self.port) : has(self.port)")
    .message("port is required for TCP and UDP, and ICMP has none")
    .field_path(".port"))]
#[x_kube(validation = Rule::new("!has(self.service) || self.protocol != 'ICMP'")
    .message("a Service's ClusterIP answers no ICMP echo: ICMP isolation needs podSelector")
    .field_path(".service"))]
pub struct Isolation {
    /// Names the report entries of this check (`TCP_Deny_<name>_<pod>_<ip>`): a DNS label of
    /// at most 32 characters, unique in the task.
    #[schemars(length(min = 1, max = 32), regex(pattern = LABEL_PATTERN))]
    pub name: String,
    /// The namespace of the peers.
    #[schemars(length(min = 1, max = 63), regex(pattern = LABEL_PATTERN))]
    pub namespace: String,
    /// The peers: running pods of `namespace` with these labels (at most 64 are checked per
    /// round). Exactly one of `podSelector` and `service`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    /// The peer: this Service of `namespace`, at its ClusterIPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = LABEL_PATTERN))]
    pub service: Option<String>,
    /// How the agents try to reach them: a TCP connect, a UDP datagram, or an ICMP echo.
    #[serde(default)]
    pub protocol: IsolationProtocol,
    /// The port the agents try (TCP and UDP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
}

/// How an isolation check tries to reach a peer.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
pub enum IsolationProtocol {
    /// A TCP connect: established or refused means the SYN got through.
    #[default]
    #[serde(rename = "TCP")]
    Tcp,
    /// A UDP datagram: an answer or an ICMP port unreachable means it got through; silence
    /// counts as blocked, so check a port that answers.
    #[serde(rename = "UDP")]
    Udp,
    /// An ICMP echo request: a reply means it got through.
    #[serde(rename = "ICMP")]
    Icmp,
}

impl IsolationProtocol {
    /// The spec value.
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationProtocol::Tcp => "TCP",
            IsolationProtocol::Udp => "UDP",
            IsolationProtocol::Icmp => "ICMP",
        }
    }
}
