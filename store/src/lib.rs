//! kdoctor-store: the controller's embedded report store, on sled.
//!
//! It keeps task incarnations (kind + name + UID: a re-created task never mixes with the old
//! one), the controller's round summaries and every agent's round report, and announces every
//! change with a resourceVersion that survives restarts. Designed around sled 0.34's weak spots:
//! values are zstd-compressed and never larger than 64 KiB (chunked), the page cache is set
//! explicitly, index and data change in one atomic batch, writes return after a flush, one
//! process holds the store, and a store that fails to open is never wiped.

mod body;
mod codec;
mod command;
mod compression;
mod config;
mod durable;
mod error;
mod failpoint;
mod flusher;
mod group_commit;
mod index;
mod keys;
mod lock;
mod metrics;
mod migrate;
mod model;
mod outbox;
mod probes;
pub mod raft;
mod retention;
mod state_tree;
mod store;
mod transfer;
mod whole_file;
mod writes;

pub use codec::MAX_VALUE_BYTES;
pub use command::{Applied, Command, Refusal, ReportEntry};
pub use config::{
    DEFAULT_CACHE_CAPACITY, DEFAULT_EVENT_WINDOW, DEFAULT_MAX_AGE, DEFAULT_MAX_BYTES, Retention,
    StoreConfig,
};
pub use error::{Result, StoreError};
pub use group_commit::GroupCommit;
pub use index::{Entry, RoundMeta};
pub use metrics::StoreMetrics;
pub use migrate::{MigrationReport, migrated_uid};
pub use model::{
    Event, EventType, IncarnationId, NodeCounts, Outcome, Progress, ReportMeta, RoundResult,
    RoundSummary, TaskRecord, TaskSummary,
};
pub use outbox::Pending;
pub use retention::{Reason, Removal, SweepReport, plan as plan_retention, run_retention};
pub use store::{
    FORMAT_VERSION, NewReport, Repair, RoundInfo, Stats, Store, Subscription, WatchError,
};
pub use transfer::{BadLine, Counts, ImportError, ImportReport, Line};
pub use writes::Writes;
