//! The open-loop pacer: request `i` is due at `t0 + i/qps` on an absolute schedule, so timer
//! lateness never accumulates into drift (vegeta's ConstantPacer, wrk2, oha). The pure schedule
//! maths is separate from the loop that sleeps, so it is tested without clocks.

use std::time::Duration;

use tokio::time::Instant;

use crate::fine_timer::FineTimer;

/// The planned requests of one run: `total` requests at `qps` per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    /// Requests per second (may be fractional).
    qps: f64,
    /// Number of planned requests (`qps × duration`, rounded).
    total: u64,
    /// Length of the run.
    duration: Duration,
}

/// Why a schedule cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    /// qps is zero, negative or not a number.
    #[error("qps must be a positive number, got {0}")]
    Qps(f64),
    /// Duration is zero.
    #[error("duration must be positive")]
    Duration,
    /// More requests than a run may plan.
    #[error("qps × duration is {0} requests, more than the maximum of {MAX_REQUESTS}")]
    TooMany(f64),
}

/// The most requests one run may plan (bounds memory and time of a mistyped command).
pub const MAX_REQUESTS: u64 = 100_000_000;

impl Schedule {
    /// `qps × duration` requests spread evenly over `duration`.
    pub fn new(qps: f64, duration: Duration) -> Result<Schedule, ScheduleError> {
        if !qps.is_finite() || qps <= 0.0 {
            return Err(ScheduleError::Qps(qps));
        }
        if duration.is_zero() {
            return Err(ScheduleError::Duration);
        }
        let planned = (qps * duration.as_secs_f64()).round();
        if planned > MAX_REQUESTS as f64 {
            return Err(ScheduleError::TooMany(planned));
        }
        Ok(Schedule {
            qps,
            total: planned.max(1.0) as u64,
            duration,
        })
    }

    /// Number of planned requests.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Requests per second.
    pub fn qps(&self) -> f64 {
        self.qps
    }

    /// Length of the run.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// Offset of request `i` from the start: `i / qps`, computed from `i` each time so that
    /// rounding never accumulates.
    pub fn offset(&self, i: u64) -> Duration {
        Duration::from_nanos((i as f64 * 1e9 / self.qps).round() as u64)
    }

    /// How many requests are due `elapsed` after the start (capped at `total`).
    pub fn due_by(&self, elapsed: Duration) -> u64 {
        let mut n = (elapsed.as_secs_f64() * self.qps).floor() as u64 + 1;
        // Float rounding can put the boundary one slot off: settle it with `offset`.
        while n > 0 && self.offset(n - 1) > elapsed {
            n -= 1;
        }
        while n < self.total && self.offset(n) <= elapsed {
            n += 1;
        }
        n.min(self.total)
    }
}

/// One planned request as the pacer hands it out.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    /// Index in the schedule.
    pub index: u64,
    /// When it was due.
    pub scheduled: Instant,
    /// When the pacer woke and handed it out (the origin of response time: the timer's own
    /// lateness is reported separately instead of being blamed on the target).
    pub woke: Instant,
}

impl Slot {
    /// How late the pacer was for this slot.
    pub fn lateness(&self) -> Duration {
        self.woke.saturating_duration_since(self.scheduled)
    }
}

/// What the pacer did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacerSummary {
    /// Slots handed out.
    pub dispatched: u64,
    /// Slots never handed out because the pacer ran past the end of the run.
    pub overrun: u64,
}

/// Slots reached this long after the end of the run are not sent: the run is over, and a
/// prober that cannot keep up must say so instead of stretching the run. A second, so that a
/// pod throttled by its CPU limit (CFS periods of 100 ms) sends late — and reports the
/// lateness — rather than dropping requests.
pub const OVERRUN_GRACE: Duration = Duration::from_secs(1);

/// The shortest time between two wakes of the pacer when slots are closer than that, unless
/// the prober asks for another (`Prober::wake_quantum`). Each wake is a turn of the event loop
/// that costs more CPU than a request on these machines: waking for every slot made the HTTP
/// prober spend 2-3× oha's CPU per request at 10,000-20,000/s. Groups of slots a quarter of a
/// millisecond apart keep it near oha's while the requests of a group wait for each other only
/// microseconds (shown as lateness).
pub const WAKE_QUANTUM: Duration = Duration::from_micros(250);

/// How the pacer waits for the next slot.
enum Waiter {
    /// tokio's timer wheel: millisecond resolution, follows tokio's paused clock.
    Wheel,
    /// A timerfd: microsecond resolution.
    Fine(FineTimer),
}

impl Waiter {
    /// The fine timer when slots are less than a millisecond apart (the wheel would hand them
    /// out in bursts); the wheel otherwise, or when no timerfd can be had.
    fn for_rate(qps: f64) -> Waiter {
        if qps <= 1000.0 {
            return Waiter::Wheel;
        }
        match FineTimer::new() {
            Ok(timer) => Waiter::Fine(timer),
            Err(e) => {
                tracing::warn!(error = %e, "no timerfd: requests go out in millisecond bursts");
                Waiter::Wheel
            }
        }
    }

