//! Health endpoints (`/healthy/startup|readiness|liveness`, as upstream) and `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

/// Readiness of the agent: ready once every target server listens.
#[derive(Clone, Default)]
pub struct Health {
    ready: Arc<AtomicBool>,
}

impl Health {
    /// Marks the agent ready (or not).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Whether the agent is ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

/// `/healthy/*` only.
pub fn health_router(health: Health) -> Router {
    let probe = |State(health): State<Health>| async move {
        if health.is_ready() {
            (StatusCode::OK, "ok\n")
        } else {
            (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
        }
    };
    Router::new()
        .route("/healthy/startup", get(probe))
        .route("/healthy/readiness", get(probe))
        // Liveness only says the process answers: a restart would not make servers ready sooner.
        .route(
            "/healthy/liveness",
            get(|| async { (StatusCode::OK, "ok\n") }),
        )
        .with_state(health)
}

/// `/metrics` only.
pub fn metrics_router(metrics: Metrics) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(metrics): State<Metrics>| async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    metrics.render(),
                )
                    .into_response()
            }),
        )
        .with_state(metrics)
}
