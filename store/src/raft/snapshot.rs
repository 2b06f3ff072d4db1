//! The snapshot file: the whole data of a store at one log position, which a replica sends to
//! one that is too far behind (or new) and which lets the log be cut. Checked whole (count and
//! checksum) before anything of it is used; every length is bounded, since a peer's bytes are
//! not trusted to be sane even over mutual TLS.
//!
//! ```text
//! "KDSNAP01"  meta_len:u32  meta (JSON: last log id, membership, id)
//! { 'K' klen:u16 key vlen:u32 value }*   every key of the data, in order
//! 'E' pairs:u64  crc32:u32               of every byte before the checksum
//! ```
//! Numbers are big-endian.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use openraft::SnapshotMeta;

use super::{Member, NodeId};
use crate::error::{Result, StoreError};
use crate::store::Store;

const MAGIC: &[u8; 8] = b"KDSNAP01";
/// Longest key accepted.
const MAX_KEY: usize = 4096;
/// Largest value accepted (stored values are at most 64 KiB; events and summaries are small).
const MAX_VALUE: usize = 4 << 20;
/// Largest meta accepted.
const MAX_META: usize = 16 << 20;
/// Keys written per batch while a snapshot loads.
const LOAD_BATCH: usize = 1024;

/// A snapshot's meta.
pub type Meta = SnapshotMeta<NodeId, Member>;

fn bad(reason: impl Into<String>) -> StoreError {
    StoreError::Replication(format!("snapshot: {}", reason.into()))
}

/// A writer that checksums what passes.
struct Summed<W> {
    inner: W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for Summed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes `store`'s data as the snapshot `meta` to `path`, durably and atomically (a temporary
/// file renamed into place). The caller keeps writes out meanwhile.
pub fn write(store: &Store, meta: &Meta, path: &Path) -> Result<u64> {
    let tmp = path.with_extension("tmp");
    let file = File::create(&tmp).map_err(StoreError::io_at(&tmp))?;
    let mut out = Summed {
        inner: BufWriter::with_capacity(256 << 10, file),
        crc: crc32fast::Hasher::new(),
    };
    let meta_json = serde_json::to_vec(meta)?;
    out.write_all(MAGIC).map_err(StoreError::io_at(&tmp))?;
    out.write_all(&(meta_json.len() as u32).to_be_bytes())
        .map_err(StoreError::io_at(&tmp))?;
    out.write_all(&meta_json).map_err(StoreError::io_at(&tmp))?;
    let mut pairs = 0u64;
    store.for_each_pair(|key, value| {
        out.write_all(b"K").map_err(StoreError::io_at(&tmp))?;
        out.write_all(&(key.len() as u16).to_be_bytes())
            .map_err(StoreError::io_at(&tmp))?;
        out.write_all(key).map_err(StoreError::io_at(&tmp))?;
        out.write_all(&(value.len() as u32).to_be_bytes())
            .map_err(StoreError::io_at(&tmp))?;
        out.write_all(value).map_err(StoreError::io_at(&tmp))?;
        pairs += 1;
        Ok(())
    })?;
    out.write_all(b"E").map_err(StoreError::io_at(&tmp))?;
    out.write_all(&pairs.to_be_bytes())
        .map_err(StoreError::io_at(&tmp))?;
    let crc = out.crc.clone().finalize();
    let mut inner = out.inner;
    inner
        .write_all(&crc.to_be_bytes())
        .map_err(StoreError::io_at(&tmp))?;
    let file = inner.into_inner().map_err(|e| StoreError::Io {
        path: tmp.clone(),
        source: e.into_error(),
    })?;
    file.sync_all().map_err(StoreError::io_at(&tmp))?;
    std::fs::rename(&tmp, path).map_err(StoreError::io_at(path))?;
    if let Some(dir) = path.parent() {
        crate::whole_file::sync_dir(dir)?;
    }
    Ok(pairs)
}

/// A reader that checksums what passes and counts it.
struct Checked<R> {
    inner: R,
    crc: crc32fast::Hasher,
}

impl<R: Read> Checked<R> {
    fn exact(&mut self, buf: &mut [u8]) -> Result<()> {
        self.inner
            .read_exact(buf)
            .map_err(|e| bad(format!("cut short: {e}")))?;
        self.crc.update(buf);
        Ok(())
    }

