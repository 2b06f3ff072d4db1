//! The accept loop of kdoctor's servers that any pod can reach (the agent's echo targets,
//! health, metrics, report API and DNS test server, the controllers' replication endpoint):
//! at most [`ServeLimits::max_connections`] connections at once, further clients waiting in the
//! listen backlog; a failed accept (out of descriptors, mostly) retried after a pause instead
//! of in a tight loop; the TLS handshake under its deadline; HTTP served with the header
//! deadline (which also ends silent and idle kept-alive connections) and HTTP/2 pings.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::limits::{MAX_HEADER_BYTES, ServeLimits};

/// A failed accept is retried after this.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How often an idle HTTP/2 connection is pinged, and how long the answer may take: pings find
/// peers that vanished without closing (an idle HTTP/2 connection has no header deadline).
pub const H2_PING_INTERVAL: Duration = Duration::from_secs(30);
pub const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// Accepts connections on `listener` until the returned future is dropped (or the task that
/// runs it aborted), each served by `serve` in a task of its own; `what` names the listener in
/// logs. A connection's slot is freed when its `serve` ends.
pub async fn accept_loop<F, Fut>(
    listener: TcpListener,
    limits: ServeLimits,
    what: &'static str,
    serve: F,
) where
    F: Fn(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(listener = what, error = %e, "accept failed; retrying in {ACCEPT_BACKOFF:?}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        if slots.available_permits() == 0 {
            tracing::debug!(
                listener = what,
                max_connections = limits.max_connections,
                "connection limit reached; new clients wait until one closes"
            );
        }
        let _ = stream.set_nodelay(true);
        let served = serve(stream, peer);
        tokio::spawn(async move {
            served.await;
            drop(slot);
        });
    }
}

/// The TLS handshake of `stream` within the deadline; `Err` says why there is no connection.
pub async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    limits: &ServeLimits,
) -> Result<TlsStream<TcpStream>, String> {
    match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(e)) => Err(format!("TLS handshake failed: {e}")),
        Err(_) => Err(format!(
            "TLS handshake not done within {:?}",
            limits.handshake_timeout
        )),
    }
}

/// An HTTP/1.1 and HTTP/2 server connection builder within `limits`: the header deadline, a
/// read buffer with room for the largest header allowed, HTTP/2 pings and header list bound.
/// Pair it with [`crate::first_bytes::FirstBytes`] on the connection's IO: hyper reads a
/// connection's first bytes (HTTP/2's preface) with no deadline of its own.
pub fn http_builder(limits: &ServeLimits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEADER_BYTES + 4096);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_PING_INTERVAL)
        .keep_alive_timeout(H2_PING_TIMEOUT)
        .max_header_list_size(MAX_HEADER_BYTES as u32);
    builder
}

/// [`http_builder`] for a TLS connection: the one protocol its ALPN chose (HTTP/2 for `h2`,
/// HTTP/1.1 otherwise), with no sniffing for HTTP/2's preface.
pub fn tls_http_builder(
    limits: &ServeLimits,
    tls: &TlsStream<TcpStream>,
) -> Builder<TokioExecutor> {
    let builder = http_builder(limits);
    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        builder.http2_only()
    } else {
        builder.http1_only()
    }
}
