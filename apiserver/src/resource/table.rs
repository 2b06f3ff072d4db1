//! Server-side printing: the `Table` kubectl asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`. Column definitions are one constant,
//! byte-identical on list, get and watch (kubectl reprints the header when they differ).

use jiff::Timestamp;
use kdoctor_store::Store;
use serde_json::{Value, json};

use super::names::Target;
use super::object::{MetadataText, result_word, round_outcome};
use crate::kube::partial::{MetaVersion, PartialObject};
use crate::kube::status::ApiError;
use crate::kube::table::Include;
use crate::kube::table::{human_bytes, human_duration};

/// The column definitions (priority 1 columns appear with `-o wide`).
pub fn columns() -> Value {
    let column = |name: &str, kind: &str, format: &str, description: &str, priority: u8| json!({"name": name, "type": kind, "format": format, "description": description, "priority": priority});
    json!([
        column(
            "Name",
            "string",
            "name",
            "Report name: <kind>-<task>, .<uid tag> for older incarnations, .round-<N> for one round",
            0
        ),
        column("Kind", "string", "", "Kind of the task", 0),
        column("Task", "string", "", "Name of the task", 0),
        column(
            "Rounds",
            "string",
            "",
            "Rounds finished / planned (-1: forever)",
            0
        ),
        column(
            "Status",
            "string",
            "",
            "Finished when every planned round is done",
            0
        ),
        column(
            "Last Result",
            "string",
            "",
            "Result of the latest round: succeed, fail or none",
            0
        ),
        column(
            "Nodes",
            "string",
            "",
            "Nodes of the latest round: succeeded/failed/not reported",
            0
        ),
        column(
            "Task CR",
            "string",
            "",
            "Present, or Deleted (the reports stay until retention)",
            0
        ),
        column("Age", "string", "", "Time since the task was created", 0),
        column("Round", "integer", "", "Round the reports are from", 1),
        column(
            "Reports",
            "integer",
            "",
            "Agent reports stored for the task",
            1
        ),
        column(
            "Size",
            "string",
            "",
            "Bytes stored for the task (compressed)",
            1
        ),
        column("UID", "string", "", "UID of the task", 1),
    ])
}

/// The cells of a row, in column order.
type Cells<'a> = (
    &'a str,
    &'a str,
    &'a str,
    String,
    &'a str,
    &'a str,
    String,
    &'a str,
    String,
    u64,
    u64,
    String,
    &'a str,
);

/// One row, serialized as is (cells in column order, then the optional object).
#[derive(serde::Serialize)]
struct Row<'a> {
    cells: Cells<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    object: Option<Value>,
}

/// One row, as JSON bytes.
pub fn row_bytes(
    store: &Store,
    target: &Target,
    include: Include,
    now: Timestamp,
) -> Result<Vec<u8>, ApiError> {
    let mut bytes = Vec::new();
    write_row(
        store,
        target,
        include,
        now,
        &mut MetadataText::default(),
        &mut bytes,
    )?;
    Ok(bytes)
}

/// Appends one row's JSON to `out`; `text` is scratch space reused from row to row (a list
/// writes thousands).
pub fn write_row(
    store: &Store,
    target: &Target,
    include: Include,
    now: Timestamp,
    text: &mut MetadataText,
    out: &mut Vec<u8>,
) -> Result<(), ApiError> {
    let task = &target.task;
    let (result, nodes) = round_outcome(store, target)?;
    let p = task.progress;
    let object = match include {
        Include::None => None,
        Include::Metadata => None,
        Include::Object => Some(Value::Object(super::object::head(store, target)?)),
    };
    let row = Row {
        cells: (
            &target.name,
            task.kind.as_str(),
            &task.name,
            format!(
                "{}/{}",
                p.done_round.unwrap_or(0),
                p.expected_round.unwrap_or(0)
            ),
            if p.finished {
                "Finished"
            } else {
                "NotFinished"
            },
            result_word(result),
            nodes.map_or("-".to_string(), |n| {
                format!("{}/{}/{}", n.succeeded, n.failed, n.not_reported)
            }),
            if task.deleted.is_some() {
                "Deleted"
            } else {
                "Present"
            },
            human_duration(now.duration_since(task.created)),
            target.round.or(task.latest_round).unwrap_or(0),
            task.reports,
            human_bytes(task.stored_bytes),
            &task.uid,
        ),
        object,
    };
    serde_json::to_writer(&mut *out, &row).map_err(|e| ApiError::internal(e.to_string()))?;
    if include == Include::Metadata {
        // Spliced in as typed JSON: `"object":{PartialObjectMetadata}` before the final brace.
        let partial = PartialObject::new(
            MetaVersion::V1,
            super::object::metadata_of(store, target, text)?,
        );
        out.pop();
        out.extend_from_slice(b",\"object\":");
        serde_json::to_writer(&mut *out, &partial)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        out.push(b'}');
    }
    Ok(())
}

/// One row, as a JSON value (single objects and watch events).
pub fn row(
    store: &Store,
    target: &Target,
    include: Include,
    now: Timestamp,
) -> Result<Value, ApiError> {
    serde_json::from_slice(&row_bytes(store, target, include, now)?)
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// The opening of a Table (everything up to the rows), for streaming large ones.
pub fn table_head(
    resource_version: u64,
    continue_token: Option<&str>,
    remaining: Option<usize>,
) -> Vec<u8> {
    let mut metadata = json!({"resourceVersion": resource_version.to_string()});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    if let Some(r) = remaining {
        metadata["remainingItemCount"] = json!(r);
    }
    let head = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": columns()});
    let mut bytes = serde_json::to_vec(&head).unwrap_or_default();
    bytes.pop();
    bytes.extend_from_slice(b",\"rows\":[");
    bytes
}

/// A Table of rows.
pub fn table(
    rows: Vec<Value>,
    resource_version: u64,
    continue_token: Option<String>,
    with_columns: bool,
) -> Value {
    let mut metadata = json!({"resourceVersion": resource_version.to_string()});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    let mut table = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "rows": rows});
    if with_columns {
        table["columnDefinitions"] = columns();
    }
    table
}
