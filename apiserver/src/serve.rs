//! The accept loop: TLS (rustls), HTTP/1.1 and HTTP/2 (hyper), the connection's client
//! certificates handed to every request, graceful shutdown. Every client is a stranger until
//! authenticated, so a connection has deadlines for its handshake and its request headers, and
//! the number of connections is capped below the file limit: idle or slow clients cannot take
//! the descriptors that the store, the watches and the health probes need.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use kdoctor_transport::accept::{H2_PING_INTERVAL, H2_PING_TIMEOUT, accept_loop, handshake};
use kdoctor_transport::first_bytes::FirstBytes;
use kdoctor_transport::runtime_threads::RuntimeThreads;

use crate::auth::PeerCertificates;
use crate::parse_errors::StatusForParseErrors;

pub use kdoctor_transport::limits::{
    MAX_HEADER_BYTES, MAX_HEADERS, ServeLimits, default_max_connections,
};

/// Sealed TLS records a connection holds before it writes them to the socket (two full
/// records; rustls' default is 64 KiB).
const SEND_AHEAD: usize = 32 * 1024;

/// Serves `app` on `listener` over TLS until `shutdown` turns true: transport's accept loop,
/// each connection served on one of the connection threads.
pub async fn serve_tls(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    app: Router,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    limits: ServeLimits,
    threads: RuntimeThreads,
) {
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let accepting = accept_loop(
        listener,
        limits,
        "kdoctor-apiserver",
        move |stream, peer| {
            let (acceptor, app) = (acceptor.clone(), app.clone());
            let served = threads.spawn(async move {
                // A stream accepted on one runtime is registered with the poller of the thread
                // that serves it.
                let stream = match stream.into_std().and_then(tokio::net::TcpStream::from_std) {
                    Ok(stream) => stream,
                    Err(e) => {
                        tracing::debug!(peer = %peer, error = %e, "cannot move the connection");
                        return;
                    }
                };
                connection(acceptor, stream, peer, app, limits).await;
            });
            async move {
                let _ = served.await;
            }
        },
    );
    tokio::select! {
        _ = accepting => {}
        _ = shutdown.wait_for(|stopped| *stopped) => {}
    }
}

async fn connection(
    acceptor: TlsAcceptor,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: ServeLimits,
) {
    let mut tls = match handshake(&acceptor, stream, &limits).await {
        Ok(tls) => tls,
        Err(why) => {
            tracing::debug!(peer = %peer, "{why}");
            return;
        }
    };
    // A body leaves in pieces as it is sealed, so the client decrypts the first while the rest
    // are sealed, as with nginx's 16 KiB ssl_buffer_size (docs/benchmarks.md: 16 KiB cost 22%
    // more CPU per answer).
    tls.get_mut().1.set_buffer_limit(Some(SEND_AHEAD));
    let certs: Vec<_> = tls
        .get_ref()
        .1
        .peer_certificates()
        .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
        .unwrap_or_default();
    let certs = PeerCertificates::new(certs);
    let service =
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(certs.clone());
            let app = app.clone();
            async move { app.oneshot(request.map(axum::body::Body::new)).await }
        });
    // ALPN has chosen the protocol: no sniffing for the HTTP/2 preface (a read with no deadline
    // of its own).
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = FirstBytes::new(tls, limits.header_timeout);
    let served = if h2 {
        // Pings find peers that vanished without closing (an idle HTTP/2 connection has no
        // header deadline).
        http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(H2_PING_INTERVAL)
            .keep_alive_timeout(H2_PING_TIMEOUT)
            .max_header_list_size(MAX_HEADER_BYTES as u32)
            .serve_connection(TokioIo::new(io), service)
            .await
    } else {
        http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_header_size(MAX_HEADER_BYTES)
            // A head still arriving is held in the read buffer: room for a whole one, with
            // Go's 4 KiB of slack.
            .max_buf_size(MAX_HEADER_BYTES + 4096)
            // MAX_HEADERS is hyper's default, left unset: set, even to the same, hyper fills a
            // vector of that many header slots for every request (1% of a small GET's
            // instructions under callgrind).
            // Only HTTP/1.1 has hyper's automatic parse-error answers to replace.
            .serve_connection(TokioIo::new(StatusForParseErrors::new(io)), service)
            .await
    };
    if let Err(e) = served {
        tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
    }
}
