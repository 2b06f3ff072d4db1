//! The HTTP(S) front of the simulated API server (axum; rustls for HTTPS with optional client
//! certificates).

pub mod discovery;
pub mod handlers;
pub mod identity;
pub mod openapi;
pub mod protobuf;
pub mod query;
pub mod table;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::cluster::Cluster;

/// Shared state of the HTTP handlers.
pub struct App {
    /// The cluster served.
    pub cluster: Arc<Cluster>,
    /// The `/version` document.
    pub version: Value,
    /// How often watches that allow bookmarks get one.
    pub bookmark_interval: Duration,
    /// Turns true when the server stops (ends watches).
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// Authenticate every request and authorize it with RBAC.
    pub rbac: bool,
    /// Where the process runner keeps pod logs (served as pods/log).
    pub logs_dir: Option<std::path::PathBuf>,
    /// Aggregated APIs (APIServices backed by a Service).
    pub aggregator: Arc<crate::aggregator::Aggregator>,
}

/// The router: one handler for every path, as the API's paths are data-driven.
pub fn router(app: Arc<App>) -> Router {
    Router::new().fallback(handlers::handle).with_state(app)
}

/// Errors setting up TLS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM block could not be read.
    #[error("reading PEM: {0}")]
    Pem(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A rustls server configuration with the serving certificate; client certificates signed by
/// `client_ca_pem` are accepted but not required (token users connect without one).
pub fn tls_config(
    cert_pem: &str,
    key_pem: &str,
    client_ca_pem: &str,
) -> Result<rustls::ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Pem(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| TlsError::Pem(e.to_string()))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(client_ca_pem.as_bytes()) {
        let c = c.map_err(|e| TlsError::Pem(e.to_string()))?;
        roots.add(c)?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .map_err(|e| TlsError::Pem(e.to_string()))?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// Serves plain HTTP until `shutdown` turns true.
pub async fn serve_http(
    listener: TcpListener,
    app: Router,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|s| *s).await;
        })
        .await;
}

/// Serves HTTPS until `shutdown` turns true.
pub async fn serve_https(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    app: Router,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    loop {
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = shutdown.wait_for(|s| *s) => break,
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let mut conn_shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let peer = identity::PeerIdentity(
                tls.get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|certs| certs.first())
                    .and_then(|c| identity::from_der(c.as_ref())),
            );
            let service = hyper::service::service_fn(
                move |mut request: hyper::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(peer.clone());
                    let app = app.clone();
                    async move { app.oneshot(request.map(axum::body::Body::new)).await }
                },
            );
            let builder = auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            tokio::select! {
                _ = conn => {}
                _ = conn_shutdown.wait_for(|s| *s) => {}
            }
        });
    }
}
