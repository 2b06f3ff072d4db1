//! Store errors. Every one says what happened and, where the operator must act, what to do.

use std::path::PathBuf;

/// Result of a store operation.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another process (or this one) holds the store.
    #[error(
        "the store at {path} is in use by {holder}; only one process may open it \
         (stop the other process, or give this one another --data directory)"
    )]
    Locked {
        /// The store directory.
        path: PathBuf,
        /// Who holds it, as recorded in its lock file.
        holder: String,
    },
    /// The store directory or its files cannot be used.
    #[error("cannot use the store at {path}: {source}")]
    Io {
        /// The store directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// sled refused to open the database, or found it corrupt. Nothing was changed.
    #[error(
        "the store at {path} cannot be opened: {reason}. Nothing was changed or deleted. \
         To recover: keep a copy of the directory, then either restore a backup with \
         `kdoctor store import --data NEW_DIR BACKUP.jsonl` and point --data at NEW_DIR, or move \
         the directory away to start with an empty store"
    )]
    Open {
        /// The store directory.
        path: PathBuf,
        /// What sled said.
        reason: String,
    },
    /// The database ends before writes that were acknowledged: sled cut its log back (a damaged
    /// disk, or files changed behind its back). Nothing was changed.
    #[error(
        "the store at {path} acknowledged writes up to resourceVersion {promised}, but its data \
         ends at {found}: acknowledged writes were lost (a damaged disk or database files). \
         Nothing was changed. Keep a copy of the directory, then either restore a backup with \
         `kdoctor store import --data NEW_DIR BACKUP.jsonl` and point --data at NEW_DIR, or accept \
         the loss with `kdoctor store repair --data {path}` (the store then continues from \
         resourceVersion {promised}, so no client sees versions go backwards)"
    )]
    LostWrites {
        /// The store directory.
        path: PathBuf,
        /// The durable mark: the last acknowledged resourceVersion.
        promised: u64,
        /// The resourceVersion the database holds.
        found: u64,
    },
    /// The durable mark cannot be read.
    #[error(
        "the store's durable mark {path} is damaged ({reason}); the store cannot tell whether \
         acknowledged writes were lost. Nothing was changed. If the data is known good, accept it \
         with `kdoctor store repair --data DIR`"
    )]
    MarkDamaged {
        /// The mark file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The store was written by a newer layout.
    #[error(
        "the store at {path} has layout version {found}; this kdoctor reads version {supported}"
    )]
    Format {
        /// The store directory.
        path: PathBuf,
        /// The version found.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// A stored value does not decode.
    #[error("stored value {key} is corrupt: {reason}")]
    Corrupt {
        /// The key, printed.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// sled failed at run time.
    #[error("store: {0}")]
    Sled(#[from] sled::Error),
    /// Compression failed.
    #[error("store compression: {0}")]
    Codec(std::io::Error),
    /// A record does not serialize or deserialize.
    #[error("store encoding: {0}")]
    Json(#[from] serde_json::Error),
    /// A write names a task the store does not know.
    #[error("no task incarnation with id {0}")]
    UnknownTask(u64),
    /// A write is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// The store stopped on an earlier I/O error and must be reopened.
    #[error(
        "the report store stopped on an I/O error and must be reopened (the controller restarts it): {0}"
    )]
    Stopped(String),
    /// This store takes its writes from the replicated log only.
    #[error("this store is replicated: writes go through the replicated log (made by the leader)")]
    Replicated,
    /// A follower could not apply what the leader sent.
    #[error("replication: {0}")]
    Replication(String),
    /// A write went to a replica that does not lead.
    #[error("this replica does not lead the replicated store{}", leader.as_ref().map(|l| format!("; the leader is {l}")).unwrap_or_default())]
    NotLeader {
        /// The leader's pod, when known.
        leader: Option<String>,
    },
}

impl StoreError {
    /// Makes an I/O error at `path` one of the store's (for `map_err`).
    pub(crate) fn io_at(path: &std::path::Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
        move |source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// A corrupt value at `key`.
    pub fn corrupt(key: &[u8], reason: &str) -> StoreError {
        StoreError::Corrupt {
            key: printable(key),
            reason: reason.to_string(),
        }
    }
}

/// A key with its non-printable bytes escaped.
fn printable(key: &[u8]) -> String {
    key.iter()
        .flat_map(|b| std::ascii::escape_default(*b))
        .map(char::from)
        .collect()
}
