//! The report API the harvester pulls from, over HTTPS with client certificates signed by the
//! install's CA (the agent holds the CA certificate only, never its key). List, fetch,
//! acknowledge, and show the pod's identity token — nothing else: no remote command execution of any kind (upstream's gRPC ran
//! shell commands on agents to fetch reports).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::server::ClientName;
use crate::spool::{Spool, SpoolError};

/// How often acknowledged and expired reports are removed.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

fn error(status: StatusCode, message: String) -> Response {
    (status, axum::Json(json!({ "error": message }))).into_response()
}

fn spool_error(e: SpoolError) -> Response {
    match e {
        SpoolError::NotFound(_) => error(StatusCode::NOT_FOUND, e.to_string()),
        SpoolError::BadName(_) => error(StatusCode::BAD_REQUEST, e.to_string()),
        other => {
            tracing::warn!(error = %other, "report spool");
            error(StatusCode::INTERNAL_SERVER_ERROR, other.to_string())
        }
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SpoolError> + Send + 'static,
) -> Result<T, Response> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(spool_error),
        Err(e) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    }
}

/// `GET /v1/reports`, held with a [`RoundWait`] until the round's report is spooled or the wait
/// is over.
async fn list(
    State(spool): State<Arc<Spool>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let wait = match RoundWait::from_query(&query) {
        Ok(wait) => wait,
        Err(problem) => return error(StatusCode::BAD_REQUEST, problem),
    };
    let wait = wait.map(|w| {
        let until = tokio::time::Instant::now() + w.wait;
        (w, until)
    });
    let mut writes = spool.writes();
    loop {
        let s = spool.clone();
        let items = match blocking(move || s.list()).await {
            Ok(items) => items,
            Err(response) => return response,
        };
        match &wait {
            Some((wait, until)) if !wait.met_by(&items) && tokio::time::Instant::now() < *until => {
                // A write, or the end of the wait: list again either way (that list answers).
                let _ = tokio::time::timeout_at(*until, writes.changed()).await;
            }
            _ => return axum::Json(json!({ "items": items })).into_response(),
        }
    }
}

async fn fetch(State(spool): State<Arc<Spool>>, Path(name): Path<String>) -> Response {
    match blocking(move || spool.read(&name)).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(response) => response,
    }
}

async fn acknowledge(State(spool): State<Arc<Spool>>, Path(name): Path<String>) -> Response {
    let now = jiff::Timestamp::now();
    match blocking(move || spool.acknowledge(&name, now)).await {
        Ok(at) => axum::Json(json!({ "acknowledged": at })).into_response(),
        Err(response) => response,
    }
}

pub use kdoctor_transport::report_api::HARVESTER_NAME;
use kdoctor_transport::report_api::{AgentIdentity, MAX_TOKEN_BYTES, RoundWait};

async fn only_the_harvester(request: Request, next: Next) -> Response {
    match request.extensions().get::<ClientName>() {
        Some(ClientName(Some(name))) if name.as_ref() == HARVESTER_NAME => next.run(request).await,
        other => {
            let presented = match other {
                Some(ClientName(Some(name))) => format!("{name:?}"),
                _ => "no certificate name".to_string(),
            };
            tracing::warn!(client = %presented, "report API request refused");
            error(
                StatusCode::FORBIDDEN,
                format!(
                    "only the controller's certificate ({HARVESTER_NAME:?}) may use the report API, not {presented}"
                ),
            )
        }
    }
}

/// `GET /v1/identity`: the pod's token, read on every request (the kubelet rotates the file).
async fn identity(State(token): State<Arc<std::path::Path>>) -> Response {
    let unusable = |problem: String| {
        tracing::warn!(path = %token.display(), %problem, "no identity token for the harvester");
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("identity token {}: {problem}", token.display()),
        )
    };
    let text = match tokio::fs::metadata(&*token).await {
        Ok(meta) if meta.len() > MAX_TOKEN_BYTES as u64 => {
            return unusable(format!("larger than {MAX_TOKEN_BYTES} bytes"));
        }
        Ok(_) => match tokio::fs::read_to_string(&*token).await {
            Ok(text) => text,
            Err(e) => return unusable(e.to_string()),
        },
        Err(e) => return unusable(e.to_string()),
    };
    let token = text.trim();
    if token.is_empty() {
        return unusable("empty".to_string());
    }
    axum::Json(AgentIdentity {
        token: token.to_string(),
    })
    .into_response()
}

/// `GET /v1/reports`, `GET /v1/reports/{name}`, `POST /v1/reports/{name}/ack`, and
/// `GET /v1/identity` from the token file `token`.
pub fn router(spool: Arc<Spool>, token: &std::path::Path) -> Router {
    let identity = Router::new()
        .route("/v1/identity", get(identity))
        .with_state(Arc::<std::path::Path>::from(token));
    Router::new()
        .route("/v1/reports", get(list))
        .route("/v1/reports/{name}", get(fetch))
        .route("/v1/reports/{name}/ack", post(acknowledge))
        .with_state(spool)
        .merge(identity)
        .layer(axum::middleware::from_fn(only_the_harvester))
}

/// Removes acknowledged and expired reports every [`SWEEP_INTERVAL`].
pub fn sweeper(spool: Arc<Spool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let s = spool.clone();
            let swept = tokio::task::spawn_blocking(move || s.sweep(jiff::Timestamp::now())).await;
            match swept {
                Ok(Ok(removed)) if !removed.is_empty() => {
                    tracing::info!(
                        count = removed.len(),
                        "removed acknowledged or expired reports"
                    )
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "report spool sweep failed"),
                _ => {}
            }
            tokio::time::sleep(SWEEP_INTERVAL).await;
        }
    })
}
