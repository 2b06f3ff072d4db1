//! Serving a router on a listener, plain or over TLS, HTTP/1.1 and HTTP/2 (ALPN for TLS, prior
//! knowledge for plain), with the peer address and scheme attached to every request.

pub mod health;
pub mod socket;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use kdoctor_transport::first_bytes::FirstBytes;
use kdoctor_transport::limits::{MAX_HEADER_BYTES, ServeLimits};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::echo::Scheme;
use crate::metrics::Metrics;

/// How often an idle HTTP/2 connection is pinged, and how long the answer may take.
const H2_PING_INTERVAL: Duration = Duration::from_secs(30);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// The common name of the client certificate the connection's TLS handshake verified (`None`
/// on plain connections and for clients without a certificate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientName(pub Option<Arc<str>>);

/// Why a listener could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} ({what}): {source}")]
pub struct ListenError {
    /// What the listener is for.
    pub what: &'static str,
    /// The address.
    pub addr: SocketAddr,
    /// The OS error.
    pub source: std::io::Error,
}

/// Binds `addr` for `what`.
pub async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, ListenError> {
    socket::tcp(addr).map_err(|source| ListenError { what, addr, source })
}

/// Serves `router` on `listener` until the returned task is aborted; with `tls`, every
/// connection is a TLS connection whose ALPN result picks HTTP/2 or HTTP/1.1. Any pod of the
/// cluster can connect, so `limits` bound what each client holds: at most
/// `max_connections` at once (further clients wait in the listen backlog), a handshake
/// deadline, and a deadline for request headers that also ends idle kept-alive connections and
/// connections that never send a byte.
pub fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    metrics: Metrics,
    limits: ServeLimits,
) -> JoinHandle<()> {
    let scheme = if tls.is_some() {
        Scheme::Https
    } else {
        Scheme::Http
    };
    let acceptor = tls.map(TlsAcceptor::from);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    tokio::spawn(async move {
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and similar: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if slots.available_permits() == 0 {
                tracing::debug!(
                    max_connections = limits.max_connections,
                    "connection limit reached; new clients wait until one closes"
                );
            }
            let _ = stream.set_nodelay(true);
            metrics
                .connections
                .with_label_values(&[scheme.as_str()])
                .inc();
            let router = router.clone();
            let acceptor = acceptor.clone();
            let metrics = metrics.clone();
            tokio::spawn(async move {
                connection(stream, peer, scheme, router, acceptor, metrics, limits).await;
                drop(slot);
            });
        }
    })
}

/// Serves one connection, plain or TLS, within `limits`.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    scheme: Scheme,
    router: Router,
    acceptor: Option<TlsAcceptor>,
    metrics: Metrics,
    limits: ServeLimits,
) {
    let service = |client: ClientName| {
        TowerToHyperService::new(router.map_request(
            move |mut request: http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request.extensions_mut().insert(scheme);
                request.extensions_mut().insert(client.clone());
                request
            },
        ))
    };
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        // A head still arriving is held in the read buffer: room for a whole one.
        .max_buf_size(MAX_HEADER_BYTES + 4096);
    builder
        .http2()
        .timer(TokioTimer::new())
        // Pings find peers that vanished without closing (an idle HTTP/2 connection has no
        // header deadline).
        .keep_alive_interval(H2_PING_INTERVAL)
        .keep_alive_timeout(H2_PING_TIMEOUT)
        .max_header_list_size(MAX_HEADER_BYTES as u32);
    let result = match acceptor {
        None => {
            // hyper reads a plain connection's first bytes to tell HTTP/2's preface from an
            // HTTP/1.1 request, with no deadline of its own.
            let io = FirstBytes::new(stream, limits.header_timeout);
            builder
                .serve_connection_with_upgrades(TokioIo::new(io), service(ClientName(None)))
                .await
        }
        Some(acceptor) => {
            let handshake =
                tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream)).await;
            let tls = match handshake {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    metrics.tls_handshake_failures.inc();
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    metrics.tls_handshake_failures.inc();
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let client = ClientName(
                tls.get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(crate::tls::common_name)
                    .map(Arc::from),
            );
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            let builder = if h2 {
                builder.http2_only()
            } else {
                builder.http1_only()
            };
            let io = FirstBytes::new(tls, limits.header_timeout);
            builder
                .serve_connection_with_upgrades(TokioIo::new(io), service(client))
                .await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}
