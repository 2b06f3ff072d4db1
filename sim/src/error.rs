//! API errors rendered as `metav1.Status`, with the real server's codes, reasons and messages.

use serde_json::{Value, json};

use crate::resources::ResourceInfo;

/// An API error: HTTP code, Status reason and message, plus the details the Go server fills in.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct ApiError {
    /// HTTP status code (and `code` in the Status body).
    pub code: u16,
    /// Machine-readable reason, e.g. `NotFound`.
    pub reason: &'static str,
    /// The human message, built like apimachinery's helpers.
    pub message: String,
    /// `details` (boxed: errors travel in every Result of the server).
    pub details: Box<Details>,
}

/// The `details` of a Status.
#[derive(Debug, Clone, Default)]
pub struct Details {
    /// `details.name`.
    pub name: Option<String>,
    /// `details.group`.
    pub group: Option<String>,
    /// `details.kind` (the resource plural, as the real server does).
    pub kind: Option<String>,
    /// `details.causes`.
    pub causes: Vec<Value>,
    /// `details.retryAfterSeconds`.
    pub retry_after: Option<u32>,
}

/// Result of an API operation.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: Box::default(),
        }
    }

    fn with_resource(mut self, info: &ResourceInfo, name: &str) -> Self {
        self.details.name = (!name.is_empty()).then(|| name.to_string());
        self.details.group = (!info.group.is_empty()).then(|| info.group.clone());
        self.details.kind = Some(info.plural.clone());
        self
    }

    /// 404 `pods "x" not found`.
    pub fn not_found(info: &ResourceInfo, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", info.group_resource()),
        )
        .with_resource(info, name)
    }

    /// 404 for an object named by group and plural.
    pub fn not_found_gr(group: &str, plural: &str, name: &str) -> Self {
        let gr = if group.is_empty() {
            plural.to_string()
        } else {
            format!("{plural}.{group}")
        };
        let mut e = Self::new(404, "NotFound", format!("{gr} \"{name}\" not found"));
        e.details.name = Some(name.to_string());
        e.details.group = (!group.is_empty()).then(|| group.to_string());
        e.details.kind = Some(plural.to_string());
        e
    }

    /// 404 for a path the server does not serve.
    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 409 `pods "x" already exists`.
    pub fn already_exists(info: &ResourceInfo, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", info.group_resource()),
        )
        .with_resource(info, name)
    }

    /// 409 optimistic-concurrency conflict.
    pub fn conflict(info: &ResourceInfo, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                info.group_resource()
            ),
        )
        .with_resource(info, name)
    }

    /// 409 because the stored object changed since the client read it.
    pub fn modified(info: &ResourceInfo, name: &str) -> Self {
        Self::conflict(
            info,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 conflict of server-side apply field managers.
    pub fn apply_conflict(
        info: &ResourceInfo,
        name: &str,
        message: String,
        causes: Vec<Value>,
    ) -> Self {
        let mut e = Self::new(409, "Conflict", message).with_resource(info, name);
        e.details.causes = causes;
        e
    }

    /// 400 with free text.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 422 `Kind "x" is invalid: field: message`.
    pub fn invalid(info: &ResourceInfo, name: &str, field: &str, detail: &str) -> Self {
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {field}: {detail}", info.kind),
        )
        .with_resource(info, name);
        e.details.kind = Some(info.kind.clone());
        e.details.causes =
            vec![json!({"reason": "FieldValueInvalid", "message": detail, "field": field})];
        e
    }

    /// 422 without a field (a patch that cannot be applied).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    /// 403 with the given message.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_allowed(verb: &str, info: &ResourceInfo) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!(
                "{verb} is not supported on resources of kind \"{}\"",
                info.group_resource()
            ),
        )
        .with_resource(info, "")
    }

    /// 410 for a resourceVersion older than the retained history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 415 for a body type the server does not read.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json; got {content_type:?}"
            ),
        )
    }

    /// 406 for an Accept header the server cannot satisfy.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    /// 401 `Unauthorized`.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 500 for a fault of the simulator itself.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut details = serde_json::Map::new();
        if let Some(n) = &self.details.name {
            details.insert("name".into(), json!(n));
        }
        if let Some(g) = &self.details.group {
            details.insert("group".into(), json!(g));
        }
        if let Some(k) = &self.details.kind {
            details.insert("kind".into(), json!(k));
        }
        if !self.details.causes.is_empty() {
            details.insert("causes".into(), json!(self.details.causes));
        }
        if let Some(r) = self.details.retry_after {
            details.insert("retryAfterSeconds".into(), json!(r));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}