    fn u8(&mut self) -> Result<u8> {
        let mut b = [0u8; 1];
        self.exact(&mut b)?;
        Ok(b[0])
    }

    fn bytes(&mut self, len: usize) -> Result<Vec<u8>> {
        let mut b = vec![0u8; len];
        self.exact(&mut b)?;
        Ok(b)
    }

    fn u16(&mut self) -> Result<usize> {
        let mut b = [0u8; 2];
        self.exact(&mut b)?;
        Ok(u16::from_be_bytes(b) as usize)
    }

    fn u32(&mut self) -> Result<usize> {
        let mut b = [0u8; 4];
        self.exact(&mut b)?;
        Ok(u32::from_be_bytes(b) as usize)
    }

    fn u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.exact(&mut b)?;
        Ok(u64::from_be_bytes(b))
    }
}

fn bounded(what: &str, len: usize, max: usize) -> Result<usize> {
    if len > max {
        Err(bad(format!("{what} of {len} bytes (at most {max})")))
    } else {
        Ok(len)
    }
}

fn read_header<R: Read>(input: &mut Checked<R>) -> Result<Meta> {
    let mut magic = [0u8; 8];
    input.exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(bad("not a kdoctor snapshot"));
    }
    let len = bounded("meta", input.u32()?, MAX_META)?;
    serde_json::from_slice(&input.bytes(len)?).map_err(|e| bad(format!("meta: {e}")))
}

/// The meta of the snapshot at the start of `input`.
pub fn read_meta(input: impl Read) -> Result<Meta> {
    read_header(&mut Checked {
        inner: BufReader::new(input),
        crc: crc32fast::Hasher::new(),
    })
}

/// Loads the snapshot `input` into the empty `tree` and returns its meta, once the whole of it
/// was read and checked (a snapshot cut short or damaged fails, and the caller drops the tree).
pub fn load(input: impl Read, tree: &sled::Tree) -> Result<Meta> {
    let mut input = Checked {
        inner: BufReader::with_capacity(256 << 10, input),
        crc: crc32fast::Hasher::new(),
    };
    let meta = read_header(&mut input)?;
    let mut batch = sled::Batch::default();
    let mut in_batch = 0;
    let mut pairs = 0u64;
    loop {
        match input.u8()? {
            b'K' => {
                let klen = bounded("key", input.u16()?, MAX_KEY)?;
                let key = input.bytes(klen)?;
                let vlen = bounded("value", input.u32()?, MAX_VALUE)?;
                let value = input.bytes(vlen)?;
                batch.insert(key, value);
                pairs += 1;
                in_batch += 1;
                if in_batch == LOAD_BATCH {
                    tree.apply_batch(std::mem::take(&mut batch))?;
                    in_batch = 0;
                    crate::failpoint::hit("snapshot-loading");
                }
            }
            b'E' => {
                let announced = input.u64()?;
                let crc = input.crc.clone().finalize();
                let mut stored = [0u8; 4];
                input
                    .inner
                    .read_exact(&mut stored)
                    .map_err(|e| bad(format!("cut short: {e}")))?;
                if u32::from_be_bytes(stored) != crc {
                    return Err(bad("checksum mismatch: the file is damaged"));
                }
                if announced != pairs {
                    return Err(bad(format!("{announced} keys announced, {pairs} carried")));
                }
                let mut rest = [0u8; 1];
                if input
                    .inner
                    .read(&mut rest)
                    .map_err(|e| bad(e.to_string()))?
                    != 0
                {
                    return Err(bad("bytes after its end"));
                }
                tree.apply_batch(batch)?;
                return Ok(meta);
            }
            other => return Err(bad(format!("unknown tag {other:#04x}"))),
        }
    }
}
