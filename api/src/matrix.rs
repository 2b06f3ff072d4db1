//! The connectivity matrix of a NetReach round: one row per source node, one column per target
//! — a node (through its agent pod) or, for Service and Ingress targets, the target kind and
//! family — and in each cell what the source measured towards that target. The report store
//! keeps a [`ProbeRow`] per agent report so that the API server can answer a matrix without
//! reading report bodies; `kubectl kdoctor matrix` renders it.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::report::Report;
use crate::report::protocol::{Protocol, split_deny};

/// How the column of a peer that must not be reachable begins: `deny db: db-0`.
pub const DENY_COLUMN: &str = "deny";

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

/// A column: a node reached through its agent pod, or a kind of target.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Column {
    /// The agent pod on this node.
    Node(String),
    /// Service or Ingress targets, e.g. `ClusterIP v4`.
    Kind(String),
}

/// The matrix of one round.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "WireMatrix", into = "WireMatrix")]
pub struct Matrix {
    /// Source nodes, grouped by zone when zones are known.
    pub rows: Vec<String>,
    /// Target nodes (same order as rows), then target kinds.
    pub columns: Vec<Column>,
    /// `cells[row][column]`; `None`: not probed.
    pub cells: Vec<Vec<Option<Cell>>>,
    /// Zone of each node that has one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub zones: BTreeMap<String, String>,
    /// The probes the cells count (absent from a server that knows only HTTP).
    pub protocol: Protocol,
}

/// A [`Matrix`] as JSON: the cells' path MTUs apart, in a grid of their own that is left out
/// when no cell has one.
#[derive(Serialize, Deserialize)]
struct WireMatrix {
    rows: Vec<String>,
    columns: Vec<Column>,
    cells: Vec<Vec<Option<Cell>>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    zones: BTreeMap<String, String>,
    #[serde(default)]
    protocol: Protocol,
    /// `pathMTU[row][column]`, bytes; `null` where not searched.
    #[serde(default, rename = "pathMTU", skip_serializing_if = "Vec::is_empty")]
    path_mtu: Vec<Vec<Option<u32>>>,
}

impl From<Matrix> for WireMatrix {
    fn from(m: Matrix) -> WireMatrix {
        let any = m
            .cells
            .iter()
            .flatten()
            .flatten()
            .any(|c| c.path_mtu.is_some());
        let path_mtu = if any {
            m.cells
                .iter()
                .map(|row| row.iter().map(|c| c.and_then(|c| c.path_mtu)).collect())
                .collect()
        } else {
            Vec::new()
        };
        WireMatrix {
            rows: m.rows,
            columns: m.columns,
            cells: m.cells,
            zones: m.zones,
            protocol: m.protocol,
            path_mtu,
        }
    }
}

impl From<WireMatrix> for Matrix {
    fn from(mut w: WireMatrix) -> Matrix {
        for (row, mtus) in w.cells.iter_mut().zip(&w.path_mtu) {
            for (cell, mtu) in row.iter_mut().zip(mtus) {
                if let Some(cell) = cell {
                    cell.path_mtu = *mtu;
                }
            }
        }
        Matrix {
            rows: w.rows,
            columns: w.columns,
            cells: w.cells,
            zones: w.zones,
            protocol: w.protocol,
        }
    }
}

impl Matrix {
    /// The widest path MTU between two different nodes: what the network carries, and what a
    /// cell is judged against (narrower: larger packets are cut or lost on that path alone). A
    /// node to its own pod goes over loopback, so the diagonal counts only where there is
    /// nothing else (one node).
    pub fn widest_path_mtu(&self) -> Option<u32> {
        // (between nodes, to itself)
        let mut widest: [Option<u32>; 2] = [None, None];
        for (node, cells) in self.rows.iter().zip(&self.cells) {
            for (column, cell) in self.columns.iter().zip(cells) {
                let own = matches!(column, Column::Node(target) if target == node);
                let slot = &mut widest[usize::from(own)];
                *slot = (*slot).max(cell.and_then(|c| c.path_mtu));
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
                    let row = std::mem::take(&mut cells[r]);
                    column_order
                        .iter()
                        .map(|&c| row.get(c).copied().flatten())
                        .collect()
                })
                .collect(),
            zones: zones.clone(),
            protocol: self.protocol,
        }
    }
}

