//! The leader's window of recent records, what each follower acknowledged, and the position a
//! follower resumes from. Pure: no IO, no clock of its own.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A place in the history: the resourceVersion of the last record applied and the term of the
/// leader that wrote it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Position {
    /// resourceVersion after the record.
    pub rv: u64,
    /// Term of the record's writer (0: nothing written yet).
    pub term: u64,
}

/// One key operation of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Set a key.
    Put(Vec<u8>, Vec<u8>),
    /// Remove a key.
    Remove(Vec<u8>),
}

impl Op {
    /// Bytes it takes in the window (key and value).
    pub fn weight(&self) -> usize {
        match self {
            Op::Put(k, v) => k.len() + v.len() + 16,
            Op::Remove(k) => k.len() + 16,
        }
    }

    /// The key it touches.
    pub fn key(&self) -> &[u8] {
        match self {
            Op::Put(k, _) | Op::Remove(k) => k,
        }
    }
}

/// One committed batch of the leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// resourceVersion after the batch.
    pub rv: u64,
    /// Term of the leader that wrote it.
    pub term: u64,
    /// The batch's key operations, in order.
    pub ops: Vec<Op>,
}

impl Record {
    /// Where a follower is once it applied this record.
    pub fn position(&self) -> Position {
        Position {
            rv: self.rv,
            term: self.term,
        }
    }

    fn weight(&self) -> usize {
        32 + self.ops.iter().map(Op::weight).sum::<usize>()
    }
}

/// Why records cannot be sent after a position: the follower must load a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("replication cannot resume after resourceVersion {} (term {:x}): {reason}", .from.rv, .from.term)]
pub struct NeedSnapshot {
    /// Where the follower was.
    pub from: Position,
    /// Why it cannot resume there.
    pub reason: String,
}

/// How long an acknowledgement counts a follower as connected.
pub const FOLLOWER_SEEN_FOR: Duration = Duration::from_secs(30);

/// The leader's replication state, under the store's writer lock.
#[derive(Debug)]
pub(crate) struct ReplicaLog {
    /// Term of this store's writes.
    pub term: u64,
    /// The position before the first kept record.
    base: Position,
    records: VecDeque<Arc<Record>>,
    bytes: usize,
    max_bytes: usize,
    /// The last resourceVersion that is durable, hence sendable.
    published: u64,
    /// Removals of delivered export entries (not batches of their own): they ride with the
    /// next record.
    carry: Vec<Op>,
    acks: HashMap<String, (u64, Instant)>,
}

impl ReplicaLog {
    /// A log whose history so far ends at `base`; new records carry `term`.
    pub fn new(base: Position, term: u64, max_bytes: usize) -> ReplicaLog {
        ReplicaLog {
            term,
            base,
            records: VecDeque::new(),
            bytes: 0,
            max_bytes,
            published: base.rv,
            carry: Vec::new(),
            acks: HashMap::new(),
        }
    }

    /// Forgets the records: the history now ends at `at` (a follower's applied position).
    pub fn rebase(&mut self, at: Position) {
        self.records.clear();
        self.bytes = 0;
        self.base = at;
        self.published = at.rv;
        self.carry.clear();
    }

    /// Adds the batch that moved the store to `rv` (not sendable until published).
    pub fn append(&mut self, rv: u64, mut ops: Vec<Op>) {
        ops.append(&mut self.carry);
        let record = Arc::new(Record {
            rv,
            term: self.term,
            ops,
        });
        self.bytes += record.weight();
        self.records.push_back(record);
        // The newest record always stays: it names where followers are.
        while self.bytes > self.max_bytes && self.records.len() > 1 {
            if self.records[0].rv > self.published {
                break;
            }
            if let Some(old) = self.records.pop_front() {
                self.bytes -= old.weight();
                self.base = old.position();
            }
        }
    }

    /// An operation to send with the next record.
    pub fn carry(&mut self, op: Op) {
        // Bounded: with no write for a long time, the oldest removals are dropped (a follower
        // that takes over then delivers those reports once more; receivers de-duplicate).
        if self.carry.len() < 100_000 {
            self.carry.push(op);
        }
    }

    /// Records up to `rv` are durable.
    pub fn publish(&mut self, rv: u64) {
        self.published = self.published.max(rv);
    }

    /// The newest durable position.
    pub fn last_published(&self) -> Position {
        self.records
            .iter()
            .rev()
            .find(|r| r.rv <= self.published)
            .map_or(self.base, |r| r.position())
    }

