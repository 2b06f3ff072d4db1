//! Serving a router on a listener, plain or over TLS, HTTP/1.1 and HTTP/2 (ALPN for TLS, prior
//! knowledge for plain), with the peer address and scheme attached to every request.

pub mod health;
pub mod socket;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::echo::Scheme;
use crate::metrics::Metrics;

/// A TLS handshake that takes longer than this is abandoned (slow or stuck clients).
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
/// connection is a TLS connection whose ALPN result picks HTTP/2 or HTTP/1.1.
pub fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    metrics: Metrics,
) -> JoinHandle<()> {
    let scheme = if tls.is_some() {
        Scheme::Https
    } else {
        Scheme::Http
    };
    let acceptor = tls.map(TlsAcceptor::from);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and similar: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            metrics
                .connections
                .with_label_values(&[scheme.as_str()])
                .inc();
            let router = router.clone();
            let acceptor = acceptor.clone();
            let metrics = metrics.clone();
            tokio::spawn(async move {
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
                let builder = Builder::new(TokioExecutor::new());
                let result = match acceptor {
                    None => {
                        builder
                            .serve_connection_with_upgrades(
                                TokioIo::new(stream),
                                service(ClientName(None)),
                            )
                            .await
                    }
                    Some(acceptor) => {
                        let handshake =
                            tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                                .await;
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
                        builder
                            .serve_connection_with_upgrades(TokioIo::new(tls), service(client))
                            .await
                    }
                };
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            });
        }
    })
}
