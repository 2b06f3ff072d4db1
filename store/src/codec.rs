//! Framing of stored values: zstd-compressed, and split into chunks so that no sled value is
//! larger than [`MAX_VALUE_BYTES`] (sled writes bigger values as separate blob files, its
//! weakest path).
//!
//! A framed value is one of:
//! - `0x01` + zstd bytes (when that fits in one value);
//! - `0x02` + chunk count (u32) + compressed length (u64) + CRC-32 of the compressed bytes, with
//!   the compressed bytes under [`keys::chunk`] keys.

use std::io::Read;

use crate::compression::{self, Inflate};
use crate::error::{Result, StoreError};
use crate::keys;

/// Largest value the store writes to sled.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// The most plain bytes a value held in one sled value may decompress to (the store's own
/// values: a report is at most 64 MiB of JSON).
const MAX_PLAIN_BYTES: usize = 1 << 30;
/// zstd level: fast, and about 5–10× smaller for report JSON.
const ZSTD_LEVEL: i32 = 3;

const INLINE: u8 = 1;
const CHUNKED: u8 = 2;
const CHUNKED_HEADER_LEN: usize = 1 + 4 + 8 + 4;

/// A value's frame as found in the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Compressed bytes held in the value itself.
    Inline(Vec<u8>),
    /// Compressed bytes held in chunks.
    Chunked {
        /// Number of chunks.
        chunks: u32,
        /// Total compressed length.
        len: u64,
        /// CRC-32 of the compressed bytes.
        crc: u32,
    },
}

impl Frame {
    /// Parses a stored value.
    pub fn parse(key: &[u8], value: &[u8]) -> Result<Frame> {
        match value.first() {
            Some(&INLINE) => Ok(Frame::Inline(value[1..].to_vec())),
            Some(&CHUNKED) if value.len() == CHUNKED_HEADER_LEN => {
                let chunks = u32::from_be_bytes(value[1..5].try_into().unwrap_or_default());
                let len = u64::from_be_bytes(value[5..13].try_into().unwrap_or_default());
                let crc = u32::from_be_bytes(value[13..17].try_into().unwrap_or_default());
                Ok(Frame::Chunked { chunks, len, crc })
            }
            _ => Err(StoreError::corrupt(key, "unknown value frame")),
        }
    }

    /// Number of chunk values this frame owns.
    pub fn chunk_count(&self) -> u32 {
        match self {
            Frame::Inline(_) => 0,
            Frame::Chunked { chunks, .. } => *chunks,
        }
    }
}

/// The sled writes that store `plain` under `key`, replacing a value framed as `old`.
pub struct Encoded {
    /// (key, value) pairs to insert.
    pub inserts: Vec<(Vec<u8>, Vec<u8>)>,
    /// Keys to remove (chunks the old value had and the new one does not).
    pub removes: Vec<Vec<u8>>,
    /// Bytes stored (compressed, before framing).
    pub stored_bytes: u64,
}

/// Compresses and frames `plain` for `key`.
pub fn encode(key: &[u8], plain: &[u8], old: Option<&Frame>) -> Result<Encoded> {
    let compressed = compression::compress(plain, ZSTD_LEVEL).map_err(StoreError::Codec)?;
    let stored_bytes = compressed.len() as u64;
    let mut inserts = Vec::new();
    let new_chunks = if compressed.len() < MAX_VALUE_BYTES {
        let mut value = Vec::with_capacity(compressed.len() + 1);
        value.push(INLINE);
        value.extend_from_slice(&compressed);
        inserts.push((key.to_vec(), value));
        0
    } else {
        let chunks: Vec<&[u8]> = compressed.chunks(MAX_VALUE_BYTES).collect();
        let mut header = Vec::with_capacity(CHUNKED_HEADER_LEN);
        header.push(CHUNKED);
        header.extend_from_slice(&(chunks.len() as u32).to_be_bytes());
        header.extend_from_slice(&(compressed.len() as u64).to_be_bytes());
        header.extend_from_slice(&crc32fast::hash(&compressed).to_be_bytes());
        inserts.push((key.to_vec(), header));
        for (i, chunk) in chunks.iter().enumerate() {
            inserts.push((keys::chunk(key, i as u32), chunk.to_vec()));
        }
        chunks.len() as u32
    };
    let old_chunks = old.map_or(0, Frame::chunk_count);
    let removes = (new_chunks..old_chunks)
        .map(|i| keys::chunk(key, i))
        .collect();
    Ok(Encoded {
        inserts,
        removes,
        stored_bytes,
    })
}

