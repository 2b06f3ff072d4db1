//! Telling a server that fell behind from a path that loses packets. A request that times out
//! says nothing by itself about where it was lost. But a server drops requests when its queue
//! is full (an untuned DNS server's socket buffer: docs/benchmarks.md#dns-against-an-untuned-server),
//! and a full queue delays every request that does get in: the answers to requests sent just
//! before and after the lost one waited far longer than usual. A lossy network or a conntrack
//! race drops requests without delaying their neighbours.
//!
//! So each answered request adds its service time to a ring of buckets by send time (a bucket
//! about [`PER_BUCKET`] requests wide at the planned rate), and each timeout looks at the
//! requests sent within one bucket of it: their answers having waited, on
//! average, [`SLOWER`] times the run's fastest answer (and at least [`FLOOR`]) marks the loss as
//! the server's queue. The mean of many neighbours, not the slowest one: at high rates a bucket
//! holds hundreds of answers, whose slowest is the tail of any server. The fastest answer, not
//! the median: a server that falls behind for most of a run makes its median the queue's wait.
//! Pure: the engine hands it instants and durations.

use std::time::Duration;

use tokio::time::Instant;

/// Requests a bucket of send times holds at the planned rate: enough for a mean that one slow
/// answer does not move, few enough that a burst of a few milliseconds stands out.
pub const PER_BUCKET: f64 = 50.0;

/// The narrowest and widest bucket of send times.
pub const BUCKET_RANGE: (Duration, Duration) =
    (Duration::from_millis(1), Duration::from_millis(100));

/// How much slower than the fastest answer the neighbours of a loss must have been.
pub const SLOWER: u32 = 8;

/// The least wait that counts as queueing, whatever the fastest answer (a loopback server
/// answers in tens of microseconds; scheduling noise reaches hundreds).
pub const FLOOR: Duration = Duration::from_millis(1);

/// Answers per bucket of send times (their count and summed service time), for the last
/// `timeout` and a few buckets more.
#[derive(Clone, Debug)]
pub struct QueueWatch {
    start: Instant,
    bucket: Duration,
    /// (bucket number, answers, summed service time in µs) per ring slot.
    slots: Vec<(u64, u64, u64)>,
}

impl QueueWatch {
    /// A watch for requests sent at `qps` from `start` on that time out after `timeout`: a
    /// bucket holds about [`PER_BUCKET`] requests, and the ring spans the timeout, so a request's
    /// neighbours are still there when it times out.
    pub fn new(start: Instant, qps: f64, timeout: Duration) -> QueueWatch {
        let (narrowest, widest) = BUCKET_RANGE;
        let bucket = if qps > 0.0 && qps.is_finite() {
            Duration::from_secs_f64((PER_BUCKET / qps).min(widest.as_secs_f64()))
                .clamp(narrowest, widest)
        } else {
            widest
        };
        let buckets = (timeout.as_nanos() / bucket.as_nanos()) as usize + 4;
        QueueWatch {
            start,
            bucket,
            // Bounded: 400,000 slots of 24 bytes at most (a timeout of 400 s at 1 ms buckets).
            slots: vec![(u64::MAX, 0, 0); buckets.min(400_000)],
        }
    }

    fn bucket(&self, sent: Instant) -> u64 {
        (sent.saturating_duration_since(self.start).as_nanos() / self.bucket.as_nanos()) as u64
    }

    /// An answer to the request sent at `sent` came after `service`.
    pub fn answered(&mut self, sent: Instant, service: Duration) {
        let bucket = self.bucket(sent);
        let len = self.slots.len() as u64;
        let slot = &mut self.slots[(bucket % len) as usize];
        let micros = service.as_micros().min(u128::from(u64::MAX)) as u64;
        if slot.0 != bucket {
            *slot = (bucket, 0, 0);
        }
        slot.1 += 1;
        slot.2 = slot.2.saturating_add(micros);
    }

    /// The mean wait of the answers to requests sent within one bucket of `sent` (`None`: none
    /// answered).
    pub fn mean_near(&self, sent: Instant) -> Option<Duration> {
        let bucket = self.bucket(sent);
        let len = self.slots.len() as u64;
        let near = bucket.saturating_sub(1)..=bucket + 1;
        let (count, sum) = near
            .clone()
            .map(|b| self.slots[(b % len) as usize])
            // A slot may still hold a bucket of a lap before.
            .filter(|(at, _, _)| near.contains(at))
            .fold((0u64, 0u64), |(n, s), (_, count, sum)| {
                (n + count, s.saturating_add(sum))
            });
        (count > 0).then(|| Duration::from_micros(sum / count))
    }