    async fn until(&self, due: Instant) {
        match self {
            Waiter::Wheel => tokio::time::sleep_until(due).await,
            Waiter::Fine(timer) => {
                if timer.sleep_until(due).await.is_err() {
                    tokio::time::sleep_until(due).await;
                }
            }
        }
    }
}

/// Hands out the slots of a schedule at their due times. The caller waits with [`Pacer::wait`]
/// (and may do other work meanwhile, such as driving the requests in flight), then takes the
/// slots due with [`Pacer::take`]. Slots that are already due when the pacer wakes (it was
/// late) are handed out at once, each with the same wake time.
pub struct Pacer {
    schedule: Schedule,
    start: Instant,
    end: Instant,
    quantum: Duration,
    waiter: Waiter,
    next: u64,
    woke: Instant,
    summary: PacerSummary,
}

impl Pacer {
    /// A pacer for `schedule` starting at `start`; slots closer together than `quantum` go out
    /// in small groups, one wake each.
    pub fn new(schedule: Schedule, start: Instant, quantum: Duration) -> Pacer {
        let quantum = if schedule.offset(1) < quantum {
            quantum
        } else {
            Duration::ZERO
        };
        Pacer {
            schedule,
            start,
            end: start + schedule.duration() + OVERRUN_GRACE,
            quantum,
            waiter: Waiter::for_rate(schedule.qps()),
            next: 0,
            woke: start,
            summary: PacerSummary::default(),
        }
    }

    /// When the next slots are due; `None` once every slot was handed out or given up.
    pub fn due(&self) -> Option<Instant> {
        (self.next < self.schedule.total())
            .then(|| (self.start + self.schedule.offset(self.next)).max(self.woke + self.quantum))
    }

    /// Returns at `due` (at once when it has passed).
    pub async fn wait(&self, due: Instant) {
        if Instant::now() < due {
            self.waiter.until(due).await;
        }
    }

    /// The indexes of the slots due when the pacer woke at `woke` (at least the next one);
    /// none, and the rest counted as overrun, once `woke` is past the end of the run.
    pub fn take(&mut self, woke: Instant) -> std::ops::Range<u64> {
        self.woke = woke;
        let total = self.schedule.total();
        if woke > self.end {
            self.summary.overrun = total - self.next;
            self.next = total;
            return total..total;
        }
        let ready = self.schedule.due_by(woke - self.start).max(self.next + 1);
        let due = self.next..ready;
        self.summary.dispatched += ready - self.next;
        self.next = ready;
        due
    }

    /// Slot `index`, handed out at `woke`.
    pub fn slot(&self, index: u64, woke: Instant) -> Slot {
        Slot {
            index,
            scheduled: self.start + self.schedule.offset(index),
            woke,
        }
    }

