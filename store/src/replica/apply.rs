//! The follower's side: applying the leader's records and loading its snapshot. Each record is
//! applied as one sled batch and flushed before the next is asked for (asking for the next is
//! the acknowledgement), then the in-memory index, change window and export outbox follow from
//! the keys the record touched, and the change events go to this replica's watchers.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use tokio::sync::broadcast;

use super::log::{Op, Position, Record, ReplicaLog};
use crate::error::{Result, StoreError};
use crate::keys;
use crate::model::{Event, IncarnationId};
use crate::outbox::{Admission, Pending};
use crate::store::{Loaded, REPLICATION_WINDOW_BYTES, Store, entry_of};

/// Keys written per batch while a snapshot loads.
const SNAPSHOT_BATCH: usize = 1024;

impl Store {
    /// From now on this store takes writes only from the leader ([`Store::apply_record`]).
    pub fn follow(&self) {
        self.following.store(true, Ordering::SeqCst);
    }

    /// From now on this store writes on its own, as the leader, under a new term, keeping its
    /// recent history for followers.
    pub fn lead(&self) {
        let mut writer = self.lock_writer();
        let base = writer.log.last_published();
        writer.log = ReplicaLog::new(base, crate::store::new_term(), REPLICATION_WINDOW_BYTES);
        self.following.store(false, Ordering::SeqCst);
        tracing::info!(resource_version = base.rv, "the store leads");
    }

    /// Whether this store follows a leader.
    pub fn is_following(&self) -> bool {
        self.following.load(Ordering::SeqCst)
    }

    /// Where this store's history ends (what a follower asks the leader to continue after).
    pub fn position(&self) -> Position {
        self.lock_writer().log.last_published()
    }

    /// Applies one of the leader's records; a record already applied changes nothing.
    pub fn apply_record(&self, record: &Record) -> Result<()> {
        let mut writer = self.lock_writer();
        if !self.is_following() {
            return Err(StoreError::Replication(
                "this store leads; it does not apply another's records".into(),
            ));
        }
        if record.rv <= writer.rv {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        let mut tasks = BTreeSet::new();
        let mut added: Vec<Event> = Vec::new();
        let mut expired = BTreeSet::new();
        let mut outbox = Admission::default();
        let mut delivered = Vec::new();
        let mut next_id = None;
        for op in &record.ops {
            let key = op.key();
            match op {
                Op::Put(k, v) => batch.insert(k.as_slice(), v.as_slice()),
                Op::Remove(k) => batch.remove(k.as_slice()),
            }
            match (key.first().copied(), op) {
                (Some(keys::SUMMARY | keys::RECORD_BYTES | keys::ROUND), _) => {
                    if let Some(id) = keys::u64_at(key, 1) {
                        tasks.insert(IncarnationId(id));
                    }
                }
                (Some(keys::EVENT), Op::Put(_, value)) => added.push(
                    serde_json::from_slice(value)
                        .map_err(|e| StoreError::corrupt(key, &e.to_string()))?,
                ),
                (Some(keys::EVENT), Op::Remove(_)) => {
                    expired.extend(keys::u64_at(key, 1));
                }
                (Some(keys::OUTBOX), Op::Put(_, value)) => {
                    let mut entry: Pending = serde_json::from_slice(value)
                        .map_err(|e| StoreError::corrupt(key, &e.to_string()))?;
                    entry.seq = keys::u64_at(key, 1).unwrap_or_default();
                    outbox.added.push(entry);
                }
                (Some(keys::OUTBOX), Op::Remove(_)) => delivered.extend(keys::u64_at(key, 1)),
                (_, Op::Put(_, value)) if key == keys::META_ID => {
                    next_id = keys::u64_at(value, 0);
                }
                _ => {}
            }
        }
        batch.insert(keys::META_RV, &record.rv.to_be_bytes());
        batch.insert(keys::META_TERM, &record.term.to_be_bytes());
        self.tree().apply_batch(batch)?;

        {
            let mut index = self.write_index();
            for id in tasks {
                let key = keys::by_id(keys::SUMMARY, id);
                match self.tree().get(&key)? {
                    Some(value) => index.insert(entry_of(&self.tree(), &key, &value)?),
                    None => {
                        index.remove(id);
                    }
                }
            }
        }
        writer
            .window
            .retain(|e| !expired.contains(&e.resource_version));
        added.sort_by_key(|e| e.resource_version);
        writer.window.extend(added);
        {
            let mut state = self.outbox.lock().unwrap_or_else(|p| p.into_inner());
            outbox.evicted = delivered;
            state.apply(&outbox);
            self.metrics.outbox_length.set(state.pending.len() as i64);
        }
        if let Some(id) = next_id {
            writer.next_id = id;
        }
        writer.rv = record.rv;
        writer.log.rebase(record.position());
        self.db.flush()?;
        self.mark.advance(record.rv)?;
        self.publish(&mut writer, record.rv);
        self.update_gauges_with(record.rv);
        Ok(())
    }

    /// Starts replacing everything in this follower with the leader's snapshot taken at `at`.
    /// Watches of this replica end when it is loaded (they resume, or relist, from the new
    /// history).
    pub fn load_snapshot(&self, at: Position) -> Result<SnapshotLoader<'_>> {
        if !self.is_following() {
            return Err(StoreError::Replication(
                "this store leads; it does not load another's snapshot".into(),
            ));
        }
        self.tree().clear()?;
        Ok(SnapshotLoader {
            store: self,
            at,
            batch: sled::Batch::default(),
            in_batch: 0,
            pairs: 0,
        })
    }
}

