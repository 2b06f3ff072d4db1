//! The request body, read before routing.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::kube::status::ApiError;

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
