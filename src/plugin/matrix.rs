//! The plugin's side of the connectivity matrix (`kdoctor_api::matrix`): reading it out of
//! whole report objects when the server offers no matrix view, and what a cell shows.

use kdoctor_api::matrix::{Builder, Probe, ProbeRow};
pub use kdoctor_api::matrix::{Cell, Matrix};
use kdoctor_api::report::protocol::Protocol;
use serde::Deserialize;

/// What the matrix needs of one node's report: read straight from the report's JSON (every
/// other field is skipped while parsing, so a large round costs little memory).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceReport {
    /// The source node.
    pub node_name: String,
    /// Its agent pod (target names name pods).
    pub pod_name: String,
    /// The NetReach part, if any.
    #[serde(default)]
    pub task_net_reach: Option<SourceResult>,
}

/// The targets of one report.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceResult {
    /// One entry per target.
    #[serde(default)]
    pub round_task_detail: Vec<TargetMeasure>,
}

/// What one source measured towards one target.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetMeasure {
    /// Upstream's target name.
    pub name: String,
    /// The counts and latencies.
    pub request_target_metrics: Measured,
}

/// Counts and the p99 of one target.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Measured {
    /// Requests sent.
    pub request_counts: i64,
    /// Requests that succeeded.
    pub success_counts: i64,
    /// Latency percentiles (only p99 is read).
    pub latencies: P99,
    /// A datagram entry's measurements (only the path MTU is read).
    #[serde(default)]
    pub datagrams: Option<PathMtu>,
}

/// The path MTU of a UDP echo entry.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct PathMtu {
    /// `pathMTU`, bytes.
    #[serde(default, rename = "pathMTU")]
    pub path_mtu: Option<u32>,
}

/// The p99 of a latency distribution, in milliseconds.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct P99 {
    /// `p99InMs`.
    #[serde(rename = "p99InMs")]
    pub p99: f32,
}

impl From<SourceReport> for ProbeRow {
    fn from(report: SourceReport) -> ProbeRow {
        ProbeRow {
            node: report.node_name,
            pod: report.pod_name,
            probes: report
                .task_net_reach
                .into_iter()
                .flat_map(|t| t.round_task_detail)
                .map(|d| Probe {
                    target: d.name,
                    requests: d.request_target_metrics.request_counts,
                    successes: d.request_target_metrics.success_counts,
                    p99_ms: d.request_target_metrics.latencies.p99,
                    path_mtu: d.request_target_metrics.datagrams.and_then(|d| d.path_mtu),
                })
                .collect(),
        }
    }
}

/// What a cell shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Metric {
    /// Share of requests that succeeded.
    Success,
    /// 99th percentile latency.
    P99,
    /// Share of requests that failed or were not sent.
    Loss,
    /// Path MTU in bytes (UDP echoes of a task with `spec.target.pathMTU`).
    Mtu,
}

/// The value a cell shows for a metric.
pub trait CellValue {
    /// The value of `metric`.
    fn value(&self, metric: Metric) -> f64;
}

impl CellValue for Cell {
    fn value(&self, metric: Metric) -> f64 {
        match metric {
            Metric::Success => self.success(),
            Metric::Loss => 1.0 - self.success(),
            Metric::P99 => self.p99_ms,
            // Not searched: 0, as no path carries nothing.
            Metric::Mtu => self.path_mtu.map_or(0.0, f64::from),
        }
    }
}

/// Builds the matrix of a round's reports (parsed client-side, when the server has no matrix
/// view), one report at a time, its cells counting the probes of `protocol`.
pub fn build(reports: Vec<SourceReport>, protocol: Protocol) -> Matrix {
    let mut builder = Builder::new(
        reports
            .iter()
            .map(|r| (r.node_name.clone(), r.pod_name.clone())),
    )
    .protocol(protocol);
    for report in reports {
        builder.add(&ProbeRow::from(report));
    }
    builder.finish()
}

#[cfg(test)]
pub mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use kdoctor_api::fixtures::{net_reach_details, net_reach_report};
    use kdoctor_api::report::Report;

    /// `n` nodes whose agents probe each other's pods and the ClusterIP; `node-1`'s requests to
    /// `node-2` fail half the time, and latency grows with the distance between node numbers.
    pub fn mesh(n: usize) -> Vec<Report> {
        (0..n)
            .map(|i| {
                let mut report = net_reach_report(&format!("node-{i}"), 3, n + 1, i as u64);
                report.pod_name = format!("kdoctor-agent-{i}");
                for (j, d) in net_reach_details(&mut report).iter_mut().enumerate() {
                    let requests = &mut d.request_target_metrics.requests;
                    if j < n {
                        d.name = format!("AgentPodV4IP_kdoctor-agent-{j}_10.0.0.{j}");
                        requests.latencies.p99 = 0.5 + i.abs_diff(j) as f32;
                    } else {
                        d.name = "AgentClusterV4IP_10.96.0.10:80".to_string();
                        requests.latencies.p99 = 2.0;
                    }
                    if i == 1 && j == 2 {
                        requests.success_counts = requests.request_counts / 2;
                    }
                }
                report
            })
            .collect()
    }

    /// The matrix of reports, grouped by `zones`.
    pub fn matrix(reports: &[Report], zones: &BTreeMap<String, String>) -> Matrix {
        let rows: Vec<ProbeRow> = reports.iter().filter_map(ProbeRow::of).collect();
        kdoctor_api::matrix::build(&rows, Protocol::Http).grouped(zones)
    }

    #[test]
    fn the_matrix_has_a_row_per_source_and_a_cell_per_probed_pair() {
        let zones = BTreeMap::from([
            ("node-0".to_string(), "b".to_string()),
            ("node-1".to_string(), "a".to_string()),
            ("node-2".to_string(), "a".to_string()),
        ]);
        let m = matrix(&mesh(3), &zones);
        // Grouped by zone: a (node-1, node-2), then b (node-0).
        assert_eq!(m.rows, ["node-1", "node-2", "node-0"]);
        assert_eq!(m.columns.len(), 4);
        assert_eq!(
            m.columns[3],
            kdoctor_api::matrix::Column::Kind("ClusterIP v4".into())
        );
        let failing = m.cell(0, 1).expect("node-1 → node-2");
        assert_eq!(failing.value(Metric::Success), 0.5);
        assert_eq!(failing.value(Metric::Loss), 0.5);
        assert_eq!(
            m.cell(2, 0).expect("node-0 → node-1").value(Metric::P99),
            1.5
        );
        assert_eq!(m.probed().count(), 3 * 4, "every pair and the Service");
    }
}
