//! Spec blocks shared by the three task kinds: schedule, carrier (agentSpec), HTTP request and
//! success condition (`expect`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, EnvVar, ResourceRequirements};
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// CRD default of `spec.schedule.roundTimeoutMinute` when a `schedule` block is given.
pub const DEFAULT_ROUND_TIMEOUT_MINUTE: i64 = 60;
/// CRD default of `spec.schedule.roundNumber`.
pub const DEFAULT_ROUND_NUMBER: i64 = 1;
/// `roundNumber` value that means "run forever".
pub const ROUND_NUMBER_FOREVER: i64 = -1;
/// CRD default of `request.durationInSecond` when a `request` block is given.
pub const DEFAULT_DURATION_IN_SECOND: i64 = 2;
/// CRD default of `request.qps` when a `request` block is given.
pub const DEFAULT_QPS: i64 = 5;
/// CRD default of `expect.successRate` (also the default when `expect` is omitted).
pub const DEFAULT_SUCCESS_RATE: f64 = 1.0;
/// CRD default of `expect.meanAccessDelayInMs` when an `expect` block is given.
pub const DEFAULT_MEAN_ACCESS_DELAY_IN_MS: i64 = 5000;

fn default_round_timeout_minute() -> i64 {
    DEFAULT_ROUND_TIMEOUT_MINUTE
}
fn default_round_number() -> i64 {
    DEFAULT_ROUND_NUMBER
}
fn default_duration_in_second() -> i64 {
    DEFAULT_DURATION_IN_SECOND
}
fn default_qps() -> i64 {
    DEFAULT_QPS
}

/// `spec.schedule`: when rounds start, how long each may take and how many there are.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.schedule)")
    .message("\"<start minutes> <interval minutes>\" or a 5-field cron expression is required")
    .field_path(".schedule"))]
#[x_kube(validation = Rule::new(
    "!has(self.schedule) || !self.schedule.matches('^[ \\t]*[0-9]+[ \\t]+[0-9]+[ \\t]*$') \
     || int(self.schedule.findAll('[0-9]+')[1]) >= self.roundTimeoutMinute"
).message("must not be greater than the interval of the schedule")
 .field_path(".roundTimeoutMinute"))]
pub struct SchedulePlan {
    /// "M N" (first round M minutes after the task is seen, then every N minutes) or a 5-field
    /// cron expression evaluated in UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new(
        "self.matches('^[ \\t]*[0-9]+[ \\t]+[0-9]+[ \\t]*$') || self.matches('^[ \\t]*[^ \\t]+([ \\t]+[^ \\t]+){4}[ \\t]*$')"
    ).message("must be \"<start minutes> <interval minutes>\" or a 5-field cron expression"))]
    #[x_kube(validation = Rule::new("!self.matches('^[ \\t]*[0-9]+[ \\t]+0+[ \\t]*$')")
        .message("the interval of the interval form must be at least 1 minute"))]
    pub schedule: Option<String>,

    /// Longest time a round may take, in minutes; nodes that have not reported by then fail it.
    #[serde(default = "default_round_timeout_minute")]
    #[schemars(range(min = 1))]
    pub round_timeout_minute: i64,

    /// Number of rounds; -1 runs forever.
    #[serde(default = "default_round_number")]
    #[schemars(range(min = -1))]
    #[x_kube(validation = Rule::new("self != 0").message("must be -1 (run forever) or at least 1"))]
    pub round_number: i64,
}

/// Kind of a per-task carrier workload.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
pub enum AgentKind {
    /// One agent pod per node.
    #[default]
    DaemonSet,
    /// `deploymentReplicas` agent pods.
    Deployment,
}

impl AgentKind {
    /// The Kubernetes kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::DaemonSet => "DaemonSet",
            AgentKind::Deployment => "Deployment",
        }
    }
}

/// `spec.agentSpec`: run the task on its own carrier instead of the shared default agent.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.kind != 'Deployment' || has(self.deploymentReplicas)")
    .message("deploymentReplicas is required when kind is Deployment")
    .field_path(".deploymentReplicas"))]
pub struct AgentSpec {
    /// Annotations merged into the workload, its pod template and its Services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation: Option<BTreeMap<String, String>>,

    /// Workload kind of the carrier.
    #[serde(default)]
    pub kind: AgentKind,

    /// Replicas of a Deployment carrier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub deployment_replicas: Option<i32>,

    /// Affinity of the carrier pods (replaces the template's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Environment variables appended to every container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,

    /// Run the carrier pods in the host network namespace.
    #[serde(default)]
    pub host_network: bool,

    /// Resources of every carrier container (replaces the template's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Minutes after the task finishes before its carrier is deleted (config default: 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub termination_grace_period_minutes: Option<i64>,
}

/// `spec.request` of NetReach and AppHttpHealthy: the load of one round.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetHttpRequest {
    /// How long each target is probed, in seconds.
    #[serde(default = "default_duration_in_second")]
    #[schemars(range(min = 1))]
    pub duration_in_second: i64,

    /// Requests per second sent to each target.
    #[serde(default = "default_qps")]
    #[schemars(range(min = 1))]
    pub qps: i64,

    /// Timeout of one request (connect, request and body), in milliseconds. Default from the
    /// configuration (`netHttpDefaultRequestPerRequestTimeoutInMS`, 500).
    #[serde(
        default,
        rename = "perRequestTimeoutInMS",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub per_request_timeout_in_ms: Option<i64>,
}

/// `spec.expect`: when a target counts as healthy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.successRate) || has(self.meanAccessDelayInMs)")
    .message("at least one of successRate and meanAccessDelayInMs must be set"))]
pub struct NetSuccessCondition {
    /// Lowest share of successful requests, 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1), extend("default" = DEFAULT_SUCCESS_RATE))]
    pub success_rate: Option<f64>,

    /// Highest mean latency, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("default" = DEFAULT_MEAN_ACCESS_DELAY_IN_MS))]
    pub mean_access_delay_in_ms: Option<i64>,

    /// HTTP status code every response must have (AppHttpHealthy only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 599))]
    pub status_code: Option<i32>,

    /// Highest interarrival jitter (RFC 3550) of the path to a UDP echo target, in
    /// milliseconds (NetReach with `spec.target.udp`, beyond upstream): a UDP entry above it
    /// fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // An exclusive zero, not a minimum of 0.001: the apiserver compares an integer value with
    // a float minimum truncated to an integer, so `0` would pass a minimum of 0.001.
    #[schemars(extend("minimum" = 0, "exclusiveMinimum" = true, "maximum" = 60000))]
    pub max_jitter_in_ms: Option<f64>,

    /// Smallest path MTU, in bytes of IP packet, a UDP echo target's path must take (NetReach
    /// with `spec.target.pathMTU`, beyond upstream): a UDP entry whose path takes less fails.
    #[serde(
        default,
        rename = "minPathMTU",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 576, max = 65535))]
    pub min_path_mtu: Option<i64>,
}
