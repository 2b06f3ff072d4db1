//! The endpoint where a replica serves the others: Raft's messages and the calls around them
//! (kdoctor_store::raft::Rpc), each a POST of bytes answered with bytes. Every request must come
//! with a certificate of the install's CA named [`REPLICA_NAME`]: the same CA signs the
//! harvester's and agents' certificates, and only a replica may take part.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use kdoctor_store::raft::{MAX_MESSAGE, Replica, Rpc};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::{REPLICA_NAME, Replication};

/// A handshake slower than this is abandoned.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

async fn call(State(replica): State<Replica>, Path(name): Path<String>, body: Bytes) -> Response {
    let Some(rpc) = Rpc::of_path(&format!("/raft/v1/{name}")) else {
        return (StatusCode::NOT_FOUND, "no such call").into_response();
    };
    match replica.handle(rpc, &body).await {
        Ok(answer) => (StatusCode::OK, answer).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    }
}

/// The routes of the endpoint.
pub fn router(replica: Replica) -> Router {
    Router::new()
        .route("/raft/v1/{name}", post(call))
        .layer(DefaultBodyLimit::max(MAX_MESSAGE))
        .with_state(replica)
}

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener.
    #[error("cannot listen on --replication-listen {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TLS material.
    #[error(transparent)]
    Tls(#[from] kdoctor_transport::tls::TlsError),
}

/// Serves the endpoint until the returned future is dropped.
pub async fn serve(
    replica: Replica,
    replication: &Replication,
) -> Result<impl std::future::Future<Output = ()> + use<>, ServeError> {
    let config = kdoctor_transport::tls::server_config(
        replication.server.clone(),
        Some(replication.roots.clone()),
    )?;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let addr = replication.listen;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Listen { addr, source })?;
    let router = router(replica);
    tracing::info!(%addr, "replication endpoint listening");
    Ok(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "replication accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let acceptor = acceptor.clone();
            let router = router.clone();
            tokio::spawn(async move {
                let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                {
                    Ok(Ok(tls)) => tls,
                    _ => {
                        tracing::debug!(%peer, "replication handshake failed");
                        return;
                    }
                };
                let name = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(kdoctor_transport::tls::common_name);
                // The CA also signs the harvester's and agents' certificates: only a replica
                // takes part.
                if name.as_deref() != Some(REPLICA_NAME) {
                    tracing::warn!(%peer, client = ?name, "replication refused: not a controller replica");
                    return;
                }
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                let builder = Builder::new(TokioExecutor::new());
                let builder = if h2 {
                    builder.http2_only()
                } else {
                    builder.http1_only()
                };
                if let Err(e) = builder
                    .serve_connection(TokioIo::new(tls), TowerToHyperService::new(router))
                    .await
                {
                    tracing::debug!(%peer, error = %e, "replication connection ended");
                }
            });
        }
    })
}
