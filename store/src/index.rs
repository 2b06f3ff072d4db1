//! The in-memory index of task incarnations and their rounds, rebuilt from the store at open.
//! Lists, name and UID lookups, and retention decisions come from here, never from a scan of
//! report bodies.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use kdoctor_api::task::TaskKind;
use serde::{Deserialize, Serialize};

use crate::model::{IncarnationId, NodeCounts, RoundResult, TaskSummary};

/// What the store keeps per round besides the reports (persisted as the round's `r` record).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RoundMeta {
    /// Agent reports stored for the round.
    pub reports: u64,
    /// Bytes stored for the round (reports and summary, compressed).
    pub stored_bytes: u64,
    /// Last write to the round; retention ages rounds by it.
    pub stored_at: Timestamp,
    /// Result of the round summary, once the controller wrote one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<RoundResult>,
    /// Bytes of the round summary (part of `stored_bytes`).
    #[serde(default)]
    pub summary_bytes: u64,
    /// Reports whose agent said `fail`.
    #[serde(default)]
    pub failed_reports: u64,
    /// Node counts of the round summary, once written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeCounts>,
}

impl RoundMeta {
    /// An empty round last written at `at`.
    pub fn new(at: Timestamp) -> RoundMeta {
        RoundMeta {
            reports: 0,
            stored_bytes: 0,
            stored_at: at,
            result: None,
            summary_bytes: 0,
            failed_reports: 0,
            nodes: None,
        }
    }

    /// Node counts: the summary's, or those of the reports stored so far.
    pub fn node_counts(&self) -> NodeCounts {
        self.nodes.unwrap_or(NodeCounts {
            succeeded: self.reports.saturating_sub(self.failed_reports) as u32,
            failed: self.failed_reports as u32,
            not_reported: 0,
        })
    }
}

/// One incarnation and its rounds.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Counters shown in lists.
    pub summary: TaskSummary,
    /// Bytes of the task record itself.
    pub record_bytes: u64,
    /// Rounds with data.
    pub rounds: BTreeMap<u64, RoundMeta>,
}

impl Entry {
    /// Recomputes the summary's round counters from the rounds.
    pub fn refresh(&mut self) {
        let s = &mut self.summary;
        s.rounds = self.rounds.len() as u64;
        s.reports = self.rounds.values().map(|r| r.reports).sum();
        s.stored_bytes =
            self.record_bytes + self.rounds.values().map(|r| r.stored_bytes).sum::<u64>();
        s.latest_round = self.rounds.keys().next_back().copied();
        s.latest_result = self.rounds.values().rev().find_map(|r| r.result);
        s.latest_nodes = self.rounds.values().next_back().map(RoundMeta::node_counts);
    }
}

/// Every incarnation, by id, by name and by UID.
#[derive(Debug, Default)]
pub struct Index {
    entries: BTreeMap<IncarnationId, Entry>,
    by_name: BTreeMap<(TaskKind, String), Vec<IncarnationId>>,
    by_uid: HashMap<String, IncarnationId>,
}

impl Index {
    /// Adds or replaces an entry.
    pub fn insert(&mut self, entry: Entry) {
        let id = entry.summary.id;
        let key = (entry.summary.kind, entry.summary.name.clone());
        let ids = self.by_name.entry(key).or_default();
        if !ids.contains(&id) {
            ids.push(id);
            ids.sort();
        }
        self.by_uid.insert(entry.summary.uid.clone(), id);
        self.entries.insert(id, entry);
    }

    /// Removes an entry.
    pub fn remove(&mut self, id: IncarnationId) -> Option<Entry> {
        let entry = self.entries.remove(&id)?;
        let key = (entry.summary.kind, entry.summary.name.clone());
        if let Some(ids) = self.by_name.get_mut(&key) {
            ids.retain(|i| *i != id);
            if ids.is_empty() {
                self.by_name.remove(&key);
            }
        }
        self.by_uid.remove(&entry.summary.uid);
        Some(entry)
    }

    /// The entry of an id.
    pub fn get(&self, id: IncarnationId) -> Option<&Entry> {
        self.entries.get(&id)
    }

    /// The id of a UID.
    pub fn by_uid(&self, uid: &str) -> Option<IncarnationId> {
        self.by_uid.get(uid).copied()
    }

    /// The incarnations of a kind and name, oldest first.
    pub fn by_name(&self, kind: TaskKind, name: &str) -> &[IncarnationId] {
        self.by_name
            .get(&(kind, name.to_string()))
            .map_or(&[], Vec::as_slice)
    }

    /// Every entry, by id.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// Bytes stored in all.
    pub fn total_bytes(&self) -> u64 {
        self.entries.values().map(|e| e.summary.stored_bytes).sum()
    }
}
