//! Live traffic on loopback: the kube-proxy stand-in (ClusterIP, NodePort, LoadBalancer), the
//! Ingress router and the cluster-DNS stand-in. All addresses are 127.x.y.z, so the sim binds
//! them without privileges beyond ports below 1024. IPv4 only.

pub mod dns;
pub mod ingress;
pub mod proxy;

use std::net::SocketAddr;

use serde_json::Value;

use crate::cluster::Cluster;

/// The Ready endpoints (pod address and port) of a Service port, from its Endpoints object.
pub fn ready_endpoints(c: &Cluster, ns: &str, svc: &str, port_name: &str) -> Vec<SocketAddr> {
    let Some(ep) = c.store.get("core/endpoints", ns, svc) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for subset in ep
        .get("subsets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let ports = subset
            .get("ports")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let port = ports
            .iter()
            .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
            .or(ports.first())
            .and_then(|p| p.get("port").and_then(Value::as_u64))
            .and_then(|p| u16::try_from(p).ok());
        let Some(port) = port else {
            continue;
        };
        for a in subset
            .get("addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(ip) = a
                .get("ip")
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok())
            {
                out.push(SocketAddr::new(ip, port));
            }
        }
    }
    out
}
