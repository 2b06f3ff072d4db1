//! The state machine: the store itself. A committed entry's command is applied in one sled
//! batch together with the entry's log id, so that after a crash the store says exactly which
//! entries it holds and the log replays the rest; a batch of entries is flushed before the
//! changes are published to watchers. Snapshots are files of the whole data (super::snapshot).

// openraft's storage traits return its `StorageError` (over 200 bytes); the helpers here
// return what the traits do rather than box it twice.
#![allow(clippy::result_large_err)]

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, Entry, EntryPayload, LogId, RaftSnapshotBuilder, StorageError, StorageIOError,
    StoredMembership,
};

use super::snapshot::{self, Meta};
use super::{Member, NodeId, TypeConfig};
use crate::command::Applied;
use crate::error::StoreError;
use crate::keys;
use crate::store::Store;

/// The snapshot a replica keeps, in its snapshot directory.
const CURRENT: &str = "current.snap";
/// Prefix of snapshots being received.
const INCOMING: &str = "incoming-";

type Error = StorageError<NodeId>;
type Membership = StoredMembership<NodeId, Member>;

fn sm_error(e: impl std::error::Error + 'static) -> Error {
    StorageError::from(StorageIOError::write_state_machine(AnyError::new(&e)))
}

fn snapshot_error(e: impl std::error::Error + 'static) -> Error {
    StorageError::from(StorageIOError::read_snapshot(None, AnyError::new(&e)))
}

/// What the state machine and its snapshot builders share.
pub(crate) struct Shared {
    store: Arc<Store>,
    /// The last applied entry and membership (also in the store, with the data).
    applied: RwLock<(Option<LogId<NodeId>>, Membership)>,
    /// Held while entries are applied, and while a snapshot is taken (so that it is the data at
    /// exactly its log position) or installed.
    gate: tokio::sync::Mutex<()>,
    dir: PathBuf,
    /// Where the snapshot being received is written.
    incoming: std::sync::Mutex<Option<PathBuf>>,
}

impl Shared {
    /// The last applied log id.
    pub(crate) fn applied(&self) -> Option<LogId<NodeId>> {
        self.applied.read().unwrap_or_else(|p| p.into_inner()).0
    }
}

/// The state machine of one replica.
pub struct StateMachine {
    shared: Arc<Shared>,
}

fn read_json<T: serde::de::DeserializeOwned>(
    store: &Store,
    key: &[u8],
) -> crate::Result<Option<T>> {
    match store.read_pair(key)? {
        Some(value) => Ok(Some(serde_json::from_slice(&value)?)),
        None => Ok(None),
    }
}

impl StateMachine {
    /// The state machine over `store`, its snapshots in `<store>/raft-snapshots`.
    pub fn open(store: Arc<Store>) -> crate::Result<StateMachine> {
        let dir = store.path().join("raft-snapshots");
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::Io {
            path: dir.clone(),
            source,
        })?;
        // Snapshots whose receiving a crash interrupted.
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with(INCOMING) || name.ends_with(".tmp") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        let applied = read_json(&store, keys::META_RAFT_APPLIED)?;
        let membership = read_json(&store, keys::META_RAFT_MEMBERSHIP)?.unwrap_or_default();
        Ok(StateMachine {
            shared: Arc::new(Shared {
                store,
                applied: RwLock::new((applied, membership)),
                gate: tokio::sync::Mutex::new(()),
                dir,
                incoming: std::sync::Mutex::new(None),
            }),
        })
    }

    /// What the replica's other parts read of it.
    pub(crate) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }
}

fn json(value: &impl serde::Serialize) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(value).map_err(sm_error)
}

/// Applies `entries` to the store (blocking: compression and sled).
fn apply_blocking(shared: &Shared, entries: Vec<Entry<TypeConfig>>) -> Result<Vec<Applied>, Error> {
    let store = &shared.store;
    let (mut applied, mut membership) = shared
        .applied
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut responses = Vec::with_capacity(entries.len());
    for entry in entries {
        let id = entry.log_id;
        let mut extra = vec![(keys::META_RAFT_APPLIED.to_vec(), json(&id)?)];
        let response = match entry.payload {
            // Nothing to keep: re-applied after a crash, it changes nothing either.
            EntryPayload::Blank => Applied::Done,
            EntryPayload::Normal(command) => {
                store.apply_command(&command, &extra).map_err(|e| {
                    StorageError::from(StorageIOError::apply(id, AnyError::new(&store.stopped(e))))
                })?
            }
            EntryPayload::Membership(members) => {
                membership = StoredMembership::new(Some(id), members);
                extra.push((keys::META_RAFT_MEMBERSHIP.to_vec(), json(&membership)?));
                store.write_pairs(&extra).map_err(|e| {
                    StorageError::from(StorageIOError::apply(id, AnyError::new(&e)))
                })?;
                Applied::Done
            }
        };
        applied = Some(id);
        responses.push(response);
    }
    // Durable before anyone is told (watchers, the writer's caller).
    store.flush().map_err(|e| sm_error(store.stopped(e)))?;
    *shared.applied.write().unwrap_or_else(|p| p.into_inner()) = (applied, membership);
    Ok(responses)
}

async fn open_snapshot(path: PathBuf) -> Result<Option<Snapshot<TypeConfig>>, Error> {
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(snapshot_error(e)),
    };
    let meta = snapshot::read_meta(&file).map_err(snapshot_error)?;
    let mut file = tokio::fs::File::from_std(file);
    use tokio::io::AsyncSeekExt;
    file.seek(std::io::SeekFrom::Start(0))
        .await
        .map_err(snapshot_error)?;
    Ok(Some(Snapshot {
        meta,
        snapshot: Box::new(file),
    }))
}

