//! The connectivity matrix of a NetReach round: one row per source node, one column per target
//! — a node (through its agent pod) or, for Service and Ingress targets, the target kind and
//! family — and in each cell what the source measured towards that target. The report store
//! keeps a [`ProbeRow`] per agent report so that the API server can answer a matrix without
//! reading report bodies; `kubectl kdoctor matrix` renders it. A matrix is kept sparse (the
//! probed cells of each row), as a round with peer sampling probes a few cells a row; on the wire
//! it is the dense grid old clients read, or sparse when the client asks (see [`Sparse`]).

mod builder;
mod column;
mod wire;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::report::Report;
use crate::report::protocol::Protocol;

pub use builder::{Builder, build};
pub use column::{Column, DENY_COLUMN, column_of};
pub use wire::{CELLS_QUERY, Sparse};

/// `kind` of the matrix view of a KdoctorReport.
pub const KIND: &str = "KdoctorReportMatrix";

/// What one source node measured towards each target: the part of an agent report a matrix
/// needs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeRow {
    /// The source node.
    pub node: String,
    /// Its agent pod (target names name pods).
    pub pod: String,
    /// One entry per target, in the report's order.
    pub probes: Vec<Probe>,
}

/// One target of a source.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// Upstream's target name (`AgentPodV4IP_<pod>_<ip>`, `AgentClusterV4IP_<addr>`, …).
    pub target: String,
    /// Requests sent.
    pub requests: i64,
    /// Requests that succeeded.
    pub successes: i64,
    /// 99th percentile latency in milliseconds.
    pub p99_ms: f32,
    /// The path MTU found (UDP echo entries of a task with `spec.target.pathMTU`), bytes.
    #[serde(default, rename = "pathMTU", skip_serializing_if = "Option::is_none")]
    pub path_mtu: Option<u32>,
}

impl ProbeRow {
    /// The row of a NetReach report; None for other kinds.
    pub fn of(report: &Report) -> Option<ProbeRow> {
        let result = report.task_net_reach.as_ref()?;
        Some(ProbeRow {
            node: report.node_name.clone(),
            pod: report.pod_name.clone(),
            probes: result
                .round_task_detail
                .iter()
                .map(|d| {
                    let metrics = &d.request_target_metrics;
                    let requests = &metrics.requests;
                    Probe {
                        target: d.name.clone(),
                        requests: requests.request_counts,
                        successes: requests.success_counts,
                        p99_ms: requests.latencies.p99,
                        path_mtu: metrics
                            .datagrams
                            .as_ref()
                            .and_then(|d| d.path_mtu)
                            .and_then(|bytes| u32::try_from(bytes).ok()),
                    }
                })
                .collect(),
        })
    }
}

/// One source → target measurement (several targets of one column are summed); on the wire
/// `[requests, successes, p99Ms]`, and its path MTU in the matrix's own `pathMTU` grid (a
/// fourth element would break every client that reads three).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "(i64, i64, f64)", into = "(i64, i64, f64)")]
pub struct Cell {
    /// Requests sent.
    pub requests: i64,
    /// Requests that succeeded.
    pub successes: i64,
    /// Worst p99 among the column's targets, in milliseconds.
    pub p99_ms: f64,
    /// Smallest path MTU among the column's targets that have one, bytes.
    pub path_mtu: Option<u32>,
}

impl From<(i64, i64, f64)> for Cell {
    fn from((requests, successes, p99_ms): (i64, i64, f64)) -> Cell {
        Cell {
            requests,
            successes,
            p99_ms,
            path_mtu: None,
        }
    }
}

impl From<Cell> for (i64, i64, f64) {
    fn from(c: Cell) -> (i64, i64, f64) {
        (c.requests, c.successes, c.p99_ms)
    }
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
}

/// The matrix of one round.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(try_from = "wire::WireMatrix")]
pub struct Matrix {
    /// Source nodes, grouped by zone when zones are known.
    pub rows: Vec<String>,
    /// Target nodes (same order as rows), then target kinds.
    pub columns: Vec<Column>,
    /// `cells[row]`: (column, cell) of the cells probed from that row, by column; a column
    /// not there was not probed.
    pub cells: Vec<Vec<(usize, Cell)>>,
    /// Zone of each node that has one.
    pub zones: BTreeMap<String, String>,
    /// The probes the cells count (absent from a server that knows only HTTP).
    pub protocol: Protocol,
}

impl Matrix {
    /// The cell of `row` towards `column`; `None`: not probed.
    pub fn cell(&self, row: usize, column: usize) -> Option<&Cell> {
        let cells = self.cells.get(row)?;
        let at = cells.binary_search_by_key(&column, |(c, _)| *c).ok()?;
        Some(&cells[at].1)
    }

    /// Every probed cell.
    pub fn probed(&self) -> impl Iterator<Item = &Cell> {
        self.cells.iter().flatten().map(|(_, cell)| cell)
    }

