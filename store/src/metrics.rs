//! Prometheus metrics of the store.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// Counters and gauges the store keeps up to date.
#[derive(Clone, Debug)]
pub struct StoreMetrics {
    /// Reports written, by outcome (`created`, `updated`, `unchanged`).
    pub reports_written: IntCounterVec,
    /// Rounds removed by retention, by reason (`age`, `size`).
    pub retention_rounds: IntCounterVec,
    /// Bytes removed by retention, by reason.
    pub retention_bytes: IntCounterVec,
    /// Task incarnations removed (by retention or delete).
    pub tasks_purged: IntCounter,
    /// Task incarnations stored.
    pub tasks: IntGauge,
    /// Bytes stored (compressed).
    pub stored_bytes: IntGauge,
    /// Last resourceVersion.
    pub resource_version: IntGauge,
    /// Reports waiting for export.
    pub outbox_length: IntGauge,
    /// Reports never exported because the outbox was full.
    pub outbox_dropped: IntCounter,
    /// 1 once the store stopped on an I/O error (a full disk, say) until it is reopened.
    pub failed: IntGauge,
}

impl StoreMetrics {
    /// Creates the metrics (not registered).
    pub fn new() -> StoreMetrics {
        let vec = |name: &str, help: &str, label: &str| {
            IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid metric")
        };
        StoreMetrics {
            reports_written: vec(
                "kdoctor_store_reports_written_total",
                "Agent reports written to the store, by outcome.",
                "outcome",
            ),
            retention_rounds: vec(
                "kdoctor_store_retention_rounds_removed_total",
                "Rounds removed by retention, by reason.",
                "reason",
            ),
            retention_bytes: vec(
                "kdoctor_store_retention_bytes_removed_total",
                "Stored bytes removed by retention, by reason.",
                "reason",
            ),
            tasks_purged: IntCounter::new(
                "kdoctor_store_tasks_purged_total",
                "Task incarnations removed from the store.",
            )
            .expect("valid metric"),
            tasks: IntGauge::new("kdoctor_store_tasks", "Task incarnations in the store.")
                .expect("valid metric"),
            stored_bytes: IntGauge::new(
                "kdoctor_store_stored_bytes",
                "Bytes stored (compressed) for tasks, rounds and reports.",
            )
            .expect("valid metric"),
            resource_version: IntGauge::new(
                "kdoctor_store_resource_version",
                "Last resourceVersion handed out by the store.",
            )
            .expect("valid metric"),
            outbox_length: IntGauge::new(
                "kdoctor_store_export_outbox_length",
                "Stored reports waiting to be exported (kept on disk across restarts).",
            )
            .expect("valid metric"),
            outbox_dropped: IntCounter::new(
                "kdoctor_store_export_outbox_dropped_total",
                "Stored reports never exported because the export outbox was full.",
            )
            .expect("valid metric"),
            failed: IntGauge::new(
                "kdoctor_store_failed",
                "1 once the report store stopped on an I/O error (a full disk, say): it takes no write until it is reopened.",
            )
            .expect("valid metric"),
        }
    }

    /// Registers every metric.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.reports_written.clone()))?;
        registry.register(Box::new(self.retention_rounds.clone()))?;
        registry.register(Box::new(self.retention_bytes.clone()))?;
        registry.register(Box::new(self.tasks_purged.clone()))?;
        registry.register(Box::new(self.tasks.clone()))?;
        registry.register(Box::new(self.stored_bytes.clone()))?;
        registry.register(Box::new(self.resource_version.clone()))?;
        registry.register(Box::new(self.outbox_length.clone()))?;
        registry.register(Box::new(self.outbox_dropped.clone()))?;
        registry.register(Box::new(self.failed.clone()))?;
        Ok(())
    }
}

impl Default for StoreMetrics {
    fn default() -> Self {
        StoreMetrics::new()
    }
}
