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

/// Serves the echo endpoint on `addr` until the process ends.
pub async fn serve(addr: SocketAddr) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    // The line the process runner's per-pod log (and pods/log) shows.
    println!("echo listening on {addr}");
    axum::serve(listener, Router::new().fallback(reply)).await
}
