//! The accept loop: TLS (rustls), HTTP/1.1 and HTTP/2 (hyper), the connection's client
//! certificates handed to every request, graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::auth::PeerCertificates;

/// Serves `app` on `listener` over TLS until `shutdown` turns true.
pub async fn serve_tls(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    app: Router,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move { connection(acceptor, stream, peer, app).await });
    }
}

async fn connection(
    acceptor: TlsAcceptor,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
) {
    let _ = stream.set_nodelay(true);
    let tls = match acceptor.accept(stream).await {
        Ok(tls) => tls,
        Err(e) => {
            tracing::debug!(peer = %peer, error = %e, "TLS handshake failed");
            return;
        }
    };
    let certs: Vec<_> = tls
        .get_ref()
        .1
        .peer_certificates()
        .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
        .unwrap_or_default();
    let certs = PeerCertificates(Arc::new(certs));
    let service =
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(certs.clone());
            let app = app.clone();
            async move { app.oneshot(request.map(axum::body::Body::new)).await }
        });
    if let Err(e) = auto::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(tls), service)
        .await
    {
        tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
    }
}