/// The column of a target name (upstream's names: `AgentPodV4IP_<pod>_<ip>`,
/// `AgentClusterV6IP_<ip>:<port>`, `AgentIngress_v4_<url>`, …) given which node runs each pod.
pub fn column_of(name: &str, pod_nodes: &HashMap<String, String>) -> Column {
    let (_, name) = Protocol::split(name);
    // A peer that must stay unreachable: its own column, whose cells count the tries that
    // were blocked as successes, so a full cell is an isolation that held.
    if let Some((check, peer)) = split_deny(name) {
        return Column::Kind(format!("{DENY_COLUMN} {check}: {peer}"));
    }
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

/// Builds a matrix one row at a time, so that a round's rows need not all be in memory at once
/// (a thousand rows of a thousand probes are a hundred megabytes as [`ProbeRow`]s).
#[derive(Debug, Default)]
pub struct Builder {
    protocol: Protocol,
    pod_nodes: HashMap<String, String>,
    nodes: Vec<String>,
    row_of: HashMap<String, usize>,
    columns: Vec<Column>,
    column_ids: HashMap<Column, usize>,
    by_target: HashMap<String, usize>,
    /// `cells[row]`: the probed cells by column id (columns in the order they were first
    /// seen). Sparse: a round that samples k peers holds k cells a row, not one per node.
    cells: Vec<BTreeMap<usize, Cell>>,
}

impl Builder {
    /// A builder for the rows of these sources: (node, its agent pod).
    pub fn new(sources: impl IntoIterator<Item = (String, String)>) -> Builder {
        let mut pod_nodes = HashMap::new();
        let mut nodes = Vec::new();
        for (node, pod) in sources {
            nodes.push(node.clone());
            pod_nodes.insert(pod, node);
        }
        nodes.sort();
        nodes.dedup();
        let row_of = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        Builder {
            pod_nodes,
            cells: vec![BTreeMap::new(); nodes.len()],
            nodes,
            row_of,
            ..Builder::default()
        }
    }

    /// The matrix of the targets probed with `protocol` (default: HTTP, upstream's only one):
    /// a round with `spec.target.tcp` reports each address twice, and a cell never sums the
    /// two.
    pub fn protocol(mut self, protocol: Protocol) -> Builder {
        self.protocol = protocol;
        self
    }

    /// Adds what one source measured (a source not given to [`Builder::new`] is skipped).
    pub fn add(&mut self, row: &ProbeRow) {
        let Some(&r) = self.row_of.get(&row.node) else {
            return;
        };
        for probe in &row.probes {
            if Protocol::split(&probe.target).0 != self.protocol {
                continue;
            }
            // Each distinct target name is mapped once; a million probes cost a lookup each.
            let id = match self.by_target.get(probe.target.as_str()) {
                Some(&id) => id,
                None => {
                    let column = column_of(&probe.target, &self.pod_nodes);
                    let id = match self.column_ids.get(&column) {
                        Some(&id) => id,
                        None => {
                            self.columns.push(column.clone());
                            self.column_ids.insert(column, self.columns.len() - 1);
                            self.columns.len() - 1
                        }
                    };
                    self.by_target.insert(probe.target.clone(), id);
                    id
                }
            };
            let cell = self.cells[r].entry(id).or_default();
            cell.requests += probe.requests;
            cell.successes += probe.successes;
            cell.p99_ms = cell.p99_ms.max(f64::from(probe.p99_ms));
            cell.path_mtu = cell.path_mtu.into_iter().chain(probe.path_mtu).min();
        }
    }

    /// The matrix: nodes in name order, node columns in name order, then kinds by name (see
    /// [`Matrix::grouped`]).
    pub fn finish(self) -> Matrix {
        let view = self.finish_view();
        let width = view.columns.len();
        Matrix {
            cells: view
                .cells
                .iter()
                .map(|row| {
                    let mut dense = vec![None; width];
                    for (column, cell) in row {
                        dense[*column] = Some(*cell);
                    }
                    dense
                })
                .collect(),
            rows: view.rows,
            columns: view.columns,
            zones: BTreeMap::new(),
            protocol: view.protocol,
        }
    }

    /// The matrix as [`Builder::finish`] orders it, its cells kept sparse: what the API server
    /// serves, in memory as large as the probed cells (a round of 5,000 nodes sampling 5 peers
    /// is 25,000 cells, where the dense grid is 25 million).
    pub fn finish_view(self) -> MatrixView {
        let mut order: Vec<usize> = (0..self.columns.len()).collect();
        order.sort_by(|&a, &b| self.columns[a].cmp(&self.columns[b]));
        let mut rank = vec![0; order.len()];
        for (position, &id) in order.iter().enumerate() {
            rank[id] = position;
        }
        let mut columns: Vec<Option<Column>> = self.columns.into_iter().map(Some).collect();
        MatrixView {
            columns: order.iter().filter_map(|&i| columns[i].take()).collect(),
            cells: self
                .cells
                .into_iter()
                .map(|row| {
                    let mut cells: Vec<(usize, Cell)> =
                        row.into_iter().map(|(id, cell)| (rank[id], cell)).collect();
                    cells.sort_by_key(|(column, _)| *column);
                    cells
                })
                .collect(),
            rows: self.nodes,
            protocol: self.protocol,
        }
    }
}

/// A [`Matrix`] whose cells are kept sparse: serialised as the same JSON (every row with a
/// value or `null` for each column, the path MTUs in their grid when any cell has one), written
/// as it goes, without the dense grid in memory.
#[derive(Clone, Debug, PartialEq)]
pub struct MatrixView {
    /// Source nodes.
    pub rows: Vec<String>,
    /// Target nodes, then target kinds.
    pub columns: Vec<Column>,
    /// `cells[row]`: (column, cell) of the probed cells, by column.
    pub cells: Vec<Vec<(usize, Cell)>>,
    /// The probes the cells count.
    pub protocol: Protocol,
}

/// One row of a [`MatrixView`] as the dense JSON has it: `value(cell)` or `null` per column.
struct DenseRow<'a, T, F: Fn(&Cell) -> Option<T>> {
    width: usize,
    cells: &'a [(usize, Cell)],
    value: F,
}

