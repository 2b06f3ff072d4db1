//! Writes of task objects: create (POST), update (PUT), patch (merge, JSON, server-side apply)
//! and delete, with the codes, reasons and messages of the Kubernetes API for custom resources.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use kdoctor_api::task::{API_VERSION, TaskKind};
use serde_json::Value;

use super::objects::{self, TaskObjects};
use super::resolve;
use crate::kube::query::Query;
use crate::kube::response::json_with_status as json_response;
use crate::kube::status::ApiError;
use crate::state::AppState;

/// `dryRun=All` (the only value the Kubernetes API takes).
fn dry_run(query: &Query) -> Result<bool, ApiError> {
    match query.get("dryRun") {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "Invalid dry run value: {other:?}: the only supported value is \"All\""
        ))),
    }
}

/// A JSON body that must be an object of `kind` in this API version.
fn body_object(kind: TaskKind, body: &[u8]) -> Result<Value, ApiError> {
    let object: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("the request body is not a JSON object: {e}"))
    })?;
    same_kind(kind, object)
}

fn same_kind(kind: TaskKind, object: Value) -> Result<Value, ApiError> {
    let text = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or("");
    if !object.is_object() {
        return Err(ApiError::bad_request(
            "the request body is not a JSON object",
        ));
    }
    if text("apiVersion") != API_VERSION || text("kind") != kind.as_str() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({}) and the kind ({}) do not match the resource \
             ({API_VERSION}, {})",
            text("apiVersion"),
            text("kind"),
            kind.as_str()
        )));
    }
    Ok(object)
}

/// `POST /apis/kdoctor.io/v1beta1/<plural>`.
pub async fn create(
    State(state): State<AppState>,
    Path(plural): Path<String>,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (kind, objects) = resolve(&state, &plural)?;
    let query = Query::parse(raw.as_deref());
    let object = body_object(kind, &body)?;
    let created = objects.create(kind, object, dry_run(&query)?)?;
    Ok(json_response(StatusCode::CREATED, &created))
}

/// `PUT /apis/kdoctor.io/v1beta1/<plural>/<name>`.
pub async fn replace(
    State(state): State<AppState>,
    Path((plural, name)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (kind, objects) = resolve(&state, &plural)?;
    let query = Query::parse(raw.as_deref());
    let object = body_object(kind, &body)?;
    let updated = objects.update(kind, &name, object, dry_run(&query)?)?;
    Ok(json_response(StatusCode::OK, &updated))
}

/// `DELETE /apis/kdoctor.io/v1beta1/<plural>/<name>`: the object as it was.
pub async fn delete(
    State(state): State<AppState>,
    Path((plural, name)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let (kind, objects) = resolve(&state, &plural)?;
    let query = Query::parse(raw.as_deref());
    let deleted = objects.delete(kind, &name, dry_run(&query)?)?;
    Ok(json_response(StatusCode::OK, &deleted))
}

/// The patch types the Kubernetes API takes for custom resources.
const PATCH_TYPES: &str =
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";

/// `PATCH /apis/kdoctor.io/v1beta1/<plural>/<name>`.
pub async fn patch(
    State(state): State<AppState>,
    Path((plural, name)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (kind, objects) = resolve(&state, &plural)?;
    let query = Query::parse(raw.as_deref());
    let dry = dry_run(&query)?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match content_type.as_str() {
        "application/apply-patch+yaml" => apply(objects, kind, &name, &query, &body, dry),
        "application/merge-patch+json" | "application/json-patch+json" => {
            let current = objects
                .get(kind, &name)
                .ok_or_else(|| objects::not_found(kind, &name))?;
            let mut patched = (*current).clone();
            if content_type == "application/merge-patch+json" {
                let patch: Value = serde_json::from_slice(&body).map_err(|e| {
                    ApiError::bad_request(format!("the merge patch is not JSON: {e}"))
                })?;
                json_patch::merge(&mut patched, &patch);
            } else {
                let patch: json_patch::Patch = serde_json::from_slice(&body).map_err(|e| {
                    ApiError::bad_request(format!("the JSON patch is not valid: {e}"))
                })?;
                json_patch::patch(&mut patched, &patch).map_err(|e| {
                    objects::task_error(
                        kind,
                        &name,
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "Invalid",
                        format!("the JSON patch cannot be applied: {e}"),
                    )
                })?;
            }
            let patched = same_kind(kind, patched)?;
            // A patch applies to the current version unless it names one itself.
            let pinned = patched.pointer("/metadata/resourceVersion")
                != current.pointer("/metadata/resourceVersion");
            let mut patched = patched;
            if !pinned
                && let Some(meta) = patched.get_mut("metadata").and_then(Value::as_object_mut)
            {
                meta.remove("resourceVersion");
            }
            let updated = objects.update(kind, &name, patched, dry)?;
            Ok(json_response(StatusCode::OK, &updated))
        }
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types \
                 include: {PATCH_TYPES}"
            ),
        )),
    }
}

/// Server-side apply: creates the object, or sets its labels and annotations and checks that
/// its spec is the one stored (the spec is immutable, so one manager owns it whole). No
/// managedFields are kept: conflicts between managers cannot arise on an immutable spec.
fn apply(
    objects: &TaskObjects,
    kind: TaskKind,
    name: &str,
    query: &Query,
    body: &[u8],
    dry: bool,
) -> Result<Response, ApiError> {
    if query.get("fieldManager").is_none_or(str::is_empty) {
        return Err(ApiError::bad_request(
            "PATCH /apply requires fieldManager to be set",
        ));
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("the apply patch is not UTF-8 text"))?;
    let applied = kdoctor_api::document::parse_object(text)
        .map_err(|e| ApiError::bad_request(format!("the apply patch is not an object: {e}")))?;
    let mut applied = same_kind(kind, applied)?;
    if applied
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .is_some_and(|n| n != name)
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object does not match the name on the URL ({name})"
        )));
    }
    let Some(current) = objects.get(kind, name) else {
        applied["metadata"]["name"] = Value::String(name.to_string());
        let created = objects.create(kind, applied, dry)?;
        return Ok(json_response(StatusCode::CREATED, &created));
    };
    let mut next = (*current).clone();
    for key in ["labels", "annotations"] {
        if let Some(Value::Object(wanted)) = applied.pointer(&format!("/metadata/{key}")) {
            let entry = next["metadata"].as_object_mut().map(|m| {
                m.entry(key)
                    .or_insert_with(|| Value::Object(Default::default()))
            });
            if let Some(Value::Object(have)) = entry {
                have.extend(wanted.clone());
            }
        }
    }
    if let Some(spec) = applied.get("spec") {
        next["spec"] = spec.clone();
    }
    if let Some(meta) = next.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    let updated = objects.update(kind, name, next, dry)?;
    Ok(json_response(StatusCode::OK, &updated))
}