    /// Whether the request sent at `sent`, lost, was lost while the server's queue was full:
    /// the answers next to it waited, on average, [`SLOWER`] times `fastest` and at least
    /// [`FLOOR`].
    pub fn lost_while_queued(&self, sent: Instant, fastest: Duration) -> bool {
        let threshold = (fastest * SLOWER).max(FLOOR);
        self.mean_near(sent).is_some_and(|mean| mean >= threshold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FASTEST: Duration = Duration::from_micros(20);

    #[test]
    fn a_loss_among_slow_answers_is_the_servers_queue() {
        let start = Instant::now();
        let mut watch = QueueWatch::new(start, 5000.0, Duration::from_secs(2));
        let at = |ms: u64| start + Duration::from_millis(ms);
        watch.answered(at(100), Duration::from_millis(3));
        watch.answered(at(104), Duration::from_millis(5));
        // Sent 2 ms after answers that waited 4 ms on average: the queue.
        assert!(watch.lost_while_queued(at(106), FASTEST));
        // Sent where the answers were quick: not the queue.
        watch.answered(at(500), Duration::from_micros(60));
        watch.answered(at(502), Duration::from_micros(40));
        assert!(!watch.lost_while_queued(at(501), FASTEST));
        // Nothing answered anywhere near: not counted as the queue either.
        assert!(!watch.lost_while_queued(at(900), FASTEST));
    }

    #[test]
    fn one_slow_answer_among_many_quick_ones_is_not_a_queue() {
        let start = Instant::now();
        let mut watch = QueueWatch::new(start, 5000.0, Duration::from_secs(2));
        let at = |us: u64| start + Duration::from_micros(us);
        for i in 0..200 {
            watch.answered(at(50_000 + i * 50), Duration::from_micros(50));
        }
        watch.answered(at(55_000), Duration::from_millis(20));
        assert!(!watch.lost_while_queued(at(55_000), FASTEST));
    }

    #[test]
    fn the_threshold_follows_the_fastest_answer_above_the_floor() {
        let start = Instant::now();
        let mut watch = QueueWatch::new(start, 5000.0, Duration::from_secs(1));
        let at = |ms: u64| start + Duration::from_millis(ms);
        watch.answered(at(10), Duration::from_millis(4));
        // 4 ms is 8 × a fastest answer of 500 µs, not of 600 µs.
        assert!(watch.lost_while_queued(at(10), Duration::from_micros(500)));
        assert!(!watch.lost_while_queued(at(10), Duration::from_micros(600)));
        // Below the floor nothing is queueing, however fast the fastest answer.
        watch.answered(at(300), Duration::from_micros(900));
        assert!(!watch.lost_while_queued(at(300), Duration::from_micros(1)));
    }

    #[test]
    fn a_bucket_holds_about_fifty_requests_within_its_bounds() {
        let start = Instant::now();
        let width = |qps: f64| QueueWatch::new(start, qps, Duration::from_secs(1)).bucket;
        assert_eq!(width(5000.0), Duration::from_millis(10));
        assert_eq!(width(1_000_000.0), Duration::from_millis(1));
        assert_eq!(width(10.0), Duration::from_millis(100));
        assert_eq!(width(0.0), Duration::from_millis(100));
        assert_eq!(
            QueueWatch::new(start, 1e9, Duration::from_secs(3600))
                .slots
                .len(),
            400_000
        );
    }

    #[test]
    fn old_buckets_are_overwritten_not_mixed_in() {
        let start = Instant::now();
        let mut watch = QueueWatch::new(start, 5000.0, Duration::from_millis(50));
        let at = |ms: u64| start + Duration::from_millis(ms);
        watch.answered(at(5), Duration::from_millis(20));
        // 9 buckets later (the ring has 9 slots) the slot is reused for a new bucket.
        watch.answered(at(95), Duration::from_micros(30));
        assert_eq!(watch.mean_near(at(95)), Some(Duration::from_micros(30)));
        assert!(!watch.lost_while_queued(at(95), FASTEST));
    }
}
