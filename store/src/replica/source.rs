//! The leader's side: the records a follower asks for, who acknowledged what, waiting until a
//! write reached a follower, and the snapshot a new or lost follower starts from.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::log::{NeedSnapshot, Position, Record};
use super::wire;
use crate::error::{Result, StoreError};
use crate::store::Store;

/// Bytes buffered before a snapshot writes to its output.
const SNAPSHOT_CHUNK: usize = 256 << 10;

impl Store {
    /// Durable records after `from` (at least one, then up to about `max_bytes`), and counts
    /// `follower` as having applied everything up to `from`.
    pub fn records_after(
        &self,
        follower: &str,
        from: Position,
        max_bytes: usize,
    ) -> std::result::Result<Vec<Arc<Record>>, NeedSnapshot> {
        let mut writer = self.lock_writer();
        let records = writer.log.after(from, max_bytes)?;
        // Only a position the leader recognises acknowledges anything.
        writer.log.ack(follower, from.rv, Instant::now());
        let acked = writer
            .log
            .followers(Instant::now())
            .iter()
            .map(|(_, rv)| *rv)
            .max()
            .unwrap_or(0);
        self.replicated_rv.send_if_modified(|old| {
            let changed = *old != acked;
            *old = acked;
            changed
        });
        Ok(records)
    }

    /// The last durable resourceVersion, changing as writes become durable.
    pub fn durable_versions(&self) -> watch::Receiver<u64> {
        self.durable_rv.subscribe()
    }

    /// Waits until every write up to `rv` is durable here, at most `timeout`; `false` when it
    /// did not come in time.
    pub async fn wait_durable(&self, rv: u64, timeout: Duration) -> bool {
        let mut durable = self.durable_rv.subscribe();
        tokio::time::timeout(timeout, durable.wait_for(|d| *d >= rv))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Followers that asked for records lately, with the resourceVersion each has applied.
    pub fn followers(&self) -> Vec<(String, u64)> {
        self.lock_writer().log.followers(Instant::now())
    }

    /// Waits until a follower has applied `rv`, at most `timeout`. `false` when none did in
    /// time, or when no follower is connected (a single replica does not wait).
    pub async fn replicated(&self, rv: u64, timeout: Duration) -> bool {
        if self.followers().is_empty() {
            return false;
        }
        let mut acked = self.replicated_rv.subscribe();
        tokio::time::timeout(timeout, acked.wait_for(|a| *a >= rv))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Writes a snapshot of the whole store for a follower, and returns where its history
    /// continues (records after that position complete it). Writes go on meanwhile: a key
    /// may be read newer than the position, and replaying the records after it converges.
    pub fn write_snapshot(&self, out: &mut dyn Write) -> Result<(Position, u64)> {
        let at = self.lock_writer().log.last_published();
        let io = |source| StoreError::Io {
            path: self.path().to_path_buf(),
            source,
        };
        let mut buf = Vec::with_capacity(SNAPSHOT_CHUNK + 4096);
        wire::encode_snapshot_start(&mut buf, at);
        let mut pairs = 0u64;
        for item in self.tree().iter() {
            let (key, value) = item?;
            wire::encode_pair(&mut buf, &key, &value);
            pairs += 1;
            if buf.len() >= SNAPSHOT_CHUNK {
                out.write_all(&buf).map_err(io)?;
                buf.clear();
            }
        }
        wire::encode_snapshot_end(&mut buf, pairs);
        out.write_all(&buf).map_err(io)?;
        out.flush().map_err(io)?;
        Ok((at, pairs))
    }
}
