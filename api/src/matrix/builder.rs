//! Building a round's matrix from its probe rows, one row at a time and sparse: a round that
//! samples k peers holds k cells a row, not one per node.

use std::collections::{BTreeMap, HashMap};

use super::column::{Column, column_of};
use super::{Cell, Matrix, ProbeRow};
use crate::report::protocol::Protocol;

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
    /// seen).
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
    /// [`Matrix::grouped`]); as large in memory as the probed cells (a round of 5,000 nodes
    /// sampling 5 peers is 25,000 cells, where a dense grid is 25 million).
    pub fn finish(self) -> Matrix {
        let mut order: Vec<usize> = (0..self.columns.len()).collect();
        order.sort_by(|&a, &b| self.columns[a].cmp(&self.columns[b]));
        let mut rank = vec![0; order.len()];
        for (position, &id) in order.iter().enumerate() {
            rank[id] = position;
        }
        let mut columns: Vec<Option<Column>> = self.columns.into_iter().map(Some).collect();
        Matrix {
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
            zones: BTreeMap::new(),
            protocol: self.protocol,
        }
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
