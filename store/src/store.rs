//! [`Store`]: the one type that owns the sled database.
//!
//! Writes are serialized by one writer lock: each builds a single sled batch holding the data,
//! the index rows, the new resourceVersion and the change event, applies it atomically, updates
//! the in-memory index, releases the lock and only then flushes — so that concurrent writers
//! share flushes, and a write returns only once it is durable. After the flush the durable mark
//! (see [`crate::durable`]) moves to the flushed resourceVersion and only then are the flushed
//! events published to watchers, in order: no watcher sees a change that a crash could undo.

use std::collections::VecDeque;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use jiff::Timestamp;
use kdoctor_api::matrix::ProbeRow;
use kdoctor_api::report::Report;
use kdoctor_api::task::TaskKind;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};

use crate::body;
use crate::codec::{self, Frame};
use crate::command::{Applied, Command, Refusal, ReportEntry};
use crate::config::StoreConfig;
use crate::durable::{self, DurableMark};
use crate::error::{Result, StoreError};
use crate::flusher::{FlushError, Flusher};
use crate::index::{Entry, Index, RoundMeta};
use crate::keys;
use crate::lock::LockFile;
use crate::metrics::StoreMetrics;
use crate::model::{
    Event, EventType, IncarnationId, NodeCounts, Outcome, Progress, ReportMeta, RoundResult,
    RoundSummary, TaskRecord, TaskSummary,
};
use crate::outbox::{OutboxState, Pending, ReportKey};
use crate::probes;
use crate::state_tree;

/// How long a write waits for its flush before the store stops (crate::flusher): far beyond
/// any healthy fsync, short of leaving the controller hung.
const FLUSH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Layout version written by this build.
pub const FORMAT_VERSION: u32 = 1;
/// Live events buffered per subscriber before it is told it lagged.
pub(crate) const BROADCAST_CAPACITY: usize = 4096;

/// The stored header of one agent report.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct ReportHeader {
    meta: ReportMeta,
    /// CRC-32 of the report's JSON, to find duplicates without reading the body.
    json_crc: u32,
}

/// One round as the store has it.
#[derive(Clone, Debug, PartialEq)]
pub struct RoundInfo {
    /// Round number.
    pub round: u64,
    /// The controller's summary, once written.
    pub summary: Option<RoundSummary>,
    /// Agent reports stored.
    pub reports: u64,
    /// Bytes stored.
    pub stored_bytes: u64,
    /// Last write.
    pub stored_at: Timestamp,
}

/// A report to store.
#[derive(Clone, Debug)]
pub struct NewReport<'a> {
    /// The incarnation.
    pub task: IncarnationId,
    /// The agent's report; its `roundNumber` and `nodeName` place it.
    pub report: &'a Report,
}

impl NewReport<'_> {
    /// The log's entries of `reports`, in order.
    pub(crate) fn entries(reports: &[NewReport<'_>]) -> Result<Vec<ReportEntry>> {
        reports
            .iter()
            .map(|new| ReportEntry::of(new.task, new.report))
            .collect()
    }
}

/// Totals of the store.
#[derive(Serialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Task incarnations.
    pub tasks: u64,
    /// Of which the CR is deleted.
    pub deleted_tasks: u64,
    /// Rounds.
    pub rounds: u64,
    /// Agent reports.
    pub reports: u64,
    /// Bytes stored (compressed).
    pub stored_bytes: u64,
    /// Bytes sled uses on disk.
    pub disk_bytes: u64,
    /// Last resourceVersion.
    pub resource_version: u64,
}

/// Why a watch cannot resume.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    /// The resourceVersion is older than the window of kept events (HTTP 410 Gone).
    #[error(
        "too old resource version: {requested} (oldest available: {oldest}); list again and watch from the list's resourceVersion"
    )]
    TooOld {
        /// What the watcher asked for.
        requested: u64,
        /// The oldest resourceVersion a watch can resume from.
        oldest: u64,
    },
}

/// A watch: the events after the requested resourceVersion, then live ones.
#[derive(Debug)]
pub struct Subscription {
    /// Kept events after the requested resourceVersion, in order.
    pub backlog: Vec<Event>,
    /// Later events. A `Lagged` error means the watcher fell too far behind and must relist.
    pub live: broadcast::Receiver<Event>,
}

/// Writer state, under the writer lock.
pub(crate) struct Writer {
    pub(crate) rv: u64,
    pub(crate) next_id: u64,
    pub(crate) window: VecDeque<Event>,
    /// The last resourceVersion whose event went to watchers (everything up to it is durable).
    pub(crate) published: u64,
}

/// The report store of the controller.
pub struct Store {
    path: PathBuf,
    /// Runs `db.flush()` with a deadline (declared before `db`: dropped first, it lets its
    /// clone of the database go before the store's).
    flusher: Flusher<sled::Error>,
    pub(crate) db: sled::Db,
    /// The tree that holds the data, and its name (crate::state_tree): replaced as a whole
    /// when a replica installs a snapshot.
    state: RwLock<(sled::Tree, Vec<u8>)>,
    pub(crate) writer: Mutex<Writer>,
    pub(crate) index: RwLock<Index>,
    /// Replaced when a replica installs a snapshot, which ends every watch of the old history.
    pub(crate) events: RwLock<broadcast::Sender<Event>>,
    pub(crate) mark: DurableMark,
    config: StoreConfig,
    pub(crate) metrics: StoreMetrics,
    pub(crate) outbox: Mutex<OutboxState>,
    /// Writes come only from the replicated log (crate::raft): [`Store::execute`] refuses.
    replicated: AtomicBool,
    /// The last durable resourceVersion, for those who wait for one.
    pub(crate) durable_rv: watch::Sender<u64>,
    /// The I/O error the store stopped on (sled takes nothing more after one, e.g. a full disk).
    failure: Mutex<Option<String>>,
    /// Bumped when a replica installs a snapshot (or clears its store to join a cluster): the
    /// same resourceVersion may then name other data than before, so caches key on it too.
    pub(crate) generation: std::sync::atomic::AtomicU64,
    _lock: LockFile,
}

/// Key-value pairs a write adds to its batch besides its own change (what the replicated log
/// applied up to, crate::raft): written exactly when the change is.
pub(crate) type Extra = [(Vec<u8>, Vec<u8>)];

/// Changes one write makes, turned into one batch.
#[derive(Default)]
struct Changes {
    batch: sled::Batch,
    events: Vec<(EventType, IncarnationId, Option<u64>)>,
}

impl Changes {
    fn new(extra: &Extra) -> Changes {
        let mut changes = Changes::default();
        for (key, value) in extra {
            changes.insert(key.clone(), value.clone());
        }
        changes
    }

    fn insert(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.batch.insert(key, value);
    }

    fn remove(&mut self, key: Vec<u8>) {
        self.batch.remove(key);
    }

    fn framed(&mut self, key: &[u8], plain: &[u8], old: Option<&Frame>) -> Result<u64> {
        let encoded = codec::encode(key, plain, old)?;
        for (k, v) in encoded.inserts {
            self.insert(k, v);
        }
        for k in encoded.removes {
            self.remove(k);
        }
        Ok(encoded.stored_bytes)
    }

