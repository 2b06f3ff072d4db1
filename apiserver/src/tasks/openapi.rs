//! OpenAPI of the task kinds (local mode): their CRDs' schemas with the GVK extension, and the
//! paths of every verb served, so that `kubectl apply` validates a task before sending it and
//! `kubectl explain netreach.spec` works as against a cluster.

use std::sync::OnceLock;

use axum::extract::RawQuery;
use axum::http::HeaderMap;
use axum::response::Response;
use kdoctor_api::task::{GROUP, TaskKind, VERSION};
use serde_json::{Map, Value, json};

use crate::kube::status::ApiError;
use crate::openapi::doc::{Doc, serve_v3};
use crate::openapi::v3;

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
        // As kube-apiserver publishes a CRD's schema: with the fields every object has.
        if let Some(properties) = schema["properties"].as_object_mut() {
            for (field, description) in [
                (
                    "apiVersion",
                    "APIVersion defines the versioned schema of this representation of an object.",
                ),
                (
                    "kind",
                    "Kind is a string value representing the REST resource this object represents.",
                ),
            ] {
                properties
                    .entry(field)
                    .or_insert_with(|| json!({"type": "string", "description": description}));
            }
            properties.entry("metadata").or_insert_with(|| {
                json!({"type": "object", "description": "Standard object's metadata: name, uid, labels, annotations, resourceVersion."})
            });
        }
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
const WRITE_PARAMETERS: [(&str, &str); 3] = [
    ("dryRun", "All: check everything, store nothing"),
    (
        "fieldManager",
        "the actor making the change (required by server-side apply)",
    ),
    (
        "fieldValidation",
        "Strict: unknown fields are errors (the only behaviour of this server)",
    ),
];

const TAG: &str = "kdoctorIo_v1beta1";

fn collection(kind: TaskKind) -> String {
    format!("/apis/{GROUP}/{VERSION}/{}", kind.plural())
}

/// `(method, x-kubernetes-action, operationId verb)` of the collection and of one object.
const COLLECTION_OPERATIONS: [(&str, &str, &str); 2] =
    [("get", "list", "list"), ("post", "post", "create")];
const OBJECT_OPERATIONS: [(&str, &str, &str); 4] = [
    ("get", "get", "read"),
    ("put", "put", "replace"),
    ("patch", "patch", "patch"),
    ("delete", "delete", "delete"),
];

fn v2_operation(kind: TaskKind, action: &str, verb: &str, reference: &str) -> Value {
    let parameters: Vec<Value> = if matches!(action, "post" | "put" | "patch") {
        WRITE_PARAMETERS
            .iter()
            .map(|(name, description)| json!({"name": name, "in": "query", "description": description, "type": "string", "uniqueItems": true}))
            .collect()
    } else {
        vec![]
    };
    json!({
        "operationId": format!("{verb}KdoctorIoV1beta1{}", kind.as_str()),
        "description": format!("{action} {}", kind.as_str()),
        "tags": [TAG],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": GROUP, "version": VERSION, "kind": kind.as_str()},
        "responses": {"200": {"description": "OK", "schema": {"$ref": reference}}},
        "parameters": parameters,
    })
}

fn v2_paths() -> Map<String, Value> {
    let prefix = "#/definitions/";
    let mut paths = Map::new();
    for kind in TaskKind::ALL {
        let one = format!("{prefix}{}", schema_name(kind.as_str()));
        let list = format!("{prefix}{}", schema_name(&format!("{}List", kind.as_str())));
        let mut item = Map::new();
        for (method, action, verb) in COLLECTION_OPERATIONS {
            let response = if action == "list" { &list } else { &one };
            item.insert(method.into(), v2_operation(kind, action, verb, response));
        }
        paths.insert(collection(kind), Value::Object(item));
        let mut item = Map::new();
        for (method, action, verb) in OBJECT_OPERATIONS {
            item.insert(method.into(), v2_operation(kind, action, verb, &one));
        }
        item.insert(
            "parameters".into(),
            json!([{"name": "name", "in": "path", "required": true, "type": "string"}]),
        );
        paths.insert(
            format!("{}/{{name}}", collection(kind)),
            Value::Object(item),
        );
    }
    paths
}

