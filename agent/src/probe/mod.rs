//! The prober engine (prior-art §1.9): one open-loop pacer per target on an absolute schedule,
//! requests under an in-flight cap (the first few driven by the pacer's task, more spawned), a
//! timeout over the whole request, and every result recorded with its service time, its
//! response time from the pacer's wake time, and the pacer's lateness.

pub mod datagram;
pub mod dns;
pub mod http;
pub mod isolation;
pub mod outcome;
pub mod queueing;
pub mod record;
pub mod tcp;
pub mod threads;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::pacer::{Pacer, Schedule, ScheduleError, Slot};
use crate::probe_metrics::TargetSeries;
use outcome::{Attempt, ErrorClass, ProbeError};
use queueing::QueueWatch;
use record::Recorder;

/// Something that sends one request to one target.
pub trait Prober: Send + Sync + 'static {
    /// `http`, `tcp`, `udp` or `dns` (metric label).
    fn kind(&self) -> &'static str;
    /// Sends one request and reads the whole answer. The engine bounds it by the timeout.
    fn probe(&self) -> impl Future<Output = Attempt> + Send;
    /// The shortest time between two wakes of the pacer when slots are closer than that.
    fn wake_quantum(&self) -> Duration {
        crate::pacer::WAKE_QUANTUM
    }
    /// Adds what the prober knows only at the end of a run (every request has finished).
    fn finish(&self, _recorder: &mut Recorder) {}
}

/// How one target is probed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plan {
    /// When requests are due.
    pub schedule: Schedule,
    /// Per-request timeout over connect, request and the whole answer.
    pub timeout: Duration,
    /// Most requests in flight; a due request beyond it is not sent and counted.
    pub max_in_flight: usize,
}

impl Plan {
    /// `qps` for `duration` with `timeout` per request, and the default in-flight cap: what
    /// the rate needs if every request took the whole timeout, plus slack.
    pub fn new(qps: f64, duration: Duration, timeout: Duration) -> Result<Plan, ScheduleError> {
        let schedule = Schedule::new(qps, duration)?;
        let needed = (qps * timeout.as_secs_f64() * 1.1).ceil();
        Ok(Plan {
            schedule,
            timeout,
            max_in_flight: (needed as usize).saturating_add(16).min(1_000_000),
        })
    }
}

/// Requests in flight that the pacer's own task drives before it spawns more.
const INLINE_REQUESTS: usize = 4;

/// Live counters of a run, for a progress line.
#[derive(Debug, Default)]
pub struct Progress {
    /// Requests sent.
    pub sent: AtomicU64,
    /// Requests finished.
    pub done: AtomicU64,
    /// Requests that failed.
    pub failed: AtomicU64,
    /// Planned requests not sent.
    pub unsent: AtomicU64,
}

/// The result of one run against one target.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// Everything recorded.
    pub recorder: Recorder,
    /// Wall-clock time of the first planned request.
    pub started: jiff::Timestamp,
    /// From the start until the last answer.
    pub elapsed: Duration,
    /// From the start until the last request was handed out, plus one interval: the time the
    /// sending took (equal to the duration when the prober kept up).
    pub send_span: Duration,
    /// Requests planned.
    pub planned: u64,
    /// The plan.
    pub plan: Plan,
}

impl Measurement {
    /// Wall-clock time of the last answer.
    pub fn ended(&self) -> jiff::Timestamp {
        let span = jiff::SignedDuration::try_from(self.elapsed).unwrap_or_default();
        self.started.checked_add(span).unwrap_or(self.started)
    }

    /// Requests per second achieved: sent requests over the time the sending took.
    pub fn achieved_rate(&self) -> f64 {
        let secs = self.send_span.as_secs_f64();
        if secs > 0.0 {
            self.recorder.requests as f64 / secs
        } else {
            0.0
        }
    }
}

