//! The agent's Prometheus metrics (served on `/metrics`).

use prometheus::{Encoder, IntCounter, IntCounterVec, Opts, Registry, TextEncoder};

use crate::probe_metrics::{DEFAULT_MAX_SERIES, ProbeMetrics};

/// Every metric the agent exports, in one registry.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// Echo API requests by method and scheme.
    pub echo_requests: IntCounterVec,
    /// Connections accepted by the target servers, by scheme.
    pub connections: IntCounterVec,
    /// TLS handshakes that failed on the HTTPS target server.
    pub tls_handshake_failures: IntCounter,
    /// Probe requests finished, by probe kind and outcome (`ok` or an error class).
    pub probe_requests: IntCounterVec,
    /// Planned probe requests that were not sent (in-flight cap reached or the run overran).
    pub probe_unsent: IntCounterVec,
    /// Task rounds run and spooled, by kind and result.
    pub rounds: IntCounterVec,
    /// Datagrams the UDP echo port read, by outcome (`echoed`, `malformed`, `limited`).
    pub udp_echo: IntCounterVec,
    /// Per-probe series (task, target type, zones, phases), under the series cap.
    pub probes: ProbeMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered, and the default series cap.
    pub fn new() -> Metrics {
        Self::with_max_series(DEFAULT_MAX_SERIES)
    }

    /// A fresh registry whose per-probe metrics hold at most `max_series` time series.
    pub fn with_max_series(max_series: usize) -> Metrics {
        let registry = Registry::new_custom(Some("kdoctor_agent".to_string()), None)
            .unwrap_or_else(|_| Registry::new());
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels)
                .unwrap_or_else(|e| panic!("metric {name} is malformed: {e}"));
            registry
                .register(Box::new(c.clone()))
                .unwrap_or_else(|e| panic!("metric {name} registered twice: {e}"));
            c
        };
        let echo_requests = counter(
            "echo_requests_total",
            "Echo API requests served, by method and scheme.",
            &["method", "scheme"],
        );
        let connections = counter(
            "target_connections_total",
            "Connections accepted by the probe-target servers, by scheme.",
            &["scheme"],
        );
        let probe_requests = counter(
            "probe_requests_total",
            "Probe requests finished, by kind (http, dns) and outcome (ok or an error class).",
            &["kind", "outcome"],
        );
        let probe_unsent = counter(
            "probe_unsent_requests_total",
            "Planned probe requests that were not sent, by kind.",
            &["kind"],
        );
        let rounds = counter(
            "rounds_total",
            "Task rounds this agent ran, by task kind and result (succeed, fail).",
            &["kind", "result"],
        );
        let udp_echo = counter(
            "udp_echo_datagrams_total",
            "Datagrams the UDP echo port read, by outcome (echoed; malformed: not a kdoctor \
             request, dropped; limited: over the echo rate cap, dropped).",
            &["outcome"],
        );
        let tls_handshake_failures = IntCounter::new(
            "target_tls_handshake_failures_total",
            "TLS handshakes that failed on the HTTPS probe-target server.",
        )
        .unwrap_or_else(|e| panic!("metric target_tls_handshake_failures is malformed: {e}"));
        registry
            .register(Box::new(tls_handshake_failures.clone()))
            .unwrap_or_else(|e| panic!("metric registered twice: {e}"));
        let probes = ProbeMetrics::new(&registry, max_series);
        Metrics {
            registry,
            echo_requests,
            connections,
            tls_handshake_failures,
            probe_requests,
            probe_unsent,
            rounds,
            udp_echo,
            probes,
        }
    }

    /// The registry, for callers that add their own metrics.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for the text format.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}