/// The typed v3 document of the task kinds.
fn v3_document() -> Result<openapiv3::OpenAPI, serde_json::Error> {
    let schemas = schemas("#/components/schemas/")
        .iter()
        .map(|(k, v)| Ok((k.clone(), v3::schema(v)?)))
        .collect::<Result<indexmap::IndexMap<_, _>, serde_json::Error>>()?;
    let write_parameters = || {
        WRITE_PARAMETERS
            .iter()
            .map(|(name, description)| v3::query(name, description))
            .collect::<Result<Vec<_>, _>>()
    };
    let mut paths = indexmap::IndexMap::new();
    for kind in TaskKind::ALL {
        let one = schema_name(kind.as_str());
        let list = schema_name(&format!("{}List", kind.as_str()));
        let operation =
            |action: &str, verb: &str| -> Result<openapiv3::Operation, serde_json::Error> {
                let parameters = if matches!(action, "post" | "put" | "patch") {
                    write_parameters()?
                } else {
                    vec![]
                };
                let response = if action == "list" { &list } else { &one };
                Ok(v3::operation(
                    v3::Action {
                        id: format!("{verb}KdoctorIoV1beta1{}", kind.as_str()),
                        action,
                        gvk: json!({"group": GROUP, "version": VERSION, "kind": kind.as_str()}),
                        tag: TAG,
                    },
                    response,
                    parameters,
                ))
            };
        let methods =
            |operations: &[(&str, &str, &str)]| -> Result<v3::Methods, serde_json::Error> {
                let mut methods = v3::Methods::default();
                for (method, action, verb) in operations {
                    methods.set(method, operation(action, verb)?);
                }
                Ok(methods)
            };
        paths.insert(collection(kind), v3::path(methods(&COLLECTION_OPERATIONS)?));
        let mut object = methods(&OBJECT_OPERATIONS)?;
        object.parameters = vec![v3::name_parameter(&format!(
            "name of the {}",
            kind.as_str()
        ))?];
        paths.insert(format!("{}/{{name}}", collection(kind)), v3::path(object));
    }
    Ok(v3::document("kdoctor tasks", VERSION, paths, schemas))
}

/// The v2 document's paths and definitions of the task kinds.
pub fn v2_parts() -> (Map<String, Value>, Map<String, Value>) {
    (v2_paths(), schemas("#/definitions/"))
}

/// The v3 document of `kdoctor.io/v1beta1`: its path and the document.
pub fn v3() -> (String, &'static Doc) {
    static DOC: OnceLock<Doc> = OnceLock::new();
    let doc = DOC.get_or_init(|| {
        // Built from the CRDs' own schemas: a failure is a bug of this program, shown to the
        // client as an empty document rather than a crash.
        let document = v3_document()
            .inspect_err(
                |e| tracing::error!(error = %e, "the tasks' OpenAPI v3 document cannot be built"),
            )
            .ok();
        Doc::new(&serde_json::to_value(&document).unwrap_or_default())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_v3_document_types_every_kind_and_verb() {
        let document = v3_document().expect("typed");
        assert_eq!(document.paths.paths.len(), 6);
        let components = document.components.expect("components");
        assert!(
            components
                .schemas
                .contains_key("io.kdoctor.v1beta1.NetReach")
        );
        let named = format!("{}/{{name}}", collection(TaskKind::Netdns));
        let Some(openapiv3::ReferenceOr::Item(item)) = document.paths.paths.get(&named) else {
            panic!("{named}");
        };
        let patch = item.patch.as_ref().expect("patch");
        assert_eq!(patch.parameters.len(), 3);
        assert_eq!(patch.extensions["x-kubernetes-action"], "patch");
    }
}
