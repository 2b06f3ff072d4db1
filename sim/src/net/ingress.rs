//! The Ingress router: every Ingress's load-balancer address listens on port 80 and routes
//! HTTP/1.1 by Host and path (Exact, Prefix, longest match first) to a Ready endpoint of the
//! backend Service; unmatched requests get the default backend's 404.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::cluster::Cluster;
use crate::controllers::Controller;
use crate::net::ready_endpoints;
use crate::store::StoreEvent;

/// HTTP port of every Ingress address.
pub const INGRESS_PORT: u16 = 80;

/// The router's listeners, one per Ingress address.
pub struct IngressRouter {
    cluster: Arc<Cluster>,
    listeners: BTreeMap<SocketAddr, ((String, String), JoinHandle<()>)>,
    dirty: bool,
    shutdown: tokio::sync::watch::Receiver<bool>,
    counter: Arc<AtomicUsize>,
}

impl IngressRouter {
    /// A router for this cluster.
    pub fn new(cluster: Arc<Cluster>, shutdown: tokio::sync::watch::Receiver<bool>) -> Self {
        IngressRouter {
            cluster,
            listeners: BTreeMap::new(),
            dirty: true,
            shutdown,
            counter: Arc::new(AtomicUsize::new(0)),
        }
    }
}

fn path_matches(kind: &str, rule: &str, path: &str) -> bool {
    match kind {
        "Exact" => rule == path,
        _ => {
            let rule = rule.trim_end_matches('/');
            rule.is_empty() || path == rule || path.starts_with(&format!("{rule}/"))
        }
    }
}

fn host_matches(rule: &str, host: &str) -> bool {
    rule.is_empty()
        || rule == host
        || rule
            .strip_prefix("*.")
            .is_some_and(|suffix| host.split_once('.').is_some_and(|(_, rest)| rest == suffix))
}

/// The backend (Service name, port name or number as text) for a request, if any.
pub fn route(ingress: &Value, host: &str, path: &str) -> Option<(String, Value)> {
    let mut best: Option<(usize, Value)> = None;
    for rule in ingress
        .pointer("/spec/rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let rhost = rule.get("host").and_then(Value::as_str).unwrap_or("");
        if !host_matches(rhost, host) {
            continue;
        }
        for p in rule
            .pointer("/http/paths")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let rpath = p.get("path").and_then(Value::as_str).unwrap_or("/");
            let kind = p
                .get("pathType")
                .and_then(Value::as_str)
                .unwrap_or("Prefix");
            if path_matches(kind, rpath, path)
                && best.as_ref().is_none_or(|(len, _)| rpath.len() > *len)
            {
                best = Some((
                    rpath.len(),
                    p.get("backend").cloned().unwrap_or(Value::Null),
                ));
            }
        }
    }
    let backend = best
        .map(|(_, b)| b)
        .or_else(|| ingress.pointer("/spec/defaultBackend").cloned())?;
    let svc = backend.pointer("/service/name")?.as_str()?.to_string();
    let port = backend
        .pointer("/service/port")
        .cloned()
        .unwrap_or(Value::Null);
    Some((svc, port))
}

fn service_port_name(c: &Cluster, ns: &str, svc: &str, port: &Value) -> Option<String> {
    let s = c.store.get("core/services", ns, svc)?;
    let ports = s.pointer("/spec/ports").and_then(Value::as_array)?.clone();
    let found = if let Some(n) = port.get("number").and_then(Value::as_i64) {
        ports
            .iter()
            .find(|p| p.get("port").and_then(Value::as_i64) == Some(n))
    } else if let Some(name) = port.get("name").and_then(Value::as_str) {
        ports
            .iter()
            .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
    } else {
        ports.first()
    }?;
    Some(
        found
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
    )
}