    /// The widest path MTU between two different nodes: what the network carries, and what a
    /// cell is judged against (narrower: larger packets are cut or lost on that path alone). A
    /// node to its own pod goes over loopback, so the diagonal counts only where there is
    /// nothing else (one node).
    pub fn widest_path_mtu(&self) -> Option<u32> {
        // (between nodes, to itself)
        let mut widest: [Option<u32>; 2] = [None, None];
        for (node, cells) in self.rows.iter().zip(&self.cells) {
            for (column, cell) in cells {
                let own = matches!(self.columns.get(*column), Some(Column::Node(target)) if target == node);
                let slot = &mut widest[usize::from(own)];
                *slot = (*slot).max(cell.path_mtu);
            }
        }
        widest[0].or(widest[1])
    }

    /// A node with its zone, when known: `node-1 (zone-a)`.
    pub fn node_label(&self, node: &str) -> String {
        match self.zones.get(node) {
            Some(zone) => format!("{node} ({zone})"),
            None => node.to_string(),
        }
    }

    /// What a column is: `node-1 (zone-a) (pod)`, `ClusterIP v4`, or a peer that must not be
    /// reachable.
    pub fn column_name(&self, column: &Column) -> String {
        match column {
            Column::Node(node) => format!("{} (pod)", self.node_label(node)),
            Column::Kind(kind) if kind.starts_with(DENY_COLUMN) => {
                format!("{kind} (must be unreachable: a cell counts the tries blocked)")
            }
            Column::Kind(kind) => kind.clone(),
        }
    }

