//! The connectivity matrix of a NetReach round (pure): one row per source node, one column per
//! target — a node (through its agent pod) or, for Service and Ingress targets, the target
//! kind and family — and in each cell what the source measured towards that target.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kdoctor_api::report::Report;
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
}

/// The p99 of a latency distribution, in milliseconds.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct P99 {
    /// `p99InMs`.
    #[serde(rename = "p99InMs")]
    pub p99: f32,
}

impl From<&Report> for SourceReport {
    fn from(report: &Report) -> SourceReport {
        SourceReport {
            node_name: report.node_name.clone(),
            pod_name: report.pod_name.clone(),
            task_net_reach: report.task_net_reach.as_ref().map(|r| SourceResult {
                round_task_detail: r
                    .round_task_detail
                    .iter()
                    .map(|d| {
                        let requests = &d.request_target_metrics.requests;
                        TargetMeasure {
                            name: d.name.clone(),
                            request_target_metrics: Measured {
                                request_counts: requests.request_counts,
                                success_counts: requests.success_counts,
                                latencies: P99 {
                                    p99: requests.latencies.p99,
                                },
                            },
                        }
                    })
                    .collect(),
            }),
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
}

/// One source → target measurement (several targets of one column are summed).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cell {
    /// Requests sent.
    pub requests: i64,
    /// Requests that succeeded.
    pub successes: i64,
    /// Worst p99 among the column's targets, in milliseconds.
    pub p99_ms: f64,
}

impl Cell {
    /// Succeeded requests over sent ones (0 when none were sent).
    pub fn success(&self) -> f64 {
        if self.requests > 0 {
            self.successes as f64 / self.requests as f64
        } else {
            0.0
        }
    }

    /// The value of `metric`.
    pub fn value(&self, metric: Metric) -> f64 {
        match metric {
            Metric::Success => self.success(),
            Metric::Loss => 1.0 - self.success(),
            Metric::P99 => self.p99_ms,
        }
    }
}

/// A column: a node reached through its agent pod, or a kind of target.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Column {
    /// The agent pod on this node.
    Node(String),
    /// Service or Ingress targets, e.g. `ClusterIP v4`.
    Kind(String),
}

/// The matrix of one round.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    /// Source nodes, grouped by zone when zones are known.
    pub rows: Vec<String>,
    /// Target nodes (same order as rows), then target kinds.
    pub columns: Vec<Column>,
    /// `cells[row][column]`; `None`: not probed.
    pub cells: Vec<Vec<Option<Cell>>>,
    /// Zone of each node that has one.
    pub zones: BTreeMap<String, String>,
}

impl Matrix {
    /// A node with its zone, when known: `node-1 (zone-a)`.
    pub fn node_label(&self, node: &str) -> String {
        match self.zones.get(node) {
            Some(zone) => format!("{node} ({zone})"),
            None => node.to_string(),
        }
    }

    /// What a column is: `node-1 (zone-a) (pod)` or `ClusterIP v4`.
    pub fn column_name(&self, column: &Column) -> String {
        match column {
            Column::Node(node) => format!("{} (pod)", self.node_label(node)),
            Column::Kind(kind) => kind.clone(),
        }
    }
}

/// The column of a target name (upstream's names: `AgentPodV4IP_<pod>_<ip>`,
/// `AgentClusterV6IP_<ip>:<port>`, `AgentIngress_v4_<url>`, …) given which node runs each pod.
pub fn column_of(name: &str, pod_nodes: &BTreeMap<String, String>) -> Column {
    let (prefix, rest) = name.split_once('_').unwrap_or((name, ""));
    let family = if prefix.contains("V6") || rest.starts_with("v6") {
        "v6"
    } else {
        "v4"
    };
    let kind = match prefix {
        p if p.starts_with("AgentPod") => {
            let pod = rest.rsplit_once('_').map_or(rest, |(pod, _)| pod);
            return match pod_nodes.get(pod) {
                Some(node) => Column::Node(node.clone()),
                None => Column::Kind(format!("pod {pod}")),
            };
        }
        p if p.starts_with("AgentCluster") => "ClusterIP",
        p if p.starts_with("AgentNodePort") => "NodePort",
        p if p.starts_with("AgentLoadbalancer") => "LoadBalancer",
        p if p.starts_with("AgentIngress") => "Ingress",
        p if p.starts_with("AgentMultus") => "Multus",
        other => other,
    };
    Column::Kind(format!("{kind} {family}"))
}

