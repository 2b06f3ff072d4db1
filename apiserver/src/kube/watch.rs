//! Watch framing: a watch's answer, its ERROR events and its default timeout.

use std::time::Duration;

use axum::response::Response;
use bytes::Bytes;
use serde_json::json;
use tokio::sync::mpsc;

use crate::kube::response::{Unbuffered, json_response};
use crate::kube::sink::body_from;
use crate::kube::status::ApiError;

/// An ERROR event saying the watch's resource version is too old (`410 Expired`).
pub fn expired(message: String) -> Vec<u8> {
    let status = ApiError::expired(message).to_status();
    let mut bytes =
        serde_json::to_vec(&json!({"type": "ERROR", "object": status})).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// A watch timeout between 30 and 60 minutes, as the Go server picks when none is asked.
pub fn default_timeout() -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    Duration::from_secs(1800 + u64::from(nanos) % 1800)
}

/// The answer of a watch: its events as `rx` yields them, never compressed (which would hold
/// events back in the encoder's buffer).
pub fn watch_response(rx: mpsc::Receiver<Result<Bytes, std::io::Error>>) -> Response {
    let mut response = json_response(body_from(rx));
    response.extensions_mut().insert(Unbuffered);
    response
}
