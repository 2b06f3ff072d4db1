//! Per-probe metrics for Prometheus: request counts by result and error class, and latency
//! histograms by phase, labelled with the task, the target type, the IP family, the source node
//! and the zones — updated by every request while a round runs, under a cap on the number of
//! series.
//!
//! The label sets of one family differ between tasks (per-target series and the labels a task
//! copies are opt-in), which the `prometheus` crate's `*Vec` types cannot hold, so the series
//! live in a table of their own, exposed through a [`Collector`] registered with the agent's
//! registry. Every new label set is admitted against the cap ([`ProbeMetrics::new`]): beyond it
//! the label set is refused and counted (`kdoctor_agent_metric_series_dropped_total`), and the
//! requests that would have gone into it are counted too
//! (`kdoctor_agent_probe_observations_dropped_total`); the cap is never exceeded.
//!
//! The hot path takes no lock: a round resolves the handles of a target once
//! ([`ProbeMetrics::target`]) and each request then only adds to atomics.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Histogram, HistogramOpts, IntCounter, IntGauge, Opts, Registry};

use crate::probe::outcome::{Attempt, ErrorClass};
use crate::report::names::APP_HTTP_HEALTHY_TARGET_NAME;
use kdoctor_api::report::protocol::Protocol;

/// Upper bounds (seconds) of the latency buckets: 1-2.5-5 steps from 100 µs (pod to pod on one
/// node) to 10 s (a timeout's worth). Classic buckets: the `prometheus` crate has no native
/// (sparse) histograms.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];
/// Default of `--metrics-max-series`.
pub const DEFAULT_MAX_SERIES: usize = 10_000;
/// Task annotation: `"true"` adds a `target` label (one series per target, e.g. per pod).
pub const ANNOTATION_PER_TARGET: &str = "kdoctor.io/metrics-per-target";
/// Task annotation: comma-separated task label keys copied as metric labels `label_<key>`.
pub const ANNOTATION_LABELS: &str = "kdoctor.io/metrics-labels";
/// Most task labels copied (further keys in the annotation are ignored).
pub const MAX_EXTRA_LABELS: usize = 8;
/// The Node label the zones are read from.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// A label set unused this long, and held by no running round, may make room for a new one
/// when the cap is reached (pods come and go; their series should not fill the cap forever).
pub const EVICT_IDLE: Duration = Duration::from_secs(600);

const REQUESTS: &str = "probe_target_requests_total";
const REQUESTS_HELP: &str = "Probe requests finished, by task, target type, protocol (http, tcp, dns), IP family, source node, zones, result (succeed, fail) and error class.";
const UNSENT: &str = "probe_target_unsent_requests_total";
const UNSENT_HELP: &str = "Planned probe requests not sent (in-flight cap reached or the run overran), by task and target labels.";
const LATENCY: &str = "probe_latency_seconds";
const LATENCY_HELP: &str = "Probe latency in seconds by phase: connect (name resolution and TCP), tls (handshake), first_byte (request to the answer's head), total (response time from the pacer's due time to the end of the answer, every request).";

/// A timed part of a request (the `phase` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Name resolution and TCP connect (requests that opened a connection).
    Connect,
    /// TLS handshake (requests that opened a TLS connection).
    Tls,
    /// From handing the request to a connection to the answer's head.
    FirstByte,
    /// Response time: from the pacer's wake-up to the end of the answer (every request).
    Total,
}

impl Phase {
    /// Every phase.
    pub const ALL: [Phase; 4] = [Phase::Connect, Phase::Tls, Phase::FirstByte, Phase::Total];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Connect => "connect",
            Phase::Tls => "tls",
            Phase::FirstByte => "first_byte",
            Phase::Total => "total",
        }
    }
}