    /// The same matrix with `zones` known: rows and node columns ordered by zone, then name
    /// (nodes without a zone first); kind columns stay last.
    pub fn grouped(self, zones: &BTreeMap<String, String>) -> Matrix {
        let key = |node: &str| {
            (
                zones.get(node).cloned().unwrap_or_default(),
                node.to_string(),
            )
        };
        let mut row_order: Vec<usize> = (0..self.rows.len()).collect();
        row_order.sort_by_key(|&i| key(&self.rows[i]));
        let mut column_order: Vec<usize> = (0..self.columns.len()).collect();
        column_order.sort_by_key(|&i| match &self.columns[i] {
            Column::Node(node) => (0, key(node)),
            Column::Kind(kind) => (1, (String::new(), kind.clone())),
        });
        // Where each column goes.
        let mut position = vec![0; column_order.len()];
        for (to, &from) in column_order.iter().enumerate() {
            position[from] = to;
        }
        let mut cells = self.cells;
        Matrix {
            rows: row_order.iter().map(|&i| self.rows[i].clone()).collect(),
            columns: column_order
                .iter()
                .map(|&i| self.columns[i].clone())
                .collect(),
            cells: row_order
                .iter()
                .map(|&r| {
                    let mut row: Vec<(usize, Cell)> = cells
                        .get_mut(r)
                        .map(std::mem::take)
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|(column, cell)| Some((*position.get(column)?, cell)))
                        .collect();
                    row.sort_by_key(|(column, _)| *column);
                    row
                })
                .collect(),
            zones: zones.clone(),
            protocol: self.protocol,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn row(node: &str, targets: &[(&str, i64)]) -> ProbeRow {
        ProbeRow {
            node: node.into(),
            pod: format!("agent-{node}"),
            probes: targets
                .iter()
                .map(|(t, ok)| Probe {
                    target: (*t).into(),
                    requests: 10,
                    successes: *ok,
                    p99_ms: 1.5,
                    path_mtu: None,
                })
                .collect(),
        }
    }

    #[test]
    fn cells_sum_a_columns_targets_and_zones_regroup_rows_and_node_columns() {
        let rows = [
            row(
                "b",
                &[
                    ("AgentPodV4IP_agent-a_1", 10),
                    ("AgentPodV6IP_agent-a_2", 5),
                    ("AgentClusterV4IP_x", 10),
                ],
            ),
            row("a", &[("AgentPodV4IP_agent-b_3", 0)]),
        ];
        let m = build(&rows, Protocol::Http);
        assert_eq!(m.rows, ["a", "b"]);
        assert_eq!(
            m.columns,
            [
                Column::Node("a".into()),
                Column::Node("b".into()),
                Column::Kind("ClusterIP v4".into())
            ]
        );
        let both_families = m.cell(1, 0).expect("b → a");
        assert_eq!((both_families.requests, both_families.successes), (20, 15));
        assert_eq!(m.cell(0, 1).map(|c| c.success()), Some(0.0));
        assert_eq!(m.cell(0, 0), None);
        let zones = BTreeMap::from([
            ("a".to_string(), "z2".to_string()),
            ("b".into(), "z1".into()),
        ]);
        let g = m.clone().grouped(&zones);
        assert_eq!(g.rows, ["b", "a"]);
        assert_eq!(g.columns[0], Column::Node("b".into()));
        assert_eq!(g.columns[2], Column::Kind("ClusterIP v4".into()));
        assert_eq!(g.cell(0, 1), m.cell(1, 0));
        assert_eq!(g.cell(1, 0), m.cell(0, 1));
        assert_eq!(g.cell(0, 2), m.cell(1, 2));
        assert_eq!(g.probed().count(), m.probed().count());
        // On the wire a cell is [requests, successes, p99].
        let wire = serde_json::to_string(&g).expect("json");
        assert!(wire.contains("[20,15,1.5]"), "{wire}");
        assert_eq!(serde_json::from_str::<Matrix>(&wire).expect("back"), g);
    }

    #[test]
    fn a_cell_s_path_mtu_is_its_column_s_smallest_and_travels_in_a_grid_of_its_own() {
        let probe = |target: &str, mtu: Option<u32>| Probe {
            target: target.into(),
            requests: 10,
            successes: 10,
            p99_ms: 1.0,
            path_mtu: mtu,
        };
        let rows = [
            ProbeRow {
                node: "a".into(),
                pod: "agent-a".into(),
                probes: vec![
                    probe("UDP_AgentPodV4IP_agent-a_1", Some(65_535)),
                    probe("UDP_AgentPodV4IP_agent-b_2", Some(1_500)),
                    probe("UDP_AgentPodV6IP_agent-b_3", Some(1_400)),
                    probe("UDP_AgentPodV4IP_agent-c_4", Some(1_500)),
                    probe("UDP_AgentClusterV4IP_5:5712", None),
                ],
            },
            ProbeRow {
                node: "b".into(),
                pod: "agent-b".into(),
                probes: vec![
                    probe("UDP_AgentPodV4IP_agent-b_2", Some(65_535)),
                    probe("UDP_AgentPodV4IP_agent-a_1", Some(1_500)),
                ],
            },
            ProbeRow {
                node: "c".into(),
                pod: "agent-c".into(),
                probes: vec![],
            },
        ];
        let m = build(&rows, Protocol::Udp);
        let mtu = |row: usize, column: usize| m.cell(row, column).and_then(|c| c.path_mtu);
        // Columns: a, b, c, then ClusterIP v4.
        assert_eq!(mtu(0, 1), Some(1_400), "the IPv6 path is the narrower");
        assert_eq!(mtu(0, 3), None, "a Service's port was not searched");
        assert_eq!(m.cell(0, 3).map(|c| c.requests), Some(10));
        // Between nodes 1,500 and 1,400; the diagonal's loopback 65,535 left out.
        assert_eq!(m.widest_path_mtu(), Some(1_500));

        let wire = serde_json::to_value(&m).expect("json");
        assert_eq!(wire["cells"][0][1], serde_json::json!([20, 20, 1.0]));
        assert_eq!(
            wire["pathMTU"][0],
            serde_json::json!([65_535, 1_400, 1_500, null])
        );
        assert_eq!(serde_json::from_value::<Matrix>(wire).expect("back"), m);
        // Without any path MTU the grid is left out, as servers before it sent.
        let http = build(&rows, Protocol::Http);
        let wire = serde_json::to_value(&http).expect("json");
        assert!(wire.get("pathMTU").is_none(), "{wire}");
        assert_eq!(http.widest_path_mtu(), None);
        // One node: its own path is all there is.
        let alone = ProbeRow {
            probes: rows[0].probes[..1].to_vec(),
            ..rows[0].clone()
        };
        assert_eq!(
            build(&[alone], Protocol::Udp).widest_path_mtu(),
            Some(65_535)
        );
    }

    #[test]
    fn a_matrix_shows_one_protocol_and_never_sums_http_with_tcp() {
        let rows = [
            row(
                "a",
                &[
                    ("AgentPodV4IP_agent-b_1", 10),
                    ("TCP_AgentPodV4IP_agent-b_1", 4),
                    ("TCP_AgentClusterV4IP_x", 7),
                    ("UDP_AgentPodV4IP_agent-b_1", 9),
                ],
            ),
            row("b", &[]),
        ];
        let cell = |m: &Matrix, column: Column| {
            let c = m.columns.iter().position(|c| *c == column)?;
            m.cell(0, c).map(|c| (c.requests, c.successes))
        };
        let http = build(&rows, Protocol::Http);
        assert_eq!(cell(&http, Column::Node("b".into())), Some((10, 10)));
        assert_eq!(cell(&http, Column::Kind("ClusterIP v4".into())), None);
        let tcp = build(&rows, Protocol::Tcp);
        assert_eq!(
            (http.protocol, tcp.protocol),
            (Protocol::Http, Protocol::Tcp)
        );
        assert_eq!(cell(&tcp, Column::Node("b".into())), Some((10, 4)));
        assert_eq!(
            cell(&tcp, Column::Kind("ClusterIP v4".into())),
            Some((10, 7))
        );
        let udp = build(&rows, Protocol::Udp);
        assert_eq!(cell(&udp, Column::Node("b".into())), Some((10, 9)));
        assert_eq!(cell(&udp, Column::Kind("ClusterIP v4".into())), None);
    }
}
