//! OpenAPI of the task kinds (local mode): their CRDs' schemas with the GVK extension, and the
//! paths of every verb served, so that `kubectl apply` validates a task before sending it and
//! `kubectl explain netreach.spec` works as against a cluster.

use std::sync::OnceLock;

use axum::extract::RawQuery;
use axum::http::HeaderMap;
use axum::response::Response;
use kdoctor_api::task::{GROUP, TaskKind, VERSION};
use serde_json::{Map, Value, json};

use crate::openapi::{Doc, serve_v3};
use crate::status::ApiError;

/// The schema name of a kind (`io.kdoctor.v1beta1.NetReach`), as the Go server names a CRD's.
fn schema_name(kind: &str) -> String {
    format!("io.kdoctor.{VERSION}.{kind}")
}

fn gvk(kind: &str) -> Value {
    json!([{"group": GROUP, "version": VERSION, "kind": kind}])
}

/// Every kind's schema and its list's.
fn schemas(prefix: &str) -> Map<String, Value> {
    let mut schemas = Map::new();
    for kind in TaskKind::ALL {
        let mut schema = kdoctor_api::document::schema(kind).clone();
        schema["x-kubernetes-group-version-kind"] = gvk(kind.as_str());
        schemas.insert(schema_name(kind.as_str()), schema);
        let list = format!("{}List", kind.as_str());
        schemas.insert(
            schema_name(&list),
            json!({
                "description": format!("A list of {}.", kind.as_str()),
                "type": "object",
                "required": ["items"],
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "items": {"type": "array", "items": {"$ref": format!("{prefix}{}", schema_name(kind.as_str()))}},
                },
                "x-kubernetes-group-version-kind": gvk(&list),
            }),
        );
    }
    schemas
}

/// The query parameters of a write: kubectl sends `fieldValidation` (server-side field
/// validation) only to a server whose OpenAPI lists it, and validates against the v2 document
/// itself otherwise.
fn write_parameters(v3: bool) -> Value {
    let parameter = |name: &str, description: &str| {
        if v3 {
            json!({"name": name, "in": "query", "description": description, "schema": {"type": "string"}, "uniqueItems": true})
        } else {
            json!({"name": name, "in": "query", "description": description, "type": "string", "uniqueItems": true})
        }
    };
    json!([
        parameter("dryRun", "All: check everything, store nothing"),
        parameter(
            "fieldManager",
            "the actor making the change (required by server-side apply)"
        ),
        parameter(
            "fieldValidation",
            "Strict: unknown fields are errors (the only behaviour of this server)"
        ),
    ])
}

fn operation(kind: TaskKind, action: &str, verb: &str, reference: &str, v3: bool) -> Value {
    let ok = if v3 {
        json!({"description": "OK", "content": {"application/json": {"schema": {"$ref": reference}}}})
    } else {
        json!({"description": "OK", "schema": {"$ref": reference}})
    };
    json!({
        "operationId": format!("{verb}KdoctorIoV1beta1{}", kind.as_str()),
        "description": format!("{action} {}", kind.as_str()),
        "tags": ["kdoctorIo_v1beta1"],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": GROUP, "version": VERSION, "kind": kind.as_str()},
        "responses": {"200": ok},
        "parameters": if matches!(action, "post" | "put" | "patch") { write_parameters(v3) } else { json!([]) },
    })
}

fn paths(prefix: &str, v3: bool) -> Map<String, Value> {
    let mut paths = Map::new();
    for kind in TaskKind::ALL {
        let collection = format!("/apis/{GROUP}/{VERSION}/{}", kind.plural());
        let one = format!("{prefix}{}", schema_name(kind.as_str()));
        let list = format!("{prefix}{}", schema_name(&format!("{}List", kind.as_str())));
        let name = if v3 {
            json!({"name": "name", "in": "path", "required": true, "schema": {"type": "string"}})
        } else {
            json!({"name": "name", "in": "path", "required": true, "type": "string"})
        };
        paths.insert(
            collection.clone(),
            json!({
                "get": operation(kind, "list", "list", &list, v3),
                "post": operation(kind, "post", "create", &one, v3),
            }),
        );
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({
                "get": operation(kind, "get", "read", &one, v3),
                "put": operation(kind, "put", "replace", &one, v3),
                "patch": operation(kind, "patch", "patch", &one, v3),
                "delete": operation(kind, "delete", "delete", &one, v3),
                "parameters": [name],
            }),
        );
    }
    paths
}

/// The v2 document's paths and definitions of the task kinds.
pub fn v2_parts() -> (Map<String, Value>, Map<String, Value>) {
    (paths("#/definitions/", false), schemas("#/definitions/"))
}

/// The v3 document of `kdoctor.io/v1beta1`: its path and the document.
pub fn v3() -> (String, &'static Doc) {
    static DOC: OnceLock<Doc> = OnceLock::new();
    let doc = DOC.get_or_init(|| {
        Doc::new(&json!({
            "openapi": "3.0.0",
            "info": {"title": "kdoctor tasks", "version": VERSION},
            "paths": paths("#/components/schemas/", true),
            "components": {"schemas": schemas("#/components/schemas/")},
        }))
    });
    (format!("/openapi/v3/apis/{GROUP}/{VERSION}"), doc)
}

/// `GET /openapi/v3/apis/kdoctor.io/v1beta1`.
pub async fn v3_group_version(
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (path, doc) = v3();
    serve_v3(&path, doc, raw.as_deref(), &headers)
}
