//! A [`Matrix`] on the wire. Dense by default, as every client of the view has read it since
//! its first version: each row a value or `null` per column, and the path MTUs in a `pathMTU`
//! grid of their own when any cell has one (a fourth element in a cell would break every
//! client that reads three). Sparse when the client asks with `?cells=sparse` ([`Sparse`]):
//! `sparseCells` holds each row's probed cells as `[column, requests, successes, p99Ms]`, a
//! fifth element the path MTU when searched — a round of 5,000 nodes sampling 5 peers is
//! 25,000 cells instead of a grid of 25 million. Both are read back into a [`Matrix`]; a server
//! that does not know the parameter answers dense.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::column::Column;
use super::{Cell, Matrix};
use crate::report::protocol::Protocol;

/// The query parameter of the matrix view that asks for its cells `dense` (the default) or
/// `sparse`.
pub const CELLS_QUERY: &str = "cells";

/// A matrix written sparse: `sparseCells` in place of `cells` and `pathMTU`.
pub struct Sparse<'a>(pub &'a Matrix);

/// `Some(value(cell))` of one cell, or `None`, in the dense grid.
type Value<T> = fn(&Cell) -> Option<T>;

/// One row of the dense grid: `value(cell)` or `null` per column.
struct DenseRow<'a, T> {
    width: usize,
    cells: &'a [(usize, Cell)],
    value: Value<T>,
}

impl<T: Serialize> Serialize for DenseRow<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
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

/// The dense grid of a matrix, written a row at a time (never whole in memory).
struct DenseGrid<'a, T> {
    matrix: &'a Matrix,
    value: Value<T>,
}

impl<T: Serialize> Serialize for DenseGrid<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.matrix.cells.iter().map(|cells| DenseRow {
            width: self.matrix.columns.len(),
            cells,
            value: self.value,
        }))
    }
}

impl Serialize for Matrix {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let any_mtu = self.probed().any(|c| c.path_mtu.is_some());
        let fields = 4 + usize::from(!self.zones.is_empty()) + usize::from(any_mtu);
        let mut out = serializer.serialize_struct("Matrix", fields)?;
        out.serialize_field("rows", &self.rows)?;
        out.serialize_field("columns", &self.columns)?;
        out.serialize_field(
            "cells",
            &DenseGrid {
                matrix: self,
                value: |c| Some(*c),
            },
        )?;
        if !self.zones.is_empty() {
            out.serialize_field("zones", &self.zones)?;
        }
        out.serialize_field("protocol", &self.protocol)?;
        if any_mtu {
            out.serialize_field(
                "pathMTU",
                &DenseGrid {
                    matrix: self,
                    value: |c| c.path_mtu,
                },
            )?;
        }
        out.end()
    }
}

/// One probed cell of the sparse form: `[column, requests, successes, p99Ms(, pathMTU)]`.
struct SparseCell(usize, Cell);

impl Serialize for SparseCell {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let SparseCell(column, cell) = self;
        let mut seq = serializer.serialize_seq(Some(4 + usize::from(cell.path_mtu.is_some())))?;
        seq.serialize_element(column)?;
        seq.serialize_element(&cell.requests)?;
        seq.serialize_element(&cell.successes)?;
        seq.serialize_element(&cell.p99_ms)?;
        if let Some(mtu) = cell.path_mtu {
            seq.serialize_element(&mtu)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for SparseCell {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = SparseCell;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("[column, requests, successes, p99Ms] and an optional path MTU")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SparseCell, A::Error> {
                let missing =
                    |what| serde::de::Error::custom(format!("a sparse cell without {what}"));
                let column = seq.next_element()?.ok_or_else(|| missing("its column"))?;
                let requests = seq.next_element()?.ok_or_else(|| missing("requests"))?;
                let successes = seq.next_element()?.ok_or_else(|| missing("successes"))?;
                let p99_ms = seq.next_element()?.ok_or_else(|| missing("p99Ms"))?;
                let path_mtu = seq.next_element::<Option<u32>>()?.flatten();
                // Elements a later version adds are skipped.
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(SparseCell(
                    column,
                    Cell {
                        requests,
                        successes,
                        p99_ms,
                        path_mtu,
                    },
                ))
            }
        }
        deserializer.deserialize_seq(Visit)
    }
}

/// The probed cells of one sparse row.
struct SparseRow<'a>(&'a [(usize, Cell)]);

impl Serialize for SparseRow<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|(c, cell)| SparseCell(*c, *cell)))
    }
}

