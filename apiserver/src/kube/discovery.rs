//! Pieces of Kubernetes discovery documents that every served group shares.

use serde_json::{Value, json};

/// The `APIGroup` of `group`, serving only `version`.
pub fn api_group(group: &str, version: &str) -> Value {
    let group_version = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": [group_version.clone()],
        "preferredVersion": group_version,
    })
}

/// Upper-case hex, as the Go server writes its discovery and OpenAPI hashes.
pub fn hex_upper(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}
