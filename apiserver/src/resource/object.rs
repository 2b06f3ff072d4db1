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
    label_pairs(task, result)
        .0
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The labels of [`labels_of`], borrowed from the task and sorted by key as a map serializes
/// them: a Table of 10,000 rows serializes 10,000 of them, and building each as a map of owned
/// strings made allocation the largest cost of such a list.
fn label_pairs(task: &TaskSummary, result: Option<RoundResult>) -> SortedMap<'_, 6> {
    SortedMap::new([
        (labels::TASK_KIND, task.kind.as_str()),
        (labels::TASK_NAME, task.name.as_str()),
        (labels::LAST_RESULT, result_word(result)),
        (labels::APP_NAME, "kdoctor"),
        (labels::APP_COMPONENT, "report"),
        (labels::MANAGED_BY, labels::MANAGED_BY_KDOCTOR),
    ])
}

/// A few string pairs serialized as a JSON object, keys in order (as a `BTreeMap` would write
/// them), without a map built for them.
pub struct SortedMap<'a, const N: usize>([(&'static str, &'a str); N]);

impl<'a, const N: usize> SortedMap<'a, N> {
    fn new(mut pairs: [(&'static str, &'a str); N]) -> Self {
        pairs.sort_unstable_by_key(|(k, _)| *k);
        SortedMap(pairs)
    }
}

impl<const N: usize> serde::Serialize for SortedMap<'_, N> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(N))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// The annotations of an object: the task's UID, its retained rounds and, once the task is
/// deleted, when.
#[derive(serde::Serialize)]
#[serde(untagged)]
pub enum Annotations<'a> {
    /// The task is there.
    Present(SortedMap<'a, 2>),
    /// The task was deleted.
    Deleted(SortedMap<'a, 3>),
}

/// `metadata` of an object, typed so that it serializes without building a value tree (a
/// Table of 10,000 rows carries 10,000 of them); borrowed from the task where it can be.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata<'a> {
    name: &'a str,
    uid: String,
    resource_version: String,
    creation_timestamp: String,
    labels: SortedMap<'a, 6>,
    annotations: Annotations<'a>,
}

/// The metadata of the object `target` names; `scratch` holds what is formatted for it (the
/// rounds, the deletion time), so that the metadata borrows it.
pub fn metadata_of<'a>(
    store: &Store,
    target: &'a Target,
    scratch: &'a mut MetadataText,
) -> Result<Metadata<'a>, ApiError> {
    use std::fmt::Write as _;
    let task = &target.task;
    let (result, _) = round_outcome(store, target)?;
    scratch.rounds.clear();
    for (i, round) in store.round_numbers(task.id).iter().enumerate() {
        if i > 0 {
            scratch.rounds.push(',');
        }
        let _ = write!(scratch.rounds, "{round}");
    }
    scratch.deleted = task.deleted.map(rfc3339);
    let (uid, rounds) = (task.uid.as_str(), scratch.rounds.as_str());
    let annotations = match &scratch.deleted {
        None => Annotations::Present(SortedMap::new([
            (ANNOTATION_TASK_UID, uid),
            (ANNOTATION_ROUNDS, rounds),
        ])),
        Some(deleted) => Annotations::Deleted(SortedMap::new([
            (ANNOTATION_TASK_UID, uid),
            (ANNOTATION_ROUNDS, rounds),
            (ANNOTATION_TASK_DELETED, deleted.as_str()),
        ])),
    };
    let uid = match target.round {
        Some(round) => format!("{}.round-{round}", task.uid),
        None => task.uid.clone(),
    };
    Ok(Metadata {
        name: &target.name,
        uid,
        resource_version: task.resource_version.to_string(),
        creation_timestamp: rfc3339(task.created),
        labels: label_pairs(task, result),
        annotations,
    })
}

/// Text formatted for a [`Metadata`], reused from one object to the next.
#[derive(Default)]
pub struct MetadataText {
    rounds: String,
    deleted: Option<String>,
}

/// `metadata` of an object, as JSON.
pub fn metadata(store: &Store, target: &Target) -> Result<Value, ApiError> {
    let mut text = MetadataText::default();
    serde_json::to_value(metadata_of(store, target, &mut text)?)
        .map_err(|e| ApiError::internal(e.to_string()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrowed_labels_serialize_as_the_label_map_does() {
        let task: TaskSummary = serde_json::from_value(json!({
            "id": 1, "kind": "Netdns", "name": "dns", "uid": "u", "created": "2026-12-08T00:00:00Z",
            "progress": {"finished": true}, "resourceVersion": 3, "rounds": 0, "reports": 0, "storedBytes": 0,
        }))
        .unwrap();
        for result in [None, Some(RoundResult::Succeed), Some(RoundResult::Fail)] {
            let borrowed = serde_json::to_string(&label_pairs(&task, result)).unwrap();
            let owned = serde_json::to_string(&labels_of(&task, result)).unwrap();
            assert_eq!(borrowed, owned);
            assert!(owned.contains("\"dns\""), "{owned}");
        }
    }
}
