//! What local mode tells its user, as data: the binary words it (src/cmd/local/progress.rs).

use std::sync::Arc;

use jiff::Timestamp;
use kdoctor_api::report::Report;
use kdoctor_api::task::{StatusHistoryRecord, TaskKind};

/// Something that happened to a task or to the run.
#[derive(Clone, Debug)]
pub enum Event {
    /// A round started.
    RoundStarted {
        /// The task's kind.
        kind: TaskKind,
        /// The task's name.
        name: String,
        /// The round number.
        round: i64,
        /// Rounds the task runs (-1: forever).
        expected: i64,
        /// Targets probed.
        targets: usize,
        /// Requests per second per target.
        qps: f64,
        /// Seconds of probing.
        seconds: u64,
    },
    /// A round ended.
    RoundEnded {
        /// The task's kind.
        kind: TaskKind,
        /// The task's name.
        name: String,
        /// The round as the status records it.
        record: Box<StatusHistoryRecord>,
        /// Rounds the task runs (-1: forever).
        expected: i64,
        /// The last report of the task's agent.
        report: Option<Box<Report>>,
    },
    /// The next round is planned for later.
    RoundPlanned {
        /// The task's kind.
        kind: TaskKind,
        /// The task's name.
        name: String,
        /// The round number.
        round: i64,
        /// Its start.
        start: Timestamp,
        /// Now.
        now: Timestamp,
    },
    /// A task ran its last round.
    TaskFinished {
        /// The task's kind.
        kind: TaskKind,
        /// The task's name.
        name: String,
        /// Rounds done.
        done: i64,
        /// The last round's result (`succeed`, `fail`).
        last: Option<&'static str>,
    },
    /// A task was deleted; its reports stay.
    TaskDeleted {
        /// The task's kind.
        kind: TaskKind,
        /// The task's name.
        name: String,
    },
    /// A task cannot run here.
    CannotRun {
        /// The task's kind.
        kind: TaskKind,
        /// The task's name.
        name: String,
        /// Why.
        why: String,
    },
    /// A task's loop stopped on an error.
    Stopped {
        /// The task's kind.
        kind: TaskKind,
        /// The task's name.
        name: String,
        /// Why.
        why: String,
    },
    /// A task's loop did not stop in time at the end of the run.
    DidNotStop {
        /// The task's kind.
        kind: TaskKind,
        /// The task's name.
        name: String,
    },
    /// A task's loop panicked.
    LoopFailed(String),
    /// Every task finished; the reports are still served.
    AllFinished,
    /// The run is stopping.
    Stopping,
}

/// Where events go.
pub type Say = Arc<dyn Fn(Event) + Send + Sync>;