/// Builds the matrix of a round's reports; `zones` maps node names to zones (may be empty).
pub fn build(reports: &[SourceReport], zones: &BTreeMap<String, String>) -> Matrix {
    let pod_nodes: BTreeMap<String, String> = reports
        .iter()
        .map(|r| (r.pod_name.clone(), r.node_name.clone()))
        .collect();
    let by_zone = |node: &String| (zones.get(node).cloned().unwrap_or_default(), node.clone());
    let mut rows: Vec<String> = reports.iter().map(|r| r.node_name.clone()).collect();
    rows.sort_by_key(by_zone);
    rows.dedup();
    let details = || {
        reports.iter().flat_map(|r| {
            r.task_net_reach
                .iter()
                .flat_map(|t| t.round_task_detail.iter())
                .map(move |d| (r, d))
        })
    };
    // First pass: the columns, node columns in row order, then kinds by name.
    let mut target_nodes = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    for (_, detail) in details() {
        match column_of(&detail.name, &pod_nodes) {
            Column::Node(node) => target_nodes.insert(node),
            Column::Kind(kind) => kinds.insert(kind),
        };
    }
    let mut node_columns: Vec<String> = target_nodes.into_iter().collect();
    node_columns.sort_by_key(by_zone);
    let columns: Vec<Column> = node_columns
        .into_iter()
        .map(Column::Node)
        .chain(kinds.into_iter().map(Column::Kind))
        .collect();
    // Second pass: sum into cells by index (a large round has a million of them).
    let row_of: HashMap<&str, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.as_str(), i))
        .collect();
    let column_index: HashMap<&Column, usize> =
        columns.iter().enumerate().map(|(i, c)| (c, i)).collect();
    let mut cells = vec![vec![None::<Cell>; columns.len()]; rows.len()];
    for (report, detail) in details() {
        let column = column_of(&detail.name, &pod_nodes);
        let (Some(&row), Some(&col)) = (
            row_of.get(report.node_name.as_str()),
            column_index.get(&column),
        ) else {
            continue;
        };
        let measured = &detail.request_target_metrics;
        let cell = cells[row][col].get_or_insert_with(Cell::default);
        cell.requests += measured.request_counts;
        cell.successes += measured.success_counts;
        cell.p99_ms = cell.p99_ms.max(f64::from(measured.latencies.p99));
    }
    Matrix {
        rows,
        columns,
        cells,
        zones: zones.clone(),
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use kdoctor_api::fixtures::net_reach_report;

    /// `n` nodes whose agents probe each other's pods and the ClusterIP; `node-1`'s requests to
    /// `node-2` fail half the time, and latency grows with the distance between node numbers.
    pub fn mesh(n: usize) -> Vec<Report> {
        (0..n)
            .map(|i| {
                let mut report = net_reach_report(&format!("node-{i}"), 3, n + 1, i as u64);
                report.pod_name = format!("kdoctor-agent-{i}");
                let detail = &mut report
                    .task_net_reach
                    .as_mut()
                    .expect("NetReach")
                    .round_task_detail;
                for (j, d) in detail.iter_mut().enumerate() {
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

    /// The matrix's view of reports.
    pub fn sources(reports: &[Report]) -> Vec<SourceReport> {
        reports.iter().map(SourceReport::from).collect()
    }

    #[test]
    fn targets_become_node_and_kind_columns() {
        let pods = BTreeMap::from([("kdoctor-agent-x".to_string(), "node-x".to_string())]);
        assert_eq!(
            column_of("AgentPodV4IP_kdoctor-agent-x_10.0.0.1", &pods),
            Column::Node("node-x".into())
        );
        assert_eq!(
            column_of("AgentPodV6IP_other_fd00::1", &pods),
            Column::Kind("pod other".into())
        );
        assert_eq!(
            column_of("AgentClusterV6IP_[fd00::10]:80", &pods),
            Column::Kind("ClusterIP v6".into())
        );
        assert_eq!(
            column_of("AgentIngress_v4_http://1.2.3.4/kdoctoragent", &pods),
            Column::Kind("Ingress v4".into())
        );
        assert_eq!(
            column_of("AgentNodePortV4IP_172.18.0.2_31000", &pods),
            Column::Kind("NodePort v4".into())
        );
    }

    #[test]
    fn the_matrix_has_a_row_per_source_and_a_cell_per_probed_pair() {
        let zones = BTreeMap::from([
            ("node-0".to_string(), "b".to_string()),
            ("node-1".to_string(), "a".to_string()),
            ("node-2".to_string(), "a".to_string()),
        ]);
        let m = build(&sources(&mesh(3)), &zones);
        // Grouped by zone: a (node-1, node-2), then b (node-0).
        assert_eq!(m.rows, ["node-1", "node-2", "node-0"]);
        assert_eq!(m.columns.len(), 4);
        assert_eq!(m.columns[3], Column::Kind("ClusterIP v4".into()));
        let failing = m.cells[0][1].expect("node-1 → node-2");
        assert_eq!(failing.value(Metric::Success), 0.5);
        assert_eq!(failing.value(Metric::Loss), 0.5);
        assert_eq!(
            m.cells[2][0].expect("node-0 → node-1").value(Metric::P99),
            1.5
        );
        assert!(m.cells.iter().flatten().all(Option::is_some));
    }
}
