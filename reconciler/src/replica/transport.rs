//! Raft between replicas over HTTPS with mutual TLS: the caller presents the replica
//! certificate, the callee's certificate must name its pod IP, both of the install's CA.
//! HTTP/1.1 connections are kept per replica and reused, one call at a time each; answers are
//! read up to the largest message a replica accepts.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use kdoctor_store::raft::{BoxFuture, MAX_MESSAGE, Member, Rpc, Transport, TransportError};
use kdoctor_transport::connect::http1;
use kdoctor_transport::tls::{ServerTrust, client_config};
use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

use super::Replication;
use super::peers::Peers;

/// Where a replica's endpoint is, by its pod name (`None`: nowhere yet).
pub type Resolve = Arc<dyn Fn(&str) -> Option<SocketAddr> + Send + Sync>;

/// Idle connections kept per replica.
const IDLE_PER_REPLICA: usize = 4;

type Sender = SendRequest<Full<Bytes>>;

struct Inner {
    connector: TlsConnector,
    resolve: Resolve,
    idle: Mutex<HashMap<SocketAddr, Vec<Sender>>>,
}

/// The transport of one replica.
#[derive(Clone)]
pub struct HttpsTransport {
    inner: Arc<Inner>,
}

impl HttpsTransport {
    /// Calls replicas at their pod IPs (from `peers`) and the port of `replication`.
    pub fn new(
        replication: &Replication,
        peers: Peers,
    ) -> Result<HttpsTransport, kdoctor_transport::tls::TlsError> {
        let port = replication.port;
        HttpsTransport::resolving(
            replication,
            Arc::new(move |pod| peers.address(pod).map(|ip| SocketAddr::new(ip, port))),
        )
    }

    /// Calls replicas where `resolve` says they are.
    pub fn resolving(
        replication: &Replication,
        resolve: Resolve,
    ) -> Result<HttpsTransport, kdoctor_transport::tls::TlsError> {
        let config = client_config(
            ServerTrust::Roots(replication.roots.clone()),
            Some(replication.client.clone()),
            &[b"http/1.1"],
        )?;
        Ok(HttpsTransport {
            inner: Arc::new(Inner {
                connector: TlsConnector::from(Arc::new(config)),
                resolve,
                idle: Mutex::new(HashMap::new()),
            }),
        })
    }
}

impl Inner {
    async fn connect(&self, addr: SocketAddr) -> Result<Sender, String> {
        let name = ServerName::IpAddress(addr.ip().into());
        http1(addr, Some((&self.connector, name)))
            .await
            .map_err(|e| e.to_string())
    }

    fn take_idle(&self, addr: SocketAddr) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let senders = idle.get_mut(&addr)?;
        while let Some(sender) = senders.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn put_idle(&self, addr: SocketAddr, sender: Sender) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let senders = idle.entry(addr).or_default();
        if senders.len() < IDLE_PER_REPLICA {
            senders.push(sender);
        }
    }

    async fn call(&self, to: &Member, rpc: Rpc, body: Vec<u8>) -> Result<Vec<u8>, String> {
        let addr = (self.resolve)(&to.pod).ok_or("its pod has no IP (not running)")?;
        let mut sender = match self.take_idle(addr) {
            Some(sender) => sender,
            None => self.connect(addr).await?,
        };
        sender.ready().await.map_err(|e| format!("HTTP: {e}"))?;
        let request = Request::builder()
            .method(Method::POST)
            .uri(rpc.path())
            .header(http::header::HOST, addr.to_string())
            .header(http::header::CONTENT_TYPE, "application/octet-stream")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("HTTP: {e}"))?;
        let status = response.status();
        let answer = Limited::new(response.into_body(), MAX_MESSAGE)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        self.put_idle(addr, sender);
        if status != StatusCode::OK {
            return Err(format!(
                "answered {status}: {}",
                String::from_utf8_lossy(&answer[..answer.len().min(512)])
            ));
        }
        Ok(answer.to_vec())
    }
}

impl Transport for HttpsTransport {
    fn call(
        &self,
        to: &Member,
        rpc: Rpc,
        body: Vec<u8>,
        timeout: Duration,
    ) -> BoxFuture<Result<Vec<u8>, TransportError>> {
        let inner = self.inner.clone();
        let to = to.clone();
        Box::pin(async move {
            match tokio::time::timeout(timeout, inner.call(&to, rpc, body)).await {
                Ok(Ok(answer)) => Ok(answer),
                Ok(Err(reason)) => Err(TransportError::Unreachable {
                    member: to.pod,
                    reason,
                }),
                Err(_) => Err(TransportError::Timeout {
                    member: to.pod,
                    timeout,
                }),
            }
        })
    }
}