    /// What the pacer did so far.
    pub fn summary(&self) -> PacerSummary {
        self.summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives a pacer to the end, handing every slot to `dispatch`.
    async fn run(schedule: Schedule, start: Instant, dispatch: impl FnMut(Slot)) -> PacerSummary {
        run_with(schedule, start, WAKE_QUANTUM, dispatch).await
    }

    /// [`run`] with a wake quantum of the caller's.
    async fn run_with(
        schedule: Schedule,
        start: Instant,
        quantum: Duration,
        mut dispatch: impl FnMut(Slot),
    ) -> PacerSummary {
        let mut pacer = Pacer::new(schedule, start, quantum);
        while let Some(due) = pacer.due() {
            pacer.wait(due).await;
            let woke = Instant::now();
            for index in pacer.take(woke) {
                dispatch(pacer.slot(index, woke));
            }
        }
        pacer.summary()
    }

    #[test]
    fn total_is_qps_times_duration() {
        let s = Schedule::new(100.0, Duration::from_secs(10)).unwrap();
        assert_eq!(s.total(), 1000);
        let s = Schedule::new(0.5, Duration::from_secs(3)).unwrap();
        assert_eq!(s.total(), 2);
        assert_eq!(s.offset(1), Duration::from_secs(2));
        // At least one request, even when qps × duration rounds to zero.
        assert_eq!(
            Schedule::new(0.1, Duration::from_secs(1)).unwrap().total(),
            1
        );
    }

    #[test]
    fn rejects_nonsense() {
        assert_eq!(
            Schedule::new(0.0, Duration::from_secs(1)),
            Err(ScheduleError::Qps(0.0))
        );
        assert!(Schedule::new(f64::NAN, Duration::from_secs(1)).is_err());
        assert!(Schedule::new(-1.0, Duration::from_secs(1)).is_err());
        assert_eq!(
            Schedule::new(1.0, Duration::ZERO),
            Err(ScheduleError::Duration)
        );
        assert!(matches!(
            Schedule::new(1e9, Duration::from_secs(1000)),
            Err(ScheduleError::TooMany(_))
        ));
    }

    #[test]
    fn offsets_do_not_drift() {
        // 3 qps: 1/3 s is not representable; offset(3k) must still be exactly k seconds.
        let s = Schedule::new(3.0, Duration::from_secs(100)).unwrap();
        for k in [1u64, 10, 33, 99] {
            assert_eq!(s.offset(3 * k), Duration::from_secs(k));
        }
        let s = Schedule::new(7000.0, Duration::from_secs(60)).unwrap();
        assert_eq!(s.offset(7000 * 59), Duration::from_secs(59));
    }

    #[test]
    fn due_by_counts_slots_whose_offset_has_passed() {
        let s = Schedule::new(1000.0, Duration::from_secs(1)).unwrap();
        assert_eq!(s.due_by(Duration::ZERO), 1);
        assert_eq!(s.due_by(Duration::from_micros(999)), 1);
        assert_eq!(s.due_by(Duration::from_millis(1)), 2);
        assert_eq!(s.due_by(Duration::from_micros(10_500)), 11);
        assert_eq!(s.due_by(Duration::from_secs(5)), 1000);
        // Exhaustive check against the definition on an awkward rate.
        let s = Schedule::new(3.0, Duration::from_secs(4)).unwrap();
        for ms in 0..5000u64 {
            let elapsed = Duration::from_millis(ms);
            let expected = (0..s.total()).filter(|i| s.offset(*i) <= elapsed).count() as u64;
            assert_eq!(s.due_by(elapsed), expected, "at {ms} ms");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn hands_out_every_slot_on_time_with_a_paused_clock() {
        let s = Schedule::new(50.0, Duration::from_secs(2)).unwrap();
        let start = Instant::now();
        let mut slots = Vec::new();
        let summary = run(s, start, |slot| slots.push(slot)).await;
        assert_eq!(
            summary,
            PacerSummary {
                dispatched: 100,
                overrun: 0
            }
        );
        for (i, slot) in slots.iter().enumerate() {
            assert_eq!(slot.index, i as u64);
            assert_eq!(slot.scheduled, start + s.offset(i as u64));
            assert_eq!(slot.lateness(), Duration::ZERO);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_pacer_catches_up_and_reports_lateness() {
        let s = Schedule::new(100.0, Duration::from_secs(1)).unwrap();
        // Started 55 ms in the past: slots 0..=5 are due at once.
        let start = Instant::now() - Duration::from_millis(55);
        let mut slots = Vec::new();
        run(s, start, |slot| slots.push(slot)).await;
        assert_eq!(slots.len(), 100);
        assert_eq!(slots[0].lateness(), Duration::from_millis(55));
        assert_eq!(slots[5].lateness(), Duration::from_millis(5));
        assert_eq!(slots[6].lateness(), Duration::ZERO);
        assert!(slots[..6].iter().all(|s| s.woke == slots[0].woke));
    }

    #[tokio::test(start_paused = true)]
    async fn slots_past_the_end_are_not_sent() {
        let s = Schedule::new(10.0, Duration::from_secs(1)).unwrap();
        let start = Instant::now() - Duration::from_millis(2500);
        let summary = run(s, start, |_| {}).await;
        assert_eq!(
            summary,
            PacerSummary {
                dispatched: 0,
                overrun: 10
            }
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn above_a_thousand_per_second_slots_go_out_one_by_one() {
        // 4,000/s: tokio's wheel would wake once a millisecond and hand out 4 slots per wake.
        let s = Schedule::new(4000.0, Duration::from_millis(250)).unwrap();
        let mut slots = Vec::new();
        let summary = run(s, Instant::now(), |slot| slots.push(slot)).await;
        assert_eq!(summary.dispatched, 1000);
        let mut wakes: Vec<Instant> = slots.iter().map(|s| s.woke).collect();
        wakes.dedup();
        // A loaded machine makes the pacer late now and then; most slots still get a wake of
        // their own (the wheel gives one wake to every four).
        assert!(wakes.len() >= 600, "{} wakes for 1000 slots", wakes.len());
    }

    #[tokio::test]
    async fn closely_spaced_slots_wake_the_pacer_a_quantum_apart() {
        for quantum in [WAKE_QUANTUM, Duration::from_micros(100)] {
            let s = Schedule::new(100_000.0, Duration::from_millis(100)).unwrap();
            let mut slots = Vec::new();
            let summary = run_with(s, Instant::now(), quantum, |slot| slots.push(slot)).await;
            assert_eq!(summary.dispatched, 10_000);
            let mut wakes: Vec<Instant> = slots.iter().map(|s| s.woke).collect();
            wakes.dedup();
            assert!(
                wakes.windows(2).all(|w| w[1] - w[0] >= quantum),
                "two wakes closer than {quantum:?}"
            );
        }
    }
}