async fn not_found(mut client: TcpStream) {
    let body = "default backend - 404";
    let resp = format!(
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(resp.as_bytes()).await;
}

async fn handle(
    c: Arc<Cluster>,
    ns: String,
    name: String,
    mut client: TcpStream,
    v6: bool,
    counter: Arc<AtomicUsize>,
) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > 16 * 1024 {
            return;
        }
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let path = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("/")
        .split('?')
        .next()
        .unwrap_or("/")
        .to_string();
    let host = lines
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("host")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    let host = host
        .rsplit_once(':')
        .map_or(host.as_str(), |(h, _)| h)
        .to_ascii_lowercase();
    let Some(ing) = c.store.get("networking.k8s.io/ingresses", &ns, &name) else {
        return not_found(client).await;
    };
    let Some((svc, port)) = route(&ing, &host, &path) else {
        return not_found(client).await;
    };
    let Some(port_name) = service_port_name(&c, &ns, &svc, &port) else {
        return not_found(client).await;
    };
    // As an ingress controller does: the backend in the family the request came in on, or in
    // the other one when the Service has only that.
    let mut eps = ready_endpoints(&c, &ns, &svc, &port_name, v6);
    if eps.is_empty() {
        eps = ready_endpoints(&c, &ns, &svc, &port_name, !v6);
    }
    if eps.is_empty() {
        let body = "no endpoints";
        let resp = format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = client.write_all(resp.as_bytes()).await;
        return;
    }
    let ep = eps[counter.fetch_add(1, Ordering::Relaxed) % eps.len()];
    let Ok(mut upstream) = TcpStream::connect(ep).await else {
        return;
    };
    if upstream.write_all(&head).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

impl Controller for IngressRouter {
    fn handle(&mut self, _c: &Cluster, e: &StoreEvent) {
        if &*e.storage == "networking.k8s.io/ingresses" {
            self.dirty = true;
        }
    }

    fn resync(&mut self, _c: &Cluster) {
        self.dirty = true;
    }

    fn flush(&mut self, c: &Cluster) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        let mut want: BTreeMap<SocketAddr, (String, String)> = BTreeMap::new();
        let (ings, _) = c.store.list("networking.k8s.io/ingresses", None);
        for i in ings {
            let ns = i
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let name = i
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            for lb in i
                .pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(ip) = lb
                    .get("ip")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse::<IpAddr>().ok())
                {
                    want.insert(
                        SocketAddr::new(ip, INGRESS_PORT),
                        (ns.clone(), name.clone()),
                    );
                }
            }
        }
        let stale: Vec<SocketAddr> = self
            .listeners
            .iter()
            .filter(|(a, (k, _))| want.get(a) != Some(k))
            .map(|(a, _)| *a)
            .collect();
        for a in stale {
            if let Some((_, h)) = self.listeners.remove(&a) {
                h.abort();
            }
        }
        for (addr, key) in want {
            if self.listeners.contains_key(&addr) {
                continue;
            }
            let std_listener = match crate::net::ipv6::tcp_listener(addr) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(%addr, error = %e, "ingress router cannot listen");
                    continue;
                }
            };
            let Ok(listener) = TcpListener::from_std(std_listener) else {
                continue;
            };
            let (cluster, counter) = (self.cluster.clone(), self.counter.clone());
            let (ns, name) = key.clone();
            let mut shutdown = self.shutdown.clone();
            let handle_task = tokio::spawn(async move {
                loop {
                    tokio::select! {
                        accepted = listener.accept() => {
                            if let Ok((stream, _)) = accepted {
                                tokio::spawn(handle(cluster.clone(), ns.clone(), name.clone(), stream, addr.is_ipv6(), counter.clone()));
                            }
                        }
                        _ = shutdown.wait_for(|s| *s) => return,
                    }
                }
            });
            self.listeners.insert(addr, (key, handle_task));
        }
    }
}

impl Drop for IngressRouter {
    fn drop(&mut self) {
        for (_, (_, h)) in std::mem::take(&mut self.listeners) {
            h.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn routes_by_host_and_longest_path() {
        let ing = json!({"spec": {
        "defaultBackend": {"service": {"name": "default", "port": {"number": 80}}},
        "rules": [
            {"host": "a.example", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "root", "port": {"number": 80}}}},
                {"path": "/api", "pathType": "Prefix", "backend": {"service": {"name": "api", "port": {"name": "http"}}}},
                {"path": "/exact", "pathType": "Exact", "backend": {"service": {"name": "exact", "port": {"number": 80}}}}
            ]}},
            {"host": "*.wild.example", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "wild", "port": {"number": 80}}}}
            ]}}
        ]}});
        let svc = |h: &str, p: &str| route(&ing, h, p).map(|(s, _)| s);
        assert_eq!(svc("a.example", "/api/v1").as_deref(), Some("api"));
        assert_eq!(svc("a.example", "/apix").as_deref(), Some("root"));
        assert_eq!(svc("a.example", "/exact/x").as_deref(), Some("root"));
        assert_eq!(svc("a.example", "/exact").as_deref(), Some("exact"));
        assert_eq!(svc("x.wild.example", "/").as_deref(), Some("wild"));
        assert_eq!(svc("other", "/").as_deref(), Some("default"));
    }
}
