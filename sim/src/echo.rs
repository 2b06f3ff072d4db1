//! `kube-sim echo`: a tiny HTTP server standing in for an agent process in tests of the
//! process runner and the traffic path. It answers every request with who it is and what it got.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::Request;
use axum::response::Json;
use serde_json::{Value, json};

async fn reply(req: Request) -> Json<Value> {
    let host = req
        .headers()
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string();
    Json(json!({
        "pod": std::env::var("POD_NAME").unwrap_or_default(),
        "namespace": std::env::var("POD_NAMESPACE").unwrap_or_default(),
        "node": std::env::var("NODE_NAME").unwrap_or_default(),
        "podIP": std::env::var("POD_IP").unwrap_or_default(),
        "host": host,
        "path": req.uri().path(),
    }))
}

/// Serves the echo endpoint on every address until the process ends.
pub async fn serve(addrs: &[SocketAddr]) -> std::io::Result<()> {
    let mut servers = tokio::task::JoinSet::new();
    for addr in addrs {
        let listener = tokio::net::TcpListener::from_std(crate::net::ipv6::tcp_listener(*addr)?)?;
        // The line the process runner's per-pod log (and pods/log) shows.
        println!("echo listening on {addr}");
        servers.spawn(async move { axum::serve(listener, Router::new().fallback(reply)).await });
    }
    match servers.join_next().await {
        Some(Ok(result)) => result,
        Some(Err(e)) => Err(std::io::Error::other(e)),
        None => Ok(()),
    }
}
