//! KdoctorReport objects, in upstream v0.2.2's shape plus labels and additive status fields,
//! written as a stream: report bodies go from the store to the socket chunk by chunk.

use std::collections::BTreeMap;
use std::io::Read;

use jiff::Timestamp;
use kdoctor_api::labels;
use kdoctor_api::report::{API_VERSION, KIND, STATUS_FINISHED, STATUS_NOT_FINISHED};
use kdoctor_store::{NodeCounts, RoundResult, Store, TaskSummary};
use serde_json::{Value, json};

use super::names::Target;
use crate::kube::sink::Sink;
use crate::kube::status::ApiError;

/// Annotation holding the task's UID.
pub const ANNOTATION_TASK_UID: &str = "kdoctor.io/task-uid";
/// Annotation holding when the task CR was deleted.
pub const ANNOTATION_TASK_DELETED: &str = "kdoctor.io/task-deleted";
/// Annotation listing the retained rounds (each reachable as `<name>.round-<N>`).
pub const ANNOTATION_ROUNDS: &str = "kdoctor.io/rounds";

/// The round an object shows: the one named, or the latest with data.
pub fn shown_round(target: &Target) -> Option<u64> {
    target.round.or(target.task.latest_round)
}

/// `succeed`, `fail` or `none`: the label value of a result.
pub fn result_word(result: Option<RoundResult>) -> &'static str {
    match result {
        Some(RoundResult::Succeed) => "succeed",
        Some(RoundResult::Fail) => "fail",
        _ => "none",
    }
}

/// Result and node counts of the round an object shows.
pub fn round_outcome(
    store: &Store,
    target: &Target,
) -> Result<(Option<RoundResult>, Option<NodeCounts>), ApiError> {
    match target.round {
        None => Ok((target.task.latest_result, target.task.latest_nodes)),
        Some(round) => {
            let info = store.round(target.task.id, round)?;
            let Some(info) = info else {
                return Ok((None, None));
            };
            let counts = match &info.summary {
                Some(s) => NodeCounts {
                    succeeded: s.succeeded_nodes,
                    failed: s.failed_nodes,
                    not_reported: s.not_reported.len() as u32,
                },
                None => {
                    let metas = store.reports(target.task.id, round)?;
                    let failed = metas
                        .iter()
                        .filter(|m| m.result == RoundResult::Fail)
                        .count() as u32;
                    NodeCounts {
                        succeeded: metas.len() as u32 - failed,
                        failed,
                        not_reported: 0,
                    }
                }
            };
            Ok((info.summary.map(|s| s.result), Some(counts)))
        }
    }
}

/// Labels every object carries (the conventions of the project).
pub fn labels_of(task: &TaskSummary, result: Option<RoundResult>) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            labels::TASK_KIND.to_string(),
            task.kind.as_str().to_string(),
        ),
        (labels::TASK_NAME.to_string(), task.name.clone()),
        (
            labels::LAST_RESULT.to_string(),
            result_word(result).to_string(),
        ),
        (labels::APP_NAME.to_string(), "kdoctor".to_string()),
        (labels::APP_COMPONENT.to_string(), "report".to_string()),
        (
            labels::MANAGED_BY.to_string(),
            labels::MANAGED_BY_KDOCTOR.to_string(),
        ),
    ])
}

/// `metadata` of an object, typed so that it serializes without building a value tree (a
/// Table of 10,000 rows carries 10,000 of them).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    name: String,
    uid: String,
    resource_version: String,
    creation_timestamp: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

/// The metadata of the object `target` names.
pub fn metadata_of(store: &Store, target: &Target) -> Result<Metadata, ApiError> {
    let task = &target.task;
    let (result, _) = round_outcome(store, target)?;
    let rounds: Vec<String> = store
        .round_numbers(task.id)
        .iter()
        .map(u64::to_string)
        .collect();
    let mut annotations = BTreeMap::from([
        (ANNOTATION_TASK_UID.to_string(), task.uid.clone()),
        (ANNOTATION_ROUNDS.to_string(), rounds.join(",")),
    ]);
    if let Some(deleted) = task.deleted {
        annotations.insert(ANNOTATION_TASK_DELETED.to_string(), rfc3339(deleted));
    }
    let uid = match target.round {
        Some(round) => format!("{}.round-{round}", task.uid),
        None => task.uid.clone(),
    };
    Ok(Metadata {
        name: target.name.clone(),
        uid,
        resource_version: task.resource_version.to_string(),
        creation_timestamp: rfc3339(task.created),
        labels: labels_of(task, result),
        annotations,
    })
}