/// What every finished request updates, under one lock: the recorder, and the queue watch that
/// judges its timeouts (probe::queueing).
struct Tally {
    recorder: Recorder,
    queue: QueueWatch,
}

/// The tally, also after a panic in another request's task: recording is a few counter
/// updates, so a poisoned lock still guards usable numbers, and losing the run would be worse.
fn locked(tally: &Mutex<Tally>) -> std::sync::MutexGuard<'_, Tally> {
    tally.lock().unwrap_or_else(|e| e.into_inner())
}

/// Probes one target according to `plan`; returns when every sent request has finished.
pub async fn run<P: Prober>(
    prober: Arc<P>,
    plan: Plan,
    progress: Arc<Progress>,
    metrics: Option<Metrics>,
) -> Measurement {
    run_observed(prober, plan, progress, metrics, None).await
}

/// [`run`], also recording every request in the target's per-probe series as it finishes.
pub async fn run_observed<P: Prober>(
    prober: Arc<P>,
    plan: Plan,
    progress: Arc<Progress>,
    metrics: Option<Metrics>,
    series: Option<Arc<TargetSeries>>,
) -> Measurement {
    // The pacer and the requests it spawns run on one prober thread of their own, never on the
    // caller's thread nor spread over a shared runtime's workers (`threads`).
    let mut paced = threads::spawn(pace(prober, plan, progress, metrics, series));
    match paced.finished().await {
        Ok(measurement) => measurement,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Cancelled: only when the process ends (the prober threads' runtimes never shut down).
        Err(_) => std::future::pending().await,
    }
}

/// The request counters of one run, resolved once: looking a labelled counter up for every
/// request (and allocating its label) cost more than the counting.
struct Counters {
    ok: prometheus::IntCounter,
    by_outcome: prometheus::IntCounterVec,
    kind: &'static str,
}

impl Counters {
    fn count(&self, attempt: &Attempt) {
        match &attempt.result {
            Ok(()) => self.ok.inc(),
            Err(e) => self
                .by_outcome
                .with_label_values(&[self.kind, &e.class.label()])
                .inc(),
        }
    }
}

/// What every request of a run shares: one reference per request instead of one per part.
struct Shared<P> {
    prober: Arc<P>,
    progress: Arc<Progress>,
    tally: Mutex<Tally>,
    counters: Option<Counters>,
    series: Option<Arc<TargetSeries>>,
    timeout: Duration,
}

impl<P: Prober> Shared<P> {
    /// Counts `n` planned requests that were not sent.
    fn unsent(&self, n: u64, counter: Option<&prometheus::IntCounter>) {
        if n == 0 {
            return;
        }
        {
            let recorder = &mut locked(&self.tally).recorder;
            for _ in 0..n {
                recorder.record_unsent();
            }
        }
        self.progress.unsent.fetch_add(n, Ordering::Relaxed);
        if let Some(s) = &self.series {
            s.unsent(n);
        }
        if let Some(c) = counter {
            c.inc_by(n);
        }
    }

    /// Sends one request and records it.
    async fn request(&self, slot: Slot) {
        let sent = Instant::now();
        // Boxed: a request's future (hyper, TLS) is large, and the spawned task is moved
        // several times on its way into the scheduler.
        let request = Box::pin(self.prober.probe());
        let attempt = match tokio::time::timeout(self.timeout, request).await {
            Ok(attempt) => attempt,
            Err(_) => Attempt::failed(ProbeError::new(ErrorClass::Timeout, "")),
        };
        let end = Instant::now();
        // Service time starts when the request was handed to a connection. An echo the kernel
        // timestamped on arrival ends there, not when this task woke to read it.
        let (service, response) = match attempt.echo.as_ref().and_then(|e| e.round_trip) {
            Some(round_trip) => (round_trip, (sent - slot.woke) + round_trip),
            None => ((end - sent).saturating_sub(attempt.queued), end - slot.woke),
        };
        {
            let mut tally = locked(&self.tally);
            let Tally { recorder, queue } = &mut *tally;
            recorder.record(&attempt, service, response, slot.lateness());
            match &attempt.result {
                Ok(()) => queue.answered(sent, service),
                Err(e) if e.class == ErrorClass::Timeout => {
                    let fastest = Duration::from_micros(recorder.response_ok.min());
                    if queue.lost_while_queued(sent, fastest) {
                        recorder.lost_while_queued += 1;
                    }
                }
                Err(_) => {}
            }
        }
        if let Some(s) = &self.series {
            s.observe(&attempt, response);
        }
        self.progress.done.fetch_add(1, Ordering::Relaxed);
        if attempt.result.is_err() {
            self.progress.failed.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(c) = &self.counters {
            c.count(&attempt);
        }
    }
}

async fn pace<P: Prober>(
    prober: Arc<P>,
    plan: Plan,
    progress: Arc<Progress>,
    metrics: Option<Metrics>,
    series: Option<Arc<TargetSeries>>,
) -> Measurement {
    let kind = prober.kind();
    let shared = Arc::new(Shared {
        prober,
        progress,
        tally: Mutex::new(Tally {
            recorder: Recorder::default(),
            queue: QueueWatch::new(Instant::now(), plan.schedule.qps(), plan.timeout),
        }),
        counters: metrics.as_ref().map(|m| Counters {
            ok: m.probe_requests.with_label_values(&[kind, "ok"]),
            by_outcome: m.probe_requests.clone(),
            kind,
        }),
        series,
        timeout: plan.timeout,
    });
    let unsent_counter = metrics
        .as_ref()
        .map(|m| m.probe_unsent.with_label_values(&[kind]));
    let started = jiff::Timestamp::now();
    let start = Instant::now();
    let mut last_woke = start;
    let mut pacer = Pacer::new(plan.schedule, start, shared.prober.wake_quantum());
    let permits = Arc::new(Semaphore::new(plan.max_in_flight));
    // The first few requests in flight are driven by this task; more are spawned. A task per
    // request woke the runtime's other worker for each one, which at low rates cost more
    // latency than the request (a DNS p50 of 95 µs instead of 30 µs at 1,000/s); at high rates
    // spawning spreads the requests, and the kernel's work of sending them, over both cores.
    let mut inline = FuturesUnordered::new();
    while let Some(due) = pacer.due() {
        {
            let wait = pacer.wait(due);
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    biased;
                    () = &mut wait => break,
                    Some(()) = inline.next(), if !inline.is_empty() => {}
                }
            }
        }
        let woke = Instant::now();
        for index in pacer.take(woke) {
            last_woke = woke;
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                shared.unsent(1, unsent_counter.as_ref());
                continue;
            };
            shared.progress.sent.fetch_add(1, Ordering::Relaxed);
            let slot = pacer.slot(index, woke);
            let shared = shared.clone();
            let request = async move {
                shared.request(slot).await;
                drop(permit);
            };
            if inline.len() < INLINE_REQUESTS {
                inline.push(request);
            } else {
                tokio::spawn(request);
            }
        }
    }
    while inline.next().await.is_some() {}
    // Every permit back means every request has finished.
    let all = u32::try_from(plan.max_in_flight).unwrap_or(u32::MAX);
    let _ = permits.acquire_many(all).await;
    let summary = pacer.summary();
    shared.unsent(summary.overrun, unsent_counter.as_ref());
    let elapsed = start.elapsed();
    let interval = Duration::from_secs_f64(1.0 / plan.schedule.qps());
    let send_span = if summary.dispatched == 0 {
        Duration::ZERO
    } else {
        last_woke.saturating_duration_since(start) + interval
    };
    let recorder = {
        let mut tally = locked(&shared.tally);
        shared.prober.finish(&mut tally.recorder);
        tally.recorder.clone()
    };
    Measurement {
        recorder,
        started,
        elapsed,
        send_span,
        planned: plan.schedule.total(),
        plan,
    }
}
