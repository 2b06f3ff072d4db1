//! The matrix view of a KdoctorReport (`Accept: application/json;as=KdoctorReportMatrix;
//! g=system.kdoctor.io;v=v1beta1`, as kubectl asks for `as=Table`): the connectivity matrix of
//! the round the object shows, built from the store's probe rows — a few megabytes for a
//! thousand nodes instead of the object's hundreds.

use kdoctor_api::matrix::{Builder, KIND, Sparse};
use kdoctor_api::report::API_VERSION;
use kdoctor_api::report::protocol::Protocol;
use kdoctor_api::task::TaskKind;
use kdoctor_store::Store;
use serde::Serialize;

use super::names::Target;
use super::object::{rfc3339, shown_round};
use crate::kube::status::ApiError;

/// The view's object.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MatrixObject<'a, M> {
    api_version: &'a str,
    kind: &'a str,
    metadata: Metadata<'a>,
    task: TaskRef<'a>,
    round_number: u64,
    matrix: M,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Metadata<'a> {
    name: &'a str,
    creation_timestamp: String,
}

#[derive(Serialize)]
struct TaskRef<'a> {
    kind: &'a str,
    name: &'a str,
}

/// How the client asked for the cells (`?cells=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cells {
    /// The grid of every row and column (what clients before `sparse` read).
    Dense,
    /// Each row's probed cells only.
    Sparse,
}

impl Cells {
    /// `dense` (also when absent) or `sparse`.
    pub fn parse(value: Option<&str>) -> Result<Cells, ApiError> {
        match value {
            None | Some("dense") => Ok(Cells::Dense),
            Some("sparse") => Ok(Cells::Sparse),
            Some(other) => Err(ApiError::bad_request(format!(
                "{}: {other:?} is neither \"dense\" nor \"sparse\"",
                kdoctor_api::matrix::CELLS_QUERY
            ))),
        }
    }
}

/// The JSON of the matrix view of `target`, its cells counting the probes of `protocol`.
pub fn matrix_json(
    store: &Store,
    target: &Target,
    protocol: Protocol,
    cells: Cells,
) -> Result<Vec<u8>, ApiError> {
    let task = &target.task;
    if task.kind != TaskKind::NetReach {
        return Err(ApiError::bad_request(format!(
            "kdoctorreport {:?} is a {} report: the matrix view is for NetReach reports",
            target.name,
            task.kind.as_str()
        )));
    }
    let round = shown_round(target).ok_or_else(|| {
        ApiError::bad_request(format!(
            "kdoctorreport {:?} has no round with reports yet",
            target.name
        ))
    })?;
    // Two passes over the rows, so that only one is in memory at a time: their sources first
    // (which pod is on which node names the node columns), then their probes.
    let mut builder = Builder::new(store.probe_row_sources(task.id, round)?).protocol(protocol);
    store.for_each_probe_row(task.id, round, |row| builder.add(&row))?;
    let matrix = builder.finish();
    // Sparse in memory; the dense grid only on the wire, as it is written.
    match cells {
        Cells::Dense => view_json(target, round, &matrix),
        Cells::Sparse => view_json(target, round, Sparse(&matrix)),
    }
}

/// The view's object around `matrix`.
fn view_json<M: Serialize>(target: &Target, round: u64, matrix: M) -> Result<Vec<u8>, ApiError> {
    let task = &target.task;
    let object = MatrixObject {
        api_version: API_VERSION,
        kind: KIND,
        metadata: Metadata {
            name: &target.name,
            creation_timestamp: rfc3339(task.created),
        },
        task: TaskRef {
            kind: task.kind.as_str(),
            name: &task.name,
        },
        round_number: round,
        matrix,
    };
    serde_json::to_vec(&object).map_err(|e| ApiError::internal(e.to_string()))
}
