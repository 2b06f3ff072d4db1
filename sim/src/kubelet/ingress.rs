//! The test cluster's ingress controller: one address per IP family (in the node network),
//! port 80, written to every Ingress's status; HTTP/1.1 requests are routed by host and path
//! (Exact and Prefix paths, the longest first; `*.` host wildcards; the default backend) to
//! the backend Service's ClusterIP, which
//! kube-proxy forwards to a Ready endpoint, as ingress-nginx in "service upstream" mode does.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The port every Ingress is served on.
pub const PORT: u16 = 80;
/// Bytes of a request head the router reads before giving up.
const MAX_HEAD: usize = 16 * 1024;
/// Connections served at once per address.
const MAX_CONNECTIONS: usize = 4096;

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

/// The backend address of a Service port (by number or name) in the family of `v6`, or the
/// other family when the Service has only that one.
pub fn backend(svc: &Service, port: &Value, v6: bool) -> Option<SocketAddr> {
    let spec = svc.spec.as_ref()?;
    let ports = spec.ports.clone().unwrap_or_default();
    let p = if let Some(n) = port.get("number").and_then(Value::as_i64) {
        ports.iter().find(|p| i64::from(p.port) == n)
    } else if let Some(name) = port.get("name").and_then(Value::as_str) {
        ports.iter().find(|p| p.name.as_deref() == Some(name))
    } else {
        ports.first()
    }?;
    let ips: Vec<IpAddr> = spec
        .cluster_ips
        .clone()
        .unwrap_or_default()
        .iter()
        .filter_map(|i| i.parse().ok())
        .collect();
    let ip = ips
        .iter()
        .find(|i| i.is_ipv6() == v6)
        .or_else(|| ips.first())?;
    Some(SocketAddr::new(*ip, u16::try_from(p.port).ok()?))
}

async fn reply(mut client: TcpStream, code: &str, body: &str) {
    let resp = format!(
        "HTTP/1.1 {code}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(resp.as_bytes()).await;
}

/// (path, host) of a request head.
fn target(head: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(head);
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
    let host = match host.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h.to_string(),
        _ => host,
    };
    (path, host.trim_matches(['[', ']']).to_ascii_lowercase())
}

async fn handle(
    ingresses: Store<Ingress>,
    services: Store<Service>,
    mut client: TcpStream,
    v6: bool,
) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_HEAD {
            return reply(client, "431 Request Header Fields Too Large", "").await;
        }
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let (path, host) = target(&head);
    // Ingresses in a stable order; the first whose rules (or default backend) take the request
    // serves it.
    let mut all = ingresses.state();
    all.sort_by_key(|i| (i.metadata.namespace.clone(), i.metadata.name.clone()));
    let best = all.iter().find_map(|ing| {
        let v = serde_json::to_value(ing.as_ref()).ok()?;
        let (svc, port) = route(&v, &host, &path)?;
        Some((
            ing.metadata.namespace.clone().unwrap_or_default(),
            svc,
            port,
        ))
    });
    let Some((ns, svc, port)) = best else {
        return reply(client, "404 Not Found", "default backend - 404").await;
    };
    let Some(svc) = services.get(&ObjectRef::new(&svc).within(&ns)) else {
        return reply(client, "503 Service Unavailable", "no such service").await;
    };
    let Some(to) = backend(&svc, &port, v6) else {
        return reply(client, "503 Service Unavailable", "no such port").await;
    };
    let Ok(Ok(mut upstream)) =
        tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(to)).await
    else {
        return reply(client, "502 Bad Gateway", "").await;
    };
    if upstream.write_all(&head).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// Serves the ingress addresses and keeps every Ingress's status pointing at them.
pub async fn run(
    client: Client,
    ingresses: Store<Ingress>,
    services: Store<Service>,
    ips: Vec<IpAddr>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    for ip in &ips {
        let listener = TcpListener::bind(SocketAddr::new(*ip, PORT)).await?;
        let (ingresses, services, slots) = (ingresses.clone(), services.clone(), slots.clone());
        let v6 = ip.is_ipv6();
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let Ok(permit) = slots.clone().acquire_owned().await else { return };
                        let (i, s) = (ingresses.clone(), services.clone());
                        tokio::spawn(async move {
                            let _permit = permit;
                            handle(i, s, stream, v6).await;
                        });
                    }
                    _ = super::stopped(&mut stop) => return,
                }
            }
        });
    }
    let status = json!({"status": {"loadBalancer": {"ingress":
        ips.iter().map(|ip| json!({"ip": ip.to_string()})).collect::<Vec<_>>()}}});
    let stream = watcher::watcher(
        Api::<Ingress>::all(client.clone()),
        watcher::Config::default(),
    );
    futures::pin_mut!(stream);
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = super::stopped(&mut shutdown) => return Ok(()),
        };
        let ing = match event {
            Some(Ok(Event::Apply(i) | Event::InitApply(i))) => i,
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "watching Ingresses (retrying)");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            None => return Ok(()),
        };
        let current = serde_json::to_value(ing.status.as_ref()).unwrap_or(Value::Null);
        if current.pointer("/loadBalancer") == status.pointer("/status/loadBalancer") {
            continue;
        }
        let ns = ing.metadata.namespace.clone().unwrap_or_default();
        let name = ing.metadata.name.clone().unwrap_or_default();
        if let Err(e) = Api::<Ingress>::namespaced(client.clone(), &ns)
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            tracing::warn!(ingress = %format!("{ns}/{name}"), error = %e, "writing the Ingress address");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_name_their_path_and_host() {
        assert_eq!(
            target(b"GET /kdoctoragent?x=1 HTTP/1.1\r\nHost: 198.18.0.3:80\r\n\r\n"),
            ("/kdoctoragent".to_string(), "198.18.0.3".to_string())
        );
        assert_eq!(
            target(b"GET / HTTP/1.1\r\nhost: [fd6b:6474::3]\r\n\r\n"),
            ("/".to_string(), "fd6b:6474::3".to_string())
        );
    }

    #[test]
    fn backends_are_the_service_address_of_the_family() {
        let svc: Service = serde_json::from_value(json!({"spec": {
            "clusterIPs": ["198.18.32.5", "fd6b:6474:0:20::5"],
            "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}}))
        .expect("svc");
        assert_eq!(
            backend(&svc, &json!({"name": "http"}), false),
            Some("198.18.32.5:80".parse().expect("addr"))
        );
        assert_eq!(
            backend(&svc, &json!({"number": 443}), true),
            Some("[fd6b:6474:0:20::5]:443".parse().expect("addr"))
        );
        assert_eq!(backend(&svc, &json!({"number": 8080}), true), None);
    }

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