/// Takes snapshots of the store.
pub struct Builder {
    shared: Arc<Shared>,
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, Error> {
        let shared = self.shared.clone();
        let _gate = shared.gate.lock().await;
        let path = shared.dir.join(CURRENT);
        let writer = shared.clone();
        let meta = tokio::task::spawn_blocking(move || -> Result<Meta, Error> {
            let (last_log_id, last_membership) = writer
                .applied
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let meta = Meta {
                snapshot_id: format!(
                    "{}-{}",
                    last_log_id.map_or(0, |l| l.index),
                    jiff::Timestamp::now().as_nanosecond()
                ),
                last_log_id,
                last_membership,
            };
            writer.store.flush().map_err(sm_error)?;
            let pairs = snapshot::write(&writer.store, &meta, &writer.dir.join(CURRENT))
                .map_err(|e| StorageError::from(StorageIOError::write_snapshot(Some(meta.signature()), AnyError::new(&e))))?;
            tracing::info!(snapshot = %meta.snapshot_id, keys = pairs, "snapshot of the store taken");
            Ok(meta)
        })
        .await
        .map_err(sm_error)??;
        match open_snapshot(path).await? {
            Some(snapshot) if snapshot.meta == meta => Ok(snapshot),
            _ => Err(snapshot_error(std::io::Error::other(
                "the snapshot just taken is not there",
            ))),
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Builder;

    async fn applied_state(&mut self) -> Result<(Option<LogId<NodeId>>, Membership), Error> {
        Ok(self
            .shared
            .applied
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone())
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, Error>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let shared = self.shared.clone();
        let _gate = shared.gate.lock().await;
        let worker = shared.clone();
        tokio::task::spawn_blocking(move || apply_blocking(&worker, entries))
            .await
            .map_err(sm_error)?
    }

    async fn get_snapshot_builder(&mut self) -> Builder {
        Builder {
            shared: self.shared.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<tokio::fs::File>, Error> {
        let path = self.shared.dir.join(format!(
            "{INCOMING}{}",
            jiff::Timestamp::now().as_nanosecond()
        ));
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .await
            .map_err(|e| {
                StorageError::from(StorageIOError::write_snapshot(None, AnyError::new(&e)))
            })?;
        *self
            .shared
            .incoming
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(path);
        Ok(Box::new(file))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<tokio::fs::File>,
    ) -> Result<(), Error> {
        let shared = self.shared.clone();
        let _gate = shared.gate.lock().await;
        let mut file = snapshot.into_std().await;
        let expected = meta.clone();
        let worker = shared.clone();
        tokio::task::spawn_blocking(move || -> Result<(), Error> {
            let fail = |e: StoreError| StorageError::from(StorageIOError::write_snapshot(Some(expected.signature()), AnyError::new(&e)));
            use std::io::{Seek, Write};
            file.flush().map_err(|e| fail(e.into_store_error()))?;
            file.sync_all().map_err(|e| fail(e.into_store_error()))?;
            file.seek(std::io::SeekFrom::Start(0))
                .map_err(|e| fail(e.into_store_error()))?;
            let mut loaded = None;
            worker
                .store
                .replace_content(|tree| {
                    let meta = snapshot::load(&mut file, tree)?;
                    if meta.last_log_id != expected.last_log_id {
                        return Err(StoreError::Replication(format!(
                            "the snapshot received is at {:?}, announced at {:?}",
                            meta.last_log_id, expected.last_log_id
                        )));
                    }
                    // The data's own marks may be older than the snapshot's position.
                    tree.insert(keys::META_RAFT_APPLIED, serde_json::to_vec(&meta.last_log_id)?)?;
                    tree.insert(keys::META_RAFT_MEMBERSHIP, serde_json::to_vec(&meta.last_membership)?)?;
                    loaded = Some(meta);
                    Ok(())
                })
                .map_err(fail)?;
            let meta = loaded.ok_or_else(|| fail(StoreError::Replication("snapshot not loaded".into())))?;
            crate::failpoint::hit("snapshot-installed");
            // Kept as this replica's snapshot, to send on and to cut the log at: copied from
            // what was read (the file received is not necessarily the one this replica made).
            file.seek(std::io::SeekFrom::Start(0))
                .map_err(|e| fail(e.into_store_error()))?;
            keep(&mut file, &worker.dir.join(CURRENT)).map_err(|e| fail(e.into_store_error()))?;
            if let Some(path) = worker
                .incoming
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
            {
                let _ = std::fs::remove_file(path);
            }
            tracing::info!(snapshot = %meta.snapshot_id, last_log_id = ?meta.last_log_id, "snapshot installed");
            *worker.applied.write().unwrap_or_else(|p| p.into_inner()) =
                (meta.last_log_id, meta.last_membership);
            Ok(())
        })
        .await
        .map_err(sm_error)?
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, Error> {
        open_snapshot(self.shared.dir.join(CURRENT)).await
    }
}

/// Copies `file` to `path`, durably and atomically.
fn keep(file: &mut std::fs::File, path: &std::path::Path) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut out = std::fs::File::create(&tmp)?;
    std::io::copy(file, &mut out)?;
    out.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

trait IntoStoreError {
    fn into_store_error(self) -> StoreError;
}

impl IntoStoreError for std::io::Error {
    fn into_store_error(self) -> StoreError {
        StoreError::Replication(format!("snapshot file: {self}"))
    }
}
