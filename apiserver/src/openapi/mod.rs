//! OpenAPI: a v3 index with hash URLs and the per-group-version v3 document (paths carrying the
//! GVK extension, so that `kubectl explain kdoctorreport.status` works), and a v2 JSON document
//! for aggregators that only read v2. Built once from the Rust types' schemas.

pub mod doc;
pub mod v3;

use std::sync::OnceLock;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kdoctor_api::report::{KIND, KdoctorReport, LIST_KIND};
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::kube::group::{GROUP, PLURAL, VERSION};
use crate::kube::status::ApiError;
use crate::state::AppState;
use doc::{Doc, accepts_json, json_body, serve_v3};

/// The documents of the report group, and the v2 document with and without the task kinds.
struct Docs {
    v3: Doc,
    v2: Doc,
    v2_with_tasks: Doc,
}

fn gvk() -> Value {
    json!({"group": GROUP, "version": VERSION, "kind": KIND})
}

/// Schemas of the report types with references under `prefix` (`#/components/schemas/` or
/// `#/definitions/`).
fn schemas(definitions_path: &'static str) -> (Map<String, Value>, String) {
    let mut settings = SchemaSettings::openapi3();
    settings.definitions_path = definitions_path.into();
    let mut generator = settings.into_generator();
    let root = generator.subschema_for::<KdoctorReport>();
    let reference = root
        .as_value()
        .get("$ref")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut definitions: Map<String, Value> =
        generator.take_definitions(true).into_iter().collect();
    let name = reference
        .rsplit('/')
        .next()
        .unwrap_or("KdoctorReport")
        .to_string();
    if let Some(report) = definitions.get_mut(&name) {
        report["x-kubernetes-group-version-kind"] = json!([gvk()]);
    }
    let list = json!({
        "description": "A list of KdoctorReports.",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": "system.kdoctor.io/v1beta1"},
            "kind": {"type": "string", "description": LIST_KIND},
            "metadata": {"type": "object", "description": "Standard list metadata (resourceVersion, continue)."},
            "items": {"type": "array", "items": {"$ref": reference}},
        },
        "x-kubernetes-group-version-kind": [{"group": GROUP, "version": VERSION, "kind": LIST_KIND}],
    });
    definitions.insert(format!("{name}List"), list);
    (definitions, reference)
}

/// A v2 operation of the report.
fn v2_operation(action: &str, id: &str, response_ref: &str) -> Value {
    json!({
        "operationId": id,
        "description": format!("{action} KdoctorReport"),
        "tags": [TAG],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(),
        "responses": {"200": {"description": "OK", "schema": {"$ref": response_ref}}},
    })
}

const TAG: &str = "systemKdoctorIo_v1beta1";
const NAME_DESCRIPTION: &str = "name of the KdoctorReport";

fn collection() -> String {
    format!("/apis/{GROUP}/{VERSION}/{PLURAL}")
}

fn v2_paths(reference: &str) -> Value {
    let list_ref = format!("{reference}List");
    json!({
        collection(): {
            "get": v2_operation("list", "listSystemKdoctorIoV1beta1KdoctorReport", &list_ref),
        },
        format!("{}/{{name}}", collection()): {
            "get": v2_operation("get", "readSystemKdoctorIoV1beta1KdoctorReport", reference),
            "delete": v2_operation("delete", "deleteSystemKdoctorIoV1beta1KdoctorReport", reference),
            "parameters": [{"name": "name", "in": "path", "required": true, "description": NAME_DESCRIPTION, "type": "string"}],
        },
    })
}

/// The typed v3 document of the report group.
fn v3_document() -> Result<openapiv3::OpenAPI, serde_json::Error> {
    let (schemas, reference) = schemas("/components/schemas");
    let name = reference.rsplit('/').next().unwrap_or(KIND).to_string();
    let schemas = schemas
        .iter()
        .map(|(k, v)| Ok((k.clone(), v3::schema(v)?)))
        .collect::<Result<indexmap::IndexMap<_, _>, serde_json::Error>>()?;
    let action = |action, id: &str| v3::Action {
        id: id.to_string(),
        action,
        gvk: gvk(),
        tag: TAG,
    };
    let mut paths = indexmap::IndexMap::new();
    paths.insert(
        collection(),
        v3::path(v3::Methods {
            get: Some(v3::operation(
                action("list", "listSystemKdoctorIoV1beta1KdoctorReport"),
                &format!("{name}List"),
                vec![],
            )),
            ..v3::Methods::default()
        }),
    );
    paths.insert(
        format!("{}/{{name}}", collection()),
        v3::path(v3::Methods {
            get: Some(v3::operation(
                action("get", "readSystemKdoctorIoV1beta1KdoctorReport"),
                &name,
                vec![],
            )),
            delete: Some(v3::operation(
                action("delete", "deleteSystemKdoctorIoV1beta1KdoctorReport"),
                &name,
                vec![],
            )),
            parameters: vec![v3::name_parameter(NAME_DESCRIPTION)?],
            ..v3::Methods::default()
        }),
    );
    Ok(v3::document("kdoctor", VERSION, paths, schemas))
}