/// The bounded `target_type` of an upstream target name.
pub fn target_type(name: &str) -> &'static str {
    let (_, name) = Protocol::split(name);
    if name == APP_HTTP_HEALTHY_TARGET_NAME {
        return "app";
    }
    match name.split('_').next().unwrap_or_default() {
        "AgentPodV4IP" | "AgentPodV6IP" => "pod",
        "AgentClusterV4IP" | "AgentClusterV6IP" => "cluster_ip",
        "AgentNodePortV4IP" | "AgentNodePortV6IP" => "node_port",
        "AgentLoadbalancerV4IP" | "AgentLoadbalancerV6IP" => "load_balancer",
        "AgentIngress" => "ingress",
        "typeA" | "typeAAAA" => "dns",
        _ => "other",
    }
}

/// How a target is probed (`http`, `tcp`, `dns`): a NetReach target with `spec.target.tcp`
/// has an HTTP and a TCP series of the same type and family.
pub fn target_protocol(name: &str) -> &'static str {
    match (target_type(name), Protocol::split(name).0) {
        ("dns", _) => "dns",
        (_, protocol) => protocol.as_str(),
    }
}

/// `ipv4`, `ipv6`, or "" when neither the address nor the name tells.
pub fn ip_family(name: &str, address: Option<IpAddr>) -> &'static str {
    let (_, name) = Protocol::split(name);
    match address {
        Some(IpAddr::V4(_)) => "ipv4",
        Some(IpAddr::V6(_)) => "ipv6",
        None if name.contains("V4IP_") || name.starts_with("AgentIngress_v4_") => "ipv4",
        None if name.contains("V6IP_") || name.starts_with("AgentIngress_v6_") => "ipv6",
        None if name.starts_with("typeAAAA_") => "ipv6",
        None if name.starts_with("typeA_") => "ipv4",
        None => "",
    }
}

/// The pod of a pod target (`AgentPodV4IP_<pod>_<ip>`).
pub fn target_pod(name: &str) -> Option<&str> {
    if target_type(name) != "pod" {
        return None;
    }
    let (_, name) = Protocol::split(name);
    let (_, rest) = name.split_once('_')?;
    let (pod, _) = rest.rsplit_once('_')?;
    Some(pod)
}

/// The metric label name of a task label key: `label_` and the key with every character
/// outside `[A-Za-z0-9_]` as `_` (as kube-state-metrics names them).
pub fn extra_label_name(key: &str) -> String {
    let cleaned: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("label_{cleaned}")
}

/// The labels a task copies (annotation [`ANNOTATION_LABELS`]): name and value (`""` when the
/// task lacks the label), at most [`MAX_EXTRA_LABELS`], sorted, without duplicates.
pub fn extra_labels(
    annotation: Option<&str>,
    labels: &BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for key in annotation.unwrap_or_default().split(',').map(str::trim) {
        if key.is_empty() || out.len() >= MAX_EXTRA_LABELS {
            continue;
        }
        let value = labels.get(key).cloned().unwrap_or_default();
        out.entry(extra_label_name(key)).or_insert(value);
    }
    out.into_iter().collect()
}

/// What every series of one round carries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundLabels {
    /// `NetReach`, `AppHttpHealthy` or `Netdns`.
    pub task_kind: String,
    /// The task's name.
    pub task: String,
    /// This agent's node.
    pub source_node: String,
    /// This agent's node's zone ("" unknown).
    pub source_zone: String,
    /// Zones of the carrier pods' nodes, by pod name (pod targets only).
    pub pod_zones: HashMap<String, String>,
    /// A `target` label with each target's name.
    pub per_target: bool,
    /// Labels copied from the task (`label_<key>`, value).
    pub extra: Vec<(String, String)>,
}

