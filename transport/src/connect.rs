//! Opening an HTTP/1.1 client connection, plain or over TLS: the one way every kdoctor client
//! reaches another process (the harvester an agent's report API, a replica its peers, the
//! exporter its receiver), with Nagle off and the connection driven by its own task.

use hyper::body::Body;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio_rustls::TlsConnector;

/// The step at which a connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// No TCP connection (refused, unreachable, no such host).
    #[error("connect: {0}")]
    Tcp(std::io::Error),
    /// The TLS handshake failed (e.g. the server refused the client certificate).
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    /// The HTTP/1.1 handshake failed.
    #[error("HTTP: {0}")]
    Http(hyper::Error),
}

impl ConnectError {
    /// The failed step as a metric label: `connect`, `tls` or `http`.
    pub fn step(&self) -> &'static str {
        match self {
            ConnectError::Tcp(_) => "connect",
            ConnectError::Tls(_) => "tls",
            ConnectError::Http(_) => "http",
        }
    }
}

/// Connects to `addr`, over TLS to the server `name` when `tls` is given, and returns the
/// sender of an HTTP/1.1 connection whose I/O runs on a spawned task until either side closes.
pub async fn http1<B>(
    addr: impl ToSocketAddrs,
    tls: Option<(&TlsConnector, ServerName<'static>)>,
) -> Result<SendRequest<B>, ConnectError>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = TcpStream::connect(addr).await.map_err(ConnectError::Tcp)?;
    // Requests are small and answered at once: Nagle would hold a request's last segment.
    let _ = tcp.set_nodelay(true);
    match tls {
        Some((connector, name)) => {
            let stream = connector
                .connect(name, tcp)
                .await
                .map_err(ConnectError::Tls)?;
            drive(TokioIo::new(stream)).await
        }
        None => drive(TokioIo::new(tcp)).await,
    }
}

async fn drive<B, S>(io: S) -> Result<SendRequest<B>, ConnectError>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(ConnectError::Http)?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "client connection ended");
        }
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_failed_step_is_named() {
        // A port nothing listens on: the TCP step fails.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let e = http1::<http_body_util::Empty<bytes::Bytes>>(addr, None)
            .await
            .expect_err("nothing listens");
        assert_eq!(e.step(), "connect");
        // A server that closes at once: the TLS step fails.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                drop(tcp);
            }
        });
        let config = crate::tls::client_config(crate::tls::ServerTrust::Any, None, &[])
            .expect("client config");
        let connector = TlsConnector::from(std::sync::Arc::new(config));
        let name = ServerName::IpAddress(addr.ip().into());
        let e = http1::<http_body_util::Empty<bytes::Bytes>>(addr, Some((&connector, name)))
            .await
            .expect_err("closed before the handshake");
        assert_eq!(e.step(), "tls");
    }
}
