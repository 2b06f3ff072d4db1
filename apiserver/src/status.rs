//! Errors as `metav1.Status` objects, with the codes, reasons and messages kubectl prints for
//! built-in resources (`Error from server (NotFound): kdoctorreports.system.kdoctor.io "x" not found`).

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::GROUP_RESOURCE;

/// An error the API answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub code: StatusCode,
    /// Kubernetes reason (`NotFound`, `Forbidden`, …).
    pub reason: &'static str,
    /// The message kubectl prints.
    pub message: String,
    /// The object's name, when there is one.
    pub name: Option<String>,
    /// The resource named in `details` when it is not the report (with the fields at fault).
    pub details: Option<Box<Details>>,
}

/// A Status's `details` beyond the name: the resource and the fields at fault.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Details {
    /// API group of the resource.
    pub group: String,
    /// Its plural (the Go server puts the resource plural in `details.kind`).
    pub kind: String,
    /// The fields at fault, as `details.causes`.
    pub causes: Vec<Cause>,
}

/// One field at fault (`details.causes[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, …
    pub reason: String,
    /// The field path (`spec.request.qps`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(code: StatusCode, reason: &'static str, message: String) -> ApiError {
        ApiError {
            code,
            reason,
            message,
            name: None,
            details: None,
        }
    }

    /// `kdoctorreports.system.kdoctor.io "x" not found`.
    pub fn not_found(name: &str) -> ApiError {
        ApiError {
            name: Some(name.to_string()),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("{GROUP_RESOURCE} {name:?} not found"),
            )
        }
    }

    /// A path the server does not serve.
    pub fn no_route() -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource".into(),
        )
    }

    /// Bad query parameters or selectors.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "BadRequest", message.into())
    }

    /// A verb the resource does not support.
    pub fn method_not_allowed(verb: &str) -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("{verb} is not supported on resources of kind {GROUP_RESOURCE:?}"),
        )
    }

    /// No credentials, or credentials not accepted.
    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "Unauthorized".into(),
        )
    }

    /// Authorization denied, in the Go server's words.
    pub fn forbidden(message: String, name: Option<&str>) -> ApiError {
        ApiError {
            name: name.map(str::to_string),
            ..ApiError::new(StatusCode::FORBIDDEN, "Forbidden", message)
        }
    }

    /// A resourceVersion or continue token the server can no longer serve.
    pub fn expired(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::GONE, "Expired", message.into())
    }

    /// The server cannot answer right now (e.g. the store is not open yet).
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            message.into(),
        )
    }

    /// A resourceVersion newer than this replica has, still after waiting for it (a replica
    /// far behind the leader), as kube-apiserver answers it: 504, reason Timeout.
    pub fn too_large_version(requested: u64, current: u64) -> ApiError {
        ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "Timeout",
            format!(
                "Too large resource version: {requested}, current: {current} (this replica is catching up with the leader; retry)"
            ),
        )
    }

    /// A response format the client asked for and the server does not produce.
    pub fn not_acceptable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_ACCEPTABLE, "NotAcceptable", message.into())
    }

    /// Something failed inside the server.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            message.into(),
        )
    }

    /// An error of the framework's own (an extractor's rejection, a method no route takes) as a
    /// Status with the reason the Go server gives that code.
    pub(crate) fn of_code(code: StatusCode, text: &str) -> ApiError {
        let reason = match code {
            StatusCode::BAD_REQUEST => "BadRequest",
            StatusCode::NOT_FOUND => "NotFound",
            StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
            StatusCode::NOT_ACCEPTABLE => "NotAcceptable",
            StatusCode::PAYLOAD_TOO_LARGE => "RequestEntityTooLarge",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "UnsupportedMediaType",
            StatusCode::UNPROCESSABLE_ENTITY => "Invalid",
            StatusCode::TOO_MANY_REQUESTS => "TooManyRequests",
            StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailable",
            StatusCode::GATEWAY_TIMEOUT => "Timeout",
            _ if code.is_server_error() => "InternalError",
            _ => "BadRequest",
        };
        let message = match (code, text.trim()) {
            (StatusCode::METHOD_NOT_ALLOWED, _) => {
                "the server does not allow this method on the requested resource".to_string()
            }
            (_, "") => code
                .canonical_reason()
                .unwrap_or("the request failed")
                .to_string(),
            (_, text) => text.to_string(),
        };
        ApiError::new(code, reason, message)
    }

    /// The Status object.
    pub fn to_status(&self) -> serde_json::Value {
        let mut details = serde_json::Map::new();
        if let Some(name) = &self.name {
            details.insert("name".into(), json!(name));
        }
        match &self.details {
            Some(d) => {
                details.insert("group".into(), json!(d.group));
                details.insert("kind".into(), json!(d.kind));
                if !d.causes.is_empty() {
                    let causes: Vec<_> = d
                        .causes
                        .iter()
                        .map(
                            |c| json!({"reason": c.reason, "message": c.message, "field": c.field}),
                        )
                        .collect();
                    details.insert("causes".into(), json!(causes));
                }
            }
            None if self.name.is_some() => {
                details.insert("group".into(), json!(crate::GROUP));
                // As the Go server: `details.kind` holds the resource plural.
                details.insert("kind".into(), json!(crate::PLURAL));
            }
            None => {}
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        });
        if !details.is_empty() {
            status["details"] = serde_json::Value::Object(details);
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.code.as_u16(),
            self.reason,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.to_status()).unwrap_or_default();
        let mut response = (self.code, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        // client-go retries these after the given seconds.
        if matches!(
            self.code,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
        ) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response.extensions_mut().insert(self);
        response
    }
}

