//! OpenAPI: a v3 index with hash URLs and the per-group-version v3 document (paths carrying the
//! GVK extension, so that `kubectl explain kdoctorreport.status` works), and a v2 JSON document
//! for aggregators that only read v2. Built once from the Rust types' schemas.

use std::sync::OnceLock;

use axum::extract::RawQuery;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kdoctor_api::report::{KIND, KdoctorReport, LIST_KIND};
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

use crate::discovery::hex_upper;
use crate::query::Query;
use crate::status::ApiError;
use crate::{GROUP, PLURAL, VERSION};

/// The documents, serialized.
struct Docs {
    v3: Vec<u8>,
    v3_hash: String,
    v2: Vec<u8>,
    v2_etag: String,
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

fn operation(action: &str, id: &str, response_ref: &str, v3: bool) -> Value {
    let ok = if v3 {
        json!({"description": "OK", "content": {"application/json": {"schema": {"$ref": response_ref}}}})
    } else {
        json!({"description": "OK", "schema": {"$ref": response_ref}})
    };
    json!({
        "operationId": id,
        "description": format!("{action} KdoctorReport"),
        "tags": ["systemKdoctorIo_v1beta1"],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(),
        "responses": {"200": ok},
    })
}

fn paths(reference: &str, v3: bool) -> Value {
    let collection = format!("/apis/{GROUP}/{VERSION}/{PLURAL}");
    let named = format!("{collection}/{{name}}");
    let list_ref = format!("{reference}List");
    let name_parameter = if v3 {
        json!({"name": "name", "in": "path", "required": true, "description": "name of the KdoctorReport", "schema": {"type": "string"}})
    } else {
        json!({"name": "name", "in": "path", "required": true, "description": "name of the KdoctorReport", "type": "string"})
    };
    json!({
        collection: {
            "get": operation("list", "listSystemKdoctorIoV1beta1KdoctorReport", &list_ref, v3),
        },
        named: {
            "get": operation("get", "readSystemKdoctorIoV1beta1KdoctorReport", reference, v3),
            "delete": operation("delete", "deleteSystemKdoctorIoV1beta1KdoctorReport", reference, v3),
            "parameters": [name_parameter],
        },
    })
}

fn docs() -> &'static Docs {
    static DOCS: OnceLock<Docs> = OnceLock::new();
    DOCS.get_or_init(|| {
        let (schemas3, reference3) = schemas("/components/schemas");
        let v3 = json!({
            "openapi": "3.0.0",
            "info": {"title": "kdoctor", "version": VERSION},
            "paths": paths(&reference3, true),
            "components": {"schemas": schemas3},
        });
        let (schemas2, reference2) = schemas("/definitions");
        let v2 = json!({
            "swagger": "2.0",
            "info": {"title": "kdoctor", "version": VERSION},
            "paths": paths(&reference2, false),
            "definitions": schemas2,
        });
        let v3 = serde_json::to_vec(&v3).unwrap_or_default();
        let v2 = serde_json::to_vec(&v2).unwrap_or_default();
        Docs {
            v3_hash: hex_upper(&Sha512::digest(&v3)),
            v2_etag: format!("\"{}\"", hex_upper(&Sha512::digest(&v2))),
            v3,
            v2,
        }
    })
}

fn path_v3() -> String {
    format!("/openapi/v3/apis/{GROUP}/{VERSION}")
}

fn accepts_json(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    accept.trim().is_empty()
        || accept.split(',').any(|e| {
            let media = e.split(';').next().unwrap_or("").trim();
            matches!(media, "application/json" | "*/*" | "application/*")
        })
}

fn json_body(body: Vec<u8>) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// `GET /openapi/v3`: the index.
pub async fn v3_index() -> Response {
    let url = format!("{}?hash={}", path_v3(), docs().v3_hash);
    let key = format!("apis/{GROUP}/{VERSION}");
    json_body(
        serde_json::to_vec(&json!({"paths": {key: {"serverRelativeURL": url}}}))
            .unwrap_or_default(),
    )
}

/// `GET /openapi/v3/apis/system.kdoctor.io/v1beta1`.
pub async fn v3_group_version(
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if !accepts_json(&headers) {
        return Err(ApiError::not_acceptable(
            "the OpenAPI document is served as application/json only",
        ));
    }
    let query = Query::parse(raw.as_deref());
    let docs = docs();
    let mut response = match query.get("hash") {
        Some(hash) if hash != docs.v3_hash => {
            let mut r = StatusCode::MOVED_PERMANENTLY.into_response();
            if let Ok(location) =
                HeaderValue::from_str(&format!("{}?hash={}", path_v3(), docs.v3_hash))
            {
                r.headers_mut().insert(header::LOCATION, location);
            }
            return Ok(r);
        }
        Some(_) => {
            let mut r = json_body(docs.v3.clone());
            let h = r.headers_mut();
            h.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, immutable"),
            );
            let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24 * 365);
            if let Ok(value) =
                HeaderValue::from_str(&expires.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string())
            {
                h.insert(header::EXPIRES, value);
            }
            r
        }
        None => json_body(docs.v3.clone()),
    };
    let h = response.headers_mut();
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", docs.v3_hash)) {
        h.insert(header::ETAG, etag);
    }
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    Ok(response)
}

/// `GET /openapi/v2` (JSON only; protobuf is refused with 406).
pub async fn v2(headers: HeaderMap) -> Result<Response, ApiError> {
    if !accepts_json(&headers) {
        return Err(ApiError::not_acceptable(
            "the OpenAPI v2 document is served as application/json only",
        ));
    }
    let docs = docs();
    if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        == Some(docs.v2_etag.as_str())
    {
        return Ok(StatusCode::NOT_MODIFIED.into_response());
    }
    let mut response = json_body(docs.v2.clone());
    if let Ok(etag) = HeaderValue::from_str(&docs.v2_etag) {
        response.headers_mut().insert(header::ETAG, etag);
    }
    Ok(response)
}
