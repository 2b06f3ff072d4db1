//! Live traffic on loopback: the kube-proxy stand-in (ClusterIP, NodePort, LoadBalancer), the
//! Ingress router and the cluster-DNS stand-in. IPv4 addresses are 127.x.y.z, so the sim binds
//! them without privileges beyond ports below 1024; IPv6 ones are their twins (see [`ipv6`]).

pub mod dns;
pub mod ingress;
pub mod ipv6;
pub mod proxy;

use std::net::SocketAddr;

use serde_json::Value;

use crate::cluster::Cluster;

/// The Ready endpoints (pod address and port) of a Service port in one address family, from
/// the Service's EndpointSlice of that family, as kube-proxy reads them; for a Service without
/// a selector, from the Endpoints object its owner wrote (which Kubernetes mirrors to slices).
pub fn ready_endpoints(
    c: &Cluster,
    ns: &str,
    svc: &str,
    port_name: &str,
    v6: bool,
) -> Vec<SocketAddr> {
    let family = if v6 { "IPv6" } else { "IPv4" };
    let Some(slice) = c.store.get(
        "discovery.k8s.io/endpointslices",
        ns,
        &crate::controllers::endpoints::slice_name(svc, family),
    ) else {
        return endpoints_object(c, ns, svc, port_name)
            .into_iter()
            .filter(|a| a.is_ipv6() == v6)
            .collect();
    };
    let ports = slice
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let Some(port) = port_of(&ports, port_name) else {
        return Vec::new();
    };
    slice
        .get("endpoints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|e| e.pointer("/conditions/ready").and_then(Value::as_bool) == Some(true))
        .filter_map(|e| e.pointer("/addresses/0")?.as_str()?.parse().ok())
        .map(|ip| SocketAddr::new(ip, port))
        .collect()
}

/// The ready addresses of an Endpoints object.
fn endpoints_object(c: &Cluster, ns: &str, svc: &str, port_name: &str) -> Vec<SocketAddr> {
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
        let Some(port) = port_of(&ports, port_name) else {
            continue;
        };
        out.extend(
            subset
                .get("addresses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|a| a.get("ip")?.as_str()?.parse().ok())
                .map(|ip| SocketAddr::new(ip, port)),
        );
    }
    out
}

/// The port named `name` of an Endpoints subset or EndpointSlice (else the first one).
fn port_of(ports: &[Value], name: &str) -> Option<u16> {
    ports
        .iter()
        .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == name)
        .or(ports.first())
        .and_then(|p| p.get("port").and_then(Value::as_u64))
        .and_then(|p| u16::try_from(p).ok())
}
