//! Retention: rounds older than the age limit go, then the oldest rounds until the store is
//! under its size limit; a deleted task goes once it has no rounds left and its deletion is
//! older than the age limit (or the size limit needs the room).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::config::Retention;
use crate::error::Result;
use crate::index::Entry;
use crate::model::IncarnationId;
use crate::store::Store;
use crate::writes::Writes;

/// Why something is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Older than the age limit.
    Age,
    /// The store is over its size limit.
    Size,
}

impl Reason {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Age => "age",
            Reason::Size => "size",
        }
    }
}

/// One removal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// A round of a task.
    Round(IncarnationId, u64, Reason),
    /// A whole task incarnation.
    Task(IncarnationId, Reason),
}

/// What a sweep removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Rounds removed for age.
    pub rounds_by_age: u64,
    /// Rounds removed for size.
    pub rounds_by_size: u64,
    /// Bytes removed.
    pub bytes: u64,
    /// Task incarnations removed.
    pub tasks: u64,
}

/// Plans the removals for `entries` at `now`. Pure, so it is tested without a store.
pub fn plan(entries: &[Entry], retention: &Retention, now: Timestamp) -> Vec<Removal> {
    let max_age = SignedDuration::try_from(retention.max_age).unwrap_or(SignedDuration::MAX);
    let cutoff = now.checked_sub(max_age).unwrap_or(Timestamp::MIN);
    let mut removals = Vec::new();
    // (stored_at, id, round, bytes) of the rounds that survive the age limit.
    let mut kept = Vec::new();
    let mut total: u64 = 0;
    // Per task: (id, deleted, rounds left, record bytes).
    let mut tasks = Vec::new();
    for entry in entries {
        let id = entry.summary.id;
        let mut left = 0usize;
        for (round, meta) in &entry.rounds {
            if meta.stored_at < cutoff {
                removals.push(Removal::Round(id, *round, Reason::Age));
            } else {
                kept.push((meta.stored_at, id, *round, meta.stored_bytes));
                total += meta.stored_bytes;
                left += 1;
            }
        }
        match entry.summary.deleted {
            Some(deleted) if left == 0 && deleted < cutoff => {
                removals.push(Removal::Task(id, Reason::Age));
            }
            deleted => {
                total += entry.record_bytes;
                tasks.push((id, deleted.is_some(), left, entry.record_bytes));
            }
        }
    }
    kept.sort();
    for (_, id, round, bytes) in kept {
        if total <= retention.max_bytes {
            break;
        }
        removals.push(Removal::Round(id, round, Reason::Size));
        total -= bytes;
        if let Some(task) = tasks.iter_mut().find(|t| t.0 == id) {
            task.2 -= 1;
            if task.1 && task.2 == 0 {
                removals.push(Removal::Task(id, Reason::Size));
                total -= task.3;
            }
        }
    }
    removals
}

impl SweepReport {
    /// Counts `removal`, which removed `bytes` (nothing when it was gone already), in the
    /// report and the store's metrics.
    fn count(&mut self, removal: Removal, bytes: Option<u64>, store: &Store) {
        let Some(bytes) = bytes else {
            return;
        };
        let metrics = store.metrics();
        match removal {
            Removal::Round(_, _, reason) => {
                metrics
                    .retention_rounds
                    .with_label_values(&[reason.as_str()])
                    .inc();
                match reason {
                    Reason::Age => self.rounds_by_age += 1,
                    Reason::Size => self.rounds_by_size += 1,
                }
                metrics
                    .retention_bytes
                    .with_label_values(&[reason.as_str()])
                    .inc_by(bytes);
            }
            Removal::Task(_, reason) => {
                self.tasks += 1;
                metrics
                    .retention_bytes
                    .with_label_values(&[reason.as_str()])
                    .inc_by(bytes);
            }
        }
        self.bytes += bytes;
    }

    fn log(&self) {
        if *self != SweepReport::default() {
            tracing::info!(
                rounds_by_age = self.rounds_by_age,
                rounds_by_size = self.rounds_by_size,
                tasks = self.tasks,
                bytes = self.bytes,
                "retention removed old data"
            );
        }
    }
}

impl Store {
    /// Applies retention once, as of `now`, to a store this process owns alone.
    pub fn sweep(&self, now: Timestamp) -> Result<SweepReport> {
        let mut report = SweepReport::default();
        for removal in plan(&self.index_snapshot(), &self.config().retention, now) {
            let bytes = match removal {
                Removal::Round(id, round, _) => Some(self.purge_round(id, round)?),
                Removal::Task(id, _) => {
                    let bytes = self.task(id).map_or(0, |t| t.stored_bytes);
                    self.purge_task(id)?.then_some(bytes)
                }
            };
            report.count(removal, bytes, self);
        }
        report.log();
        Ok(report)
    }
}

impl Writes {
    /// Applies retention once, as of `now`, through the writer.
    pub async fn sweep(&self, now: Timestamp) -> Result<SweepReport> {
        let store = self.store().clone();
        let mut report = SweepReport::default();
        for removal in plan(&store.index_snapshot(), &store.config().retention, now) {
            let bytes = match removal {
                Removal::Round(id, round, _) => Some(self.purge_round(id, round).await?),
                Removal::Task(id, _) => {
                    let bytes = store.task(id).map_or(0, |t| t.stored_bytes);
                    self.purge_task(id).await?.then_some(bytes)
                }
            };
            report.count(removal, bytes, &store);
        }
        report.log();
        Ok(report)
    }
}

/// Sweeps every `every` through what `writes` gives at that moment (a store's writes may
/// become replicated after it opened), while this process writes, until the task is dropped
/// (spawn it on the process's runtime): with replicas, only the leader sweeps.
pub async fn run_retention(writes: impl Fn() -> Writes + Send + 'static, every: Duration) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let writes = writes();
        if !writes.is_writer() {
            continue;
        }
        if let Err(e) = writes.sweep(Timestamp::now()).await {
            tracing::error!(error = %e, "retention sweep failed");
        }
    }
}
