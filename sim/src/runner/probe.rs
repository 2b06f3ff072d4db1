//! The readiness probe of a pod's process, as the kubelet runs it: httpGet (a 2xx or 3xx
//! answer; HTTPS counts a completed TCP connection) or tcpSocket, against the pod's address,
//! named ports resolved from the container's ports. A pod whose container declares one is
//! Ready only once its process passes it.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A readiness check of one container.
#[derive(Debug, Clone, PartialEq)]
pub enum Probe {
    /// GET `path` over HTTP.
    Http {
        /// Where.
        addr: SocketAddr,
        /// Path.
        path: String,
    },
    /// A TCP connection (also HTTPS probes: the sim does not check their answer).
    Tcp(SocketAddr),
}

fn port_of(container: &Value, port: &Value) -> Option<u16> {
    match port {
        Value::Number(n) => n.as_u64().and_then(|p| u16::try_from(p).ok()),
        Value::String(name) => container
            .get("ports")
            .and_then(Value::as_array)?
            .iter()
            .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
            .and_then(|p| p.get("containerPort").and_then(Value::as_u64))
            .and_then(|p| u16::try_from(p).ok()),
        _ => None,
    }
}

/// The readiness probe of the pod's first container, if it declares one.
pub fn readiness(pod: &Value) -> Option<Probe> {
    let container = pod.pointer("/spec/containers/0")?;
    let probe = container.get("readinessProbe")?;
    let ip: std::net::IpAddr = pod.pointer("/status/podIP")?.as_str()?.parse().ok()?;
    if let Some(h) = probe.get("httpGet") {
        let port = port_of(container, h.get("port")?)?;
        let addr = SocketAddr::new(ip, port);
        if h.get("scheme").and_then(Value::as_str) == Some("HTTPS") {
            return Some(Probe::Tcp(addr));
        }
        let path = h
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or("/")
            .to_string();
        return Some(Probe::Http { addr, path });
    }
    let t = probe.get("tcpSocket")?;
    Some(Probe::Tcp(SocketAddr::new(
        ip,
        port_of(container, t.get("port")?)?,
    )))
}

/// Runs the probe once (one second budget).
pub async fn check(p: &Probe) -> bool {
    let run = async {
        match p {
            Probe::Tcp(addr) => TcpStream::connect(addr).await.is_ok(),
            Probe::Http { addr, path } => {
                let Ok(mut s) = TcpStream::connect(addr).await else {
                    return false;
                };
                let req = format!(
                    "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.32\r\nConnection: close\r\n\r\n"
                );
                if s.write_all(req.as_bytes()).await.is_err() {
                    return false;
                }
                let mut head = [0u8; 12];
                if s.read_exact(&mut head).await.is_err() {
                    return false;
                }
                // "HTTP/1.1 200"
                matches!(head.get(9), Some(b'2' | b'3'))
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(1), run)
        .await
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn probes_from_pod_specs() {
        let pod = |probe: Value| {
            json!({"status": {"podIP": "127.20.0.7"}, "spec": {"containers": [{
                "ports": [{"name": "health", "containerPort": 5710}],
                "readinessProbe": probe}]}})
        };
        assert_eq!(
            readiness(&pod(
                json!({"httpGet": {"path": "/healthy/readiness", "port": "health"}})
            )),
            Some(Probe::Http {
                addr: "127.20.0.7:5710".parse().expect("addr"),
                path: "/healthy/readiness".into()
            })
        );
        assert_eq!(
            readiness(&pod(json!({"tcpSocket": {"port": 80}}))),
            Some(Probe::Tcp("127.20.0.7:80".parse().expect("addr")))
        );
        assert_eq!(
            readiness(&pod(json!({"exec": {"command": ["true"]}}))),
            None
        );
    }
}
