//! JSON answers, and the mark of an answer that must not be buffered.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::Value;

/// An `application/json` answer of `body`.
pub fn json_response(body: Body) -> Response {
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON answer of `value`.
pub fn json(value: &Value) -> Response {
    json_response(Body::from(serde_json::to_vec(value).unwrap_or_default()))
}

/// A JSON answer of `value` with `code`.
pub fn json_with_status(code: StatusCode, value: &Value) -> Response {
    let mut response = json(value);
    *response.status_mut() = code;
    response
}

/// Marks a response that must reach the client event by event (a watch): compressing it would
/// hold events back in the encoder's buffer.
#[derive(Clone, Copy, Debug)]
pub struct Unbuffered;
