//! Every change to the store as one value: what the replicated log carries (crate::raft) and
//! what a single-process store applies directly.
//!
//! Applying a command depends only on the store's content and on the command itself (its time
//! comes in it, reports come as the exact JSON bytes to keep), so every replica that applies
//! the same commands in the same order holds the same data under the same resourceVersions.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::StoreError;
use crate::model::{IncarnationId, Outcome, RoundSummary, TaskRecord};

/// One change.
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub enum Command {
    /// Records a task incarnation (created, or its spec/status/deletion changed).
    RecordTask {
        /// The incarnation as the controller saw it.
        record: TaskRecord,
    },
    /// Marks an incarnation's CR as deleted.
    MarkDeleted {
        /// The incarnation.
        task: IncarnationId,
        /// When the controller saw it gone.
        at: Timestamp,
    },
    /// Stores the controller's summary of a round.
    PutRound {
        /// The incarnation.
        task: IncarnationId,
        /// The summary.
        summary: RoundSummary,
        /// When.
        at: Timestamp,
    },
    /// Stores agent reports (one batch: all or none).
    PutReports {
        /// The reports.
        reports: Vec<ReportEntry>,
        /// When.
        at: Timestamp,
        /// Entries the export outbox keeps at most (`None`: export is off, nothing is added).
        outbox: Option<u64>,
    },
    /// Removes an incarnation and everything stored for it.
    PurgeTask {
        /// The incarnation.
        task: IncarnationId,
    },
    /// Removes one round of an incarnation.
    PurgeRound {
        /// The incarnation.
        task: IncarnationId,
        /// The round.
        round: u64,
    },
    /// Removes export outbox entries that were delivered (or given up).
    OutboxDone {
        /// Their sequence numbers.
        seqs: Vec<u64>,
    },
}

/// One agent report of a [`Command::PutReports`].
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct ReportEntry {
    /// The incarnation it belongs to.
    pub task: IncarnationId,
    /// The report's JSON, kept byte for byte.
    pub json: Box<RawValue>,
}

impl ReportEntry {
    /// The entry of a report.
    pub fn of(
        task: IncarnationId,
        report: &kdoctor_api::report::Report,
    ) -> Result<ReportEntry, StoreError> {
        Ok(ReportEntry {
            task,
            json: serde_json::value::to_raw_value(report)?,
        })
    }
}

impl Command {
    /// What the command is, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Command::RecordTask { .. } => "recordTask",
            Command::MarkDeleted { .. } => "markDeleted",
            Command::PutRound { .. } => "putRound",
            Command::PutReports { .. } => "putReports",
            Command::PurgeTask { .. } => "purgeTask",
            Command::PurgeRound { .. } => "purgeRound",
            Command::OutboxDone { .. } => "outboxDone",
        }
    }
}

/// Why a command changed nothing: the same on every replica, so not a failure of the store.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Refusal {
    /// It names an incarnation the store does not have (purged meanwhile, say).
    UnknownTask(u64),
    /// It is not acceptable.
    Invalid(String),
}

impl From<Refusal> for StoreError {
    fn from(refusal: Refusal) -> StoreError {
        match refusal {
            Refusal::UnknownTask(id) => StoreError::UnknownTask(id),
            Refusal::Invalid(message) => StoreError::Invalid(message),
        }
    }
}

/// What applying a command did.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum Applied {
    /// [`Command::RecordTask`]: the incarnation and whether it changed.
    Task(IncarnationId, Outcome),
    /// [`Command::MarkDeleted`], [`Command::PutRound`].
    Outcome(Outcome),
    /// [`Command::PutReports`]: one outcome per report.
    Outcomes(Vec<Outcome>),
    /// [`Command::PurgeTask`]: whether it was there.
    TaskPurged(bool),
    /// [`Command::PurgeRound`]: the bytes removed.
    RoundPurged(u64),
    /// [`Command::OutboxDone`]; also what a log entry without a command applies to.
    Done,
    /// Nothing changed, and why.
    Refused(Refusal),
}

impl Applied {
    /// The refusal as an error; anything else as it is.
    pub fn accepted(self) -> Result<Applied, StoreError> {
        match self {
            Applied::Refused(refusal) => Err(refusal.into()),
            other => Ok(other),
        }
    }
}
