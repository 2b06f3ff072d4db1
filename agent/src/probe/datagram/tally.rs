//! What a stream of echoes adds up to beyond latencies: RFC 3550's interarrival jitter of the
//! path to the target, the hop counts most echoes saw, reordering. Pure: fed one reading per
//! echo, in the order the echoes came.

/// What one echo told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EchoReading {
    /// The target's receive time less the prober's send time, nanoseconds. Both are wall
    /// clocks of different hosts: only differences between echoes mean anything (jitter).
    pub transit_ns: i64,
    /// Routers on the way to the target, when it read the TTL.
    pub forward_hops: Option<u8>,
    /// Routers on the way back, when the prober read the TTL.
    pub return_hops: Option<u8>,
    /// A later datagram's echo came before this one.
    pub reordered: bool,
    /// From the send to this kernel's receive time of the echo (`SO_TIMESTAMPNS`), when the
    /// kernel gave one: the round trip without the prober's own wake-up, which the engine
    /// takes as the request's time.
    pub round_trip: Option<std::time::Duration>,
}

/// Hop counts seen, by count (a path longer than 64 routers is not a cluster's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HopCounts([u64; 65]);

impl Default for HopCounts {
    fn default() -> Self {
        HopCounts([0; 65])
    }
}

impl HopCounts {
    fn add(&mut self, hops: Option<u8>) {
        if let Some(slot) = hops.and_then(|h| self.0.get_mut(usize::from(h))) {
            *slot += 1;
        }
    }

    /// The count most echoes saw (the lower one on a tie); `None` when none was read.
    pub fn most_seen(&self) -> Option<u8> {
        let (hops, seen) = self
            .0
            .iter()
            .enumerate()
            .rev()
            .max_by_key(|(_, seen)| **seen)?;
        (*seen > 0).then(|| u8::try_from(hops).unwrap_or(u8::MAX))
    }
}

/// The datagram side of one target's run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DatagramTally {
    /// Bytes of each datagram.
    pub payload_bytes: u64,
    /// Echoes after the echo of a later datagram.
    pub reordered: u64,
    /// Echoes of a datagram echoed before (the prober adds them at the end).
    pub duplicates: u64,
    /// Echoes after their request's timeout (the prober adds them at the end).
    pub late: u64,
    /// RFC 3550 §6.4.1's running estimate, nanoseconds.
    jitter_ns: f64,
    last_transit_ns: Option<i64>,
    /// Hops to the target.
    pub forward_hops: HopCounts,
    /// Hops back.
    pub return_hops: HopCounts,
    /// The path MTU search's finding, when one ran (`spec.target.pathMTU`).
    pub path_mtu: Option<PathMtuFinding>,
}

/// What a path MTU search found.
#[derive(Clone, Debug, PartialEq)]
pub enum PathMtuFinding {
    /// The path's MTU and why larger packets do not pass.
    Found(super::pmtu::PathMtu),
    /// Not even the smallest packet searched passed.
    NothingPassed,
    /// The search could not run (the socket's error).
    Failed(String),
}

impl DatagramTally {
    /// Adds one echo.
    pub fn observe(&mut self, reading: &EchoReading) {
        if let Some(last) = self.last_transit_ns {
            let d = reading.transit_ns.saturating_sub(last).unsigned_abs() as f64;
            self.jitter_ns += (d - self.jitter_ns) / 16.0;
        }
        self.last_transit_ns = Some(reading.transit_ns);
        if reading.reordered {
            self.reordered += 1;
        }
        self.forward_hops.add(reading.forward_hops);
        self.return_hops.add(reading.return_hops);
    }

    /// The interarrival jitter, milliseconds.
    pub fn jitter_ms(&self) -> f64 {
        self.jitter_ns / 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo(transit_ns: i64, forward: u8) -> EchoReading {
        EchoReading {
            transit_ns,
            forward_hops: Some(forward),
            return_hops: None,
            reordered: false,
            round_trip: None,
        }
    }

    #[test]
    fn jitter_follows_rfc_3550_and_a_constant_clock_offset_cancels() {
        // Transit times with a large clock offset between the hosts; only their differences
        // count: |D| = 1 ms, then 0, then 2 ms.
        let offset = 5_000_000_000_000i64;
        let mut tally = DatagramTally::default();
        for transit in [100_000, 1_100_000, 1_100_000, 3_100_000] {
            tally.observe(&echo(offset + transit, 1));
        }
        let mut j = 0.0;
        for d in [1e6, 0.0, 2e6] {
            j += (d - j) / 16.0;
        }
        assert!((tally.jitter_ms() - j / 1e6).abs() < 1e-12);
        assert!(tally.jitter_ms() > 0.1);
        // A steady path has none.
        let mut steady = DatagramTally::default();
        (0..100).for_each(|_| steady.observe(&echo(offset, 1)));
        assert_eq!(steady.jitter_ms(), 0.0);
    }

    #[test]
    fn hops_are_the_count_most_echoes_saw_and_reordering_is_counted() {
        let mut tally = DatagramTally::default();
        for hops in [2, 3, 3, 2, 3] {
            tally.observe(&echo(0, hops));
        }
        tally.observe(&EchoReading {
            reordered: true,
            forward_hops: None,
            ..echo(0, 0)
        });
        assert_eq!(tally.forward_hops.most_seen(), Some(3));
        assert_eq!(tally.return_hops.most_seen(), None);
        assert_eq!(tally.reordered, 1);
        let mut tie = HopCounts::default();
        tie.add(Some(4));
        tie.add(Some(1));
        assert_eq!(tie.most_seen(), Some(1));
    }
}
