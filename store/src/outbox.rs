//! The export outbox: stored reports waiting to be delivered to the export receiver, kept in
//! the store itself so that a restart or a new leader delivers what was not acknowledged.
//! An entry is written in the same batch as its report (a report is never stored without its
//! entry, nor an entry without its report) and removed once the receiver acknowledged it.
//! Bounded: when full, the oldest entry makes room and is counted as dropped.

use std::collections::{BTreeMap, HashSet};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::model::IncarnationId;

/// Which report: incarnation, round, node.
pub(crate) type ReportKey = (IncarnationId, u64, String);

/// One report waiting for export.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    /// Position in the outbox (delivery order).
    #[serde(skip)]
    pub seq: u64,
    /// The incarnation.
    pub task: IncarnationId,
    /// Round number.
    pub round: u64,
    /// The agent's node.
    pub node: String,
    /// When the report was stored (the event's time; kept here so that sending needs no read
    /// of the round's headers).
    pub stored_at: Timestamp,
}

impl Pending {
    fn report(&self) -> ReportKey {
        (self.task, self.round, self.node.clone())
    }
}

/// The outbox as the writer keeps it in memory: what is pending, to bound and de-duplicate
/// without reading the disk.
#[derive(Debug, Default)]
pub(crate) struct OutboxState {
    /// Entries kept at most; `None`: export is off and nothing is added.
    pub capacity: Option<u64>,
    /// Pending entries by sequence number.
    pub pending: BTreeMap<u64, Pending>,
    /// The same, by report: one pending entry per report.
    pub reports: HashSet<ReportKey>,
    /// The next sequence number.
    pub next_seq: u64,
}

/// What adding reports to the outbox does.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Admission {
    /// New entries, with their sequence numbers.
    pub added: Vec<Pending>,
    /// Oldest entries removed to make room.
    pub evicted: Vec<u64>,
}

impl OutboxState {
    /// The state of `entries` read from disk.
    pub fn load(entries: impl IntoIterator<Item = Pending>, next_seq: u64) -> OutboxState {
        let mut state = OutboxState {
            next_seq,
            ..OutboxState::default()
        };
        for entry in entries {
            state.next_seq = state.next_seq.max(entry.seq + 1);
            state.reports.insert(entry.report());
            state.pending.insert(entry.seq, entry);
        }
        state
    }

    /// Plans adding `reports`, stored at `at` (pure: [`OutboxState::apply`] makes it so once
    /// written). A report already pending is not added again: its delivery reads the newest
    /// version.
    pub fn admit(&self, reports: &[ReportKey], at: Timestamp, capacity: Option<u64>) -> Admission {
        let Some(capacity) = capacity else {
            return Admission::default();
        };
        let mut admission = Admission::default();
        let mut seq = self.next_seq;
        let mut seen = HashSet::new();
        for report in reports {
            if self.reports.contains(report) || !seen.insert(report.clone()) {
                continue;
            }
            admission.added.push(Pending {
                seq,
                task: report.0,
                round: report.1,
                node: report.2.clone(),
                stored_at: at,
            });
            seq += 1;
        }
        let total = self.pending.len() as u64 + admission.added.len() as u64;
        let over = total.saturating_sub(capacity.max(1)) as usize;
        // The oldest go first: those on disk, then (when more arrive at once than fit) the
        // oldest of the new ones.
        admission.evicted = self.pending.keys().take(over).copied().collect();
        let still_over = over.saturating_sub(admission.evicted.len());
        if still_over > 0 {
            let dropped: Vec<u64> = admission.added.drain(..still_over).map(|p| p.seq).collect();
            // Never written: counted as evicted so the caller counts them as dropped.
            admission.evicted.extend(dropped);
        }
        admission
    }

    /// Records an admission as written.
    pub fn apply(&mut self, admission: &Admission) {
        for seq in &admission.evicted {
            self.remove(*seq);
        }
        for entry in &admission.added {
            self.next_seq = self.next_seq.max(entry.seq + 1);
            self.reports.insert(entry.report());
            self.pending.insert(entry.seq, entry.clone());
        }
    }

    /// Forgets an entry delivered or given up; `false` if it was not pending.
    pub fn remove(&mut self, seq: u64) -> bool {
        match self.pending.remove(&seq) {
            Some(entry) => {
                self.reports.remove(&entry.report());
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(task: u64, round: u64, node: &str) -> ReportKey {
        (IncarnationId(task), round, node.to_string())
    }

    const AT: Timestamp = Timestamp::UNIX_EPOCH;

    #[test]
    fn nothing_is_added_while_export_is_off() {
        let state = OutboxState::default();
        assert_eq!(
            state.admit(&[report(1, 1, "a")], AT, state.capacity),
            Admission::default()
        );
    }

    #[test]
    fn a_pending_report_is_not_added_twice() {
        let mut state = OutboxState {
            capacity: Some(10),
            ..OutboxState::default()
        };
        let first = state.admit(
            &[report(1, 1, "a"), report(1, 1, "b"), report(1, 1, "a")],
            AT,
            state.capacity,
        );
        assert_eq!(
            first.added.iter().map(|p| p.seq).collect::<Vec<_>>(),
            [0, 1]
        );
        state.apply(&first);
        let again = state.admit(&[report(1, 1, "b"), report(1, 2, "b")], AT, state.capacity);
        assert_eq!(again.added.len(), 1);
        assert_eq!(again.added[0].seq, 2);
        assert_eq!(again.added[0].round, 2);
        // Once delivered, a new version of the report is pending again.
        assert!(state.remove(1));
        assert!(!state.remove(1));
        assert_eq!(
            state
                .admit(&[report(1, 1, "b")], AT, state.capacity)
                .added
                .len(),
            1
        );
    }

    #[test]
    fn a_full_outbox_evicts_the_oldest() {
        let mut state = OutboxState {
            capacity: Some(3),
            ..OutboxState::default()
        };
        let first = state.admit(&[report(1, 1, "a"), report(1, 1, "b")], AT, state.capacity);
        state.apply(&first);
        let second = state.admit(&[report(1, 2, "a"), report(1, 2, "b")], AT, state.capacity);
        assert_eq!(second.evicted, [0]);
        state.apply(&second);
        assert_eq!(state.pending.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
        // More at once than fit: the whole outbox and the oldest new ones go.
        let burst: Vec<_> = (0..5).map(|i| report(2, 1, &format!("n{i}"))).collect();
        let third = state.admit(&burst, AT, state.capacity);
        assert_eq!(third.evicted, [1, 2, 3, 4, 5]);
        assert_eq!(
            third.added.iter().map(|p| p.seq).collect::<Vec<_>>(),
            [6, 7, 8]
        );
        state.apply(&third);
        assert_eq!(state.pending.len(), 3);
        assert_eq!(state.next_seq, 9);
    }

    #[test]
    fn loading_resumes_the_sequence_and_the_pending_set() {
        let state = OutboxState::load(
            [
                Pending {
                    seq: 4,
                    task: IncarnationId(1),
                    round: 1,
                    node: "a".into(),
                    stored_at: AT,
                },
                Pending {
                    seq: 9,
                    task: IncarnationId(1),
                    round: 2,
                    node: "a".into(),
                    stored_at: AT,
                },
            ],
            0,
        );
        assert_eq!(state.next_seq, 10);
        // The stored next number wins once every entry was delivered.
        assert_eq!(OutboxState::load([], 12).next_seq, 12);
        assert_eq!(state.pending.len(), 2);
        assert!(state.reports.contains(&report(1, 2, "a")));
    }
}