/// A snapshot being loaded; [`SnapshotLoader::finish`] makes it the store's content.
pub struct SnapshotLoader<'a> {
    store: &'a Store,
    at: Position,
    batch: sled::Batch,
    in_batch: usize,
    pairs: u64,
}

impl SnapshotLoader<'_> {
    /// One key of the snapshot.
    pub fn pair(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.batch.insert(key, value);
        self.in_batch += 1;
        self.pairs += 1;
        if self.in_batch >= SNAPSHOT_BATCH {
            self.store
                .tree()
                .apply_batch(std::mem::take(&mut self.batch))?;
            self.in_batch = 0;
        }
        Ok(())
    }

    /// The snapshot ended after `pairs` keys: checks the count, makes it durable and reloads
    /// the in-memory state from it.
    pub fn finish(mut self, pairs: u64) -> Result<Position> {
        if pairs != self.pairs {
            return Err(StoreError::Replication(format!(
                "the snapshot announced {pairs} keys but carried {}",
                self.pairs
            )));
        }
        let store = self.store;
        let at = self.at;
        self.batch.insert(keys::META_RV, &at.rv.to_be_bytes());
        self.batch.insert(keys::META_TERM, &at.term.to_be_bytes());
        store.tree().apply_batch(std::mem::take(&mut self.batch))?;
        store.db.flush()?;
        let loaded = Loaded::read(&store.tree())?;
        let mut writer = store.lock_writer();
        *store.write_index() = loaded.index;
        {
            let mut outbox = store.outbox.lock().unwrap_or_else(|p| p.into_inner());
            let capacity = outbox.capacity;
            *outbox = loaded.outbox;
            outbox.capacity = capacity;
            store.metrics.outbox_length.set(outbox.pending.len() as i64);
        }
        writer.next_id = loaded.next_id;
        writer.window = loaded.window;
        writer.rv = at.rv;
        writer.published = at.rv;
        writer.log.rebase(at);
        store.mark.reset(at.rv)?;
        let (events, _) = broadcast::channel(crate::store::BROADCAST_CAPACITY);
        *store.events.write().unwrap_or_else(|p| p.into_inner()) = events;
        store.generation.fetch_add(1, Ordering::SeqCst);
        store.durable_rv.send_replace(at.rv);
        store.update_gauges_with(at.rv);
        tracing::info!(
            resource_version = at.rv,
            keys = pairs,
            "snapshot of the leader's store loaded"
        );
        Ok(at)
    }
}
