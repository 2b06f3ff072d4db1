//! Peer sampling for NetReach (`spec.target.maxPeers`): instead of the full mesh — O(n²)
//! requests per round — each agent probes k other agents per round, and the choice is
//! balanced and covering by construction:
//!
//! - the agents are placed on a ring in the order of a hash of their pod names (every agent
//!   computes the same ring from the same pod list, with no coordination);
//! - in round r, the agent at ring position i probes positions i + d (mod n) for the k distances
//!   d = 1 + ((r·k + j) mod (n − 1)), j = 0 … k − 1.
//!
//! Each distance maps positions one-to-one, so every agent is probed by exactly k others per
//! round (in-degree k, never more), and the distances walk through 1 … n − 1, so every ordered
//! pair is probed within ⌈(n − 1) / k⌉ consecutive rounds. Pure.

use crate::round::targets::CarrierPod;

/// FNV-1a: stable across processes, architectures and releases (unlike std's hasher).
fn ring_key(name: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The carrier's agents in ring order.
pub struct Ring<'a> {
    ring: Vec<&'a CarrierPod>,
    position: std::collections::HashMap<&'a str, usize>,
}

impl<'a> Ring<'a> {
    /// Orders `pods` on the ring.
    pub fn new(pods: &'a [CarrierPod]) -> Ring<'a> {
        let mut ring: Vec<&CarrierPod> = pods.iter().collect();
        ring.sort_by(|a, b| {
            ring_key(&a.name)
                .cmp(&ring_key(&b.name))
                .then_with(|| a.name.cmp(&b.name))
        });
        let position = ring
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.as_str(), i))
            .collect();
        Ring { ring, position }
    }

    /// Ring positions probed in `round` by the agent at ring position `i` (of `n`).
    pub fn positions(i: usize, n: usize, round: i64, k: usize) -> Vec<usize> {
        let others = n.saturating_sub(1);
        if others == 0 || k == 0 {
            return Vec::new();
        }
        let k = k.min(others);
        let r = usize::try_from(round.max(0)).unwrap_or(0) % others;
        (0..k).map(|j| (i + 1 + (r * k + j) % others) % n).collect()
    }

    /// The peers the agent in pod `me` probes in `round`: `k` of the other pods (all of them
    /// when there are no more than `k`); `None` when `me` is not on the ring.
    pub fn peers(&self, me: &str, round: i64, k: usize) -> Option<Vec<&'a CarrierPod>> {
        let i = *self.position.get(me)?;
        Some(
            Ring::positions(i, self.ring.len(), round, k)
                .into_iter()
                .map(|p| self.ring[p])
                .collect(),
        )
    }
}

/// The peers the agent in pod `me` probes in `round`, as [`Ring::peers`]; `me` not among
/// `pods` (not ready yet): every pod, as without `maxPeers`.
pub fn sample(pods: &[CarrierPod], me: &str, round: i64, k: usize) -> Vec<CarrierPod> {
    match Ring::new(pods).peers(me, round, k) {
        Some(peers) => peers.into_iter().cloned().collect(),
        None => pods.to_vec(),
    }
}

/// Rounds within which every ordered pair of `n` agents is probed with `k` peers each.
pub fn coverage_rounds(n: usize, k: usize) -> usize {
    if n <= 1 || k == 0 {
        0
    } else {
        (n - 1).div_ceil(k.min(n - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods(n: usize) -> Vec<CarrierPod> {
        (0..n)
            .map(|i| CarrierPod {
                name: format!("kdoctor-agent-{i:05}"),
                ips: vec![],
                multus: vec![],
            })
            .collect()
    }

    #[test]
    fn every_agent_probes_k_peers_every_agent_is_probed_k_times_and_pairs_are_covered() {
        // By ring position (pods map one-to-one onto it, checked below).
        for (n, k) in [(10, 1), (10, 3), (100, 7), (1000, 10), (5000, 50)] {
            let rounds = coverage_rounds(n, k);
            let mut covered = vec![false; n * n];
            for round in 1..=rounds as i64 {
                let mut in_degree = vec![0usize; n];
                for s in 0..n {
                    let peers = Ring::positions(s, n, round, k);
                    assert_eq!(peers.len(), k, "n={n} k={k}");
                    let mut seen = vec![false; n];
                    for &t in &peers {
                        assert_ne!(t, s, "never itself");
                        assert!(!seen[t], "no peer twice in a round");
                        seen[t] = true;
                        in_degree[t] += 1;
                        covered[s * n + t] = true;
                    }
                }
                assert!(
                    in_degree.iter().all(|d| *d <= 2 * k),
                    "n={n} k={k}: in-degree above 2k"
                );
                assert!(in_degree.iter().all(|d| *d == k), "exactly k here");
            }
            let missing = (0..n)
                .flat_map(|s| (0..n).map(move |t| (s, t)))
                .filter(|(s, t)| s != t && !covered[s * n + t])
                .count();
            assert_eq!(
                missing, 0,
                "n={n} k={k}: pairs not probed in {rounds} rounds"
            );
        }
    }

    #[test]
    fn pods_map_one_to_one_onto_the_ring() {
        let all = pods(1000);
        let ring = Ring::new(&all);
        let mut hit = vec![0; all.len()];
        for pod in &all {
            let first = ring.peers(&pod.name, 1, 1).expect("on the ring");
            assert_ne!(first[0].name, pod.name);
            hit[ring.position[pod.name.as_str()]] += 1;
        }
        assert!(hit.iter().all(|h| *h == 1));
    }

    #[test]
    fn small_carriers_and_unknown_agents_fall_back_to_everyone() {
        let three = pods(3);
        assert_eq!(sample(&three, "kdoctor-agent-00001", 1, 5).len(), 2);
        assert_eq!(sample(&three, "not-here", 1, 1).len(), 3);
        assert!(sample(&pods(1), "kdoctor-agent-00000", 1, 3).is_empty());
        assert_eq!(coverage_rounds(1000, 10), 100);
        assert_eq!(coverage_rounds(10, 3), 3);
        // Every agent computes the same choice from the same list in any order.
        let mut shuffled = pods(50);
        shuffled.reverse();
        assert_eq!(
            sample(&pods(50), "kdoctor-agent-00007", 4, 5),
            sample(&shuffled, "kdoctor-agent-00007", 4, 5)
        );
    }
}
