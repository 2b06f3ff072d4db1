//! The compact encoding of a report's [`ProbeRow`] (what a connectivity matrix needs of it),
//! stored at the front of the report's value (`body.rs`) so that a matrix of a thousand nodes
//! reads a few megabytes instead of parsing hundreds of megabytes of report JSON. Little-endian; strings are a u32 length and
//! UTF-8 bytes:
//!
//! `1 (format) | node | pod | u32 count | count × (target | i64 requests | i64 successes | f32 p99 ms)`
//!
//! A row with a path MTU (UDP echo entries with `spec.target.pathMTU`) is format 2, each probe
//! followed by `u32 path MTU` (0: none). A row without one stays format 1, so that a replica
//! still on the build before format 2 reads every row it can.

use kdoctor_api::matrix::{Probe, ProbeRow};

const FORMAT: u8 = 1;
const FORMAT_WITH_PATH_MTU: u8 = 2;

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// The bytes of a row.
pub fn encode(row: &ProbeRow) -> Vec<u8> {
    let names: usize = row.probes.iter().map(|p| p.target.len() + 24).sum();
    let mut out = Vec::with_capacity(16 + row.node.len() + row.pod.len() + names);
    let with_mtu = row.probes.iter().any(|p| p.path_mtu.is_some());
    out.push(if with_mtu {
        FORMAT_WITH_PATH_MTU
    } else {
        FORMAT
    });
    put_str(&mut out, &row.node);
    put_str(&mut out, &row.pod);
    out.extend_from_slice(&(row.probes.len() as u32).to_le_bytes());
    for p in &row.probes {
        put_str(&mut out, &p.target);
        out.extend_from_slice(&p.requests.to_le_bytes());
        out.extend_from_slice(&p.successes.to_le_bytes());
        out.extend_from_slice(&p.p99_ms.to_le_bytes());
        if with_mtu {
            out.extend_from_slice(&p.path_mtu.unwrap_or(0).to_le_bytes());
        }
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

    /// The format byte; None for one this build does not know.
    fn format(&mut self) -> Option<u8> {
        let [format] = self.array()?;
        [FORMAT, FORMAT_WITH_PATH_MTU]
            .contains(&format)
            .then_some(format)
    }
}

/// The source of a row (node, pod) from its bytes, without decoding its probes.
pub fn decode_source(bytes: &[u8]) -> Option<(String, String)> {
    let mut r = Reader(bytes);
    r.format()?;
    Some((r.string()?, r.string()?))
}

/// A row from its bytes; None when they are not a row of a known format.
pub fn decode(bytes: &[u8]) -> Option<ProbeRow> {
    let mut r = Reader(bytes);
    let with_mtu = r.format()? == FORMAT_WITH_PATH_MTU;
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
            path_mtu: if with_mtu {
                Some(u32::from_le_bytes(r.array()?)).filter(|&bytes| bytes > 0)
            } else {
                None
            },
        });
    }
    r.0.is_empty().then_some(ProbeRow { node, pod, probes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn row() -> impl Strategy<Value = ProbeRow> {
        let probe = (
            ".{0,40}",
            any::<i64>(),
            any::<i64>(),
            any::<f32>(),
            prop::option::weighted(0.2, 1..=u32::MAX),
        )
            .prop_map(|(target, requests, successes, p99_ms, path_mtu)| Probe {
                target,
                requests,
                successes,
                p99_ms,
                path_mtu,
            });
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
                prop_assert_eq!(a.path_mtu, b.path_mtu);
            }
            let format = if row.probes.iter().any(|p| p.path_mtu.is_some()) { 2 } else { 1 };
            prop_assert_eq!(bytes[0], format, "format 1 unless a path MTU needs 2");
            prop_assert_eq!(decode_source(&bytes), Some((row.node.clone(), row.pod.clone())));
            let n = cut.index(bytes.len());
            prop_assert!(decode(&bytes[..n]).is_none());
        }
    }
}