fn docs() -> &'static Docs {
    static DOCS: OnceLock<Docs> = OnceLock::new();
    DOCS.get_or_init(|| {
        // Built from the report's own types: a failure is a bug of this program, shown to the
        // client as an empty document rather than a crash.
        let v3 = v3_document()
            .inspect_err(|e| tracing::error!(error = %e, "the OpenAPI v3 document cannot be built"))
            .ok();
        let (schemas2, reference2) = schemas("/definitions");
        let v2 = json!({
            "swagger": "2.0",
            "info": {"title": "kdoctor", "version": VERSION},
            "paths": v2_paths(&reference2),
            "definitions": schemas2,
        });
        let mut v2_with_tasks = v2.clone();
        let (task_paths, task_definitions) = crate::tasks::openapi::v2_parts();
        if let Some(paths) = v2_with_tasks["paths"].as_object_mut() {
            paths.extend(task_paths);
        }
        if let Some(definitions) = v2_with_tasks["definitions"].as_object_mut() {
            definitions.extend(task_definitions);
        }
        Docs {
            v3: Doc::new(&serde_json::to_value(&v3).unwrap_or_default()),
            v2: Doc::new(&v2),
            v2_with_tasks: Doc::new(&v2_with_tasks),
        }
    })
}

fn path_v3() -> String {
    format!("/openapi/v3/apis/{GROUP}/{VERSION}")
}

/// `GET /openapi/v3`: the index (with the task kinds' group where the server shows tasks).
pub async fn v3_index(State(state): State<AppState>) -> Response {
    let mut paths = serde_json::Map::new();
    paths.insert(
        format!("apis/{GROUP}/{VERSION}"),
        json!({"serverRelativeURL": format!("{}?hash={}", path_v3(), docs().v3.hash)}),
    );
    if state.tasks.is_some() {
        let (path, doc) = crate::tasks::openapi::v3();
        paths.insert(
            path.trim_start_matches("/openapi/v3/").to_string(),
            json!({"serverRelativeURL": format!("{path}?hash={}", doc.hash)}),
        );
    }
    json_body(serde_json::to_vec(&json!({ "paths": paths })).unwrap_or_default())
}

/// `GET /openapi/v3/apis/system.kdoctor.io/v1beta1`.
pub async fn v3_group_version(
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    serve_v3(&path_v3(), &docs().v3, raw.as_deref(), &headers)
}

/// `GET /openapi/v2` (JSON only; protobuf is refused with 406).
pub async fn v2(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    if !accepts_json(&headers) {
        return Err(ApiError::not_acceptable(
            "the OpenAPI v2 document is served as application/json only",
        ));
    }
    let doc = if state.tasks.is_some() {
        &docs().v2_with_tasks
    } else {
        &docs().v2
    };
    let etag = format!("\"{}\"", doc.hash);
    if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        == Some(etag.as_str())
    {
        return Ok(StatusCode::NOT_MODIFIED.into_response());
    }
    let mut response = json_body(doc.body.clone());
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        response.headers_mut().insert(header::ETAG, etag);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_v3_document_is_typed_with_its_gvk() {
        let document = v3_document().expect("typed");
        let components = document.components.expect("components");
        let report = components.schemas.get(KIND).expect("the report's schema");
        let openapiv3::ReferenceOr::Item(report) = report else {
            panic!("inline");
        };
        assert_eq!(
            report.schema_data.extensions["x-kubernetes-group-version-kind"][0]["kind"],
            KIND
        );
        assert_eq!(document.paths.paths.len(), 2);
    }
}
