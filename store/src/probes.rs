//! The compact encoding of a report's [`ProbeRow`] (what a connectivity matrix needs of it),
//! stored at the front of the report's value (`body.rs`) so that a matrix of a thousand nodes
//! reads a few megabytes instead of parsing hundreds of megabytes of report JSON. Little-endian; strings are a u32 length and
//! UTF-8 bytes:
//!
//! `1 (format) | node | pod | u32 count | count × (target | i64 requests | i64 successes | f32 p99 ms)`

use kdoctor_api::matrix::{Probe, ProbeRow};

const FORMAT: u8 = 1;

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// The bytes of a row.
pub fn encode(row: &ProbeRow) -> Vec<u8> {
    let names: usize = row.probes.iter().map(|p| p.target.len() + 24).sum();
    let mut out = Vec::with_capacity(16 + row.node.len() + row.pod.len() + names);
    out.push(FORMAT);
    put_str(&mut out, &row.node);
    put_str(&mut out, &row.pod);
    out.extend_from_slice(&(row.probes.len() as u32).to_le_bytes());
    for p in &row.probes {
        put_str(&mut out, &p.target);
        out.extend_from_slice(&p.requests.to_le_bytes());
        out.extend_from_slice(&p.successes.to_le_bytes());
        out.extend_from_slice(&p.p99_ms.to_le_bytes());
    }
    out
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn string(&mut self) -> Option<String> {
        let len = u32::from_le_bytes(self.array()?) as usize;
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }
}

/// The source of a row (node, pod) from its bytes, without decoding its probes.
pub fn decode_source(bytes: &[u8]) -> Option<(String, String)> {
    let mut r = Reader(bytes);
    if r.take(1)? != [FORMAT] {
        return None;
    }
    Some((r.string()?, r.string()?))
}

/// A row from its bytes; None when they are not a row of a known format.
pub fn decode(bytes: &[u8]) -> Option<ProbeRow> {
    let mut r = Reader(bytes);
    if r.take(1)? != [FORMAT] {
        return None;
    }
    let node = r.string()?;
    let pod = r.string()?;
    let count = u32::from_le_bytes(r.array()?) as usize;
    // Each probe takes at least 24 bytes: a corrupt count cannot make us allocate much.
    let mut probes = Vec::with_capacity(count.min(bytes.len() / 24));
    for _ in 0..count {
        probes.push(Probe {
            target: r.string()?,
            requests: i64::from_le_bytes(r.array()?),
            successes: i64::from_le_bytes(r.array()?),
            p99_ms: f32::from_le_bytes(r.array()?),
        });
    }
    r.0.is_empty().then_some(ProbeRow { node, pod, probes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn row() -> impl Strategy<Value = ProbeRow> {
        let probe = (".{0,40}", any::<i64>(), any::<i64>(), any::<f32>()).prop_map(
            |(target, requests, successes, p99_ms)| Probe {
                target,
                requests,
                successes,
                p99_ms,
            },
        );
        (".{0,20}", ".{0,20}", prop::collection::vec(probe, 0..50))
            .prop_map(|(node, pod, probes)| ProbeRow { node, pod, probes })
    }

    proptest! {
        #[test]
        fn rows_round_trip_and_truncations_are_refused(row in row(), cut in any::<prop::sample::Index>()) {
            let bytes = encode(&row);
            let back = decode(&bytes).expect("decodes");
            prop_assert_eq!(&back.node, &row.node);
            prop_assert_eq!(&back.pod, &row.pod);
            prop_assert_eq!(back.probes.len(), row.probes.len());
            for (a, b) in back.probes.iter().zip(&row.probes) {
                prop_assert_eq!(&a.target, &b.target);
                prop_assert_eq!((a.requests, a.successes), (b.requests, b.successes));
                prop_assert_eq!(a.p99_ms.to_bits(), b.p99_ms.to_bits());
            }
            prop_assert_eq!(decode_source(&bytes), Some((row.node.clone(), row.pod.clone())));
            let n = cut.index(bytes.len());
            prop_assert!(decode(&bytes[..n]).is_none());
        }
    }
}
