//! Errors as `metav1.Status` objects, with the codes, reasons and messages kubectl prints for
//! built-in resources (`Error from server (NotFound): kdoctorreports.system.kdoctor.io "x" not found`).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::kube::group::GROUP_RESOURCE;

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
                details.insert("group".into(), json!(crate::kube::group::GROUP));
                // As the Go server: `details.kind` holds the resource plural.
                details.insert("kind".into(), json!(crate::kube::group::PLURAL));
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