impl RoundLabels {
    /// The labels of a round of `task` on `node` in `zone`: its per-target choice and copied
    /// labels from its annotations (pod zones are the caller's to add).
    pub fn of_task(task: &kdoctor_api::task::Task, node: &str, zone: &str) -> RoundLabels {
        let meta = task.metadata();
        let annotations = meta.annotations.clone().unwrap_or_default();
        let labels = meta.labels.clone().unwrap_or_default();
        RoundLabels {
            task_kind: task.kind().as_str().to_string(),
            task: task.name().to_string(),
            source_node: node.to_string(),
            source_zone: zone.to_string(),
            pod_zones: HashMap::new(),
            per_target: annotations
                .get(ANNOTATION_PER_TARGET)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
            extra: extra_labels(
                annotations.get(ANNOTATION_LABELS).map(String::as_str),
                &labels,
            ),
        }
    }

    /// The label set of one target (without `result`, `error_class`, `phase`).
    pub fn target_labels(&self, target: &str, address: Option<IpAddr>) -> Vec<(String, String)> {
        let target_zone = target_pod(target)
            .and_then(|pod| self.pod_zones.get(pod))
            .cloned()
            .unwrap_or_default();
        let mut labels = vec![
            ("task_kind".to_string(), self.task_kind.clone()),
            ("task".to_string(), self.task.clone()),
            ("target_type".to_string(), target_type(target).to_string()),
            ("protocol".to_string(), target_protocol(target).to_string()),
            (
                "ip_family".to_string(),
                ip_family(target, address).to_string(),
            ),
            ("source_node".to_string(), self.source_node.clone()),
            ("source_zone".to_string(), self.source_zone.clone()),
            ("target_zone".to_string(), target_zone),
        ];
        if self.per_target {
            labels.push(("target".to_string(), target.to_string()));
        }
        labels.extend(self.extra.iter().cloned());
        labels
    }
}

#[derive(Clone)]
enum Metric {
    Counter(IntCounter),
    Histogram(Histogram),
}

impl Metric {
    fn collect(&self) -> Vec<MetricFamily> {
        match self {
            Metric::Counter(c) => c.collect(),
            Metric::Histogram(h) => h.collect(),
        }
    }
}

struct Series {
    metric: Metric,
    cost: usize,
    last_used: Instant,
    /// Held by each round's handle while it runs: a series in use is never evicted.
    users: Arc<()>,
}

type Key = (&'static str, Vec<(String, String)>);

#[derive(Default)]
struct Table {
    series: HashMap<Key, Series>,
    used: usize,
    /// When the table was last scanned for idle series (at most once a second, so a round
    /// whose targets are refused at the cap does not scan it once per target).
    scanned: Option<Instant>,
}

struct Inner {
    max_series: usize,
    table: Mutex<Table>,
    series_gauge: IntGauge,
    dropped_series: IntCounter,
    evicted_series: IntCounter,
    dropped_observations: IntCounter,
    descs: Vec<Desc>,
}

/// The per-probe series (cheap to clone: one shared table).
#[derive(Clone)]
pub struct ProbeMetrics {
    inner: Arc<Inner>,
}

/// How many exposed time series one label set costs: 1 for a counter; the buckets, `+Inf`,
/// `_sum` and `_count` for a histogram.
pub fn series_cost(histogram: bool) -> usize {
    if histogram {
        LATENCY_BUCKETS.len() + 3
    } else {
        1
    }
}

fn register<C: Collector + Clone + 'static>(registry: &Registry, c: C) -> C {
    registry
        .register(Box::new(c.clone()))
        .unwrap_or_else(|e| panic!("metric registered twice: {e}"));
    c
}

