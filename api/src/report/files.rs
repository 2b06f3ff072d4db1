//! Upstream's report files, as a Go kdoctor controller keeps them in its report directory:
//! `<Kind>_<task>_round<N>_<node>_<expiry RFC3339>` for agent reports and
//! `<Kind>_<task>_round<N>_summary_<expiry>` for the controller's round summaries.

use jiff::Timestamp;
use serde::Deserialize;

use crate::task::{StatusHistoryRecord, TaskKind};

/// What a report file name says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportFileName {
    /// Task kind.
    pub kind: TaskKind,
    /// Task name.
    pub task: String,
    /// Round number.
    pub round: u64,
    /// Node of the agent, or `None` for the controller's summary.
    pub node: Option<String>,
    /// When upstream would have deleted the file.
    pub expiry: Timestamp,
}

/// Why a file name is not an upstream report name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{name:?} is not a kdoctor report file name (<Kind>_<task>_round<N>_<node>_<RFC3339 time>): {problem}"
)]
pub struct FileNameError {
    /// The name.
    pub name: String,
    /// What is wrong.
    pub problem: String,
}

/// Parses a report file name.
pub fn parse_file_name(name: &str) -> Result<ReportFileName, FileNameError> {
    let fail = |problem: &str| FileNameError {
        name: name.to_string(),
        problem: problem.to_string(),
    };
    let parts: Vec<&str> = name.split('_').collect();
    let [kind, task, round, node, expiry] = parts[..] else {
        return Err(fail("expected five '_'-separated parts"));
    };
    let kind: TaskKind = kind.parse().map_err(|_| fail("unknown kind"))?;
    if task.is_empty() {
        return Err(fail("empty task name"));
    }
    let round = round
        .strip_prefix("round")
        .and_then(|r| r.parse::<u64>().ok())
        .filter(|r| *r >= 1)
        .ok_or_else(|| fail("the third part must be round<N>"))?;
    let expiry: Timestamp = expiry
        .parse()
        .map_err(|_| fail("the last part must be an RFC 3339 time"))?;
    let node = match node {
        "" => return Err(fail("empty node name")),
        "summary" => None,
        node => Some(node.to_string()),
    };
    Ok(ReportFileName {
        kind,
        task: task.to_string(),
        round,
        node,
        expiry,
    })
}

/// The controller's round summary file (upstream's Go field names, misspellings included).
#[derive(Deserialize, Clone, Debug, PartialEq)]
pub struct SummaryFile {
    /// `<lowercase kind>.<task>`.
    #[serde(rename = "TaskName")]
    pub task_name: String,
    /// Round number.
    #[serde(rename = "RoundNumber")]
    pub round_number: i64,
    /// `succeed` or `fail`.
    #[serde(rename = "RoundResult")]
    pub round_result: String,
    /// Why the round failed.
    #[serde(rename = "FailedReason", default)]
    pub failed_reason: String,
    /// Planned start.
    #[serde(rename = "StartTimeStamp")]
    pub start: Timestamp,
    /// Finalisation time.
    #[serde(rename = "EndTimeStamp")]
    pub end: Timestamp,
    /// The round's status history record.
    #[serde(rename = "Detail")]
    pub detail: StatusHistoryRecord,
}
