//! The plain-HTTP operations listener of a server process: `/metrics` for Prometheus and the
//! health endpoints for the kubelet (`/healthz`, `/livez`, `/readyz`, and upstream's
//! `/healthy/liveness` and `/healthy/readiness`), without TLS or authentication, so probes and
//! scrapers need no credentials. Reports are never served here.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use kdoctor_transport::accept::{accept_loop, http_builder};
use kdoctor_transport::first_bytes::FirstBytes;
use kdoctor_transport::limits::ServeLimits;
use tokio::net::TcpListener;

use crate::state::AppState;
use crate::{health, metrics};

/// The operations routes over the server's state.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(s): State<AppState>| async move { metrics::render(&s.metrics) }),
        )
        .merge(health::routes::routes())
        .route(
            "/healthy/liveness",
            get(|State(s): State<AppState>| async move { health::routes::endpoint(&s, "livez", None) }),
        )
        .route(
            "/healthy/readiness",
            get(|State(s): State<AppState>| async move { health::routes::endpoint(&s, "readyz", None) }),
        )
        .with_state(state)
}

/// Serves the operations routes on `listen` until the server's shutdown signal, within the
/// same limits as every kdoctor server (any pod can reach this port).
pub async fn serve(
    listen: SocketAddr,
    state: AppState,
    limits: ServeLimits,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(listen).await?;
    let address = listener.local_addr()?;
    let mut shutdown = state.shutdown.clone();
    let app = router(state);
    let accepting = accept_loop(listener, limits, "operations", move |stream, peer| {
        let service = TowerToHyperService::new(app.clone());
        async move {
            let io = FirstBytes::new(stream, limits.header_timeout);
            if let Err(e) = http_builder(&limits)
                .serve_connection(TokioIo::new(io), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "operations connection ended with an error");
            }
        }
    });
    tokio::spawn(async move {
        tokio::select! {
            _ = accepting => {}
            _ = shutdown.wait_for(|stopped| *stopped) => {}
        }
    });
    Ok(address)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    use super::*;
    use crate::auth::Auth;
    use crate::auth::config::AuthnConfig;
    use crate::metrics::ApiMetrics;

    async fn answer(app: &Router, path: &str) -> (StatusCode, String) {
        let request = Request::get(path).body(Body::empty()).expect("request");
        let response = app.clone().oneshot(request).await.expect("answer");
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn health_endpoints_and_upstream_s_aliases_answer_alike_before_the_store_opens() {
        let (_stop, shutdown) = tokio::sync::watch::channel(false);
        let state = AppState::new(
            Arc::new(Auth::standalone(AuthnConfig::default())),
            Arc::new(ApiMetrics::new()),
            shutdown,
        );
        let app = router(state);
        let live = answer(&app, "/livez").await;
        assert_eq!(live.0, StatusCode::OK, "{}", live.1);
        assert_eq!(answer(&app, "/healthy/liveness").await.0, live.0);
        let ready = answer(&app, "/readyz").await;
        assert_ne!(ready.0, StatusCode::OK, "ready with no store: {}", ready.1);
        assert_eq!(answer(&app, "/healthy/readiness").await.0, ready.0);
        let verbose = answer(&app, "/readyz?verbose").await;
        assert!(
            verbose.1.contains("[-]"),
            "no failing check listed: {}",
            verbose.1
        );
        assert_eq!(answer(&app, "/healthz").await.0, live.0);
        assert_eq!(answer(&app, "/metrics").await.0, StatusCode::OK);
    }
}