impl ProbeMetrics {
    /// The table, its collector and its bookkeeping metrics in `registry`, holding at most
    /// `max_series` exposed time series (at least one histogram's worth).
    pub fn new(registry: &Registry, max_series: usize) -> ProbeMetrics {
        let gauge = |name: &str, help: &str| {
            IntGauge::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"))
        };
        let counter = |name: &str, help: &str| {
            IntCounter::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"))
        };
        let series_gauge = register(
            registry,
            gauge(
                "metric_series",
                "Time series the per-probe metrics hold now (a histogram label set counts its buckets, +Inf, _sum and _count).",
            ),
        );
        let limit = register(
            registry,
            gauge(
                "metric_series_limit",
                "Most time series the per-probe metrics may hold (--metrics-max-series).",
            ),
        );
        limit.set(i64::try_from(max_series).unwrap_or(i64::MAX));
        let dropped_series = register(
            registry,
            counter(
                "metric_series_dropped_total",
                "New per-probe label sets refused because --metrics-max-series was reached (counted each time a round asks for one).",
            ),
        );
        let evicted_series = register(
            registry,
            counter(
                "metric_series_evicted_total",
                "Per-probe label sets removed to make room: unused for 10 minutes and held by no running round.",
            ),
        );
        let dropped_observations = register(
            registry,
            counter(
                "probe_observations_dropped_total",
                "Probe requests (or unsent requests) not recorded in a per-probe series because its label set was refused.",
            ),
        );
        let desc = |name: &str, help: &str| {
            Desc::new(name.to_string(), help.to_string(), vec![], HashMap::new())
                .unwrap_or_else(|e| panic!("metric {name}: {e}"))
        };
        let inner = Arc::new(Inner {
            max_series,
            table: Mutex::new(Table::default()),
            series_gauge,
            dropped_series,
            evicted_series,
            dropped_observations,
            descs: vec![
                desc(REQUESTS, REQUESTS_HELP),
                desc(UNSENT, UNSENT_HELP),
                desc(LATENCY, LATENCY_HELP),
            ],
        });
        register(
            registry,
            TableCollector {
                inner: inner.clone(),
            },
        );
        ProbeMetrics { inner }
    }

    /// Time series held now.
    pub fn series(&self) -> usize {
        self.table().used
    }

    /// Label sets refused so far.
    pub fn dropped_series(&self) -> u64 {
        self.inner.dropped_series.get()
    }

    /// Requests not recorded because their label set was refused.
    pub fn dropped_observations(&self) -> u64 {
        self.inner.dropped_observations.get()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // The table holds only metric handles: a poisoned lock still holds valid ones.
        self.inner.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The metric of `family` with `labels`, created when the cap allows; `None` when it does
    /// not (counted). With the metric, a token that keeps it from eviction while held.
    fn resolve(
        &self,
        family: &'static str,
        labels: Vec<(String, String)>,
        histogram: bool,
    ) -> Option<(Metric, Arc<()>)> {
        let now = Instant::now();
        let mut table = self.table();
        let key = (family, labels);
        if let Some(series) = table.series.get_mut(&key) {
            series.last_used = now;
            return Some((series.metric.clone(), series.users.clone()));
        }
        let cost = series_cost(histogram);
        if table.used + cost > self.inner.max_series {
            self.evict(&mut table, now);
        }
        if table.used + cost > self.inner.max_series {
            self.inner.dropped_series.inc();
            return None;
        }
        let const_labels: HashMap<String, String> = key.1.iter().cloned().collect();
        let metric = if histogram {
            let opts = HistogramOpts::new(LATENCY, LATENCY_HELP)
                .const_labels(const_labels)
                .buckets(LATENCY_BUCKETS.to_vec());
            Metric::Histogram(Histogram::with_opts(opts).ok()?)
        } else {
            let help = if family == UNSENT {
                UNSENT_HELP
            } else {
                REQUESTS_HELP
            };
            let opts = Opts::new(family, help).const_labels(const_labels);
            Metric::Counter(IntCounter::with_opts(opts).ok()?)
        };
        let users = Arc::new(());
        table.series.insert(
            key,
            Series {
                metric: metric.clone(),
                cost,
                last_used: now,
                users: users.clone(),
            },
        );
        table.used += cost;
        self.inner.series_gauge.set(table.used as i64);
        Some((metric, users))
    }

    /// Removes label sets unused for [`EVICT_IDLE`] that no running round holds.
    fn evict(&self, table: &mut Table, now: Instant) {
        if table
            .scanned
            .is_some_and(|at| now.saturating_duration_since(at) < Duration::from_secs(1))
        {
            return;
        }
        table.scanned = Some(now);
        let before = table.series.len();
        let mut freed = 0;
        table.series.retain(|_, s| {
            let idle = now.saturating_duration_since(s.last_used) >= EVICT_IDLE;
            let keep = !idle || Arc::strong_count(&s.users) > 1;
            if !keep {
                freed += s.cost;
            }
            keep
        });
        table.used -= freed;
        self.inner
            .evicted_series
            .inc_by((before - table.series.len()) as u64);
        self.inner.series_gauge.set(table.used as i64);
    }

    /// The handles of one target for one round: its success counter and total latency now,
    /// the rest when first needed.
    pub fn target(&self, labels: Vec<(String, String)>) -> TargetSeries {
        let series = TargetSeries {
            owner: self.clone(),
            base: labels,
            ok: OnceLock::new(),
            latency: Default::default(),
            failures: Mutex::new(HashMap::new()),
            unsent: OnceLock::new(),
            leases: Mutex::new(Vec::new()),
        };
        series.ok_counter();
        series.histogram(Phase::Total);
        series
    }
}

/// The per-probe series of one target in one round (the hot path's handles).
pub struct TargetSeries {
    owner: ProbeMetrics,
    base: Vec<(String, String)>,
    ok: OnceLock<Option<IntCounter>>,
    latency: [OnceLock<Option<Histogram>>; 4],
    failures: Mutex<HashMap<String, Option<IntCounter>>>,
    unsent: OnceLock<Option<IntCounter>>,
    leases: Mutex<Vec<Arc<()>>>,
}

impl TargetSeries {
    fn lease(&self, users: Arc<()>) {
        self.leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(users);
    }

