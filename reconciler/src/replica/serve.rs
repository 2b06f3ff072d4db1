//! The leader's replication endpoint: records after a position (held open while there is
//! nothing new), a snapshot of the whole store, and purges that followers forward. Every
//! request must come with a certificate of the install's CA named [`REPLICA_NAME`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use kdoctor_store::Store;
use kdoctor_store::replica::{Position, encode_record};
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::{LONG_POLL, MAX_ANSWER_RECORDS, REPLICA_NAME, Replication};

/// The header with the leader's newest resourceVersion, so a follower knows when it is current.
pub const LEADER_RV_HEADER: &str = "kdoctor-leader-resource-version";

/// A handshake slower than this is abandoned.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Snapshot bytes buffered between the reading thread and the connection.
const SNAPSHOT_QUEUE: usize = 8;

#[derive(Deserialize)]
struct RecordsQuery {
    rv: u64,
    term: u64,
    #[serde(default)]
    wait: u64,
    #[serde(default)]
    replica: String,
}

#[derive(Deserialize)]
struct PurgeQuery {
    uid: String,
    round: Option<u64>,
}

fn text(code: StatusCode, body: impl Into<String>) -> Response {
    (code, body.into()).into_response()
}

fn not_leading() -> Response {
    text(
        StatusCode::SERVICE_UNAVAILABLE,
        "this replica does not lead; read the leader's address from the Lease",
    )
}

async fn records(State(store): State<Arc<Store>>, Query(q): Query<RecordsQuery>) -> Response {
    if store.is_following() {
        return not_leading();
    }
    let from = Position {
        rv: q.rv,
        term: q.term,
    };
    let replica: String = q.replica.chars().take(253).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(q.wait).min(LONG_POLL);
    let mut durable = store.durable_versions();
    loop {
        durable.borrow_and_update();
        match store.records_after(&replica, from, MAX_ANSWER_RECORDS) {
            Err(need) => return text(StatusCode::GONE, need.to_string()),
            Ok(records) if records.is_empty() && tokio::time::Instant::now() < deadline => {
                let _ = tokio::time::timeout_at(deadline, durable.changed()).await;
            }
            Ok(records) => {
                let mut body = Vec::new();
                for record in &records {
                    encode_record(&mut body, record);
                }
                let mut response = (StatusCode::OK, body).into_response();
                let headers = response.headers_mut();
                headers.insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/octet-stream"),
                );
                if let Ok(value) = store.position().rv.to_string().parse() {
                    headers.insert(LEADER_RV_HEADER, value);
                }
                return response;
            }
        }
    }
}

/// A `Write` into the connection's body, from a blocking thread.
struct ChannelWriter(tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>);

impl std::io::Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .blocking_send(Ok(Bytes::copy_from_slice(buf)))
            .map_err(|_| std::io::Error::other("the follower went away"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn snapshot(State(store): State<Arc<Store>>) -> Response {
    if store.is_following() {
        return not_leading();
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel(SNAPSHOT_QUEUE);
    tokio::task::spawn_blocking(move || {
        let mut out = ChannelWriter(tx.clone());
        match store.write_snapshot(&mut out) {
            Ok((at, pairs)) => {
                tracing::info!(
                    resource_version = at.rv,
                    keys = pairs,
                    "snapshot sent to a follower"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "snapshot for a follower failed");
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
            }
        }
    });
    let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    (
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from_stream(stream),
    )
        .into_response()
}

async fn purge(State(store): State<Arc<Store>>, Query(q): Query<PurgeQuery>) -> Response {
    if store.is_following() {
        return not_leading();
    }
    let done = tokio::task::spawn_blocking(move || {
        let Some(task) = store.by_uid(&q.uid) else {
            return Ok(None);
        };
        match q.round {
            Some(round) => store.purge_round(task.id, round).map(|_| ()),
            None => store.purge_task(task.id).map(|_| ()),
        }?;
        Ok::<_, kdoctor_store::StoreError>(Some(store.resource_version()))
    })
    .await;
    match done {
        Ok(Ok(Some(rv))) => text(StatusCode::OK, rv.to_string()),
        Ok(Ok(None)) => text(StatusCode::NOT_FOUND, "no such task in the leader's store"),
        Ok(Err(e)) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// The routes of the endpoint.
pub fn router(store: Arc<Store>) -> Router {
    Router::new()
        .route("/replication/v1/records", get(records))
        .route("/replication/v1/snapshot", get(snapshot))
        .route("/replication/v1/purge", post(purge))
        .with_state(store)
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
    store: Arc<Store>,
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
    let router = router(store);
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
                // may read the store's history.
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
