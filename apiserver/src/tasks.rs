//! Read-only task objects of `kdoctor.io/v1beta1` (NetReach, AppHttpHealthy, Netdns) for a
//! server with no cluster behind it (`kdoctor local`): get and list, as JSON or as a Table with
//! the CRDs' printer columns, and their discovery. In a cluster the Kubernetes API serves the
//! tasks; this exists so that `kubectl get netreach` works against the local server too.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kdoctor_api::task::{API_VERSION, GROUP, TaskKind, VERSION};
use serde_json::{Value, json};

use crate::negotiate::{Wanted, negotiate};
use crate::query::Query;
use crate::resource::table::{Include, human_duration};
use crate::state::AppState;
use crate::status::ApiError;

/// Verbs served on the task resources.
pub const VERBS: [&str; 2] = ["get", "list"];

/// The task objects a server shows (cheap to clone; the embedding program publishes them).
#[derive(Clone, Debug, Default)]
pub struct TaskObjects {
    inner: Arc<RwLock<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    objects: BTreeMap<(TaskKind, String), Value>,
    version: u64,
}

impl TaskObjects {
    /// Shows `object` (a whole task: apiVersion, kind, metadata, spec, status) as `kind`/`name`
    /// from now on; its `metadata.resourceVersion` is set to a new version.
    pub fn publish(&self, kind: TaskKind, name: &str, mut object: Value) {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        inner.version += 1;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(inner.version.to_string()));
        }
        inner.objects.insert((kind, name.to_string()), object);
    }

    /// Stops showing `kind`/`name`.
    pub fn remove(&self, kind: TaskKind, name: &str) {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        inner.version += 1;
        inner.objects.remove(&(kind, name.to_string()));
    }

    /// Every object of `kind`, by name, and the current version.
    pub fn list(&self, kind: TaskKind) -> (Vec<Value>, u64) {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let objects = inner
            .objects
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|(_, v)| v.clone())
            .collect();
        (objects, inner.version)
    }

    /// One object.
    pub fn get(&self, kind: TaskKind, name: &str) -> Option<Value> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner.objects.get(&(kind, name.to_string())).cloned()
    }
}

/// The kind served under `plural`.
fn kind_of(plural: &str) -> Option<TaskKind> {
    TaskKind::ALL.into_iter().find(|k| k.plural() == plural)
}

fn short_names(kind: TaskKind) -> Vec<&'static str> {
    match kind {
        TaskKind::NetReach => vec!["nr"],
        TaskKind::AppHttpHealthy => vec!["ahh"],
        TaskKind::Netdns => vec![],
    }
}

fn group_version() -> Value {
    json!({"groupVersion": API_VERSION, "version": VERSION})
}

/// The `APIGroup` of `kdoctor.io`, for `/apis` and `/apis/kdoctor.io`.
pub fn api_group() -> Value {
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [group_version()],
        "preferredVersion": group_version(),
    })
}

/// The aggregated-discovery entry (`APIGroupDiscovery`) of `kdoctor.io`.
pub fn aggregated_group() -> Value {
    let resources: Vec<Value> = TaskKind::ALL
        .into_iter()
        .map(|kind| {
            json!({
                "resource": kind.plural(),
                "responseKind": {"group": GROUP, "version": VERSION, "kind": kind.as_str()},
                "scope": "Cluster",
                "singularResource": kind.lowercase(),
                "verbs": VERBS,
                "shortNames": short_names(kind),
                "categories": ["kdoctor"],
            })
        })
        .collect();
    json!({
        "metadata": {"name": GROUP},
        "versions": [{"version": VERSION, "freshness": "Current", "resources": resources}],
    })
}

fn json_response(value: &Value) -> Response {
    let mut response = (
        StatusCode::OK,
        Body::from(serde_json::to_vec(value).unwrap_or_default()),
    )
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The routes of the task resources and their discovery (the server adds them when it has
/// task objects to show).
pub fn routes() -> Router<AppState> {
    let base = format!("/apis/{GROUP}/{VERSION}");
    Router::new()
        .route(
            &format!("/apis/{GROUP}"),
            get(|| async { json_response(&api_group()) }),
        )
        .route(&base, get(|| async { json_response(&resource_list()) }))
        .route(&format!("{base}/{{plural}}"), get(list))
        .route(&format!("{base}/{{plural}}/{{name}}"), get(get_one))
}

/// `/apis/kdoctor.io/v1beta1`.
fn resource_list() -> Value {
    let resources: Vec<Value> = TaskKind::ALL
        .into_iter()
        .map(|kind| {
            json!({
                "name": kind.plural(),
                "singularName": kind.lowercase(),
                "namespaced": false,
                "kind": kind.as_str(),
                "verbs": VERBS,
                "shortNames": short_names(kind),
                "categories": ["kdoctor"],
            })
        })
        .collect();
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": resources,
    })
}

