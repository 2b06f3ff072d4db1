//! The messages between replicas: JSON, zstd-compressed (a batch of reports shrinks several
//! times), decoded with every size bounded. A snapshot chunk carries its bytes raw after a
//! small header, not as a JSON array of numbers.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::compression::{self, Inflate};

/// The largest message accepted, decompressed: a batch of entries of the largest reports an
/// agent may send (64 MiB each, crate::harvest) fits several times.
pub const MAX_MESSAGE: usize = 512 << 20;
/// The largest snapshot chunk header accepted.
const MAX_HEADER: usize = 16 << 20;

/// What replicas ask each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rpc {
    /// Raft: log entries, and heartbeats.
    Append,
    /// Raft: a vote.
    Vote,
    /// Raft: a chunk of a snapshot.
    Snapshot,
    /// A write made by the leader for a replica that is not (a DELETE served by a follower).
    Write,
    /// The log position a linearizable read must wait for, from the leader.
    ReadIndex,
    /// Whether a replica is part of a cluster yet, and what it holds (forming a cluster).
    Status,
    /// Asks the leader to take a new replica in.
    Join,
}

impl Rpc {
    /// Every call.
    pub const ALL: [Rpc; 7] = [
        Rpc::Append,
        Rpc::Vote,
        Rpc::Snapshot,
        Rpc::Write,
        Rpc::ReadIndex,
        Rpc::Status,
        Rpc::Join,
    ];

    /// Its HTTP path.
    pub fn path(self) -> &'static str {
        match self {
            Rpc::Append => "/raft/v1/append",
            Rpc::Vote => "/raft/v1/vote",
            Rpc::Snapshot => "/raft/v1/snapshot",
            Rpc::Write => "/raft/v1/write",
            Rpc::ReadIndex => "/raft/v1/read-index",
            Rpc::Status => "/raft/v1/status",
            Rpc::Join => "/raft/v1/join",
        }
    }

    /// The call of an HTTP path.
    pub fn of_path(path: &str) -> Option<Rpc> {
        Rpc::ALL.into_iter().find(|rpc| rpc.path() == path)
    }

    /// A short name, for metrics and logs.
    pub fn name(self) -> &'static str {
        &self.path()["/raft/v1/".len()..]
    }
}

/// Bytes that are not a message.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Decompression or JSON failed.
    #[error("replication message: {0}")]
    Malformed(String),
    /// Larger than allowed.
    #[error("replication message of more than {max} bytes")]
    TooLarge {
        /// The bound.
        max: usize,
    },
}

/// Encodes a message.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing the store's own types does not fail (no maps with non-string keys).
    let json = serde_json::to_vec(value).unwrap_or_default();
    compression::compress(&json, 1).unwrap_or_default()
}

fn inflate(bytes: &[u8], max: usize) -> Result<Vec<u8>, WireError> {
    compression::decompress(bytes, max).map_err(|e| match e {
        Inflate::TooLarge => WireError::TooLarge { max },
        Inflate::Malformed(e) => WireError::Malformed(e.to_string()),
    })
}

/// Decodes a message.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    let plain = inflate(bytes, MAX_MESSAGE)?;
    serde_json::from_slice(&plain).map_err(|e| WireError::Malformed(e.to_string()))
}

/// Encodes a header and raw bytes (a snapshot chunk).
pub fn encode_with_data<T: Serialize>(header: &T, data: &[u8]) -> Vec<u8> {
    let header = encode(header);
    let mut out = Vec::with_capacity(4 + header.len() + data.len());
    out.extend_from_slice(&(header.len() as u32).to_be_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(data);
    out
}

/// Decodes a header and raw bytes.
pub fn decode_with_data<T: DeserializeOwned>(bytes: &[u8]) -> Result<(T, &[u8]), WireError> {
    let len = bytes
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| WireError::Malformed("no header length".into()))? as usize;
    if len > MAX_HEADER {
        return Err(WireError::TooLarge { max: MAX_HEADER });
    }
    let header = bytes
        .get(4..4 + len)
        .ok_or_else(|| WireError::Malformed("header cut short".into()))?;
    let plain = inflate(header, MAX_HEADER)?;
    let header = serde_json::from_slice(&plain).map_err(|e| WireError::Malformed(e.to_string()))?;
    Ok((header, &bytes[4 + len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_bombs_are_refused() {
        let value = serde_json::json!({"entries": ["a", "b"], "n": 7});
        let back: serde_json::Value = decode(&encode(&value)).expect("decodes");
        assert_eq!(back, value);
        let chunk = encode_with_data(&value, b"raw bytes");
        let (header, data): (serde_json::Value, &[u8]) = decode_with_data(&chunk).expect("decodes");
        assert_eq!((header, data), (value, &b"raw bytes"[..]));
        // Decompressing to more than the bound stops there.
        let bomb = zstd::bulk::compress(&vec![b' '; 100_000], 1).expect("compress");
        assert!(bomb.len() < 1000);
        assert!(matches!(
            inflate(&bomb, 4096),
            Err(WireError::TooLarge { max: 4096 })
        ));
        assert_eq!(inflate(&bomb, 100_000).expect("fits").len(), 100_000);
        assert!(decode::<serde_json::Value>(b"not zstd").is_err());
        assert!(decode_with_data::<serde_json::Value>(&[0, 0, 0, 9, 1]).is_err());
        for rpc in Rpc::ALL {
            assert_eq!(Rpc::of_path(rpc.path()), Some(rpc));
        }
    }
}
