//! Task objects of `kdoctor.io/v1beta1` (NetReach, AppHttpHealthy, Netdns) for a server with no
//! cluster behind it (`kdoctor local`), served as the Kubernetes API serves custom resources:
//! create, update, merge/JSON patch, server-side apply, delete, get, list and watch, as JSON or
//! as a Table with the CRDs' printer columns, with their discovery and OpenAPI. In a cluster the
//! Kubernetes API serves the tasks; this exists so that `kubectl apply -f task.yaml` works
//! against the local server too.

pub mod objects;
pub mod openapi;
mod table;
pub mod uid;
mod watch;
mod write;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::get;
use kdoctor_api::task::{API_VERSION, GROUP, TaskKind, VERSION};
use serde_json::{Value, json};

pub use self::objects::{Admit, Change, ChangeType, TaskObjects};
pub use self::table::table;

use crate::kube::discovery::api_group;
use crate::kube::negotiate::{Reading, Wanted, negotiate};
use crate::kube::partial::{self, MetaVersion, PartialObject};
use crate::kube::query::Query;
use crate::kube::response::{json, json_with_status};
use crate::kube::selectors::{FieldSelector, LabelSelector};
use crate::kube::status::ApiError;
use crate::kube::table::Include;
use crate::state::AppState;

/// Verbs served on the task resources.
pub const VERBS: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// The kind served under `plural`.
fn kind_of(plural: &str) -> Option<TaskKind> {
    TaskKind::ALL.into_iter().find(|k| k.plural() == plural)
}

/// The short names of a kind, as its CRD declares them.
pub fn short_names(kind: TaskKind) -> Vec<&'static str> {
    match kind {
        TaskKind::NetReach => vec!["nr"],
        TaskKind::AppHttpHealthy => vec!["ahh"],
        TaskKind::Netdns => vec![],
    }
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
                "subresources": [{
                    "subresource": "status",
                    "responseKind": {"group": GROUP, "version": VERSION, "kind": kind.as_str()},
                    "verbs": ["get"],
                }],
            })
        })
        .collect();
    json!({
        "metadata": {"name": GROUP},
        "versions": [{"version": VERSION, "freshness": "Current", "resources": resources}],
    })
}

/// The routes of the task resources and their discovery (the server adds them when it has
/// task objects to show).
pub fn routes() -> Router<AppState> {
    let base = format!("/apis/{GROUP}/{VERSION}");
    Router::new()
        .route(
            &format!("/apis/{GROUP}"),
            get(|| async { json(&api_group(GROUP, VERSION)) }),
        )
        .route(
            &base,
            get(|| async { json_with_status(StatusCode::OK, &resource_list()) }),
        )
        .route(&format!("{base}/{{plural}}"), get(list).post(write::create))
        .route(
            &format!("{base}/{{plural}}/{{name}}"),
            get(get_one)
                .put(write::replace)
                .patch(write::patch)
                .delete(write::delete),
        )
        .route(&format!("{base}/{{plural}}/{{name}}/status"), get(get_one))
        .route(
            &format!("/openapi/v3/apis/{GROUP}/{VERSION}"),
            get(openapi::v3_group_version),
        )
}

/// `/apis/kdoctor.io/v1beta1`.
fn resource_list() -> Value {
    let mut resources: Vec<Value> = Vec::new();
    for kind in TaskKind::ALL {
        resources.push(json!({
            "name": kind.plural(),
            "singularName": kind.lowercase(),
            "namespaced": false,
            "kind": kind.as_str(),
            "verbs": VERBS,
            "shortNames": short_names(kind),
            "categories": ["kdoctor"],
        }));
        resources.push(json!({
            "name": format!("{}/status", kind.plural()),
            "singularName": "",
            "namespaced": false,
            "kind": kind.as_str(),
            "verbs": ["get"],
        }));
    }
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

/// The kind of `plural`, and the server's task objects.
fn resolve<'a>(state: &'a AppState, plural: &str) -> Result<(TaskKind, &'a TaskObjects), ApiError> {
    let kind = kind_of(plural).ok_or_else(ApiError::no_route)?;
    Ok((kind, objects(state)?))
}