    fn event(&mut self, event_type: EventType, id: IncarnationId, round: Option<u64>) {
        self.events.push((event_type, id, round));
    }
}

impl Store {
    /// Opens (or creates) the store. Fails, changing nothing, when another process holds it,
    /// when sled cannot open it, or when it was written by a newer layout.
    pub fn open(config: StoreConfig) -> Result<Store> {
        let path = config.path.clone();
        let lock = LockFile::acquire(&path)?;
        let db = open_db(&config)?;
        let (tree, tree_name) = state_tree::open_current(&db)?;
        match tree.get(keys::META_FORMAT)? {
            None => {
                tree.insert(keys::META_FORMAT, &FORMAT_VERSION.to_be_bytes())?;
                db.flush()?;
            }
            Some(v) => {
                let found = v
                    .as_ref()
                    .try_into()
                    .map(u32::from_be_bytes)
                    .unwrap_or(u32::MAX);
                if found != FORMAT_VERSION {
                    return Err(StoreError::Format {
                        path,
                        found,
                        supported: FORMAT_VERSION,
                    });
                }
            }
        }
        let rv = read_u64(&tree, keys::META_RV)?;
        if let Some(promised) = durable::read(&path)?
            && promised > rv
        {
            return Err(StoreError::LostWrites {
                path,
                promised,
                found: rv,
            });
        }
        let mark = DurableMark::open(&path, rv)?;
        let loaded = Loaded::read(&tree)?;
        let (events, _) = broadcast::channel(BROADCAST_CAPACITY);
        let metrics = StoreMetrics::new();
        let flusher = {
            let db = db.clone();
            Flusher::spawn(move || db.flush().map(drop)).map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?
        };
        let store = Store {
            path,
            flusher,
            writer: Mutex::new(Writer {
                rv,
                next_id: loaded.next_id,
                window: loaded.window,
                published: rv,
            }),
            db,
            state: RwLock::new((tree, tree_name)),
            index: RwLock::new(loaded.index),
            events: RwLock::new(events),
            mark,
            config,
            metrics,
            outbox: Mutex::new(loaded.outbox),
            replicated: AtomicBool::new(false),
            durable_rv: watch::Sender::new(rv),
            failure: Mutex::new(None),
            generation: std::sync::atomic::AtomicU64::new(0),
            _lock: lock,
        };
        store.update_gauges();
        tracing::info!(
            path = %store.path.display(),
            tasks = store.read_index().entries().count(),
            resource_version = rv,
            "store opened"
        );
        Ok(store)
    }

    /// The store directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The store's settings.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The store's metrics (register them with [`StoreMetrics::register`]).
    pub fn metrics(&self) -> &StoreMetrics {
        &self.metrics
    }