impl<T: Serialize, F: Fn(&Cell) -> Option<T>> Serialize for DenseRow<'_, T, F> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.width))?;
        let mut probed = self.cells.iter().peekable();
        for column in 0..self.width {
            match probed.next_if(|(c, _)| *c == column) {
                Some((_, cell)) => seq.serialize_element(&(self.value)(cell))?,
                None => seq.serialize_element(&None::<T>)?,
            }
        }
        seq.end()
    }
}

/// The rows of a [`MatrixView`], each a [`DenseRow`].
struct DenseRows<'a, T, F: Fn(&Cell) -> Option<T> + Copy> {
    view: &'a MatrixView,
    value: F,
}

impl<T: Serialize, F: Fn(&Cell) -> Option<T> + Copy> Serialize for DenseRows<'_, T, F> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.view.cells.iter().map(|cells| DenseRow {
            width: self.view.columns.len(),
            cells,
            value: self.value,
        }))
    }
}

impl Serialize for MatrixView {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        // The fields of WireMatrix, in its order; `zones` is empty here (the server does not
        // group), so it is left out as WireMatrix leaves an empty one out.
        let any_mtu = self
            .cells
            .iter()
            .flatten()
            .any(|(_, c)| c.path_mtu.is_some());
        let mut out = serializer.serialize_struct("Matrix", if any_mtu { 5 } else { 4 })?;
        out.serialize_field("rows", &self.rows)?;
        out.serialize_field("columns", &self.columns)?;
        out.serialize_field(
            "cells",
            &DenseRows {
                view: self,
                value: |c: &Cell| Some(*c),
            },
        )?;
        out.serialize_field("protocol", &self.protocol)?;
        if any_mtu {
            out.serialize_field(
                "pathMTU",
                &DenseRows {
                    view: self,
                    value: |c: &Cell| c.path_mtu,
                },
            )?;
        }
        out.end()
    }
}

