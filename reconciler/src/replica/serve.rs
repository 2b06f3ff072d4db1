//! The endpoint where a replica serves the others: Raft's messages and the calls around them
//! (kdoctor_store::raft::Rpc), each a POST of bytes answered with bytes. Every request must come
//! with a certificate of the install's CA named [`REPLICA_NAME`]: the same CA signs the
//! harvester's and agents' certificates, and only a replica may take part.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use kdoctor_store::raft::{MAX_MESSAGE, Replica, Rpc};
use kdoctor_transport::accept::{accept_loop, handshake, tls_http_builder};
use kdoctor_transport::first_bytes::FirstBytes;
use kdoctor_transport::limits::ServeLimits;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::{REPLICA_NAME, Replication};

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
    Ok(accept(listener, acceptor, router, ServeLimits::default()))
}

/// Serves `router` to controller replicas on `listener` within `limits` (any pod can connect
/// and shake hands before its certificate is judged).
fn accept(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: Router,
    limits: ServeLimits,
) -> impl std::future::Future<Output = ()> + use<> {
    accept_loop(listener, limits, "replication", move |tcp, peer| {
        let acceptor = acceptor.clone();
        let router = router.clone();
        async move {
            let tls = match handshake(&acceptor, tcp, &limits).await {
                Ok(tls) => tls,
                Err(why) => {
                    tracing::debug!(%peer, "replication: {why}");
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
            let builder = tls_http_builder(&limits, &tls);
            let io = FirstBytes::new(tls, limits.header_timeout);
            if let Err(e) = builder
                .serve_connection(TokioIo::new(io), TowerToHyperService::new(router))
                .await
            {
                tracing::debug!(%peer, error = %e, "replication connection ended");
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use kdoctor_transport::pki::Ca;
    use kdoctor_transport::tls::{ServerTrust, client_config, parse_identity, parse_roots};
    use rustls::pki_types::ServerName;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpStream;

    use super::*;

    const LIMITS: ServeLimits = ServeLimits {
        handshake_timeout: Duration::from_millis(400),
        header_timeout: Duration::from_millis(400),
        max_connections: 2,
    };

    /// How long until the endpoint closes `stream`, or 5 s.
    async fn closed_after(mut stream: impl AsyncReadExt + Unpin) -> Duration {
        let started = Instant::now();
        let mut buf = [0u8; 1024];
        loop {
            match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
                Ok(Ok(_)) => continue,
                Err(_) => return Duration::from_secs(5),
            }
        }
    }

    #[tokio::test]
    async fn silent_clients_are_dropped_and_cannot_hold_every_slot() {
        let ca = Ca::generate("replication-test").expect("CA");
        let serving = ca.serving(&["127.0.0.1".into()]).expect("serving");
        let replica = ca.client(REPLICA_NAME, &[]).expect("replica certificate");
        let roots = parse_roots(ca.pem.cert.as_bytes(), "test CA").expect("roots");
        let config = kdoctor_transport::tls::server_config(
            parse_identity(serving.cert.as_bytes(), serving.key.as_bytes(), "serving")
                .expect("identity"),
            Some(roots.clone()),
        )
        .expect("server config");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let endpoint = tokio::spawn(accept(
            listener,
            TlsAcceptor::from(Arc::new(config)),
            Router::new(),
            LIMITS,
        ));

        // Every slot held by a client that never starts its handshake: a replica's connection
        // waits for one, and the handshake deadline frees it.
        let held = hold_every_slot(addr).await;
        let started = Instant::now();
        let client = client_config(
            ServerTrust::Roots(roots),
            Some(
                parse_identity(replica.cert.as_bytes(), replica.key.as_bytes(), "replica")
                    .expect("identity"),
            ),
            &[b"http/1.1"],
        )
        .expect("client config");
        let tcp = TcpStream::connect(addr).await.expect("connects");
        let tls = tokio_rustls::TlsConnector::from(Arc::new(client))
            .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
            .await
            .expect("a replica's handshake, once a slot is free");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(250),
            "a slot was free after {waited:?} while every one was held"
        );
        for stream in held {
            let took = closed_after(stream).await;
            assert!(took < Duration::from_secs(5), "a silent client lived on");
        }
        // A replica that shook hands and sends nothing is closed at the header deadline.
        let took = closed_after(tls).await;
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(5),
            "a silent replica connection lived {took:?}"
        );
        endpoint.abort();
    }

    async fn hold_every_slot(addr: SocketAddr) -> Vec<TcpStream> {
        let mut held = Vec::new();
        for _ in 0..LIMITS.max_connections {
            held.push(TcpStream::connect(addr).await.expect("connects"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        held
    }
}