impl From<kdoctor_store::StoreError> for ApiError {
    fn from(e: kdoctor_store::StoreError) -> Self {
        if matches!(
            e,
            kdoctor_store::StoreError::Replicated
                | kdoctor_store::StoreError::NotLeader { .. }
                | kdoctor_store::StoreError::Replication(_)
        ) {
            return ApiError::unavailable(format!("{e}; retry"));
        }
        tracing::error!(error = %e, "store error");
        ApiError::internal(format!("the report store failed: {e}"))
    }
}

/// The most of a framework error's text body that is carried into the Status message.
const MAX_ERROR_TEXT: usize = 4096;

/// Makes every error answer a Status: axum's own rejections (a name that is not UTF-8, a
/// method no route takes) come as plain text or an empty body, which kubectl cannot print.
/// The health endpoints keep the Go server's plain-text answers (probes read them).
pub async fn as_status<F, Fut>(request: Request, next: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    let health = crate::health::ENDPOINTS.iter().any(|e| {
        request
            .uri()
            .path()
            .strip_prefix('/')
            .is_some_and(|p| p.starts_with(e))
    });
    let response = next(request).await;
    if health {
        return response;
    }
    let code = response.status();
    if !(code.is_client_error() || code.is_server_error())
        || response.extensions().get::<ApiError>().is_some()
    {
        return response;
    }
    let text = axum::body::to_bytes(response.into_body(), MAX_ERROR_TEXT)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    ApiError::of_code(code, &text).into_response()
}

/// The largest request body read: kube-apiserver's own limit.
pub const MAX_REQUEST_BODY: usize = 3 * 1024 * 1024;

/// How much of a larger body is read and dropped so that the client can still be told 413; a
/// client sending more than this has its stream reset.
const MAX_DRAINED_BODY: usize = 32 * 1024 * 1024;

/// Reads a request's body (up to [`MAX_REQUEST_BODY`]) before it is routed. This API takes no
/// bodies, and answering before reading one makes HTTP/2 reset the stream: the client, still
/// sending, sees a framing error instead of the 405 Status. A larger body is read on and
/// dropped (up to [`MAX_DRAINED_BODY`]) and answered 413.
pub async fn read_body<F, Fut>(request: Request, next: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    use http_body_util::BodyExt;
    // Reads (GET, watches) carry no body: nothing to do on the hot path.
    if axum::body::HttpBody::is_end_stream(request.body()) {
        return next(request).await;
    }
    let (parts, mut body) = request.into_parts();
    let mut kept = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                return ApiError::bad_request(format!("the request body could not be read: {e}"))
                    .into_response();
            }
        };
        if let Ok(data) = frame.into_data() {
            seen = seen.saturating_add(data.len());
            if seen <= MAX_REQUEST_BODY {
                kept.extend_from_slice(&data);
            } else if seen > MAX_DRAINED_BODY {
                break;
            }
        }
    }
    if seen > MAX_REQUEST_BODY {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!("the request body is larger than {MAX_REQUEST_BODY} bytes"),
        )
        .into_response();
    }
    next(Request::from_parts(parts, axum::body::Body::from(kept))).await
}