fn objects(state: &AppState) -> Result<&TaskObjects, ApiError> {
    state.tasks.as_ref().ok_or_else(ApiError::no_route)
}

/// Not found, in the words kubectl prints for a custom resource.
fn not_found(kind: TaskKind, name: &str) -> ApiError {
    ApiError {
        code: StatusCode::NOT_FOUND,
        reason: "NotFound",
        message: format!("{}.{GROUP} {name:?} not found", kind.plural()),
        name: None,
    }
}

async fn list(
    State(state): State<AppState>,
    Path(plural): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let kind = kind_of(&plural).ok_or_else(ApiError::no_route)?;
    let query = Query::parse(raw.as_deref());
    if query.flag("watch")? {
        return Err(ApiError::method_not_allowed("watch"));
    }
    let include = Include::parse(query.get("includeObject"))?;
    let (items, version) = objects(&state)?.list(kind);
    Ok(match negotiate(&headers)? {
        Wanted::Table => json_response(&table(&items, version, include, jiff::Timestamp::now())),
        Wanted::Json => json_response(&json!({
            "apiVersion": API_VERSION,
            "kind": format!("{}List", kind.as_str()),
            "metadata": {"resourceVersion": version.to_string()},
            "items": items,
        })),
    })
}

async fn get_one(
    State(state): State<AppState>,
    Path((plural, name)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let kind = kind_of(&plural).ok_or_else(ApiError::no_route)?;
    let query = Query::parse(raw.as_deref());
    let include = Include::parse(query.get("includeObject"))?;
    let object = objects(&state)?
        .get(kind, &name)
        .ok_or_else(|| not_found(kind, &name))?;
    let version = object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Ok(match negotiate(&headers)? {
        Wanted::Table => json_response(&table(
            std::slice::from_ref(&object),
            version,
            include,
            jiff::Timestamp::now(),
        )),
        Wanted::Json => json_response(&object),
    })
}

/// The CRDs' printer columns (api/src/crd.rs), so that the local server prints tasks as a
/// cluster does.
fn columns() -> Value {
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

/// A Table of task objects.
pub fn table(items: &[Value], version: u64, include: Include, now: jiff::Timestamp) -> Value {
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
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": at("/metadata"),
                    });
                }
                Include::Object => row["object"] = item.clone(),
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": version.to_string()},
        "columnDefinitions": columns(),
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(name: &str, done: i64) -> Value {
        json!({
            "apiVersion": API_VERSION,
            "kind": "NetReach",
            "metadata": {"name": name, "uid": "u", "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"schedule": {"schedule": "0 1"}},
            "status": {"finish": false, "expectedRound": 2, "doneRound": done, "lastRoundStatus": "succeed"},
        })
    }

    #[test]
    fn published_objects_get_versions_and_list_by_kind() {
        let objects = TaskObjects::default();
        objects.publish(TaskKind::NetReach, "b", task("b", 1));
        objects.publish(TaskKind::NetReach, "a", task("a", 0));
        objects.publish(TaskKind::Netdns, "d", task("d", 0));
        let (items, version) = objects.list(TaskKind::NetReach);
        assert_eq!(version, 3);
        let names: Vec<&str> = items
            .iter()
            .filter_map(|i| i.pointer("/metadata/name").and_then(Value::as_str))
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            objects.get(TaskKind::NetReach, "b").unwrap()["metadata"]["resourceVersion"],
            "1"
        );
        objects.remove(TaskKind::NetReach, "b");
        assert!(objects.get(TaskKind::NetReach, "b").is_none());
        assert_eq!(kind_of("netdnses"), Some(TaskKind::Netdns));
        assert_eq!(kind_of("pods"), None);
    }

    #[test]
    fn table_rows_follow_the_crd_columns() {
        let now: jiff::Timestamp = "2025-01-01T00:05:00Z".parse().unwrap();
        let table = table(&[task("a", 1)], 7, Include::Metadata, now);
        assert_eq!(table["columnDefinitions"].as_array().unwrap().len(), 7);
        assert_eq!(
            table["rows"][0]["cells"],
            json!(["a", false, 2, 1, "succeed", "0 1", "5m"])
        );
        assert_eq!(table["rows"][0]["object"]["metadata"]["name"], "a");
        assert_eq!(table["metadata"]["resourceVersion"], "7");
        let group = aggregated_group();
        assert_eq!(group["versions"][0]["resources"][2]["resource"], "netdnses");
    }
}