    fn counter(&self, family: &'static str, extra: &[(&str, &str)]) -> Option<IntCounter> {
        let mut labels = self.base.clone();
        labels.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        match self.owner.resolve(family, labels, false)? {
            (Metric::Counter(c), users) => {
                self.lease(users);
                Some(c)
            }
            _ => None,
        }
    }

    fn ok_counter(&self) -> Option<&IntCounter> {
        self.ok
            .get_or_init(|| self.counter(REQUESTS, &[("result", "succeed"), ("error_class", "")]))
            .as_ref()
    }

    fn histogram(&self, phase: Phase) -> Option<&Histogram> {
        let slot = &self.latency[phase as usize];
        slot.get_or_init(|| {
            let mut labels = self.base.clone();
            labels.push(("phase".to_string(), phase.label().to_string()));
            match self.owner.resolve(LATENCY, labels, true)? {
                (Metric::Histogram(h), users) => {
                    self.lease(users);
                    Some(h)
                }
                _ => None,
            }
        })
        .as_ref()
    }

    fn failure(&self, class: &ErrorClass) -> Option<IntCounter> {
        let label = class.label();
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = failures.get(&label) {
            return known.clone();
        }
        let counter = self.counter(REQUESTS, &[("result", "fail"), ("error_class", &label)]);
        failures.insert(label, counter.clone());
        counter
    }

    /// Records one finished request: its result and every phase it measured, `total` being
    /// its response time.
    pub fn observe(&self, attempt: &Attempt, total: Duration) {
        let mut recorded = match &attempt.result {
            Ok(()) => self.ok_counter().map(IntCounter::inc).is_some(),
            Err(e) => self.failure(&e.class).map(|c| c.inc()).is_some(),
        };
        let phases = [
            (Phase::Connect, attempt.phases.tcp),
            (Phase::Tls, attempt.phases.tls),
            (Phase::FirstByte, attempt.phases.first_byte),
            (Phase::Total, Some(total)),
        ];
        for (phase, took) in phases {
            if let Some(took) = took {
                match self.histogram(phase) {
                    Some(h) => h.observe(took.as_secs_f64()),
                    None => recorded = false,
                }
            }
        }
        if !recorded {
            self.owner.inner.dropped_observations.inc();
        }
    }