/// Which objects a list or watch selects.
struct Selection {
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Selection {
    fn parse(query: &Query) -> Result<Selection, ApiError> {
        Ok(Selection {
            labels: LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?,
            fields: FieldSelector::parse(query.get("fieldSelector").unwrap_or(""))?,
        })
    }

    fn matches(&self, object: &Value) -> bool {
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let labels = object
            .pointer("/metadata/labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default();
        self.fields.matches(name) && self.labels.matches(&labels)
    }
}

async fn list(
    State(state): State<AppState>,
    Path(plural): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (kind, objects) = resolve(&state, &plural)?;
    let query = Query::parse(raw.as_deref());
    let selection = Selection::parse(&query)?;
    let include = Include::parse(query.get("includeObject"))?;
    let watching = query.flag("watch")?;
    let wanted = negotiate(&headers, Reading::collection(watching))?;
    if watching {
        let from = match query.get("resourceVersion") {
            None | Some("") => None,
            Some(v) => Some(
                v.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {v:?}")))?,
            ),
        };
        let timeout = query.number("timeoutSeconds")?;
        return watch::serve(
            &state, objects, kind, from, timeout, selection, wanted, include,
        );
    }
    let (items, version) = objects.list(kind);
    let items: Vec<&Value> = items
        .iter()
        .map(|i| i.as_ref())
        .filter(|i| selection.matches(i))
        .collect();
    Ok(match wanted {
        Wanted::Table => json_with_status(
            StatusCode::OK,
            &table(&items, version, include, true, jiff::Timestamp::now()),
        ),
        Wanted::Json => json_with_status(
            StatusCode::OK,
            &json!({
                "apiVersion": API_VERSION,
                "kind": format!("{}List", kind.as_str()),
                "metadata": {"resourceVersion": version.to_string()},
                "items": items,
            }),
        ),
        Wanted::Metadata(meta) => json_with_status(
            StatusCode::OK,
            &json!({
                "apiVersion": meta.api_version(),
                "kind": partial::LIST_KIND,
                "metadata": {"resourceVersion": version.to_string()},
                "items": items.iter().map(|i| partial_of(meta, i)).collect::<Vec<_>>(),
            }),
        ),
    })
}

async fn get_one(
    State(state): State<AppState>,
    Path((plural, name)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (kind, objects) = resolve(&state, &plural)?;
    let query = Query::parse(raw.as_deref());
    let include = Include::parse(query.get("includeObject"))?;
    let object = objects
        .get(kind, &name)
        .ok_or_else(|| objects::not_found(kind, &name))?;
    let version = object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Ok(match negotiate(&headers, Reading::One)? {
        Wanted::Table => json_with_status(
            StatusCode::OK,
            &table(&[&object], version, include, true, jiff::Timestamp::now()),
        ),
        Wanted::Json => json_with_status(StatusCode::OK, &object),
        Wanted::Metadata(meta) => json_with_status(StatusCode::OK, &partial_of(meta, &object)),
    })
}

/// A task object's metadata alone.
fn partial_of(version: MetaVersion, object: &Value) -> Value {
    json!(PartialObject::new(
        version,
        object.get("metadata").cloned().unwrap_or_else(|| json!({}))
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_names_every_kind_with_every_verb() {
        assert_eq!(kind_of("netdnses"), Some(TaskKind::Netdns));
        assert_eq!(kind_of("pods"), None);
        let group = aggregated_group();
        assert_eq!(group["versions"][0]["resources"][2]["resource"], "netdnses");
        assert_eq!(group["versions"][0]["resources"][0]["verbs"], json!(VERBS));
        assert_eq!(
            resource_list()["resources"].as_array().map(Vec::len),
            Some(6)
        );
    }

    #[test]
    fn a_tasks_partial_object_is_its_metadata_alone() {
        let task = json!({
            "apiVersion": API_VERSION, "kind": "NetReach",
            "metadata": {"name": "mesh", "resourceVersion": "7", "labels": {"a": "b"}},
            "spec": {"target": {"endpoint": true}}, "status": {"doneRound": 3},
        });
        assert_eq!(
            partial_of(MetaVersion::V1beta1, &task),
            json!({
                "apiVersion": "meta.k8s.io/v1beta1", "kind": "PartialObjectMetadata",
                "metadata": {"name": "mesh", "resourceVersion": "7", "labels": {"a": "b"}},
            })
        );
    }
}
