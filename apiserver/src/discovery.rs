//! Discovery: `/version`, `/api`, `/apis` (legacy and aggregated v2 / v2beta1 with ETag and
//! 304), `/apis/system.kdoctor.io` and `/apis/system.kdoctor.io/v1beta1`. All static and fast:
//! the aggregator's availability check is `GET /apis/<g>/<v>`, which must never depend on the
//! store.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sha2::{Digest, Sha512};

use crate::kube::discovery::{api_group, hex_upper};
use crate::kube::group::{GROUP, PLURAL, SHORT_NAME, SINGULAR, VERSION};
use crate::kube::response::json;
use crate::state::AppState;
use kdoctor_api::report::KIND;

/// Verbs served on `kdoctorreports`.
pub const VERBS: [&str; 4] = ["delete", "get", "list", "watch"];

const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const AGGREGATED_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// `/version`: a Kubernetes-like version, so that kubectl's dispatcher picks a current client.
pub async fn version() -> Response {
    json(&json!({
        "major": "1",
        "minor": "32",
        "gitVersion": format!("v1.32.0-kdoctor.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    }))
}

/// `/api`: no legacy core group here.
pub async fn api() -> Response {
    json(&json!({"kind": "APIVersions", "versions": [], "serverAddressByClientCIDRs": []}))
}

/// `/apis/system.kdoctor.io`.
pub async fn group() -> Response {
    json(&api_group(GROUP, VERSION))
}

/// `/apis/system.kdoctor.io/v1beta1`.
pub async fn resources() -> Response {
    json(&json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{GROUP}/{VERSION}"),
        "resources": [{
            "name": PLURAL,
            "singularName": SINGULAR,
            "namespaced": false,
            "kind": KIND,
            "verbs": VERBS,
            "shortNames": [SHORT_NAME],
            "categories": ["kdoctor"],
        }],
    }))
}

fn aggregated(api_version: &str, with_tasks: bool) -> Value {
    let mut document = json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": api_version,
        "metadata": {},
        "items": [{
            "metadata": {"name": GROUP},
            "versions": [{
                "version": VERSION,
                "freshness": "Current",
                "resources": [{
                    "resource": PLURAL,
                    "responseKind": {"group": GROUP, "version": VERSION, "kind": KIND},
                    "scope": "Cluster",
                    "singularResource": SINGULAR,
                    "verbs": VERBS,
                    "shortNames": [SHORT_NAME],
                    "categories": ["kdoctor"],
                }],
            }],
        }],
    });
    if with_tasks && let Some(items) = document["items"].as_array_mut() {
        items.push(crate::tasks::aggregated_group());
    }
    document
}

/// Which aggregated format the Accept header asks for first, if any.
fn wants_aggregated(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    for entry in accept.split(',') {
        let params: Vec<String> = entry
            .split(';')
            .skip(1)
            .map(|p| p.trim().replace(' ', ""))
            .collect();
        let has = |p: &str| params.iter().any(|q| q == p);
        if has("g=apidiscovery.k8s.io") && has("as=APIGroupDiscoveryList") {
            if has("v=v2") {
                return Some(AGGREGATED_V2);
            }
            if has("v=v2beta1") {
                return Some(AGGREGATED_V2BETA1);
            }
        }
        let media = entry.split(';').next().unwrap_or("").trim();
        if matches!(media, "application/json" | "*/*" | "application/*") && params.is_empty() {
            return None;
        }
    }
    None
}

/// `/apis`: aggregated discovery when asked for (with ETag / If-None-Match), else APIGroupList.
/// Includes `kdoctor.io` when the server shows task objects (local mode).
pub async fn apis(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let with_tasks = state.tasks.is_some();
    let Some(content_type) = wants_aggregated(&headers) else {
        let mut groups = vec![api_group(GROUP, VERSION)];
        if with_tasks {
            groups.push(api_group(
                kdoctor_api::task::GROUP,
                kdoctor_api::task::VERSION,
            ));
        }
        return json(&json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}));
    };
    let api_version = if content_type == AGGREGATED_V2 {
        "apidiscovery.k8s.io/v2"
    } else {
        "apidiscovery.k8s.io/v2beta1"
    };
    let body = serde_json::to_vec(&aggregated(api_version, with_tasks)).unwrap_or_default();
    let etag = format!("\"{}\"", hex_upper(&Sha512::digest(&body)));
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == etag);
    let mut response = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, body).into_response()
    };
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(value) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, value);
    }
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
    response
}
