//! Every error answer as a `Status` object.

use axum::extract::Request;
use axum::response::{IntoResponse, Response};

use crate::health::ENDPOINTS;
use crate::kube::status::ApiError;

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
    let health = ENDPOINTS.iter().any(|e| {
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