    /// Records `n` planned requests that were not sent.
    pub fn unsent(&self, n: u64) {
        if n == 0 {
            return;
        }
        match self.unsent.get_or_init(|| self.counter(UNSENT, &[])) {
            Some(c) => c.inc_by(n),
            None => self.owner.inner.dropped_observations.inc_by(n),
        }
    }
}

/// Exposes the table through the registry.
#[derive(Clone)]
struct TableCollector {
    inner: Arc<Inner>,
}

impl Collector for TableCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.inner.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let metrics: Vec<Metric> = {
            let table = self.inner.table.lock().unwrap_or_else(|e| e.into_inner());
            table.series.values().map(|s| s.metric.clone()).collect()
        };
        let mut families: BTreeMap<String, MetricFamily> = BTreeMap::new();
        for metric in metrics {
            for mut family in metric.collect() {
                match families.get_mut(family.name()) {
                    Some(known) => known.mut_metric().extend(family.take_metric()),
                    None => {
                        families.insert(family.name().to_string(), family);
                    }
                }
            }
        }
        families.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::outcome::{Phases, ProbeError};

    #[test]
    fn target_types_and_families() {
        let cases = [
            ("AgentPodV4IP_kdoctor-agent-x1_10.0.0.1", "pod", "ipv4"),
            ("AgentPodV6IP_kdoctor-agent-x1_fd00::1", "pod", "ipv6"),
            ("AgentClusterV4IP_10.96.0.3:80", "cluster_ip", "ipv4"),
            ("AgentClusterV6IP_[fd00::3]:80", "cluster_ip", "ipv6"),
            ("AgentNodePortV4IP_172.18.0.2_31000", "node_port", "ipv4"),
            (
                "AgentLoadbalancerV6IP_[fd00::9]:80",
                "load_balancer",
                "ipv6",
            ),
            ("AgentIngress_v4_http://1.2.3.4/x", "ingress", "ipv4"),
            ("HttpAppHealthy target", "app", ""),
            ("typeA_10.96.0.10:53_kubernetes.default", "dns", "ipv4"),
            ("typeAAAA_[fd00::a]:53_kubernetes.default", "dns", "ipv6"),
            ("something else", "other", ""),
            ("TCP_AgentPodV6IP_kdoctor-agent-x1_fd00::1", "pod", "ipv6"),
            (
                "TCP_AgentNodePortV4IP_172.18.0.2_31000",
                "node_port",
                "ipv4",
            ),
        ];
        for (name, kind, family) in cases {
            assert_eq!(target_type(name), kind, "{name}");
            assert_eq!(ip_family(name, None), family, "{name}");
        }
        assert_eq!(
            target_pod("TCP_AgentPodV4IP_kdoctor-agent-x1_10.0.0.1"),
            Some("kdoctor-agent-x1")
        );
        for (name, protocol) in [
            ("TCP_AgentClusterV4IP_10.96.0.3:80", "tcp"),
            ("AgentClusterV4IP_10.96.0.3:80", "http"),
            ("HttpAppHealthy target", "http"),
            ("typeA_10.96.0.10:53_kubernetes.default", "dns"),
        ] {
            assert_eq!(target_protocol(name), protocol, "{name}");
        }
        assert_eq!(
            ip_family("HttpAppHealthy target", "::1".parse().ok()),
            "ipv6"
        );
        assert_eq!(
            target_pod("AgentPodV6IP_kdoctor-agent-x1_fd00::1"),
            Some("kdoctor-agent-x1")
        );
        assert_eq!(target_pod("AgentClusterV4IP_10.96.0.3:80"), None);
    }

