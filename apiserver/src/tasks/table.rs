//! Task objects as a Table with the CRDs' printer columns (api/src/crd.rs), so that the local
//! server prints tasks as a cluster does.

use serde_json::{Value, json};

use crate::kube::partial::MetaVersion;
use crate::kube::table::{Include, human_duration};

/// The CRDs' printer columns (api/src/crd.rs), so that the local server prints tasks as a
/// cluster does.
fn column_definitions() -> Value {
    let column = |name: &str, kind: &str, format: &str, description: &str| json!({"name": name, "type": kind, "format": format, "description": description, "priority": 0});
    json!([
        column("Name", "string", "name", "Name of the task"),
        column("finish", "boolean", "", "finish"),
        column("expectedRound", "integer", "", "expectedRound"),
        column("doneRound", "integer", "", "doneRound"),
        column("lastRoundStatus", "string", "", "lastRoundStatus"),
        column("schedule", "string", "", "schedule"),
        column("age", "date", "", "time since creation"),
    ])
}

/// A Table of task objects (`columns`: with the column definitions; a watch sends them once).
pub fn table(
    items: &[&Value],
    version: u64,
    include: Include,
    columns: bool,
    now: jiff::Timestamp,
) -> Value {
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let at = |pointer: &str| item.pointer(pointer).cloned().unwrap_or(Value::Null);
            let age = item
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map(|t| json!(human_duration(now.duration_since(t))))
                .unwrap_or(Value::Null);
            let mut row = json!({
                "cells": [
                    at("/metadata/name"),
                    at("/status/finish"),
                    at("/status/expectedRound"),
                    at("/status/doneRound"),
                    at("/status/lastRoundStatus"),
                    at("/spec/schedule/schedule"),
                    age,
                ],
            });
            match include {
                Include::None => {}
                Include::Metadata => {
                    row["object"] = super::partial_of(MetaVersion::V1, item);
                }
                Include::Object => row["object"] = (*item).clone(),
            }
            row
        })
        .collect();
    let mut table = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": version.to_string()},
        "rows": rows,
    });
    if columns {
        table["columnDefinitions"] = column_definitions();
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_follow_the_crd_columns() {
        let task = json!({
            "apiVersion": "kdoctor.io/v1beta1",
            "kind": "NetReach",
            "metadata": {"name": "a", "uid": "u", "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"schedule": {"schedule": "0 1"}},
            "status": {"finish": false, "expectedRound": 2, "doneRound": 1, "lastRoundStatus": "succeed"},
        });
        let now: jiff::Timestamp = "2025-01-01T00:05:00Z".parse().unwrap();
        let table = table(&[&task], 7, Include::Metadata, true, now);
        assert_eq!(table["columnDefinitions"].as_array().unwrap().len(), 7);
        assert_eq!(
            table["rows"][0]["cells"],
            json!(["a", false, 2, 1, "succeed", "0 1", "5m"])
        );
        assert_eq!(table["rows"][0]["object"]["metadata"]["name"], "a");
        assert_eq!(table["metadata"]["resourceVersion"], "7");
        assert!(
            super::table(&[&task], 7, Include::None, false, now)
                .get("columnDefinitions")
                .is_none()
        );
    }
}
