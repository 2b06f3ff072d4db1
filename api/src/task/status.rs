//! `status` of every task kind: round counters, round history and carrier bookkeeping.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Result of the last finished round (`status.lastRoundStatus`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LastRoundStatus {
    /// Every expected node reported success.
    Succeed,
    /// A node failed or did not report.
    Fail,
    /// Declared by upstream, never written.
    Unknown,
}

/// State of one round in `status.history`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RoundStatus {
    /// Finished, every expected node succeeded.
    Succeed,
    /// Finished, some node failed or did not report.
    Fail,
    /// Started: agents are probing.
    Ongoing,
    /// Planned, not started yet.
    Notstarted,
}

impl RoundStatus {
    /// Whether the round is over.
    pub fn is_finished(self) -> bool {
        matches!(self, RoundStatus::Succeed | RoundStatus::Fail)
    }
}

/// `failureReason` when a node reported failure (takes precedence).
pub const FAILURE_REASON_AGENTS_FAILED: &str = "some agents failed";
/// `failureReason` when a node did not report before the deadline.
pub const FAILURE_REASON_AGENTS_NOT_REPORTED: &str = "some agents did not report";

/// One round in `status.history` (newest first).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatusHistoryRecord {
    /// Round state.
    pub status: RoundStatus,
    /// Why the round failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// 1-based round number.
    pub round_number: i64,
    /// Planned start.
    pub start_time_stamp: Time,
    /// When the controller finalised the round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time_stamp: Option<Time>,
    /// End minus planned start, as a Go duration string (e.g. `15.462579243s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// Planned start plus roundTimeoutMinute.
    pub dead_line_time_stamp: Time,
    /// Nodes expected to report (reported plus not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_actor_number: Option<i64>,
    /// Nodes whose agent reported failure.
    #[serde(default)]
    pub failed_agent_node_list: Vec<String>,
    /// Nodes whose agent reported success.
    #[serde(default)]
    pub succeed_agent_node_list: Vec<String>,
    /// Nodes whose agent did not report before the deadline.
    #[serde(default)]
    pub not_report_agent_node_list: Vec<String>,
}

/// Lifecycle of a task's carrier (`status.resource.runtimeStatus`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeStatus {
    /// Applied, not ready yet.
    Creating,
    /// Ready.
    Created,
    /// Removed after the task finished.
    Deleted,
}

impl RuntimeStatus {
    /// The word in the status (`creating`, `created`, `deleted`).
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeStatus::Creating => "creating",
            RuntimeStatus::Created => "created",
            RuntimeStatus::Deleted => "deleted",
        }
    }
}

/// `status.resource`: the carrier this task runs on.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskResource {
    /// Workload name.
    pub runtime_name: String,
    /// Workload kind (`DaemonSet` or `Deployment`).
    pub runtime_type: String,
    /// IPv4 Service of the carrier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name_v4: Option<String>,
    /// IPv6 Service of the carrier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name_v6: Option<String>,
    /// Carrier lifecycle.
    pub runtime_status: RuntimeStatus,
}

/// `status` of a task. Written only by the controller.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// Rounds planned (-1: forever), copied from spec.schedule.roundNumber.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1))]
    pub expected_round: Option<i64>,
    /// Rounds finished, successful or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub done_round: Option<i64>,
    /// All planned rounds are done.
    #[serde(default)]
    pub finish: bool,
    /// When `finish` became true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_time: Option<Time>,
    /// Result of the last finished round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_round_status: Option<LastRoundStatus>,
    /// Rounds, newest first, capped at the configured crdMaxHistory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<StatusHistoryRecord>>,
    /// The carrier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<TaskResource>,
    /// Standard conditions (e.g. `Valid`), beyond upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
}
