//! The plain-HTTP operations listener of a server process: `/metrics` for Prometheus and the
//! health endpoints for the kubelet (`/healthz`, `/livez`, `/readyz`, and upstream's
//! `/healthy/liveness` and `/healthy/readiness`), without TLS or authentication, so probes and
//! scrapers need no credentials. Reports are never served here.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::routing::get;
use tokio::net::TcpListener;

use crate::state::AppState;
use crate::{health, metrics};

/// The operations routes over the server's state.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics::render))
        .route(
            "/healthz",
            get(
                |State(s): State<AppState>, RawQuery(q): RawQuery| async move {
                    health::endpoint(&s, "healthz", q.as_deref())
                },
            ),
        )
        .route(
            "/livez",
            get(
                |State(s): State<AppState>, RawQuery(q): RawQuery| async move {
                    health::endpoint(&s, "livez", q.as_deref())
                },
            ),
        )
        .route(
            "/healthy/liveness",
            get(|State(s): State<AppState>| async move { health::endpoint(&s, "livez", None) }),
        )
        .route(
            "/readyz",
            get(
                |State(s): State<AppState>, RawQuery(q): RawQuery| async move {
                    health::endpoint(&s, "readyz", q.as_deref())
                },
            ),
        )
        .route(
            "/healthy/readiness",
            get(|State(s): State<AppState>| async move { health::endpoint(&s, "readyz", None) }),
        )
        .with_state(state)
}

/// Serves the operations routes on `listen` until the server's shutdown signal.
pub async fn serve(listen: SocketAddr, state: AppState) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(listen).await?;
    let address = listener.local_addr()?;
    let mut shutdown = state.shutdown.clone();
    let app = router(state);
    tokio::spawn(async move {
        let stopped = async move {
            let _ = shutdown.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .await
        {
            tracing::warn!(error = %e, "operations listener ended");
        }
    });
    Ok(address)
}
