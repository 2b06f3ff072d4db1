//! Netdns: every agent queries a DNS server (the cluster DNS or a given one).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{AgentSpec, NetSuccessCondition, SchedulePlan};
use super::status::TaskStatus;

/// CRD default of `request.domain`.
pub const DEFAULT_DOMAIN: &str = "kubernetes.default.svc.cluster.local";
/// CRD default of `target.targetUser.port`.
pub const DEFAULT_DNS_PORT: i64 = 53;

fn default_domain() -> String {
    DEFAULT_DOMAIN.to_string()
}
fn default_port() -> i64 {
    DEFAULT_DNS_PORT
}
fn yes() -> bool {
    true
}
fn default_duration_in_second() -> i64 {
    super::common::DEFAULT_DURATION_IN_SECOND
}
fn default_qps() -> i64 {
    super::common::DEFAULT_QPS
}

/// Spec of a Netdns task.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "kdoctor.io",
    version = "v1beta1",
    kind = "Netdns",
    plural = "netdnses",
    singular = "netdns",
    category = "kdoctor",
    status = "TaskStatus",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct NetdnsSpec {
    /// Run on a dedicated carrier instead of the default agent DaemonSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_spec: Option<AgentSpec>,
    /// Mark Nodes with the results (a Node condition, labels, annotations); beyond upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marker_policy: Option<super::MarkerPolicy>,
    /// When rounds run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<SchedulePlan>,
    /// Accepted for compatibility; upstream ignores it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_agent_node_selector: Option<LabelSelector>,
    /// Which DNS server to query. Omitted: the cluster DNS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<NetDnsTarget>,
    /// Query load and what to ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<NetdnsRequest>,
    /// When the server is healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<NetSuccessCondition>,
}

/// `spec.target` of Netdns: exactly one of `targetUser` and `targetDns`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.targetUser) != has(self.targetDns)")
    .message("exactly one of targetUser and targetDns must be set"))]
pub struct NetDnsTarget {
    /// A server given by address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_user: Option<NetDnsTargetUser>,
    /// The cluster DNS Service (or a named Service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_dns: Option<NetDnsTargetDns>,
    /// Report the full latency distribution, not only the mean.
    #[serde(default)]
    pub enable_latency_metric: bool,
}

/// `spec.target.targetUser`: a DNS server by address.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.server)").message("server is required").field_path(".server"))]
pub struct NetDnsTargetUser {
    /// IP address (or host name) of the server. Queries are A for IPv4, AAAA otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub server: Option<String>,
    /// Server port.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i64,
}

/// `spec.target.targetDns`: the cluster DNS Service, found by label, or a named Service.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
// One rule per missing half, so that kube-apiserver names the field that is missing.
#[x_kube(validation = Rule::new("!has(self.serviceName) || has(self.serviceNamespace)")
    .message("serviceName and serviceNamespace must be set together")
    .field_path(".serviceNamespace"))]
#[x_kube(validation = Rule::new("!has(self.serviceNamespace) || has(self.serviceName)")
    .message("serviceName and serviceNamespace must be set together")
    .field_path(".serviceName"))]
#[x_kube(validation = Rule::new("self.testIPv4 || self.testIPv6").message("at least one of testIPv4 and testIPv6 must be true"))]
pub struct NetDnsTargetDns {
    /// Service name; omitted: the cluster DNS Service selected by label in kube-system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Namespace of `serviceName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_namespace: Option<String>,
    /// Query the IPv4 ClusterIPs (A records).
    #[serde(default = "yes", rename = "testIPv4")]
    pub test_ipv4: bool,
    /// Query the IPv6 ClusterIPs (AAAA records).
    #[serde(default, rename = "testIPv6")]
    pub test_ipv6: bool,
}

impl Default for NetDnsTargetDns {
    /// The CRD defaults, as when `targetDns: {}` is applied.
    fn default() -> Self {
        NetDnsTargetDns {
            service_name: None,
            service_namespace: None,
            test_ipv4: true,
            test_ipv6: false,
        }
    }
}

/// DNS transport of a Netdns probe.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
pub enum DnsProtocol {
    /// DNS over UDP.
    #[default]
    #[serde(rename = "udp")]
    Udp,
    /// DNS over TCP.
    #[serde(rename = "tcp")]
    Tcp,
    /// DNS over TLS.
    #[serde(rename = "tcp-tls")]
    TcpTls,
}

impl DnsProtocol {
    /// Every protocol, in the order the spec's documentation lists them.
    pub const ALL: [DnsProtocol; 3] = [DnsProtocol::Udp, DnsProtocol::Tcp, DnsProtocol::TcpTls];

    /// The spec value (upstream's name).
    pub fn as_str(self) -> &'static str {
        match self {
            DnsProtocol::Udp => "udp",
            DnsProtocol::Tcp => "tcp",
            DnsProtocol::TcpTls => "tcp-tls",
        }
    }
}

impl std::str::FromStr for DnsProtocol {
    type Err = String;

    /// A spec value, as the CLI takes it too.
    fn from_str(text: &str) -> Result<DnsProtocol, String> {
        DnsProtocol::ALL
            .into_iter()
            .find(|p| p.as_str() == text)
            .ok_or_else(|| format!("{text:?} is not one of udp, tcp, tcp-tls"))
    }
}

/// `spec.request` of Netdns.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetdnsRequest {
    /// How long the server is queried, in seconds.
    #[serde(default = "default_duration_in_second")]
    #[schemars(range(min = 1))]
    pub duration_in_second: i64,
    /// Queries per second.
    #[serde(default = "default_qps")]
    #[schemars(range(min = 1))]
    pub qps: i64,
    /// Timeout of one query, in milliseconds. Default from the configuration
    /// (`netHttpDefaultRequestPerRequestTimeoutInMS`, 500).
    #[serde(
        default,
        rename = "perRequestTimeoutInMS",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub per_request_timeout_in_ms: Option<i64>,
    /// Name to resolve.
    #[serde(default = "default_domain")]
    #[schemars(length(min = 1, max = 253))]
    pub domain: String,
    /// Transport.
    #[serde(default)]
    pub protocol: DnsProtocol,
}

impl Default for NetdnsRequest {
    /// The CRD defaults, as when `request: {}` is applied.
    fn default() -> Self {
        NetdnsRequest {
            duration_in_second: super::common::DEFAULT_DURATION_IN_SECOND,
            qps: super::common::DEFAULT_QPS,
            per_request_timeout_in_ms: None,
            domain: DEFAULT_DOMAIN.to_string(),
            protocol: DnsProtocol::Udp,
        }
    }
}
