//! One served OpenAPI document: serialized once, addressed by its hash.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use sha2::{Digest, Sha512};

use crate::kube::discovery::hex_upper;
use crate::kube::query::Query;
use crate::kube::response::json_response;
use crate::kube::status::ApiError;

/// One served document, serialized, with its hash (the v3 URL's `hash`, the v2 ETag).
pub struct Doc {
    pub(crate) body: Vec<u8>,
    pub(crate) hash: String,
}

impl Doc {
    /// Serializes `document` once.
    pub fn new(document: &Value) -> Doc {
        let body = serde_json::to_vec(document).unwrap_or_default();
        Doc {
            hash: hex_upper(&Sha512::digest(&body)),
            body,
        }
    }
}

pub(crate) fn accepts_json(headers: &HeaderMap) -> bool {
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

pub(crate) fn json_body(body: Vec<u8>) -> Response {
    json_response(axum::body::Body::from(body))
}

/// One group-version's v3 document: immutable under its hash URL, moved when the hash is stale.
pub fn serve_v3(
    path: &str,
    doc: &Doc,
    raw: Option<&str>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    if !accepts_json(headers) {
        return Err(ApiError::not_acceptable(
            "the OpenAPI document is served as application/json only",
        ));
    }
    let query = Query::parse(raw);
    let mut response = match query.get("hash") {
        Some(hash) if hash != doc.hash => {
            let mut r = StatusCode::MOVED_PERMANENTLY.into_response();
            if let Ok(location) = HeaderValue::from_str(&format!("{path}?hash={}", doc.hash)) {
                r.headers_mut().insert(header::LOCATION, location);
            }
            return Ok(r);
        }
        Some(_) => {
            let mut r = json_body(doc.body.clone());
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
        None => json_body(doc.body.clone()),
    };
    let h = response.headers_mut();
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", doc.hash)) {
        h.insert(header::ETAG, etag);
    }
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    Ok(response)
}