    #[test]
    fn task_labels_are_copied_sanitised_and_bounded() {
        let labels = BTreeMap::from([
            ("team".to_string(), "net".to_string()),
            ("app.kubernetes.io/name".to_string(), "web".to_string()),
        ]);
        let got = extra_labels(
            Some(" team, app.kubernetes.io/name ,missing,team,"),
            &labels,
        );
        assert_eq!(
            got,
            vec![
                (
                    "label_app_kubernetes_io_name".to_string(),
                    "web".to_string()
                ),
                ("label_missing".to_string(), String::new()),
                ("label_team".to_string(), "net".to_string()),
            ]
        );
        let many: String = (0..20).map(|i| format!("k{i},")).collect();
        assert_eq!(
            extra_labels(Some(&many), &BTreeMap::new()).len(),
            MAX_EXTRA_LABELS
        );
        assert!(extra_labels(None, &labels).is_empty());
    }

    #[test]
    fn round_labels_of_a_pod_target() {
        let round = RoundLabels {
            task_kind: "NetReach".into(),
            task: "t".into(),
            source_node: "n1".into(),
            source_zone: "z1".into(),
            pod_zones: HashMap::from([("p2".to_string(), "z2".to_string())]),
            per_target: false,
            extra: vec![("label_team".into(), "net".into())],
        };
        let labels: BTreeMap<_, _> = round
            .target_labels("AgentPodV4IP_p2_10.0.0.2", None)
            .into_iter()
            .collect();
        assert_eq!(labels["target_zone"], "z2");
        assert_eq!(labels["source_zone"], "z1");
        assert_eq!(labels["target_type"], "pod");
        assert_eq!(labels["label_team"], "net");
        assert!(!labels.contains_key("target"));
        let per_target = RoundLabels {
            per_target: true,
            ..round
        };
        let labels = per_target.target_labels("AgentClusterV4IP_10.96.0.3:80", None);
        assert!(labels.contains(&("target".into(), "AgentClusterV4IP_10.96.0.3:80".into())));
        assert!(labels.contains(&("target_zone".into(), String::new())));
    }

    fn ok_attempt() -> Attempt {
        Attempt {
            result: Ok(()),
            code: None,
            bytes: 0,
            connect: None,
            queued: Duration::ZERO,
            phases: Phases {
                tcp: Some(Duration::from_micros(150)),
                tls: None,
                first_byte: Some(Duration::from_micros(300)),
            },
            echo: None,
        }
    }

