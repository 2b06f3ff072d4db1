//! The kube-proxy stand-in: for every Service TCP port it listens on each ClusterIP, on the
//! NodePort of every node address, and on each LoadBalancer address, and forwards each
//! connection to a Ready endpoint of the same IP family (round-robin).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::cluster::Cluster;
use crate::controllers::Controller;
use crate::net::ready_endpoints;
use crate::stages::funcs::internal_ips;
use crate::store::StoreEvent;

/// Which Service port a listener serves.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    /// Namespace of the Service.
    pub namespace: String,
    /// Service name.
    pub service: String,
    /// The Service port's name ("" when unnamed).
    pub port_name: String,
}

/// The proxy: desired listeners follow Services and nodes.
pub struct Proxy {
    cluster: Arc<Cluster>,
    listeners: BTreeMap<SocketAddr, (Target, JoinHandle<()>)>,
    dirty: bool,
    shutdown: tokio::sync::watch::Receiver<bool>,
    counter: Arc<AtomicUsize>,
    /// Addresses that failed to bind (reported once).
    failed: std::collections::BTreeSet<SocketAddr>,
}

impl Proxy {
    /// A proxy for this cluster.
    pub fn new(cluster: Arc<Cluster>, shutdown: tokio::sync::watch::Receiver<bool>) -> Self {
        Proxy {
            cluster,
            listeners: BTreeMap::new(),
            dirty: true,
            shutdown,
            counter: Arc::new(AtomicUsize::new(0)),
            failed: Default::default(),
        }
    }
}

/// Every (address, target) the Services and nodes call for.
pub fn desired(c: &Cluster) -> BTreeMap<SocketAddr, Target> {
    let mut out = BTreeMap::new();
    let (nodes, _) = c.store.list("core/nodes", None);
    let node_ips: Vec<IpAddr> = nodes
        .iter()
        .flat_map(|n| internal_ips(n))
        .filter_map(|ip| ip.parse().ok())
        .collect();
    let (svcs, _) = c.store.list("core/services", None);
    for s in svcs {
        let ns = s
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let name = s
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        // The DNS stand-in serves its own address; kube-dns has no selector.
        if ns == "kube-system" && name == "kube-dns" {
            continue;
        }
        let cluster_ips: Vec<IpAddr> = s
            .pointer("/spec/clusterIPs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str()?.parse().ok())
            .collect();
        let lbs: Vec<IpAddr> = s
            .pointer("/status/loadBalancer/ingress")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|i| i.get("ip")?.as_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        for p in s
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if p.get("protocol").and_then(Value::as_str).unwrap_or("TCP") != "TCP" {
                continue;
            }
            let target = Target {
                namespace: ns.to_string(),
                service: name.to_string(),
                port_name: p
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            };
            let Some(port) = p
                .get("port")
                .and_then(Value::as_u64)
                .and_then(|x| u16::try_from(x).ok())
            else {
                continue;
            };
            for ip in &cluster_ips {
                out.insert(SocketAddr::new(*ip, port), target.clone());
            }
            for ip in &lbs {
                out.insert(SocketAddr::new(*ip, port), target.clone());
            }
            if let Some(np) = p
                .get("nodePort")
                .and_then(Value::as_u64)
                .and_then(|x| u16::try_from(x).ok())
            {
                for ip in &node_ips {
                    out.insert(SocketAddr::new(*ip, np), target.clone());
                }
            }
        }
    }
    out
}

async fn forward(
    c: Arc<Cluster>,
    target: Target,
    mut client: TcpStream,
    v6: bool,
    counter: Arc<AtomicUsize>,
) {
    let eps = ready_endpoints(
        &c,
        &target.namespace,
        &target.service,
        &target.port_name,
        v6,
    );
    if eps.is_empty() {
        // As kube-proxy: no Ready endpoint, the connection is refused (here: closed at once).
        return;
    }
    let start = counter.fetch_add(1, Ordering::Relaxed);
    for i in 0..eps.len() {
        let ep = eps[(start + i) % eps.len()];
        if let Ok(mut upstream) = TcpStream::connect(ep).await {
            let _ = upstream.set_nodelay(true);
            let _ = client.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            return;
        }
    }
}

impl Controller for Proxy {
    fn handle(&mut self, _c: &Cluster, e: &StoreEvent) {
        if matches!(&*e.storage, "core/services" | "core/nodes") {
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
        let want = desired(c);
        let stale: Vec<SocketAddr> = self
            .listeners
            .iter()
            .filter(|(a, (t, _))| want.get(a) != Some(t))
            .map(|(a, _)| *a)
            .collect();
        for a in stale {
            if let Some((_, h)) = self.listeners.remove(&a) {
                h.abort();
            }
        }
        for (addr, target) in want {
            if self.listeners.contains_key(&addr) {
                continue;
            }
            let std_listener = match crate::net::ipv6::tcp_listener(addr) {
                Ok(l) => l,
                Err(e) => {
                    if self.failed.insert(addr) {
                        tracing::warn!(%addr, error = %e, "service proxy cannot listen");
                    }
                    continue;
                }
            };
            let Ok(listener) = TcpListener::from_std(std_listener) else {
                continue;
            };
            let (cluster, t, counter) =
                (self.cluster.clone(), target.clone(), self.counter.clone());
            let mut shutdown = self.shutdown.clone();
            let handle = tokio::spawn(async move {
                loop {
                    tokio::select! {
                        accepted = listener.accept() => {
                            if let Ok((stream, _)) = accepted {
                                tokio::spawn(forward(cluster.clone(), t.clone(), stream, addr.is_ipv6(), counter.clone()));
                            }
                        }
                        _ = shutdown.wait_for(|s| *s) => return,
                    }
                }
            });
            self.listeners.insert(addr, (target, handle));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for (_, (_, h)) in std::mem::take(&mut self.listeners) {
            h.abort();
        }
    }
}