    /// Durable records after `from`, at least one and then up to about `max_bytes`.
    pub fn after(
        &self,
        from: Position,
        max_bytes: usize,
    ) -> Result<Vec<Arc<Record>>, NeedSnapshot> {
        let refuse = |reason: &str| NeedSnapshot {
            from,
            reason: reason.to_string(),
        };
        let last = self.last_published();
        if from.rv > last.rv {
            return Err(refuse("the follower is ahead of the leader"));
        }
        let start = if from.rv == self.base.rv {
            if from.term != self.base.term {
                return Err(refuse("the follower's history differs from the leader's"));
            }
            0
        } else if from.rv < self.base.rv {
            return Err(refuse("older than the leader's window of records"));
        } else {
            let at = self
                .records
                .binary_search_by_key(&from.rv, |r| r.rv)
                .map_err(|_| refuse("the leader has no record at that resourceVersion"))?;
            if self.records[at].term != from.term {
                return Err(refuse("the follower's history differs from the leader's"));
            }
            at + 1
        };
        let mut out = Vec::new();
        let mut bytes = 0;
        for record in self.records.iter().skip(start) {
            if record.rv > self.published || (!out.is_empty() && bytes >= max_bytes) {
                break;
            }
            bytes += record.weight();
            out.push(record.clone());
        }
        Ok(out)
    }

    /// `follower` has applied everything up to `rv`.
    pub fn ack(&mut self, follower: &str, rv: u64, now: Instant) {
        if self.acks.len() < 64 || self.acks.contains_key(follower) {
            self.acks.insert(follower.to_string(), (rv, now));
        }
        self.acks
            .retain(|_, (_, seen)| now.saturating_duration_since(*seen) < FOLLOWER_SEEN_FOR * 4);
    }

    /// Followers seen recently, with the resourceVersion each has applied.
    pub fn followers(&self, now: Instant) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = self
            .acks
            .iter()
            .filter(|(_, (_, seen))| now.saturating_duration_since(*seen) < FOLLOWER_SEEN_FOR)
            .map(|(name, (rv, _))| (name.clone(), *rv))
            .collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(n: u8) -> Vec<Op> {
        vec![Op::Put(vec![b'k', n], vec![n; 10])]
    }

    #[test]
    fn records_after_a_position_are_sent_once_durable() {
        let mut log = ReplicaLog::new(Position { rv: 5, term: 1 }, 2, 1 << 20);
        log.append(6, put(6));
        log.append(7, put(7));
        let from = Position { rv: 5, term: 1 };
        assert!(log.after(from, 1 << 20).expect("resumes").is_empty());
        log.publish(6);
        let sent = log.after(from, 1 << 20).expect("resumes");
        assert_eq!(sent.iter().map(|r| r.rv).collect::<Vec<_>>(), vec![6]);
        log.publish(7);
        let next = log.after(sent[0].position(), 1 << 20).expect("resumes");
        assert_eq!(
            next.iter().map(|r| (r.rv, r.term)).collect::<Vec<_>>(),
            vec![(7, 2)]
        );
        assert_eq!(log.last_published(), Position { rv: 7, term: 2 });
    }

    #[test]
    fn a_follower_from_another_history_or_too_old_needs_a_snapshot() {
        let mut log = ReplicaLog::new(Position { rv: 5, term: 1 }, 2, 200);
        for rv in 6..=20 {
            log.append(rv, put(rv as u8));
            log.publish(rv);
        }
        // The window keeps about 200 bytes: the oldest records went.
        let error = log
            .after(Position { rv: 5, term: 1 }, 1 << 20)
            .expect_err("gone");
        assert!(error.reason.contains("older than"), "{error}");
        let error = log
            .after(Position { rv: 19, term: 9 }, 1 << 20)
            .expect_err("diverged");
        assert!(error.reason.contains("differs"), "{error}");
        let error = log
            .after(Position { rv: 21, term: 2 }, 1 << 20)
            .expect_err("ahead");
        assert!(error.reason.contains("ahead"), "{error}");
        assert_eq!(
            log.after(Position { rv: 19, term: 2 }, 1)
                .expect("resumes")
                .len(),
            1
        );
    }

    #[test]
    fn carried_operations_ride_with_the_next_record_and_sends_are_bounded() {
        let mut log = ReplicaLog::new(Position::default(), 3, 1 << 20);
        log.carry(Op::Remove(b"q1".to_vec()));
        log.append(1, put(1));
        log.append(2, put(2));
        log.publish(2);
        let all = log.after(Position::default(), 1 << 20).expect("resumes");
        assert_eq!(all[0].ops.last(), Some(&Op::Remove(b"q1".to_vec())));
        assert!(all[1].ops.iter().all(|op| matches!(op, Op::Put(..))));
        // At least one record, however small the budget.
        assert_eq!(log.after(Position::default(), 1).expect("resumes").len(), 1);
    }

    #[test]
    fn followers_count_while_they_keep_acknowledging() {
        let mut log = ReplicaLog::new(Position::default(), 1, 1 << 20);
        let t0 = Instant::now();
        log.ack("replica-1", 7, t0);
        assert_eq!(log.followers(t0), vec![("replica-1".to_string(), 7)]);
        assert!(log.followers(t0 + FOLLOWER_SEEN_FOR).is_empty());
    }
}