/// The rows of the sparse form, written a row at a time.
struct SparseGrid<'a>(&'a [Vec<(usize, Cell)>]);

impl Serialize for SparseGrid<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|row| SparseRow(row)))
    }
}

impl Serialize for Sparse<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let m = self.0;
        let fields = 4 + usize::from(!m.zones.is_empty());
        let mut out = serializer.serialize_struct("Matrix", fields)?;
        out.serialize_field("rows", &m.rows)?;
        out.serialize_field("columns", &m.columns)?;
        out.serialize_field("sparseCells", &SparseGrid(&m.cells))?;
        if !m.zones.is_empty() {
            out.serialize_field("zones", &m.zones)?;
        }
        out.serialize_field("protocol", &m.protocol)?;
        out.end()
    }
}

/// A dense row read sparse: the (column, value) of each non-null element, so that reading a
/// dense grid of 25 million cells keeps only the probed ones.
struct ReadDenseRow<T>(Vec<(usize, T)>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ReadDenseRow<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Visit<T> {
            type Value = ReadDenseRow<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a row of cells and nulls")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut probed = Vec::new();
                let mut column = 0;
                while let Some(value) = seq.next_element::<Option<T>>()? {
                    if let Some(value) = value {
                        probed.push((column, value));
                    }
                    column += 1;
                }
                Ok(ReadDenseRow(probed))
            }
        }
        deserializer.deserialize_seq(Visit(PhantomData))
    }
}

/// A matrix as read: dense or sparse.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WireMatrix {
    rows: Vec<String>,
    columns: Vec<Column>,
    #[serde(default)]
    cells: Option<Vec<ReadDenseRow<Cell>>>,
    #[serde(default)]
    sparse_cells: Option<Vec<Vec<SparseCell>>>,
    #[serde(default)]
    zones: BTreeMap<String, String>,
    #[serde(default)]
    protocol: Protocol,
    /// `pathMTU[row][column]` of the dense form, bytes; `null` where not searched.
    #[serde(default, rename = "pathMTU")]
    path_mtu: Vec<ReadDenseRow<u32>>,
}

impl TryFrom<WireMatrix> for Matrix {
    type Error = String;

