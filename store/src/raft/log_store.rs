//! The replicated log on sled: one tree of the store's own database (so one flush makes the
//! log and the applied data durable together). Entries are JSON, zstd-compressed and chunked
//! like every other large value of the store (crate::codec), so no value outgrows sled's
//! comfortable size however large a batch of reports is.
//!
//! | key | value |
//! |---|---|
//! | `e` index | one entry (framed) |
//! | `x` … | chunks of large entries |
//! | `mvote` | the vote (JSON) |
//! | `mcommitted` | the last committed log id (JSON) |
//! | `mpurged` | the last purged log id (JSON) |
//! | `mid` | this replica's node id |

// openraft's storage traits return its `StorageError` (over 200 bytes); the helpers here
// return what the traits do rather than box it twice.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    AnyError, Entry, LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote,
};

use super::{NodeId, TypeConfig};
use crate::codec::{self, Frame};
use crate::store::Store;

/// Name of the log's tree.
const TREE: &str = "raft-log";
const ENTRY: u8 = b'e';
const VOTE: &[u8] = b"mvote";
const COMMITTED: &[u8] = b"mcommitted";
const PURGED: &[u8] = b"mpurged";
const ID: &[u8] = b"mid";

fn entry_key(index: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(9);
    key.push(ENTRY);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

fn index_of(key: &[u8]) -> Option<u64> {
    key.strip_prefix(&[ENTRY])
        .and_then(|rest| rest.try_into().ok())
        .map(u64::from_be_bytes)
}

type Error = StorageError<NodeId>;

fn read_error(e: impl std::error::Error + 'static) -> Error {
    StorageError::from(StorageIOError::read_logs(AnyError::new(&e)))
}

fn write_error(e: impl std::error::Error + 'static) -> Error {
    StorageError::from(StorageIOError::write_logs(AnyError::new(&e)))
}

/// The log of one replica. Clones share the tree (the reader openraft asks for is a clone).
#[derive(Clone)]
pub struct LogStore {
    store: Arc<Store>,
    tree: sled::Tree,
    /// Bytes of entries appended since the last purge (when to compact, crate::raft::replica).
    appended: Arc<AtomicU64>,
    /// The last purge of this process (the mark on disk may be behind it, see `purge`).
    purged: Arc<Mutex<Option<LogId<NodeId>>>>,
}

impl LogStore {
    /// The log kept beside `store`'s data.
    pub fn open(store: Arc<Store>) -> crate::Result<LogStore> {
        let tree = store.side_tree(TREE)?;
        Ok(LogStore {
            store,
            tree,
            appended: Arc::new(AtomicU64::new(0)),
            purged: Arc::default(),
        })
    }

    /// This replica's node id, minted by `mint` the first time (a new volume is a new node:
    /// one that lost its log must never vote as the node it was).
    pub fn node_id(&self, mint: impl FnOnce() -> NodeId) -> crate::Result<NodeId> {
        if let Some(id) = self.tree.get(ID)?.and_then(|v| crate::keys::u64_at(&v, 0)) {
            return Ok(id);
        }
        let id = mint();
        self.tree.insert(ID, &id.to_be_bytes())?;
        self.store.flush_db()?;
        Ok(id)
    }

    /// Whether this replica ever took part in a cluster (it has a vote or a log).
    pub fn is_initialized(&self) -> crate::Result<bool> {
        Ok(self.tree.get(VOTE)?.is_some()
            || self.tree.get(PURGED)?.is_some()
            || self.last_entry_key()?.is_some())
    }

    /// Bytes appended since the log was last compacted.
    pub fn appended_bytes(&self) -> u64 {
        self.appended.load(Ordering::Relaxed)
    }

    fn last_entry_key(&self) -> crate::Result<Option<u64>> {
        Ok(self
            .tree
            .scan_prefix([ENTRY])
            .keys()
            .next_back()
            .transpose()?
            .and_then(|k| index_of(&k)))
    }

    fn get_json<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, Error> {
        match self.tree.get(key).map_err(read_error)? {
            Some(value) => serde_json::from_slice(&value).map(Some).map_err(read_error),
            None => Ok(None),
        }
    }

    fn entry(&self, key: &[u8], value: &[u8]) -> Result<Entry<TypeConfig>, Error> {
        let frame = Frame::parse(key, value).map_err(read_error)?;
        let plain = codec::read_all(&self.tree, key, frame).map_err(read_error)?;
        serde_json::from_slice(&plain).map_err(read_error)
    }

    /// Removes the entries in `range` (and their chunks) in one batch.
    fn remove(
        &self,
        range: impl RangeBounds<Vec<u8>>,
        batch: &mut sled::Batch,
    ) -> Result<(), Error> {
        for item in self.tree.range(range) {
            let (key, value) = item.map_err(read_error)?;
            let frame = Frame::parse(&key, &value).map_err(read_error)?;
            for k in codec::keys_of(&key, &frame) {
                batch.remove(k);
            }
        }
        Ok(())
    }

    async fn flush(&self) -> Result<(), Error> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.flush_db())
            .await
            .map_err(write_error)?
            .map_err(write_error)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, Error> {
        let start = match range.start_bound() {
            Bound::Included(i) => entry_key(*i),
            Bound::Excluded(i) => entry_key(i.saturating_add(1)),
            Bound::Unbounded => vec![ENTRY],
        };
        let end = match range.end_bound() {
            Bound::Included(i) => Bound::Included(entry_key(*i)),
            Bound::Excluded(i) => Bound::Excluded(entry_key(*i)),
            Bound::Unbounded => Bound::Excluded(vec![ENTRY + 1]),
        };
        let mut entries = Vec::new();
        for item in self.tree.range((Bound::Included(start), end)) {
            let (key, value) = item.map_err(read_error)?;
            entries.push(self.entry(&key, &value)?);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, Error> {
        let in_memory = *self.purged.lock().unwrap_or_else(|p| p.into_inner());
        let purged: Option<LogId<NodeId>> = match in_memory {
            Some(purged) => Some(purged),
            None => self.get_json(PURGED)?,
        };
        let last = match self
            .tree
            .scan_prefix([ENTRY])
            .next_back()
            .transpose()
            .map_err(read_error)?
        {
            Some((key, value)) => Some(self.entry(&key, &value)?.log_id),
            None => purged,
        };
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), Error> {
        let json = serde_json::to_vec(vote)
            .map_err(|e| StorageError::from(StorageIOError::write_vote(AnyError::new(&e))))?;
        self.tree
            .insert(VOTE, json)
            .map_err(|e| StorageError::from(StorageIOError::write_vote(AnyError::new(&e))))?;
        // A vote must survive a crash: a replica that forgot it could vote twice in a term.
        self.flush().await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, Error> {
        self.get_json(VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), Error> {
        // Not flushed on its own: it only saves re-applying after a restart.
        let json = serde_json::to_vec(&committed).map_err(write_error)?;
        self.tree.insert(COMMITTED, json).map_err(write_error)?;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, Error> {
        Ok(self.get_json::<Option<LogId<NodeId>>>(COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), Error>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = sled::Batch::default();
        let mut bytes = 0u64;
        for entry in entries {
            let key = entry_key(entry.log_id.index);
            let json = serde_json::to_vec(&entry).map_err(write_error)?;
            // A truncated index written again may have had chunks of its own.
            let old = match self.tree.get(&key).map_err(read_error)? {
                Some(value) => Some(Frame::parse(&key, &value).map_err(read_error)?),
                None => None,
            };
            let encoded = codec::encode(&key, &json, old.as_ref()).map_err(write_error)?;
            bytes += encoded.stored_bytes;
            for (k, v) in encoded.inserts {
                batch.insert(k, v);
            }
            for k in encoded.removes {
                batch.remove(k);
            }
        }
        self.tree.apply_batch(batch).map_err(write_error)?;
        let flushed = self.flush().await;
        self.appended.fetch_add(bytes, Ordering::Relaxed);
        callback.log_io_completed(flushed.clone().map_err(std::io::Error::other));
        flushed
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), Error> {
        let mut batch = sled::Batch::default();
        self.remove(entry_key(log_id.index)..vec![ENTRY + 1], &mut batch)?;
        self.tree.apply_batch(batch).map_err(write_error)?;
        self.flush().await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), Error> {
        // openraft purges right after it hands a received snapshot to the state machine, while
        // the install may still be under way. Should the process die before the install is
        // done, the log on disk must not say it was cut beyond what the store holds (openraft
        // would refuse to start): the marks written here never pass the store's own applied
        // mark; the cut in memory is openraft's. At the next start the store is where it was,
        // with an empty log, and takes the snapshot again.
        let applied: Option<LogId<NodeId>> = match self
            .store
            .read_pair(crate::keys::META_RAFT_APPLIED)
            .map_err(read_error)?
        {
            Some(value) => serde_json::from_slice(&value).map_err(read_error)?,
            None => None,
        };
        let mut batch = sled::Batch::default();
        if applied.is_some_and(|a| a.index >= log_id.index) {
            batch.insert(PURGED, serde_json::to_vec(&log_id).map_err(write_error)?);
        } else {
            match applied {
                Some(applied) => {
                    batch.insert(PURGED, serde_json::to_vec(&applied).map_err(write_error)?);
                }
                None => batch.remove(PURGED),
            }
            let committed: Option<LogId<NodeId>> =
                self.get_json::<Option<LogId<NodeId>>>(COMMITTED)?.flatten();
            if committed > applied {
                batch.insert(
                    COMMITTED,
                    serde_json::to_vec(&applied).map_err(write_error)?,
                );
            }
        }
        self.remove(vec![ENTRY]..=entry_key(log_id.index), &mut batch)?;
        self.tree.apply_batch(batch).map_err(write_error)?;
        *self.purged.lock().unwrap_or_else(|p| p.into_inner()) = Some(log_id);
        self.appended.store(0, Ordering::Relaxed);
        Ok(())
    }
}