/// Every key a framed value occupies (for deletion).
pub fn keys_of(key: &[u8], frame: &Frame) -> Vec<Vec<u8>> {
    let mut all = vec![key.to_vec()];
    all.extend((0..frame.chunk_count()).map(|i| keys::chunk(key, i)));
    all
}

/// Reads the compressed bytes of a framed value, chunk by chunk, and checks them.
struct ChunkReader {
    tree: sled::Tree,
    key: Vec<u8>,
    chunks: u32,
    next: u32,
    current: Vec<u8>,
    offset: usize,
    crc: crc32fast::Hasher,
    expected_crc: u32,
    expected_len: u64,
    read: u64,
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.offset == self.current.len() {
            if self.next == self.chunks {
                let crc = std::mem::take(&mut self.crc).finalize();
                if crc != self.expected_crc || self.read != self.expected_len {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "stored value fails its checksum",
                    ));
                }
                return Ok(0);
            }
            let chunk_key = keys::chunk(&self.key, self.next);
            let chunk = self
                .tree
                .get(&chunk_key)
                .map_err(std::io::Error::other)?
                .ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "a chunk of a stored value is missing",
                    )
                })?;
            self.current = chunk.to_vec();
            self.offset = 0;
            self.next += 1;
            self.crc.update(&self.current);
            self.read += self.current.len() as u64;
        }
        let n = buf.len().min(self.current.len() - self.offset);
        buf[..n].copy_from_slice(&self.current[self.offset..self.offset + n]);
        self.offset += n;
        Ok(n)
    }
}

/// A stream of the plain bytes of a framed value.
pub fn reader(tree: sled::Tree, key: &[u8], frame: Frame) -> Result<Box<dyn Read>> {
    let compressed: Box<dyn Read> = match frame {
        Frame::Inline(bytes) => Box::new(std::io::Cursor::new(bytes)),
        Frame::Chunked { chunks, len, crc } => Box::new(ChunkReader {
            tree,
            key: key.to_vec(),
            chunks,
            next: 0,
            current: Vec::new(),
            offset: 0,
            crc: crc32fast::Hasher::new(),
            expected_crc: crc,
            expected_len: len,
            read: 0,
        }),
    };
    let decoder = zstd::stream::read::Decoder::new(compressed).map_err(StoreError::Codec)?;
    Ok(Box::new(decoder))
}

/// The plain bytes of a framed value.
pub fn read_all(tree: &sled::Tree, key: &[u8], frame: Frame) -> Result<Vec<u8>> {
    // A value held in one sled value (every log entry a follower is sent, most report bodies)
    // is decompressed in one call with this thread's context: a streaming decoder makes a
    // context of its own, over 100 KiB, at every read.
    if let Frame::Inline(compressed) = &frame {
        return compression::decompress(compressed, MAX_PLAIN_BYTES).map_err(|e| {
            let why = match e {
                Inflate::Malformed(e) => e.to_string(),
                Inflate::TooLarge => format!("more than {MAX_PLAIN_BYTES} bytes decompressed"),
            };
            StoreError::corrupt(key, &why)
        });
    }
    let mut plain = Vec::new();
    reader(tree.clone(), key, frame)?
        .read_to_end(&mut plain)
        .map_err(|e| StoreError::corrupt(key, &e.to_string()))?;
    Ok(plain)
}
