//! Serving a router on a listener, plain or over TLS, HTTP/1.1 and HTTP/2 (ALPN for TLS, prior
//! knowledge for plain), with the peer address and scheme attached to every request.

pub mod health;
pub mod socket;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use kdoctor_transport::accept::{accept_loop, handshake, http_builder, tls_http_builder};
use kdoctor_transport::first_bytes::FirstBytes;
use kdoctor_transport::limits::ServeLimits;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::echo::Scheme;
use crate::metrics::Metrics;

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
/// cluster can connect, so `limits` bound what each client holds
/// (kdoctor_transport::accept): at most `max_connections` at once, a handshake deadline, and
/// a deadline for request headers that also ends idle kept-alive connections and connections
/// that never send a byte.
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
    tokio::spawn(accept_loop(
        listener,
        limits,
        scheme.as_str(),
        move |stream, peer| {
            metrics
                .connections
                .with_label_values(&[scheme.as_str()])
                .inc();
            connection(
                stream,
                peer,
                scheme,
                router.clone(),
                acceptor.clone(),
                metrics.clone(),
                limits,
            )
        },
    ))
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
    let result = match acceptor {
        None => {
            let io = FirstBytes::new(stream, limits.header_timeout);
            http_builder(&limits)
                .serve_connection_with_upgrades(TokioIo::new(io), service(ClientName(None)))
                .await
        }
        Some(acceptor) => {
            let tls = match handshake(&acceptor, stream, &limits).await {
                Ok(tls) => tls,
                Err(why) => {
                    metrics.tls_handshake_failures.inc();
                    tracing::debug!(%peer, "{why}");
                    return;
                }
            };
            let client = ClientName(
                tls.get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(kdoctor_transport::tls::common_name)
                    .map(Arc::from),
            );
            let builder = tls_http_builder(&limits, &tls);
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
