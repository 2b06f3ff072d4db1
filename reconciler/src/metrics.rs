//! The controller's Prometheus metrics: rounds, harvests, carriers, reconciles, status writes,
//! leadership.

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Metrics of the reconciler and harvester.
#[derive(Clone)]
pub struct ControllerMetrics {
    /// Rounds finalised, by kind and result.
    pub rounds: IntCounterVec,
    /// Round duration (planned start to finalisation), by kind.
    pub round_duration: HistogramVec,
    /// Time to harvest one agent (connect, list, fetch, store, acknowledge).
    pub harvest_duration: Histogram,
    /// Failed agent harvests, by reason (connect, tls, identity, http, timeout, decode, store).
    pub harvest_failures: IntCounterVec,
    /// Agent reports stored, by kind.
    pub reports_stored: IntCounterVec,
    /// Per-task carriers, by state (creating, created, deleted).
    pub carriers: IntGaugeVec,
    /// Carrier objects written because they were missing or had drifted, by kind.
    pub carrier_applies: IntCounterVec,
    /// Carrier objects deleted because their task is gone, by kind.
    pub orphans_deleted: IntCounterVec,
    /// Carrier objects deleted because their task no longer declares them, by kind.
    pub leftovers_deleted: IntCounterVec,
    /// Reconciles, by kind and outcome (ok, error).
    pub reconciles: IntCounterVec,
    /// Task status writes, by kind.
    pub status_writes: IntCounterVec,
    /// Time from the last expected report being stored to its round being finalised.
    pub finalise_lag: Histogram,
    /// 1 while this replica holds the leader Lease.
    pub leader: IntGauge,
    /// Per-task series (last round result, failing nodes, rounds by result).
    pub tasks: crate::task_metrics::TaskMetrics,
}

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
}

fn seconds(name: &str, help: &str, buckets: &[f64]) -> HistogramOpts {
    HistogramOpts::new(name, help).buckets(buckets.to_vec())
}

impl ControllerMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn new(registry: &Registry) -> ControllerMetrics {
        let short = [
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ];
        let long = [
            1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
        ];
        let metrics = ControllerMetrics {
            rounds: counter(
                "kdoctor_controller_rounds_total",
                "Rounds finalised, by task kind and result.",
                &["kind", "result"],
            ),
            round_duration: HistogramVec::new(
                seconds(
                    "kdoctor_controller_round_duration_seconds",
                    "From a round's planned start to its finalisation.",
                    &long,
                ),
                &["kind"],
            )
            .expect("valid metric"),
            harvest_duration: Histogram::with_opts(seconds(
                "kdoctor_controller_harvest_duration_seconds",
                "Harvesting one agent: connect, list, fetch, store durably, acknowledge.",
                &short,
            ))
            .expect("valid metric"),
            harvest_failures: counter(
                "kdoctor_controller_harvest_failures_total",
                "Agent harvests that failed, by reason (connect, tls, identity, http, timeout, decode, store).",
                &["reason"],
            ),
            reports_stored: counter(
                "kdoctor_controller_reports_stored_total",
                "Agent reports stored, by task kind.",
                &["kind"],
            ),
            carriers: IntGaugeVec::new(
                Opts::new(
                    "kdoctor_controller_carriers",
                    "Per-task carriers by state (creating, created, deleted).",
                ),
                &["state"],
            )
            .expect("valid metric"),
            carrier_applies: counter(
                "kdoctor_controller_carrier_applies_total",
                "Carrier objects applied because they were missing or differed from the declaration, by kind.",
                &["kind"],
            ),
            orphans_deleted: counter(
                "kdoctor_controller_orphans_deleted_total",
                "Carrier objects deleted because the task they were made for is gone, by kind.",
                &["kind"],
            ),
            leftovers_deleted: counter(
                "kdoctor_controller_carrier_leftovers_deleted_total",
                "Carrier objects deleted because their task no longer declares them, by kind.",
                &["kind"],
            ),
            reconciles: counter(
                "kdoctor_controller_reconciles_total",
                "Task reconciles, by kind and outcome (ok, error).",
                &["kind", "outcome"],
            ),
            status_writes: counter(
                "kdoctor_controller_status_writes_total",
                "Task status writes, by kind.",
                &["kind"],
            ),
            finalise_lag: Histogram::with_opts(seconds(
                "kdoctor_controller_round_finalise_lag_seconds",
                "From the last expected report being stored to its round being finalised.",
                &short,
            ))
            .expect("valid metric"),
            leader: IntGauge::new(
                "kdoctor_controller_leader",
                "1 while this replica holds the leader Lease.",
            )
            .expect("valid metric"),
            tasks: crate::task_metrics::TaskMetrics::new(registry),
        };
        for collector in [
            Box::new(metrics.rounds.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(metrics.round_duration.clone()),
            Box::new(metrics.harvest_duration.clone()),
            Box::new(metrics.harvest_failures.clone()),
            Box::new(metrics.reports_stored.clone()),
            Box::new(metrics.carriers.clone()),
            Box::new(metrics.carrier_applies.clone()),
            Box::new(metrics.orphans_deleted.clone()),
            Box::new(metrics.leftovers_deleted.clone()),
            Box::new(metrics.reconciles.clone()),
            Box::new(metrics.status_writes.clone()),
            Box::new(metrics.finalise_lag.clone()),
            Box::new(metrics.leader.clone()),
        ] {
            // Registering twice (a second controller in one process, in tests) is harmless.
            let _ = registry.register(collector);
        }
        metrics
    }
}
