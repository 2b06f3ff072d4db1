//! Replication of the store to followers (issue 18): the leader's writes, as the key operations
//! of each committed batch, travel to followers in resourceVersion order; a follower applies
//! them as its own batches, so its data, index, change events and resourceVersions are the
//! leader's, and a watch can resume on any replica.
//!
//! Each record also carries the *term* of the leader that wrote it (a fresh number whenever a
//! store starts writing), and a follower asks for "the records after (resourceVersion, term)".
//! A follower whose last record the leader does not have under that term — it was written by
//! an old leader that crashed before replicating it, or the follower is older than the leader's
//! window — is told to take a snapshot instead of receiving records that would not fit.

mod apply;
mod log;
mod source;
mod wire;

pub use log::{NeedSnapshot, Op, Position, Record};
pub use wire::{
    Frame, WireError, decode, encode_pair, encode_record, encode_snapshot_end,
    encode_snapshot_start,
};

pub use apply::SnapshotLoader;
pub(crate) use log::ReplicaLog;