    #[test]
    fn observations_land_in_their_series() {
        let registry = Registry::new();
        let m = ProbeMetrics::new(&registry, DEFAULT_MAX_SERIES);
        let round = RoundLabels {
            task_kind: "NetReach".into(),
            task: "t".into(),
            ..RoundLabels::default()
        };
        let t = m.target(round.target_labels("AgentPodV4IP_p_10.0.0.1", None));
        // Eager: the success counter and the total latency.
        assert_eq!(m.series(), 1 + series_cost(true));
        t.observe(&ok_attempt(), Duration::from_micros(400));
        t.observe(
            &Attempt::failed(ProbeError::new(ErrorClass::Timeout, "")),
            Duration::from_millis(500),
        );
        t.unsent(3);
        assert_eq!(m.series(), 3 + 3 * series_cost(true));
        let text = {
            let mut out = Vec::new();
            prometheus::Encoder::encode(
                &prometheus::TextEncoder::new(),
                &registry.gather(),
                &mut out,
            )
            .unwrap();
            String::from_utf8(out).unwrap()
        };
        assert!(text.contains(r#"error_class="",ip_family="ipv4",protocol="http",result="succeed",source_node="",source_zone="",target_type="pod",target_zone="",task="t",task_kind="NetReach"} 1"#), "{text}");
        assert!(text.contains(r#"probe_target_requests_total{error_class="timeout""#));
        assert!(text.contains(r#"probe_target_unsent_requests_total{"#));
        assert!(text.contains(r#"phase="total""#));
        assert!(text.contains(r#"le="0.00025""#));
        let total_count = text
            .lines()
            .find(|l| l.starts_with("probe_latency_seconds_count") && l.contains("\"total\""))
            .unwrap();
        assert!(total_count.ends_with(" 2"), "{total_count}");
        assert_eq!(m.dropped_observations(), 0);
        assert_eq!(m.dropped_series(), 0);
    }

    #[test]
    fn the_cap_holds_with_a_thousand_targets() {
        let registry = Registry::new();
        let cap = 100;
        let m = ProbeMetrics::new(&registry, cap);
        let round = RoundLabels {
            task_kind: "NetReach".into(),
            task: "big".into(),
            per_target: true,
            ..RoundLabels::default()
        };
        let mut admitted = 0;
        let mut handles = Vec::new();
        for i in 0..1000 {
            let before = m.series();
            let t = m.target(round.target_labels(
                &format!("AgentPodV4IP_p{i}_10.0.{}.{}", i / 256, i % 256),
                None,
            ));
            if m.series() > before {
                admitted += 1;
            }
            t.observe(&ok_attempt(), Duration::from_micros(700));
            assert!(
                m.series() <= cap,
                "{} series with a cap of {cap}",
                m.series()
            );
            handles.push(t);
        }
        // Each target wants a counter (1) and three histograms (19 each): 58 series. Only one
        // target fits whole; the rest of the cap goes to counters and single histograms.
        assert!(admitted > 0);
        assert!(m.series() <= cap);
        let gathered = registry.gather();
        let value = |name: &str| {
            gathered
                .iter()
                .find(|f| f.name() == name)
                .map(|f| {
                    let metric = &f.get_metric()[0];
                    if f.get_field_type() == prometheus::proto::MetricType::GAUGE {
                        metric.get_gauge().get_value()
                    } else {
                        metric.get_counter().get_value()
                    }
                })
                .unwrap()
        };
        assert_eq!(value("metric_series") as usize, m.series());
        assert_eq!(value("metric_series_limit") as usize, cap);
        // Every target asked for 4 label sets (ok counter, total, connect, first_byte): what was
        // not created was refused and counted.
        let created = m.table().series.len() as u64;
        assert_eq!(created + m.dropped_series(), 4 * 1000);
        assert_eq!(
            value("metric_series_dropped_total") as u64,
            m.dropped_series()
        );
        // Every request that missed a series is counted: all but the fully admitted ones.
        assert!(m.dropped_observations() >= 1000 - created);
        assert_eq!(
            value("probe_observations_dropped_total") as u64,
            m.dropped_observations()
        );
        // The exposition holds exactly the series counted.
        let mut out = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &gathered, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let exposed = text
            .lines()
            .filter(|l| l.starts_with("probe_target_") || l.starts_with("probe_latency_"))
            .count();
        assert_eq!(exposed, m.series());
    }

    #[test]
    fn idle_series_make_room_unless_in_use() {
        let registry = Registry::new();
        let m = ProbeMetrics::new(&registry, 2 * series_cost(true) + 2);
        let round = RoundLabels {
            per_target: true,
            ..RoundLabels::default()
        };
        let held = m.target(round.target_labels("typeA_1.1.1.1:53_a", None));
        let released = m.target(round.target_labels("typeA_1.1.1.2:53_a", None));
        drop(released);
        // Make every series look idle.
        for s in m.table().series.values_mut() {
            s.last_used = Instant::now() - EVICT_IDLE - Duration::from_secs(1);
        }
        let fresh = m.target(round.target_labels("typeA_1.1.1.3:53_a", None));
        assert_eq!(m.series(), 2 * series_cost(true) + 2);
        assert_eq!(m.dropped_series(), 0);
        // The held target's series survived; the released one's made room.
        held.observe(
            &Attempt::failed(ProbeError::new(ErrorClass::Other, "")),
            Duration::ZERO,
        );
        assert!(
            m.dropped_series() > 0,
            "the cap is full: a new error class is refused"
        );
        drop(fresh);
    }
}
