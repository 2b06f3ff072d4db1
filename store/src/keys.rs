//! The key layout of the one sled tree. Everything lives in one tree so that a write of index,
//! data and change event is a single atomic batch.
//!
//! | prefix | key | value |
//! |---|---|---|
//! | `m` | name | metadata (`rv`, `term`, `id`, `format`) |
//! | `s` | id | task summary (JSON) |
//! | `t` | id | task record (framed) |
//! | `u` | uid | id |
//! | `l` | id | stored size of the task record |
//! | `r` | id, round | round record (JSON) |
//! | `o` | id, round | round summary (framed) |
//! | `h` | id, round, node | report header (JSON) |
//! | `b` | id, round, node | report body (framed: probe row and JSON, `body.rs`) |
//! | `x` | key of a framed value, chunk | one chunk of a large framed value |
//! | `e` | resourceVersion | change event (JSON) |
//! | `q` | sequence | report waiting for export (JSON) |
//!
//! Numbers are big-endian so that keys sort numerically.

use crate::model::IncarnationId;

/// Metadata: the last resourceVersion handed out.
pub const META_RV: &[u8] = b"mrv";
/// Metadata: the layout version of the store.
pub const META_FORMAT: &[u8] = b"mformat";
/// Metadata: the last incarnation id handed out.
pub const META_ID: &[u8] = b"mid";
/// Metadata: the last entry of the replicated log applied (crate::raft).
pub const META_RAFT_APPLIED: &[u8] = b"mraftapplied";
/// Metadata: the cluster's membership as last applied (crate::raft).
pub const META_RAFT_MEMBERSHIP: &[u8] = b"mraftmembers";
/// Metadata: the next sequence number of the export outbox.
pub const META_OUTBOX_SEQ: &[u8] = b"mqseq";

/// Prefix of task summaries.
pub const SUMMARY: u8 = b's';
/// Prefix of task records.
pub const TASK: u8 = b't';
/// Prefix of the UID index.
pub const UID: u8 = b'u';
/// Prefix of the stored sizes of task records.
pub const RECORD_BYTES: u8 = b'l';
/// Prefix of round records.
pub const ROUND: u8 = b'r';
/// Prefix of round summaries.
pub const SUMMARY_OF_ROUND: u8 = b'o';
/// Prefix of report headers.
pub const HEADER: u8 = b'h';
/// Prefix of report bodies.
pub const BODY: u8 = b'b';
/// Prefix of chunks of large values.
pub const CHUNK: u8 = b'x';
/// Prefix of change events.
pub const EVENT: u8 = b'e';
/// `q<seq>` → a report waiting for export (crate::outbox).
pub const OUTBOX: u8 = b'q';

/// `<prefix><id>`.
pub fn by_id(prefix: u8, id: IncarnationId) -> Vec<u8> {
    let mut key = Vec::with_capacity(9);
    key.push(prefix);
    key.extend_from_slice(&id.0.to_be_bytes());
    key
}

/// `<prefix><id><round>`.
pub fn by_round(prefix: u8, id: IncarnationId, round: u64) -> Vec<u8> {
    let mut key = by_id(prefix, id);
    key.extend_from_slice(&round.to_be_bytes());
    key
}

/// `<prefix><id><round><node>`.
pub fn by_node(prefix: u8, id: IncarnationId, round: u64, node: &str) -> Vec<u8> {
    let mut key = by_round(prefix, id, round);
    key.extend_from_slice(node.as_bytes());
    key
}

/// `u<uid>`.
pub fn uid(uid: &str) -> Vec<u8> {
    let mut key = vec![UID];
    key.extend_from_slice(uid.as_bytes());
    key
}

/// `e<rv>`.
pub fn event(rv: u64) -> Vec<u8> {
    let mut key = vec![EVENT];
    key.extend_from_slice(&rv.to_be_bytes());
    key
}

/// `q<seq>`.
pub fn outbox(seq: u64) -> Vec<u8> {
    let mut key = vec![OUTBOX];
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// `x<len><key><chunk>`: the key's length first, so that no chunk key of one value is a prefix
/// of another value's.
pub fn chunk(of: &[u8], index: u32) -> Vec<u8> {
    let mut key = chunk_prefix(of);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// The prefix of every chunk of a value.
pub fn chunk_prefix(of: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(of.len() + 7);
    key.push(CHUNK);
    key.extend_from_slice(&(of.len() as u16).to_be_bytes());
    key.extend_from_slice(of);
    key
}

/// Reads a big-endian u64 at `offset` of a key.
pub fn u64_at(key: &[u8], offset: usize) -> Option<u64> {
    key.get(offset..offset + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
}