    fn try_from(w: WireMatrix) -> Result<Matrix, String> {
        let mut cells: Vec<Vec<(usize, Cell)>> = match (w.cells, w.sparse_cells) {
            (Some(dense), None) => dense.into_iter().map(|row| row.0).collect(),
            (None, Some(sparse)) => sparse
                .into_iter()
                .map(|row| {
                    let mut row: Vec<(usize, Cell)> = row
                        .into_iter()
                        .map(|SparseCell(c, cell)| (c, cell))
                        .collect();
                    row.sort_by_key(|(column, _)| *column);
                    row
                })
                .collect(),
            (Some(_), Some(_)) => return Err("a matrix has either cells or sparseCells".into()),
            (None, None) => return Err("a matrix needs cells or sparseCells".into()),
        };
        if cells.len() != w.rows.len() {
            return Err(format!(
                "the matrix has {} rows of cells for {} rows",
                cells.len(),
                w.rows.len()
            ));
        }
        let width = w.columns.len();
        for (node, row) in w.rows.iter().zip(&cells) {
            if let Some((column, _)) = row.iter().find(|(column, _)| *column >= width) {
                return Err(format!(
                    "the matrix's row {node:?} has a cell in column {column} of {width}"
                ));
            }
            if row.windows(2).any(|pair| pair[0].0 == pair[1].0) {
                return Err(format!("the matrix's row {node:?} has a column twice"));
            }
        }
        for (row, mtus) in cells.iter_mut().zip(w.path_mtu) {
            for (column, mtu) in mtus.0 {
                if let Ok(at) = row.binary_search_by_key(&column, |(c, _)| *c) {
                    row[at].1.path_mtu = Some(mtu);
                }
            }
        }
        Ok(Matrix {
            rows: w.rows,
            columns: w.columns,
            cells,
            zones: w.zones,
            protocol: w.protocol,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::{Probe, ProbeRow, build};

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

    /// The dense JSON of `m`, built cell by cell from [`Matrix::cell`].
    fn dense_reference(m: &Matrix) -> serde_json::Value {
        let grid = |value: &dyn Fn(&Cell) -> serde_json::Value| -> serde_json::Value {
            (0..m.rows.len())
                .map(|r| {
                    (0..m.columns.len())
                        .map(|c| m.cell(r, c).map_or(serde_json::Value::Null, value))
                        .collect::<serde_json::Value>()
                })
                .collect()
        };
        let mut out = serde_json::json!({
            "rows": m.rows,
            "columns": m.columns,
            "cells": grid(&|c| serde_json::json!([c.requests, c.successes, c.p99_ms])),
            "protocol": m.protocol,
        });
        if m.probed().any(|c| c.path_mtu.is_some()) {
            out["pathMTU"] = grid(&|c| serde_json::json!(c.path_mtu));
        }
        out
    }

    #[test]
    fn a_sparse_matrix_is_the_dense_grid_on_the_wire_unless_asked_sparse() {
        for protocol in [Protocol::Http, Protocol::Udp] {
            let m = build(&sampled_rows(7), protocol);
            // In memory: two peers a node (and, by HTTP, the Service), not a cell per column.
            let probed = if protocol == Protocol::Http { 3 } else { 2 };
            assert_eq!(m.cells.iter().map(Vec::len).max(), Some(probed));
            let dense = serde_json::to_value(&m).expect("json");
            assert_eq!(dense, dense_reference(&m), "{protocol:?}");
            assert_eq!(serde_json::from_value::<Matrix>(dense).expect("dense"), m);
            let sparse = serde_json::to_value(Sparse(&m)).expect("json");
            assert!(sparse.get("cells").is_none(), "{sparse}");
            assert_eq!(sparse["sparseCells"][3], serde_json::json!([]));
            assert_eq!(
                sparse["sparseCells"][0].as_array().map(Vec::len),
                Some(probed)
            );
            assert_eq!(serde_json::from_value::<Matrix>(sparse).expect("sparse"), m);
        }
        // The path MTU: a grid of its own when dense, a cell's fifth element when sparse.
        let udp = build(&sampled_rows(7), Protocol::Udp);
        let dense = serde_json::to_value(&udp).expect("json");
        assert_eq!(dense["pathMTU"][0][1], serde_json::json!(1_401));
        assert_eq!(dense["cells"][3], serde_json::json!(vec![None::<u8>; 7]));
        let sparse = serde_json::to_value(Sparse(&udp)).expect("json");
        assert_eq!(
            sparse["sparseCells"][0][0],
            serde_json::json!([1, 5, 5, 0.5, 1_401])
        );
        assert_eq!(
            sparse["sparseCells"][1][0],
            serde_json::json!([2, 5, 5, 0.5])
        );
        let http = serde_json::to_value(build(&sampled_rows(7), Protocol::Http)).expect("json");
        assert!(http.get("pathMTU").is_none(), "{http}");
    }

    #[test]
    fn a_matrix_read_from_the_wire_names_only_its_own_rows_and_columns() {
        let refused = |json: serde_json::Value| {
            serde_json::from_value::<Matrix>(json)
                .expect_err("refused")
                .to_string()
        };
        let base =
            serde_json::json!({"rows": ["a", "b"], "columns": [{"node": "a"}, {"node": "b"}]});
        let with = |key: &str, value: serde_json::Value| {
            let mut json = base.clone();
            json[key] = value;
            json
        };
        let error = refused(with(
            "sparseCells",
            serde_json::json!([[[2, 1, 1, 0.5]], []]),
        ));
        assert!(
            error.contains("row \"a\" has a cell in column 2 of 2"),
            "{error}"
        );
        let error = refused(with(
            "cells",
            serde_json::json!([[null, null, [1, 1, 0.5]], []]),
        ));
        assert!(error.contains("column 2 of 2"), "{error}");
        let error = refused(with("cells", serde_json::json!([[null, null]])));
        assert!(error.contains("1 rows of cells for 2 rows"), "{error}");
        let error = refused(with(
            "sparseCells",
            serde_json::json!([[[1, 1, 1, 0.5], [1, 2, 2, 0.5]], []]),
        ));
        assert!(error.contains("a column twice"), "{error}");
        let error = refused(base.clone());
        assert!(error.contains("needs cells or sparseCells"), "{error}");
        let error = refused(with("sparseCells", serde_json::json!([[[1, 1]], []])));
        assert!(error.contains("without successes"), "{error}");
        // Unordered sparse cells are put in order; an element a later version adds is skipped.
        let m: Matrix = serde_json::from_value(with(
            "sparseCells",
            serde_json::json!([[[1, 4, 4, 0.5, null, "later"], [0, 3, 3, 0.5]], []]),
        ))
        .expect("read");
        assert_eq!(m.cell(0, 0).map(|c| c.requests), Some(3));
        assert_eq!(m.cell(0, 1).map(|c| c.requests), Some(4));
        assert_eq!(m.cell(1, 0), None);
    }
}