/// `metadata` of an object, as JSON.
pub fn metadata(store: &Store, target: &Target) -> Result<Value, ApiError> {
    serde_json::to_value(metadata_of(store, target)?).map_err(|e| ApiError::internal(e.to_string()))
}

/// Kubernetes' timestamp format (seconds, `Z`).
pub fn rfc3339(t: Timestamp) -> String {
    t.round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| t.to_string())
}

/// The object as JSON without `report` (for Table rows with `includeObject=Object`, DELETE, and
/// watch events of Table watchers).
pub fn head(store: &Store, target: &Target) -> Result<serde_json::Map<String, Value>, ApiError> {
    let task = &target.task;
    let record = store.task_record(task.id)?;
    let spec_key = match task.kind {
        kdoctor_api::task::TaskKind::NetReach => "netReach",
        kdoctor_api::task::TaskKind::AppHttpHealthy => "appHttpHealthy",
        kdoctor_api::task::TaskKind::Netdns => "netDns",
    };
    let spec = record.map(|r| r.spec).unwrap_or(Value::Null);
    let mut task_spec = serde_json::Map::new();
    if !spec.is_null() {
        task_spec.insert(spec_key.to_string(), spec);
    }
    let rounds = store.round_numbers(task.id);
    let (result, _) = round_outcome(store, target)?;
    let p = task.progress;
    let mut status = json!({
        "totalRoundNumber": p.expected_round.unwrap_or(0),
        "roundFinishedNumber": p.done_round.unwrap_or(0),
        "status": if p.finished { STATUS_FINISHED } else { STATUS_NOT_FINISHED },
        "roundNumber": shown_round(target).unwrap_or(0),
        "lastResult": result_word(result),
        "retainedRounds": rounds,
        "taskState": if task.deleted.is_some() { "Deleted" } else { "Present" },
    });
    if let Some(deleted) = task.deleted {
        status["taskDeletedAt"] = json!(rfc3339(deleted));
    }
    let mut object = serde_json::Map::new();
    object.insert("apiVersion".into(), json!(API_VERSION));
    object.insert("kind".into(), json!(KIND));
    object.insert("metadata".into(), metadata(store, target)?);
    object.insert(
        "task".into(),
        json!({"name": task.name, "kind": task.kind.as_str(), "spec": task_spec}),
    );
    object.insert("status".into(), status);
    Ok(object)
}

/// Writes the whole object, streaming the reports of the round it shows.
pub fn write_object(store: &Store, target: &Target, sink: &mut Sink) -> Result<(), ApiError> {
    let mut head = head(store, target)?;
    let round = shown_round(target);
    let nodes = match round {
        Some(round) => store.reports(target.task.id, round)?,
        None => vec![],
    };
    if nodes.is_empty() {
        head.insert("report".into(), json!({}));
        return sink.write_json(&Value::Object(head));
    }
    // Everything but the closing brace, then `"report":{"latestRoundReport":[…]}}`.
    let mut text =
        serde_json::to_vec(&Value::Object(head)).map_err(|e| ApiError::internal(e.to_string()))?;
    text.pop();
    sink.write(&text)?;
    sink.write(b",\"report\":{\"latestRoundReport\":[")?;
    for (i, meta) in nodes.iter().enumerate() {
        if i > 0 {
            sink.write(b",")?;
        }
        let round = round.unwrap_or_default();
        let Some(mut reader) = store.report_reader(target.task.id, round, &meta.node)? else {
            // Removed meanwhile (retention): an empty object keeps the JSON valid.
            sink.write(b"{}")?;
            continue;
        };
        let mut buffer = [0u8; 16 * 1024];
        loop {
            let n = reader
                .read(&mut buffer)
                .map_err(|e| ApiError::internal(format!("reading a stored report: {e}")))?;
            if n == 0 {
                break;
            }
            sink.write(&buffer[..n])?;
        }
    }
    sink.write(b"]}}")
}
