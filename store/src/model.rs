//! What the store keeps: task incarnations, round summaries, agent reports, and the change
//! events that announce them.

use jiff::Timestamp;
use kdoctor_api::task::TaskKind;
use serde::{Deserialize, Serialize};

/// The store's own number for one incarnation of a task (kind + name + UID). A task deleted and
/// re-created under the same name is a new incarnation with a new id.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IncarnationId(pub u64);

/// One incarnation of a task as the controller last saw it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    /// Task kind.
    pub kind: TaskKind,
    /// Task name.
    pub name: String,
    /// `metadata.uid` of the task CR.
    pub uid: String,
    /// `metadata.creationTimestamp` of the task CR.
    pub created: Timestamp,
    /// The task's spec as JSON.
    pub spec: serde_json::Value,
    /// The task's status as JSON, as last seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
    /// When the controller saw the CR gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<Timestamp>,
}

/// The counters of a task's status that reports show (`status` of a KdoctorReport).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// Rounds planned (-1: forever); `None` before the controller initialised the task.
    pub expected_round: Option<i64>,
    /// Rounds finished.
    pub done_round: Option<i64>,
    /// Every round is done.
    pub finished: bool,
}

impl Progress {
    /// Reads the counters from a task status (JSON).
    pub fn from_status(status: Option<&serde_json::Value>) -> Progress {
        let Some(status) = status else {
            return Progress::default();
        };
        Progress {
            expected_round: status
                .get("expectedRound")
                .and_then(serde_json::Value::as_i64),
            done_round: status.get("doneRound").and_then(serde_json::Value::as_i64),
            finished: status
                .get("finish")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
        }
    }
}

/// Outcome of a round (or of one node's part of it).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RoundResult {
    /// Every expected node succeeded.
    Succeed,
    /// A node failed or did not report.
    Fail,
    /// Not finalised yet.
    Ongoing,
}

impl RoundResult {
    /// The word used in statuses, reports and labels.
    pub fn as_str(self) -> &'static str {
        match self {
            RoundResult::Succeed => "succeed",
            RoundResult::Fail => "fail",
            RoundResult::Ongoing => "ongoing",
        }
    }

    /// Reads an agent's `roundResult`.
    pub fn from_report(text: &str) -> RoundResult {
        match text {
            "succeed" => RoundResult::Succeed,
            "fail" => RoundResult::Fail,
            _ => RoundResult::Ongoing,
        }
    }
}

/// The controller's verdict on one round.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RoundSummary {
    /// 1-based round number.
    pub round: u64,
    /// Result.
    pub result: RoundResult,
    /// Planned start.
    pub start: Timestamp,
    /// When the controller finalised the round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<Timestamp>,
    /// Nodes expected to report.
    pub expected_nodes: u32,
    /// Nodes that reported success.
    pub succeeded_nodes: u32,
    /// Nodes that reported failure.
    pub failed_nodes: u32,
    /// Nodes that did not report before the deadline.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_reported: Vec<String>,
    /// Why the round failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
}

/// What the store knows about one stored agent report, without its body.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReportMeta {
    /// Node of the agent.
    pub node: String,
    /// The agent's `roundResult`.
    pub result: RoundResult,
    /// Size of the report's JSON.
    pub json_bytes: u64,
    /// Size stored (compressed).
    pub stored_bytes: u64,
    /// When it was stored.
    pub stored_at: Timestamp,
}

/// How the nodes of a round did.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeCounts {
    /// Nodes that reported success.
    pub succeeded: u32,
    /// Nodes that reported failure.
    pub failed: u32,
    /// Nodes that did not report (known once the controller summarised the round).
    pub not_reported: u32,
}

/// One task incarnation with the counters a list shows; kept in memory, so listing every task
/// never touches a report body.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskSummary {
    /// The store's id.
    pub id: IncarnationId,
    /// Task kind.
    pub kind: TaskKind,
    /// Task name.
    pub name: String,
    /// Task UID.
    pub uid: String,
    /// Creation time of the CR.
    pub created: Timestamp,
    /// When the CR was seen gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<Timestamp>,
    /// Round counters of the task status.
    pub progress: Progress,
    /// Resource version of the last change to this task or its rounds.
    pub resource_version: u64,
    /// Resource version of the change that added this incarnation.
    #[serde(default)]
    pub added_resource_version: u64,
    /// Highest round with data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_round: Option<u64>,
    /// Result of the highest round with a summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_result: Option<RoundResult>,
    /// How the nodes of the highest round did: from its summary, or from its reports so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_nodes: Option<NodeCounts>,
    /// Rounds stored.
    pub rounds: u64,
    /// Agent reports stored.
    pub reports: u64,
    /// Bytes stored for this task (compressed).
    pub stored_bytes: u64,
}

/// What happened to a task.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// A new incarnation.
    Added,
    /// Its record, a round or a report changed.
    Modified,
    /// It was purged from the store.
    Deleted,
}

/// One change, in resourceVersion order.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Resource version of the change (strictly increasing, survives restarts).
    pub resource_version: u64,
    /// What happened.
    pub event_type: EventType,
    /// The task after the change (for Deleted: as it was).
    pub task: TaskSummary,
    /// The round the change was about, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u64>,
    /// The task before the change (`None` for Added), so that a watcher can tell, without
    /// remembering anything, whether an object started or stopped matching its selectors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<TaskSummary>,
    /// Whether this incarnation was the newest of its task name before the change.
    #[serde(default)]
    pub was_newest: bool,
    /// Whether it is the newest after the change (false once purged).
    #[serde(default)]
    pub newest: bool,
}

/// Whether a write changed anything.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// Stored new data.
    Created,
    /// Replaced different data.
    Updated,
    /// The same data was already stored; nothing changed.
    Unchanged,
}