    fn read_index(&self) -> RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn write_index(&self) -> RwLockWriteGuard<'_, Index> {
        self.index.write().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn lock_writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tree that holds the data (a handle: cheap to clone, valid while it is current).
    pub(crate) fn tree(&self) -> sled::Tree {
        self.state
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    // ---- writes ------------------------------------------------------------------------

    /// Applies one command and returns once its change is durable: the write path of a store
    /// one process owns (`kdoctor local`, `kdoctor apiserver`, imports). A replicated store
    /// takes its commands from the replicated log only (crate::raft).
    pub fn execute(&self, command: &Command) -> Result<Applied> {
        self.writable()?;
        let applied = self
            .apply_command(command, &[])
            .map_err(|e| self.stopped(e))?;
        let pending = {
            let writer = self.lock_writer();
            writer.rv > writer.published
        };
        if pending {
            self.flush().map_err(|e| self.stopped(e))?;
        }
        applied.accepted()
    }

    /// Records a task incarnation (created, or its spec/status/deletion changed). The UID
    /// decides the incarnation: the same name with a new UID is a new incarnation.
    pub fn record_task(&self, record: &TaskRecord) -> Result<(IncarnationId, Outcome)> {
        match self.execute(&Command::RecordTask {
            record: record.clone(),
        })? {
            Applied::Task(id, outcome) => Ok((id, outcome)),
            other => Err(unexpected(&other)),
        }
    }

    /// Stores the controller's summary of a round.
    pub fn put_round(&self, id: IncarnationId, summary: &RoundSummary) -> Result<Outcome> {
        match self.execute(&Command::PutRound {
            task: id,
            summary: summary.clone(),
            at: Timestamp::now(),
        })? {
            Applied::Outcome(outcome) => Ok(outcome),
            other => Err(unexpected(&other)),
        }
    }

    /// Stores agent reports in one atomic batch and one flush; returns once they are durable.
    /// A report already stored byte for byte is not written again.
    pub fn put_reports(&self, reports: &[NewReport<'_>]) -> Result<Vec<Outcome>> {
        let command = self.put_reports_command(reports)?;
        match self.execute(&command)? {
            Applied::Outcomes(outcomes) => Ok(outcomes),
            other => Err(unexpected(&other)),
        }
    }

    /// The command that stores `reports` now, with the export outbox as this store has it.
    pub fn put_reports_command(&self, reports: &[NewReport<'_>]) -> Result<Command> {
        Ok(self.reports_command(NewReport::entries(reports)?))
    }

    /// The command that stores `entries` now (see [`Store::put_reports_command`]).
    pub fn reports_command(&self, entries: Vec<ReportEntry>) -> Command {
        Command::PutReports {
            reports: entries,
            at: Timestamp::now(),
            outbox: self.lock_outbox().capacity,
        }
    }

    /// Removes a task incarnation and everything stored for it. `false` if it was not there.
    pub fn purge_task(&self, id: IncarnationId) -> Result<bool> {
        match self.execute(&Command::PurgeTask { task: id })? {
            Applied::TaskPurged(gone) => {
                if gone {
                    self.metrics.tasks_purged.inc();
                }
                Ok(gone)
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Removes one round of a task (summary and reports). Returns the bytes removed.
    pub fn purge_round(&self, id: IncarnationId, round: u64) -> Result<u64> {
        match self.execute(&Command::PurgeRound { task: id, round })? {
            Applied::RoundPurged(bytes) => Ok(bytes),
            other => Err(unexpected(&other)),
        }
    }

    /// Applies `command` (not yet durable: the caller flushes), writing `extra` in the same
    /// batch as its change. A command the store cannot take (it names an incarnation that is
    /// not there, say) changes nothing and says why; any other error is the store's own.
    pub(crate) fn apply_command(&self, command: &Command, extra: &Extra) -> Result<Applied> {
        let applied = match command {
            Command::RecordTask { record } => self
                .apply_record_task(record, extra)
                .map(|(id, outcome)| Applied::Task(id, outcome)),
            Command::MarkDeleted { task, at } => self
                .apply_mark_deleted(*task, *at, extra)
                .map(Applied::Outcome),
            Command::PutRound { task, summary, at } => self
                .apply_put_round(*task, summary, *at, extra)
                .map(Applied::Outcome),
            Command::PutReports {
                reports,
                at,
                outbox,
            } => self
                .apply_put_reports(reports, *at, *outbox, extra)
                .map(Applied::Outcomes),
            Command::PurgeTask { task } => {
                self.apply_purge_task(*task, extra).map(Applied::TaskPurged)
            }
            Command::PurgeRound { task, round } => self
                .apply_purge_round(*task, *round, extra)
                .map(Applied::RoundPurged),
            Command::OutboxDone { seqs } => {
                self.apply_outbox_done(seqs, extra).map(|()| Applied::Done)
            }
        };
        match applied {
            Err(StoreError::UnknownTask(id)) => Ok(Applied::Refused(Refusal::UnknownTask(id))),
            Err(StoreError::Invalid(message)) => Ok(Applied::Refused(Refusal::Invalid(message))),
            other => other,
        }
    }

    fn apply_record_task(
        &self,
        record: &TaskRecord,
        extra: &Extra,
    ) -> Result<(IncarnationId, Outcome)> {
        if record.name.is_empty() || record.uid.is_empty() {
            return Err(StoreError::Invalid(
                "a task record needs a name and a uid".into(),
            ));
        }
        let mut writer = self.lock_writer();
        let existing = self.read_index().by_uid(&record.uid);
        let mut changes = Changes::new(extra);
        let (id, outcome, mut entry) = match existing {
            Some(id) => {
                let old = self.task_record(id)?;
                if old.as_ref() == Some(record) {
                    return Ok((id, Outcome::Unchanged));
                }
                let entry = self
                    .read_index()
                    .get(id)
                    .cloned()
                    .ok_or(StoreError::UnknownTask(id.0))?;
                (id, Outcome::Updated, entry)
            }
            None => {
                writer.next_id += 1;
                let id = IncarnationId(writer.next_id);
                changes.insert(
                    keys::META_ID.to_vec(),
                    writer.next_id.to_be_bytes().to_vec(),
                );
                changes.insert(keys::uid(&record.uid), id.0.to_be_bytes().to_vec());
                let summary = TaskSummary {
                    id,
                    kind: record.kind,
                    name: record.name.clone(),
                    uid: record.uid.clone(),
                    created: record.created,
                    deleted: None,
                    progress: Progress::default(),
                    resource_version: 0,
                    added_resource_version: 0,
                    latest_round: None,
                    latest_result: None,
                    latest_nodes: None,
                    rounds: 0,
                    reports: 0,
                    stored_bytes: 0,
                };
                (
                    id,
                    Outcome::Created,
                    Entry {
                        summary,
                        record_bytes: 0,
                        rounds: Default::default(),
                    },
                )
            }
        };
        let key = keys::by_id(keys::TASK, id);
        let old_frame = self.frame(&key)?;
        entry.record_bytes =
            changes.framed(&key, &serde_json::to_vec(record)?, old_frame.as_ref())?;
        entry.summary.progress = Progress::from_status(record.status.as_ref());
        entry.summary.deleted = record.deleted;
        entry.summary.created = record.created;
        let mut changed = Vec::new();
        let event_type = if outcome == Outcome::Created {
            // The incarnation that was the newest of this name is displaced (it changes name):
            // announced first, so that watchers see the rename before the newcomer.
            let displaced = self
                .read_index()
                .by_name(record.kind, &record.name)
                .last()
                .copied();
            if let Some(old) = displaced.and_then(|d| self.read_index().get(d).cloned()) {
                changes.event(EventType::Modified, old.summary.id, None);
                changed.push(old);
            }
            EventType::Added
        } else {
            EventType::Modified
        };
        changes.event(event_type, id, None);
        changed.push(entry);
        self.commit(&mut writer, changes, changed, vec![])?;
        Ok((id, outcome))
    }

    /// Marks the incarnation's CR as deleted at `at` (its reports stay until retention).
    pub fn mark_deleted(&self, id: IncarnationId, at: Timestamp) -> Result<Outcome> {
        match self.execute(&Command::MarkDeleted { task: id, at })? {
            Applied::Outcome(outcome) => Ok(outcome),
            other => Err(unexpected(&other)),
        }
    }

    fn apply_mark_deleted(
        &self,
        id: IncarnationId,
        at: Timestamp,
        extra: &Extra,
    ) -> Result<Outcome> {
        let mut record = self.task_record(id)?.ok_or(StoreError::UnknownTask(id.0))?;
        if record.deleted.is_some() {
            return Ok(Outcome::Unchanged);
        }
        record.deleted = Some(at);
        self.apply_record_task(&record, extra)
            .map(|(_, outcome)| outcome)
    }

    fn apply_put_round(
        &self,
        id: IncarnationId,
        summary: &RoundSummary,
        at: Timestamp,
        extra: &Extra,
    ) -> Result<Outcome> {
        let mut writer = self.lock_writer();
        let mut entry = self
            .read_index()
            .get(id)
            .cloned()
            .ok_or(StoreError::UnknownTask(id.0))?;
        let key = keys::by_round(keys::SUMMARY_OF_ROUND, id, summary.round);
        let old_frame = self.frame(&key)?;
        if let Some(frame) = &old_frame {
            let old: RoundSummary =
                serde_json::from_slice(&codec::read_all(&self.tree(), &key, frame.clone())?)?;
            if &old == summary {
                return Ok(Outcome::Unchanged);
            }
        }
        let mut changes = Changes::new(extra);
        let bytes = changes.framed(&key, &serde_json::to_vec(summary)?, old_frame.as_ref())?;
        let meta = entry
            .rounds
            .entry(summary.round)
            .or_insert_with(|| RoundMeta::new(at));
        meta.nodes = Some(NodeCounts {
            succeeded: summary.succeeded_nodes,
            failed: summary.failed_nodes,
            not_reported: summary.not_reported.len() as u32,
        });
        meta.stored_bytes = meta.stored_bytes.saturating_sub(meta.summary_bytes) + bytes;
        meta.summary_bytes = bytes;
        meta.result = Some(summary.result);
        meta.stored_at = at;
        changes.insert(
            keys::by_round(keys::ROUND, id, summary.round),
            serde_json::to_vec(&*meta)?,
        );
        changes.event(EventType::Modified, id, Some(summary.round));
        let outcome = if old_frame.is_some() {
            Outcome::Updated
        } else {
            Outcome::Created
        };
        self.commit(&mut writer, changes, vec![entry], vec![])?;
        Ok(outcome)
    }

    /// Stores one agent report; returns once it is durable.
    pub fn put_report(&self, id: IncarnationId, report: &Report) -> Result<Outcome> {
        let outcomes = self.put_reports(&[NewReport { task: id, report }])?;
        Ok(outcomes.into_iter().next().unwrap_or(Outcome::Unchanged))
    }

    fn apply_put_reports(
        &self,
        reports: &[ReportEntry],
        now: Timestamp,
        outbox_capacity: Option<u64>,
        extra: &Extra,
    ) -> Result<Vec<Outcome>> {
        let mut writer = self.lock_writer();
        let mut changes = Changes::new(extra);
        let mut written: Vec<ReportKey> = Vec::new();
        let mut entries: Vec<Entry> = Vec::new();
        let mut outcomes = Vec::with_capacity(reports.len());
        for new in reports {
            let json = new.json.get().as_bytes();
            let report: Report = serde_json::from_slice(json)
                .map_err(|e| StoreError::Invalid(format!("a report does not parse: {e}")))?;
            let node = report.node_name.as_str();
            if node.is_empty() || report.round_number < 1 {
                return Err(StoreError::Invalid(format!(
                    "a report needs a nodeName and a roundNumber of at least 1 (got {node:?}, round {})",
                    report.round_number
                )));
            }
            let round = report.round_number as u64;
            let position = match entries.iter().position(|e| e.summary.id == new.task) {
                Some(p) => p,
                None => {
                    let entry = self
                        .read_index()
                        .get(new.task)
                        .cloned()
                        .ok_or(StoreError::UnknownTask(new.task.0))?;
                    entries.push(entry);
                    entries.len() - 1
                }
            };
            let json_crc = crc32fast::hash(json);
            let header_key = keys::by_node(keys::HEADER, new.task, round, node);
            let body_key = keys::by_node(keys::BODY, new.task, round, node);
            let old_header: Option<ReportHeader> = match self.tree().get(&header_key)? {
                Some(v) => Some(serde_json::from_slice(&v)?),
                None => None,
            };
            let old_frame = self.frame(&body_key)?;
            if let (Some(h), Some(frame)) = (&old_header, &old_frame)
                && h.json_crc == json_crc
                && h.meta.json_bytes == json.len() as u64
                && body::json_of(&codec::read_all(&self.tree(), &body_key, frame.clone())?) == json
            {
                self.metrics
                    .reports_written
                    .with_label_values(&["unchanged"])
                    .inc();
                outcomes.push(Outcome::Unchanged);
                continue;
            }
            let row = ProbeRow::of(&report).map(|r| probes::encode(&r));
            let plain = body::compose(json, row.as_deref());
            let stored = changes.framed(&body_key, &plain, old_frame.as_ref())?;
            let meta = ReportMeta {
                node: node.to_string(),
                result: RoundResult::from_report(&report.round_result),
                json_bytes: json.len() as u64,
                stored_bytes: stored,
                stored_at: now,
            };
            let result = meta.result;
            changes.insert(
                header_key,
                serde_json::to_vec(&ReportHeader { meta, json_crc })?,
            );
            let entry = &mut entries[position];
            let round_meta = entry
                .rounds
                .entry(round)
                .or_insert_with(|| RoundMeta::new(now));
            match &old_header {
                Some(h) => {
                    round_meta.stored_bytes =
                        round_meta.stored_bytes.saturating_sub(h.meta.stored_bytes);
                    if h.meta.result == RoundResult::Fail {
                        round_meta.failed_reports = round_meta.failed_reports.saturating_sub(1);
                    }
                }
                None => round_meta.reports += 1,
            }
            if result == RoundResult::Fail {
                round_meta.failed_reports += 1;
            }
            round_meta.stored_bytes += stored;
            round_meta.stored_at = now;
            changes.insert(
                keys::by_round(keys::ROUND, new.task, round),
                serde_json::to_vec(&*round_meta)?,
            );
            changes.event(EventType::Modified, new.task, Some(round));
            written.push((new.task, round, node.to_string()));
            let outcome = if old_header.is_some() {
                Outcome::Updated
            } else {
                Outcome::Created
            };
            let label = if outcome == Outcome::Created {
                "created"
            } else {
                "updated"
            };
            self.metrics
                .reports_written
                .with_label_values(&[label])
                .inc();
            outcomes.push(outcome);
        }
        if changes.events.is_empty() {
            return Ok(outcomes);
        }
        // In the same batch as the reports: an entry exists exactly when its report does.
        let admission = self.lock_outbox().admit(&written, now, outbox_capacity);
        for entry in &admission.added {
            changes.insert(keys::outbox(entry.seq), serde_json::to_vec(entry)?);
        }
        if let Some(last) = admission.added.last() {
            // Kept with the entries: sequence numbers continue the same on every replica,
            // also once every entry was delivered.
            changes.insert(
                keys::META_OUTBOX_SEQ.to_vec(),
                (last.seq + 1).to_be_bytes().to_vec(),
            );
        }
        for seq in &admission.evicted {
            changes.remove(keys::outbox(*seq));
        }
        self.commit(&mut writer, changes, entries, vec![])?;
        if !admission.evicted.is_empty() {
            tracing::warn!(
                dropped = admission.evicted.len(),
                "export outbox full: the oldest reports will not be exported"
            );
            self.metrics
                .outbox_dropped
                .inc_by(admission.evicted.len() as u64);
        }
        {
            let mut outbox = self.lock_outbox();
            outbox.apply(&admission);
            self.metrics.outbox_length.set(outbox.pending.len() as i64);
        }
        Ok(outcomes)
    }

    // ---- export outbox -----------------------------------------------------------------

    fn lock_outbox(&self) -> MutexGuard<'_, OutboxState> {
        self.outbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps every report stored from now on in the export outbox, at most `capacity` of them
    /// (the oldest make room). Entries already on disk are kept either way.
    pub fn enable_outbox(&self, capacity: u64) {
        let mut outbox = self.lock_outbox();
        outbox.capacity = Some(capacity.max(1));
        self.metrics.outbox_length.set(outbox.pending.len() as i64);
    }

    /// Up to `limit` reports waiting for export, oldest first, after sequence number `after`.
    pub fn outbox(&self, after: Option<u64>, limit: usize) -> Vec<Pending> {
        let outbox = self.lock_outbox();
        let from = after.map_or(0, |a| a.saturating_add(1));
        outbox
            .pending
            .range(from..)
            .take(limit)
            .map(|(_, entry)| entry.clone())
            .collect()
    }

    /// Removes an entry delivered (or given up). Not flushed on its own: an entry whose
    /// removal a crash undoes is delivered once more, and receivers de-duplicate by event id.
    pub fn outbox_done(&self, seq: u64) -> Result<()> {
        self.execute(&Command::OutboxDone { seqs: vec![seq] })
            .map(drop)
    }

    fn apply_outbox_done(&self, seqs: &[u64], extra: &Extra) -> Result<()> {
        let _writer = self.lock_writer();
        let removed: Vec<u64> = {
            let mut outbox = self.lock_outbox();
            let removed = seqs
                .iter()
                .copied()
                .filter(|seq| outbox.remove(*seq))
                .collect();
            self.metrics.outbox_length.set(outbox.pending.len() as i64);
            removed
        };
        let mut changes = Changes::new(extra);
        for seq in &removed {
            changes.remove(keys::outbox(*seq));
        }
        if !removed.is_empty() {
            self.tree().apply_batch(changes.batch)?;
        }
        Ok(())
    }

    fn apply_purge_task(&self, id: IncarnationId, extra: &Extra) -> Result<bool> {
        let mut writer = self.lock_writer();
        let Some(entry) = self.read_index().get(id).cloned() else {
            return Ok(false);
        };
        let mut changes = Changes::new(extra);
        for round in entry.rounds.keys() {
            self.remove_round_keys(&mut changes, id, *round)?;
        }
        let task_key = keys::by_id(keys::TASK, id);
        if let Some(frame) = self.frame(&task_key)? {
            codec::keys_of(&task_key, &frame)
                .into_iter()
                .for_each(|k| changes.remove(k));
        }
        changes.remove(keys::by_id(keys::SUMMARY, id));
        changes.remove(keys::uid(&entry.summary.uid));
        changes.event(EventType::Deleted, id, None);
        // Purging the newest incarnation promotes the one before it to the task's plain name.
        let mut changed = Vec::new();
        let siblings = self
            .read_index()
            .by_name(entry.summary.kind, &entry.summary.name)
            .to_vec();
        if siblings.last() == Some(&id)
            && let Some(promoted) = siblings
                .iter()
                .rev()
                .nth(1)
                .and_then(|p| self.read_index().get(*p).cloned())
        {
            changes.event(EventType::Modified, promoted.summary.id, None);
            changed.push(promoted);
        }
        self.commit(&mut writer, changes, changed, vec![entry])?;
        Ok(true)
    }

    fn apply_purge_round(&self, id: IncarnationId, round: u64, extra: &Extra) -> Result<u64> {
        let mut writer = self.lock_writer();
        let Some(mut entry) = self.read_index().get(id).cloned() else {
            return Ok(0);
        };
        let Some(meta) = entry.rounds.remove(&round) else {
            return Ok(0);
        };
        let mut changes = Changes::new(extra);
        self.remove_round_keys(&mut changes, id, round)?;
        changes.event(EventType::Modified, id, Some(round));
        self.commit(&mut writer, changes, vec![entry], vec![])?;
        Ok(meta.stored_bytes)
    }

    fn remove_round_keys(
        &self,
        changes: &mut Changes,
        id: IncarnationId,
        round: u64,
    ) -> Result<()> {
        changes.remove(keys::by_round(keys::ROUND, id, round));
        let summary_key = keys::by_round(keys::SUMMARY_OF_ROUND, id, round);
        if let Some(frame) = self.frame(&summary_key)? {
            codec::keys_of(&summary_key, &frame)
                .into_iter()
                .for_each(|k| changes.remove(k));
        }
        for item in self
            .tree()
            .scan_prefix(keys::by_round(keys::HEADER, id, round))
        {
            let (header_key, _) = item?;
            changes.remove(header_key.to_vec());
            let mut body_key = header_key.to_vec();
            body_key[0] = keys::BODY;
            if let Some(frame) = self.frame(&body_key)? {
                codec::keys_of(&body_key, &frame)
                    .into_iter()
                    .for_each(|k| changes.remove(k));
            }
        }
        Ok(())
    }

    /// Applies one batch: data, summaries of `changed` entries, events, resourceVersion.
    fn commit(
        &self,
        writer: &mut Writer,
        mut changes: Changes,
        mut changed: Vec<Entry>,
        removed: Vec<Entry>,
    ) -> Result<()> {
        let mut events = Vec::with_capacity(changes.events.len());
        let index_before = self.read_index();
        // The newest incarnation of a task name, before and after this batch.
        let newest_of = |kind, name: &str, after: bool| -> Option<IncarnationId> {
            let mut ids: Vec<IncarnationId> = index_before.by_name(kind, name).to_vec();
            if after {
                ids.retain(|id| !removed.iter().any(|e| e.summary.id == *id));
                ids.extend(
                    changed
                        .iter()
                        .filter(|e| e.summary.kind == kind && e.summary.name == name)
                        .map(|e| e.summary.id),
                );
            }
            ids.into_iter().max()
        };
        let mut flags = Vec::with_capacity(changes.events.len());
        for (_, id, _) in &changes.events {
            let entry = changed
                .iter()
                .chain(removed.iter())
                .find(|e| e.summary.id == *id);
            let (kind, name) = match entry {
                Some(e) => (e.summary.kind, e.summary.name.clone()),
                None => return Err(StoreError::UnknownTask(id.0)),
            };
            let previous = index_before.get(*id).map(|e| e.summary.clone());
            let was_newest = previous.is_some() && newest_of(kind, &name, false) == Some(*id);
            let gone = removed.iter().any(|e| e.summary.id == *id);
            let newest = !gone && newest_of(kind, &name, true) == Some(*id);
            flags.push((previous, was_newest, newest));
        }
        drop(index_before);
        for ((event_type, id, round), (previous, was_newest, newest)) in
            std::mem::take(&mut changes.events).into_iter().zip(flags)
        {
            writer.rv += 1;
            let rv = writer.rv;
            let task = match changed.iter_mut().find(|e| e.summary.id == id) {
                Some(entry) => {
                    entry.refresh();
                    entry.summary.resource_version = rv;
                    if event_type == EventType::Added {
                        entry.summary.added_resource_version = rv;
                    }
                    entry.summary.clone()
                }
                None => {
                    let entry = removed
                        .iter()
                        .find(|e| e.summary.id == id)
                        .ok_or(StoreError::UnknownTask(id.0))?;
                    let mut summary = entry.summary.clone();
                    summary.resource_version = rv;
                    summary
                }
            };
            events.push(Event {
                resource_version: rv,
                event_type,
                task,
                round,
                previous,
                was_newest,
                newest,
            });
        }
        for entry in &changed {
            changes.insert(
                keys::by_id(keys::SUMMARY, entry.summary.id),
                serde_json::to_vec(&entry.summary)?,
            );
            changes.insert(
                keys::by_id(keys::RECORD_BYTES, entry.summary.id),
                entry.record_bytes.to_be_bytes().to_vec(),
            );
        }
        for event in &events {
            changes.insert(
                keys::event(event.resource_version),
                serde_json::to_vec(event)?,
            );
        }
        let overflow =
            (writer.window.len() + events.len()).saturating_sub(self.config.event_window);
        for old in writer.window.iter().take(overflow) {
            changes.remove(keys::event(old.resource_version));
        }
        changes.insert(keys::META_RV.to_vec(), writer.rv.to_be_bytes().to_vec());
        self.tree().apply_batch(changes.batch)?;

        {
            let mut index = self.write_index();
            for entry in removed {
                index.remove(entry.summary.id);
            }
            for entry in changed {
                index.insert(entry);
            }
        }
        for _ in 0..overflow {
            writer.window.pop_front();
        }
        // Published by the flush that makes them durable.
        writer.window.extend(events);
        self.update_gauges_with(writer.rv);
        Ok(())
    }

    /// Makes every applied write durable, moves the durable mark, then publishes the events
    /// that are now durable, in resourceVersion order (several writers may flush at once).
    pub(crate) fn flush(&self) -> Result<()> {
        let applied = self.lock_writer().rv;
        self.flush_db()?;
        self.mark.advance(applied)?;
        let mut writer = self.lock_writer();
        self.publish(&mut writer, applied);
        Ok(())
    }

    /// Makes everything written to the database so far durable (every tree: the replicated
    /// log's too), within the deadline.
    pub(crate) fn flush_db(&self) -> Result<()> {
        match self.flusher.flush(FLUSH_DEADLINE) {
            Ok(()) => Ok(()),
            Err(FlushError::Failed(e)) => Err(e.into()),
            Err(FlushError::TimedOut(waited)) => Err(StoreError::Io {
                path: self.path.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "a flush did not finish within {}s: the disk is full or failing",
                        waited.as_secs()
                    ),
                ),
            }),
        }
    }

    /// Sends the events up to `applied` (durable now) to watchers and the writes to followers.
    pub(crate) fn publish(&self, writer: &mut Writer, applied: u64) {
        if applied > writer.published {
            let from = writer.published;
            let events = self.events.read().unwrap_or_else(|p| p.into_inner());
            for event in writer
                .window
                .iter()
                .filter(|e| e.resource_version > from && e.resource_version <= applied)
            {
                // No subscriber is not an error.
                let _ = events.send(event.clone());
            }
            writer.published = applied;
            self.durable_rv.send_replace(applied);
        }
    }

    /// Fails when this store's writes come from the replicated log, or it stopped on an I/O
    /// error.
    fn writable(&self) -> Result<()> {
        if self.replicated.load(Ordering::SeqCst) {
            return Err(StoreError::Replicated);
        }
        if let Some(reason) = self.failure() {
            return Err(StoreError::Stopped(reason));
        }
        Ok(())
    }

    /// Records an I/O error the store cannot go on after (sled refuses every later operation
    /// with it): the store must be reopened, once the cause (a full disk, say) is gone.
    /// Records that the store cannot go on (the replicated log stopped, say): liveness fails
    /// and the process restarts.
    pub(crate) fn record_failure(&self, reason: String) {
        let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        if failure.is_none() {
            tracing::error!(path = %self.path.display(), %reason, "the report store stopped");
            *failure = Some(reason);
            self.metrics.failed.set(1);
        }
    }

    pub(crate) fn stopped(&self, error: StoreError) -> StoreError {
        if matches!(
            error,
            StoreError::Sled(sled::Error::Io(_)) | StoreError::Io { .. }
        ) {
            let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
            if failure.is_none() {
                tracing::error!(path = %self.path.display(), %error, "the report store stopped on an I/O error; it must be reopened (the controller restarts) once the cause is gone");
                *failure = Some(error.to_string());
                self.metrics.failed.set(1);
            }
        }
        error
    }

    /// Changes when the content is replaced by a snapshot (see the field).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The last durable resourceVersion, changing as writes become durable.
    pub fn durable_versions(&self) -> watch::Receiver<u64> {
        self.durable_rv.subscribe()
    }

    /// Waits until every write up to `rv` is durable here, at most `timeout`; `false` when it
    /// did not come in time.
    pub async fn wait_durable(&self, rv: u64, timeout: std::time::Duration) -> bool {
        let mut durable = self.durable_rv.subscribe();
        tokio::time::timeout(timeout, durable.wait_for(|d| *d >= rv))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// From now on the store takes writes from the replicated log only.
    pub(crate) fn set_replicated(&self) {
        self.replicated.store(true, Ordering::SeqCst);
    }

    /// Whether writes come from the replicated log.
    pub fn is_replicated(&self) -> bool {
        self.replicated.load(Ordering::SeqCst)
    }

    /// Writes `pairs` into the data tree as one batch, beside no change of the data (what the
    /// replicated log applied up to, for an entry that changes nothing else).
    pub(crate) fn write_pairs(&self, pairs: &Extra) -> Result<()> {
        let _writer = self.lock_writer();
        let mut batch = sled::Batch::default();
        for (key, value) in pairs {
            batch.insert(key.as_slice(), value.as_slice());
        }
        self.tree()
            .apply_batch(batch)
            .map_err(|e| self.stopped(e.into()))
    }

    /// A value of the data tree (the replicated log's marks).
    pub(crate) fn read_pair(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tree().get(key)?.map(|v| v.to_vec()))
    }

    /// A tree of the same database beside the data (the replicated log's own).
    pub(crate) fn side_tree(&self, name: &str) -> Result<sled::Tree> {
        Ok(self.db.open_tree(name)?)
    }

    /// Replaces the whole content with what `fill` writes into a fresh tree, atomically (a
    /// crash leaves the old content or the new, crate::state_tree), then reloads everything
    /// kept in memory from it. Watches end (they resume, or relist, from the new history).
    pub(crate) fn replace_content(
        &self,
        fill: impl FnOnce(&sled::Tree) -> Result<()>,
    ) -> Result<()> {
        let mut writer = self.lock_writer();
        let old_name = self
            .state
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone();
        let (tree, name) = state_tree::create_next(&self.db, &old_name)?;
        if let Err(e) = fill(&tree) {
            let _ = self.db.drop_tree(&name);
            return Err(e);
        }
        if tree.get(keys::META_FORMAT)?.is_none() {
            tree.insert(keys::META_FORMAT, &FORMAT_VERSION.to_be_bytes())?;
        }
        self.flush_db()?;
        crate::failpoint::hit("content-filled");
        let loaded = Loaded::read(&tree)?;
        let rv = read_u64(&tree, keys::META_RV)?;
        // The durable mark must not promise more than either content until the switch is done:
        // a crash in between leaves one or the other, and each must open.
        self.mark.reset(rv.min(writer.rv))?;
        crate::failpoint::hit("content-mark-reset");
        state_tree::switch(&self.db, &name)?;
        crate::failpoint::hit("content-switched");
        self.mark.reset(rv)?;
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = (tree, name);
        *self.write_index() = loaded.index;
        {
            let mut outbox = self.lock_outbox();
            let capacity = outbox.capacity;
            *outbox = loaded.outbox;
            outbox.capacity = capacity;
            self.metrics.outbox_length.set(outbox.pending.len() as i64);
        }
        writer.next_id = loaded.next_id;
        writer.window = loaded.window;
        writer.rv = rv;
        writer.published = rv;
        let (events, _) = broadcast::channel(BROADCAST_CAPACITY);
        *self.events.write().unwrap_or_else(|p| p.into_inner()) = events;
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.durable_rv.send_replace(rv);
        drop(writer);
        state_tree::discard(&self.db, &old_name)?;
        self.update_gauges_with(rv);
        Ok(())
    }

    /// Calls `f` with every key and value of the data, in key order.
    pub(crate) fn for_each_pair(
        &self,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        for item in self.tree().iter() {
            let (key, value) = item?;
            f(&key, &value)?;
        }
        Ok(())
    }

    /// The I/O error the store stopped on, if it did.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn update_gauges(&self) {
        let rv = self.lock_writer().rv;
        self.update_gauges_with(rv);
    }

    pub(crate) fn update_gauges_with(&self, rv: u64) {
        let index = self.read_index();
        self.metrics.tasks.set(index.entries().count() as i64);
        self.metrics.stored_bytes.set(index.total_bytes() as i64);
        self.metrics.resource_version.set(rv as i64);
    }

    /// A copy of the index entries (for retention planning).
    pub(crate) fn index_snapshot(&self) -> Vec<Entry> {
        self.read_index().entries().cloned().collect()
    }

    fn frame(&self, key: &[u8]) -> Result<Option<Frame>> {
        match self.tree().get(key)? {
            Some(value) => Frame::parse(key, &value).map(Some),
            None => Ok(None),
        }
    }

    // ---- reads -------------------------------------------------------------------------

    /// The last resourceVersion handed out.
    pub fn resource_version(&self) -> u64 {
        self.lock_writer().rv
    }

    /// Every task incarnation, by id (oldest first), without touching report bodies.
    pub fn tasks(&self) -> Vec<TaskSummary> {
        self.read_index()
            .entries()
            .map(|e| e.summary.clone())
            .collect()
    }

    /// Every task incarnation with the resourceVersion the list is consistent with.
    pub fn tasks_at(&self) -> (Vec<TaskSummary>, u64) {
        let writer = self.lock_writer();
        (self.tasks(), writer.rv)
    }

    /// One incarnation.
    pub fn task(&self, id: IncarnationId) -> Option<TaskSummary> {
        self.read_index().get(id).map(|e| e.summary.clone())
    }

    /// The incarnations of a task name, oldest first.
    pub fn find(&self, kind: TaskKind, name: &str) -> Vec<TaskSummary> {
        let index = self.read_index();
        index
            .by_name(kind, name)
            .iter()
            .filter_map(|id| index.get(*id).map(|e| e.summary.clone()))
            .collect()
    }

    /// The incarnation of a task UID.
    pub fn by_uid(&self, uid: &str) -> Option<TaskSummary> {
        let index = self.read_index();
        index
            .by_uid(uid)
            .and_then(|id| index.get(id))
            .map(|e| e.summary.clone())
    }

    /// The stored task record (spec, status).
    pub fn task_record(&self, id: IncarnationId) -> Result<Option<TaskRecord>> {
        let key = keys::by_id(keys::TASK, id);
        match self.frame(&key)? {
            Some(frame) => Ok(Some(serde_json::from_slice(&codec::read_all(
                &self.tree(),
                &key,
                frame,
            )?)?)),
            None => Ok(None),
        }
    }

    /// The numbers of the stored rounds of a task, oldest first (from memory).
    pub fn round_numbers(&self, id: IncarnationId) -> Vec<u64> {
        self.read_index()
            .get(id)
            .map(|e| e.rounds.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Every stored round of a task, oldest first.
    pub fn rounds(&self, id: IncarnationId) -> Result<Vec<RoundInfo>> {
        let metas: Vec<(u64, RoundMeta)> = match self.read_index().get(id) {
            Some(entry) => entry.rounds.iter().map(|(r, m)| (*r, m.clone())).collect(),
            None => return Ok(vec![]),
        };
        metas
            .into_iter()
            .map(|(round, meta)| self.round_info(id, round, meta))
            .collect()
    }

    /// One stored round.
    pub fn round(&self, id: IncarnationId, round: u64) -> Result<Option<RoundInfo>> {
        let meta = self
            .read_index()
            .get(id)
            .and_then(|e| e.rounds.get(&round).cloned());
        meta.map(|meta| self.round_info(id, round, meta))
            .transpose()
    }

    fn round_info(&self, id: IncarnationId, round: u64, meta: RoundMeta) -> Result<RoundInfo> {
        let key = keys::by_round(keys::SUMMARY_OF_ROUND, id, round);
        let summary = match self.frame(&key)? {
            Some(frame) => Some(serde_json::from_slice(&codec::read_all(
                &self.tree(),
                &key,
                frame,
            )?)?),
            None => None,
        };
        Ok(RoundInfo {
            round,
            summary,
            reports: meta.reports,
            stored_bytes: meta.stored_bytes,
            stored_at: meta.stored_at,
        })
    }

    /// The reports of a round, without their bodies, by node name.
    pub fn reports(&self, id: IncarnationId, round: u64) -> Result<Vec<ReportMeta>> {
        self.tree()
            .scan_prefix(keys::by_round(keys::HEADER, id, round))
            .map(|item| {
                let (_, value) = item?;
                Ok(serde_json::from_slice::<ReportHeader>(&value)?.meta)
            })
            .collect()
    }

    /// A stream of one report's JSON, read chunk by chunk (memory does not grow with size).
    pub fn report_reader(
        &self,
        id: IncarnationId,
        round: u64,
        node: &str,
    ) -> Result<Option<Box<dyn Read + '_>>> {
        let key = keys::by_node(keys::BODY, id, round, node);
        match self.frame(&key)? {
            Some(frame) => Ok(Some(self.split_body(&key, frame)?.1)),
            None => Ok(None),
        }
    }

    /// One report's JSON, exactly as stored.
    pub fn report_json(
        &self,
        id: IncarnationId,
        round: u64,
        node: &str,
    ) -> Result<Option<Vec<u8>>> {
        let key = keys::by_node(keys::BODY, id, round, node);
        match self.frame(&key)? {
            Some(frame) => {
                let mut plain = codec::read_all(&self.tree(), &key, frame)?;
                plain.drain(..body::json_start(&plain));
                Ok(Some(plain))
            }
            None => Ok(None),
        }
    }

    /// Calls `f` with each probe row of a NetReach round (what a connectivity matrix needs of
    /// each report), in node order, one row in memory at a time, without parsing report JSON (a
    /// report stored before rows were kept is parsed instead).
    pub fn for_each_probe_row(
        &self,
        id: IncarnationId,
        round: u64,
        mut f: impl FnMut(ProbeRow),
    ) -> Result<()> {
        for meta in self.reports(id, round)? {
            if let Some(row) = self.probe_row(id, round, &meta.node, probes::decode, |r| r)? {
                f(row);
            }
        }
        Ok(())
    }

    /// The source (node, agent pod) of each probe row of a round, in node order.
    pub fn probe_row_sources(
        &self,
        id: IncarnationId,
        round: u64,
    ) -> Result<Vec<(String, String)>> {
        let mut sources = Vec::new();
        for meta in self.reports(id, round)? {
            sources.extend(
                self.probe_row(id, round, &meta.node, probes::decode_source, |r| {
                    (r.node, r.pod)
                })?,
            );
        }
        Ok(sources)
    }

    /// A body's probe row (if any) and a reader of its JSON.
    fn split_body(&self, key: &[u8], frame: Frame) -> Result<body::Split<'_>> {
        body::split(codec::reader(self.tree(), key, frame)?).map_err(|e| StoreError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            reason: format!("the front of a report body: {e}"),
        })
    }

    /// Reads the front of a report body: its probe row decoded by `decode`, or, for a report
    /// stored without one (by an earlier version), `convert` of the parsed JSON's row.
    fn probe_row<T>(
        &self,
        id: IncarnationId,
        round: u64,
        node: &str,
        decode: impl Fn(&[u8]) -> Option<T>,
        convert: impl Fn(ProbeRow) -> T,
    ) -> Result<Option<T>> {
        let key = keys::by_node(keys::BODY, id, round, node);
        let Some(frame) = self.frame(&key)? else {
            return Ok(None);
        };
        let (row, json) = self.split_body(&key, frame)?;
        if let Some(decoded) = row.as_deref().and_then(&decode) {
            return Ok(Some(decoded));
        }
        let report: Report = serde_json::from_reader(std::io::BufReader::new(json))?;
        Ok(ProbeRow::of(&report).map(convert))
    }

    /// One report.
    pub fn report(&self, id: IncarnationId, round: u64, node: &str) -> Result<Option<Report>> {
        match self.report_json(id, round, node)? {
            Some(json) => Ok(Some(serde_json::from_slice(&json)?)),
            None => Ok(None),
        }
    }

    /// Watches changes after `after` (a resourceVersion), or from now.
    pub fn subscribe(&self, after: Option<u64>) -> Result<Subscription, WatchError> {
        let writer = self.lock_writer();
        let live = self
            .events
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .subscribe();
        let Some(after) = after else {
            return Ok(Subscription {
                backlog: vec![],
                live,
            });
        };
        // The oldest version a watcher can resume from: one before the oldest kept event, or
        // the current version when none is kept.
        let oldest = writer
            .window
            .front()
            .map_or(writer.rv, |e| e.resource_version - 1);
        // A version from the future (e.g. writes lost in a crash) is as unusable as a stale one.
        if after < oldest || after > writer.rv {
            return Err(WatchError::TooOld {
                requested: after,
                oldest,
            });
        }
        // Events not yet durable come live, once their flush publishes them.
        let backlog = writer
            .window
            .iter()
            .filter(|e| e.resource_version > after && e.resource_version <= writer.published)
            .cloned()
            .collect();
        Ok(Subscription { backlog, live })
    }

    /// Totals.
    pub fn stats(&self) -> Result<Stats> {
        let writer = self.lock_writer();
        let index = self.read_index();
        let mut stats = Stats {
            resource_version: writer.rv,
            ..Stats::default()
        };
        for entry in index.entries() {
            stats.tasks += 1;
            stats.deleted_tasks += u64::from(entry.summary.deleted.is_some());
            stats.rounds += entry.summary.rounds;
            stats.reports += entry.summary.reports;
            stats.stored_bytes += entry.summary.stored_bytes;
        }
        stats.disk_bytes = self.db.size_on_disk()?;
        Ok(stats)
    }
}

fn open_db(config: &StoreConfig) -> Result<sled::Db> {
    sled::Config::new()
        .path(config.path.join("db"))
        .cache_capacity(config.cache_capacity)
        .mode(sled::Mode::LowSpace)
        .open()
        .map_err(|e| StoreError::Open {
            path: config.path.clone(),
            reason: e.to_string(),
        })
}

/// What [`Store::repair`] found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    /// The resourceVersion the database held.
    pub found: u64,
    /// The durable mark, when readable.
    pub promised: Option<u64>,
    /// Where resourceVersions continue from now (never below what clients were shown).
    pub continues_from: u64,
}

impl Store {
    /// Accepts a store that lost acknowledged writes (see [`StoreError::LostWrites`]) or whose
    /// durable mark is damaged: the data stays as it is, the resourceVersion jumps to the mark
    /// so that no client sees versions go backwards, and the mark is rewritten.
    pub fn repair(config: &StoreConfig) -> Result<Repair> {
        let _lock = LockFile::acquire(&config.path)?;
        let db = open_db(config)?;
        let found = db
            .get(keys::META_RV)?
            .and_then(|v| keys::u64_at(&v, 0))
            .unwrap_or(0);
        let promised = match durable::read(&config.path) {
            Ok(mark) => mark,
            Err(e) => {
                tracing::warn!(error = %e, "the durable mark is rewritten");
                None
            }
        };
        let continues_from = found.max(promised.unwrap_or(0));
        if continues_from > found {
            db.insert(keys::META_RV, &continues_from.to_be_bytes())?;
            db.flush()?;
        }
        DurableMark::open(&config.path, continues_from)?;
        Ok(Repair {
            found,
            promised,
            continues_from,
        })
    }
}

fn read_u64(db: &sled::Tree, key: &[u8]) -> Result<u64> {
    Ok(db.get(key)?.and_then(|v| keys::u64_at(&v, 0)).unwrap_or(0))
}

/// A command answered with what another command answers: a defect of this crate.
pub(crate) fn unexpected(applied: &Applied) -> StoreError {
    StoreError::Invalid(format!("the store answered a write with {applied:?}"))
}

/// What the store keeps in memory, read from the database (at open, and after a replica
/// installed a snapshot).
pub(crate) struct Loaded {
    pub(crate) next_id: u64,
    pub(crate) index: Index,
    pub(crate) window: VecDeque<Event>,
    pub(crate) outbox: OutboxState,
}

impl Loaded {
    pub(crate) fn read(db: &sled::Tree) -> Result<Loaded> {
        let mut window = VecDeque::new();
        for item in db.scan_prefix([keys::EVENT]) {
            let (_, value) = item?;
            window.push_back(serde_json::from_slice::<Event>(&value)?);
        }
        let mut pending = Vec::new();
        for item in db.scan_prefix([keys::OUTBOX]) {
            let (key, value) = item?;
            let mut entry: Pending = serde_json::from_slice(&value)?;
            entry.seq = keys::u64_at(&key, 1).unwrap_or_default();
            pending.push(entry);
        }
        Ok(Loaded {
            next_id: read_u64(db, keys::META_ID)?,
            index: load_index(db)?,
            window,
            outbox: OutboxState::load(pending, read_u64(db, keys::META_OUTBOX_SEQ)?),
        })
    }
}

/// Rebuilds the in-memory index from task summaries and round records.
fn load_index(db: &sled::Tree) -> Result<Index> {
    let mut index = Index::default();
    for item in db.scan_prefix([keys::SUMMARY]) {
        let (key, value) = item?;
        index.insert(entry_of(db, &key, &value)?);
    }
    Ok(index)
}

/// The index entry of the task whose summary is `value` at `key`.
pub(crate) fn entry_of(db: &sled::Tree, key: &[u8], value: &[u8]) -> Result<Entry> {
    let summary: TaskSummary =
        serde_json::from_slice(value).map_err(|e| StoreError::corrupt(key, &e.to_string()))?;
    let record_bytes = read_u64(db, &keys::by_id(keys::RECORD_BYTES, summary.id))?;
    let mut entry = Entry {
        summary,
        record_bytes,
        rounds: Default::default(),
    };
    for round in db.scan_prefix(keys::by_id(keys::ROUND, entry.summary.id)) {
        let (key, value) = round?;
        let number =
            keys::u64_at(&key, 9).ok_or_else(|| StoreError::corrupt(&key, "short round key"))?;
        let meta: RoundMeta = serde_json::from_slice(&value)
            .map_err(|e| StoreError::corrupt(&key, &e.to_string()))?;
        entry.rounds.insert(number, meta);
    }
    entry.refresh();
    Ok(entry)
}