/// Builds the matrix of a round's rows, its cells counting the probes of `protocol` (see
/// [`Builder`]).
pub fn build(rows: &[ProbeRow], protocol: Protocol) -> Matrix {
    let mut builder =
        Builder::new(rows.iter().map(|r| (r.node.clone(), r.pod.clone()))).protocol(protocol);
    for row in rows {
        builder.add(row);
    }
    builder.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(node: &str, targets: &[(&str, i64)]) -> ProbeRow {
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
    fn targets_become_node_and_kind_columns() {
        let pods = HashMap::from([("kdoctor-agent-x".to_string(), "node-x".to_string())]);
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
        // A peer that must not be reachable, even when it is an agent pod: expected and
        // observed differ from the mesh's, so it never shares the node's column.
        assert_eq!(
            column_of("TCP_Deny_db_kdoctor-agent-x_10.0.0.1", &pods),
            Column::Kind("deny db: kdoctor-agent-x".into())
        );
        assert_eq!(
            column_of("UDP_Deny_dns_svc-dns_fd00::10", &pods),
            Column::Kind("deny dns: svc-dns".into())
        );
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
        let both_families = m.cells[1][0].expect("b → a");
        assert_eq!((both_families.requests, both_families.successes), (20, 15));
        assert_eq!(m.cells[0][1].map(|c| c.success()), Some(0.0));
        assert_eq!(m.cells[0][0], None);
        let zones = BTreeMap::from([
            ("a".to_string(), "z2".to_string()),
            ("b".into(), "z1".into()),
        ]);
        let g = m.clone().grouped(&zones);
        assert_eq!(g.rows, ["b", "a"]);
        assert_eq!(g.columns[0], Column::Node("b".into()));
        assert_eq!(g.columns[2], Column::Kind("ClusterIP v4".into()));
        assert_eq!(g.cells[0][1], m.cells[1][0]);
        assert_eq!(g.cells[1][0], m.cells[0][1]);
        // On the wire a cell is [requests, successes, p99].
        let wire = serde_json::to_string(&g).expect("json");
        assert!(wire.contains("[20,15,1.5]"), "{wire}");
        assert_eq!(serde_json::from_str::<Matrix>(&wire).expect("back"), g);
    }

    /// The rows of a sampled round: each node probes the next two (by UDP with path MTUs
    /// on some, by HTTP), a Service, and a node that sent nothing.
    fn sampled_rows(nodes: usize) -> Vec<ProbeRow> {
        (0..nodes)
            .map(|i| {
                let peer = |k: usize| (i + k) % nodes;
                let mut probes = Vec::new();
                if i != 3 {
                    for k in 1..=2 {
                        let p = peer(k);
                        probes.push(Probe {
                            target: format!("AgentPodV4IP_agent-{p}_10.0.0.{p}"),
                            requests: 10 + i as i64,
                            successes: 10 - k as i64,
                            p99_ms: 1.0 + k as f32,
                            path_mtu: None,
                        });
                        probes.push(Probe {
                            target: format!("UDP_AgentPodV4IP_agent-{p}_10.0.0.{p}"),
                            requests: 5,
                            successes: 5,
                            p99_ms: 0.5,
                            path_mtu: (i % 2 == 0).then_some(1_400 + k as u32),
                        });
                    }
                    probes.push(Probe {
                        target: "AgentClusterV4IP_10.96.0.1:80".into(),
                        requests: 3,
                        successes: 3,
                        p99_ms: 2.0,
                        path_mtu: None,
                    });
                }
                ProbeRow {
                    node: format!("node-{i}"),
                    pod: format!("agent-{i}"),
                    probes,
                }
            })
            .collect()
    }

    #[test]
    fn the_sparse_view_is_the_dense_matrix_on_the_wire() {
        for protocol in [Protocol::Http, Protocol::Udp] {
            let rows = sampled_rows(7);
            let dense = build(&rows, protocol);
            let view = build_view(&rows, protocol);
            // Sparse: two peers a node (and, by HTTP, the Service), not a cell per node.
            let probed = if protocol == Protocol::Http { 3 } else { 2 };
            assert_eq!(view.cells.iter().map(Vec::len).max(), Some(probed));
            let dense_json = serde_json::to_value(&dense).expect("json");
            let view_json = serde_json::to_value(&view).expect("json");
            assert_eq!(view_json, dense_json, "{protocol:?}");
            assert_eq!(
                serde_json::to_string(&view).expect("json"),
                serde_json::to_string(&dense).expect("json")
            );
            let back: Matrix = serde_json::from_value(view_json).expect("a Matrix");
            assert_eq!(back, dense);
        }
        // The UDP grid has path MTUs, the HTTP one none: the pathMTU grid only in the first.
        let rows = sampled_rows(7);
        let udp = serde_json::to_value(build_view(&rows, Protocol::Udp)).expect("json");
        assert_eq!(udp["pathMTU"][0][1], serde_json::json!(1_401));
        assert_eq!(udp["cells"][3], serde_json::json!(vec![None::<u8>; 7]));
        let http = serde_json::to_value(build_view(&rows, Protocol::Http)).expect("json");
        assert!(http.get("pathMTU").is_none(), "{http}");
    }

    fn build_view(rows: &[ProbeRow], protocol: Protocol) -> MatrixView {
        let mut b =
            Builder::new(rows.iter().map(|r| (r.node.clone(), r.pod.clone()))).protocol(protocol);
        for row in rows {
            b.add(row);
        }
        b.finish_view()
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
        let mtu = |row: usize, column: usize| m.cells[row][column].and_then(|c| c.path_mtu);
        // Columns: a, b, c, then ClusterIP v4.
        assert_eq!(mtu(0, 1), Some(1_400), "the IPv6 path is the narrower");
        assert_eq!(mtu(0, 3), None, "a Service's port was not searched");
        assert_eq!(m.cells[0][3].map(|c| c.requests), Some(10));
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
            m.cells[0][c].map(|c| (c.requests, c.successes))
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
