//! The replication wire format: length-prefixed binary frames, decoded incrementally and with
//! every length bounded (a peer's bytes are not trusted to be sane even over mutual TLS).
//!
//! ```text
//! record          'R' rv:u64 term:u64 ops:u32 { 'P' klen:u16 key vlen:u32 value | 'D' klen:u16 key }*
//! snapshot start  'S' rv:u64 term:u64
//! snapshot pair   'K' klen:u16 key vlen:u32 value
//! snapshot end    'E' pairs:u64
//! ```
//! Numbers are big-endian.

use super::log::{Op, Position, Record};

/// Longest key accepted.
pub const MAX_KEY: usize = 4096;
/// Largest value accepted (stored values are at most 64 KiB; events and summaries are small).
pub const MAX_VALUE: usize = 4 << 20;
/// Most operations in one record.
pub const MAX_OPS: usize = 4_000_000;

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A committed batch.
    Record(Record),
    /// A snapshot begins; records after this position complete it.
    SnapshotStart(Position),
    /// One key of a snapshot.
    Pair(Vec<u8>, Vec<u8>),
    /// A snapshot ends after this many pairs.
    SnapshotEnd(u64),
}

/// Bytes that are not a frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// An unknown frame or operation tag.
    #[error("replication stream: unknown tag {0:#04x}")]
    Tag(u8),
    /// A length beyond its bound.
    #[error("replication stream: {what} of {len} bytes (at most {max})")]
    TooLong {
        /// What was too long.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
}

fn put_bytes16(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn put_bytes32(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Appends a record frame.
pub fn encode_record(out: &mut Vec<u8>, record: &Record) {
    out.push(b'R');
    out.extend_from_slice(&record.rv.to_be_bytes());
    out.extend_from_slice(&record.term.to_be_bytes());
    out.extend_from_slice(&(record.ops.len() as u32).to_be_bytes());
    for op in &record.ops {
        match op {
            Op::Put(key, value) => {
                out.push(b'P');
                put_bytes16(out, key);
                put_bytes32(out, value);
            }
            Op::Remove(key) => {
                out.push(b'D');
                put_bytes16(out, key);
            }
        }
    }
}

/// Appends a snapshot's first frame.
pub fn encode_snapshot_start(out: &mut Vec<u8>, at: Position) {
    out.push(b'S');
    out.extend_from_slice(&at.rv.to_be_bytes());
    out.extend_from_slice(&at.term.to_be_bytes());
}

/// Appends one key of a snapshot.
pub fn encode_pair(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    out.push(b'K');
    put_bytes16(out, key);
    put_bytes32(out, value);
}

/// Appends a snapshot's last frame.
pub fn encode_snapshot_end(out: &mut Vec<u8>, pairs: u64) {
    out.push(b'E');
    out.extend_from_slice(&pairs.to_be_bytes());
}

/// A cursor that says "incomplete" (None) rather than failing when the bytes run out.
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let bytes = self.buf.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(bytes)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
    }

    fn u32(&mut self) -> Option<usize> {
        self.take(4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes)
    }
}

fn bounded(what: &'static str, len: usize, max: usize) -> Result<usize, WireError> {
    if len > max {
        Err(WireError::TooLong { what, len, max })
    } else {
        Ok(len)
    }
}

/// Decodes the frame at the start of `buf`: `Ok(None)` when more bytes are needed, else the
/// frame and the bytes it took.
pub fn decode(buf: &[u8]) -> Result<Option<(Frame, usize)>, WireError> {
    let mut c = Cursor { buf, at: 0 };
    macro_rules! need {
        ($e:expr) => {
            match $e {
                Some(v) => v,
                None => return Ok(None),
            }
        };
    }
    let frame = match need!(c.u8()) {
        b'R' => {
            let rv = need!(c.u64());
            let term = need!(c.u64());
            let count = bounded("record operations", need!(c.u32()), MAX_OPS)?;
            let mut ops = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                let tag = need!(c.u8());
                let klen = bounded("key", need!(c.u16()), MAX_KEY)?;
                let key = need!(c.take(klen)).to_vec();
                ops.push(match tag {
                    b'P' => {
                        let vlen = bounded("value", need!(c.u32()), MAX_VALUE)?;
                        Op::Put(key, need!(c.take(vlen)).to_vec())
                    }
                    b'D' => Op::Remove(key),
                    other => return Err(WireError::Tag(other)),
                });
            }
            Frame::Record(Record { rv, term, ops })
        }
        b'S' => Frame::SnapshotStart(Position {
            rv: need!(c.u64()),
            term: need!(c.u64()),
        }),
        b'K' => {
            let klen = bounded("key", need!(c.u16()), MAX_KEY)?;
            let key = need!(c.take(klen)).to_vec();
            let vlen = bounded("value", need!(c.u32()), MAX_VALUE)?;
            Frame::Pair(key, need!(c.take(vlen)).to_vec())
        }
        b'E' => Frame::SnapshotEnd(need!(c.u64())),
        other => return Err(WireError::Tag(other)),
    };
    Ok(Some((frame, c.at)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_partial_input_asks_for_more() {
        let record = Record {
            rv: 42,
            term: 7,
            ops: vec![
                Op::Put(b"s\0\0\0\0\0\0\0\x01".to_vec(), b"{}".to_vec()),
                Op::Remove(b"q\0\0\0\0\0\0\0\x09".to_vec()),
            ],
        };
        let mut bytes = Vec::new();
        encode_record(&mut bytes, &record);
        encode_snapshot_start(&mut bytes, Position { rv: 3, term: 1 });
        encode_pair(&mut bytes, b"k", b"v");
        encode_snapshot_end(&mut bytes, 1);
        let mut frames = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            // Every strict prefix of a frame is incomplete, never an error.
            for cut in at..bytes.len() {
                if let Some((_, used)) = decode(&bytes[at..cut]).expect("a prefix is not an error")
                {
                    assert!(at + used <= cut);
                }
            }
            let (frame, used) = decode(&bytes[at..]).expect("valid").expect("complete");
            frames.push(frame);
            at += used;
        }
        assert_eq!(
            frames,
            vec![
                Frame::Record(record),
                Frame::SnapshotStart(Position { rv: 3, term: 1 }),
                Frame::Pair(b"k".to_vec(), b"v".to_vec()),
                Frame::SnapshotEnd(1),
            ]
        );
    }

    #[test]
    fn unknown_tags_and_oversized_lengths_are_refused() {
        assert_eq!(decode(b"Z"), Err(WireError::Tag(b'Z')));
        let mut bytes = vec![b'K', 0xff, 0xff];
        bytes.extend_from_slice(&[0; 8]);
        assert!(matches!(
            decode(&bytes),
            Err(WireError::TooLong { what: "key", .. })
        ));
        let mut bytes = vec![b'R'];
        bytes.extend_from_slice(&[0; 16]);
        bytes.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            decode(&bytes),
            Err(WireError::TooLong {
                what: "record operations",
                ..
            })
        ));
    }
}
