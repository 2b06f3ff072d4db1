//! The cluster DNS of the test cluster: kube-sim answers `<svc>.<ns>.svc.cluster.local` (the
//! ClusterIPs, or the Ready addresses of a headless Service's EndpointSlices) and
//! `<a-b-c-d>.<ns>.pod.cluster.local` from the real API's objects, on its own address in the
//! node network. The Service `kube-system/kube-dns` (the pods' nameserver) points there through
//! an EndpointSlice kube-sim writes, so kube-proxy routes to it as to CoreDNS.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use serde_json::json;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};

/// The cluster domain.
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// Record type A.
pub const TYPE_A: u16 = 1;
/// Record type AAAA.
pub const TYPE_AAAA: u16 = 28;
const TTL: u32 = 5;

/// Response codes used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rcode {
    /// Found (possibly with no records of the asked type).
    NoError = 0,
    /// Malformed query.
    FormErr = 1,
    /// No such name in the cluster domain.
    NxDomain = 3,
    /// Not the cluster domain.
    Refused = 5,
}

/// The question of a query: (name, type, end offset of the question).
fn parse_question(q: &[u8]) -> Option<(String, u16, usize)> {
    if q.len() < 12 || u16::from_be_bytes([q[4], q[5]]) != 1 {
        return None;
    }
    let mut i = 12;
    let mut labels = Vec::new();
    loop {
        let len = *q.get(i)? as usize;
        i += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return None;
        }
        labels.push(String::from_utf8_lossy(q.get(i..i + len)?).into_owned());
        i += len;
    }
    let qtype = u16::from_be_bytes([*q.get(i)?, *q.get(i + 1)?]);
    Some((labels.join("."), qtype, i + 4))
}

/// Answers a name: its response code and addresses (both families).
pub type Resolver<'a> = dyn Fn(&str) -> (Rcode, Vec<IpAddr>) + Send + Sync + 'a;

/// Builds the response to a query with `resolve` (None for input too short to answer at all).
pub fn answer_with(resolve: &Resolver<'_>, q: &[u8]) -> Option<Vec<u8>> {
    if q.len() < 12 {
        return None;
    }
    let rd = q[2] & 0x01;
    let opcode = q[2] & 0x78;
    let (rcode, qtype, records, qend) = match parse_question(q) {
        Some((name, qtype, end)) if q.len() >= end => {
            let (rcode, ips) = resolve(&name);
            let records: Vec<IpAddr> = ips
                .into_iter()
                .filter(|ip| match ip {
                    IpAddr::V4(_) => qtype == TYPE_A,
                    IpAddr::V6(_) => qtype == TYPE_AAAA,
                })
                .collect();
            (rcode, qtype, records, end)
        }
        _ => (Rcode::FormErr, 0, Vec::new(), 12),
    };
    let _ = qtype;
    let mut r = Vec::with_capacity(qend + records.len() * 16);
    r.extend_from_slice(&q[0..2]);
    r.push(0x80 | opcode | 0x04 | rd);
    r.push(rcode as u8);
    r.extend_from_slice(&(if qend > 12 { 1u16 } else { 0 }).to_be_bytes());
    r.extend_from_slice(&(records.len() as u16).to_be_bytes());
    r.extend_from_slice(&[0, 0, 0, 0]);
    r.extend_from_slice(&q[12..qend]);
    for ip in records {
        let (rtype, data) = match ip {
            IpAddr::V4(v4) => (TYPE_A, v4.octets().to_vec()),
            IpAddr::V6(v6) => (TYPE_AAAA, v6.octets().to_vec()),
        };
        r.extend_from_slice(&[0xC0, 0x0C]);
        r.extend_from_slice(&rtype.to_be_bytes());
        r.extend_from_slice(&1u16.to_be_bytes());
        r.extend_from_slice(&TTL.to_be_bytes());
        r.extend_from_slice(&(data.len() as u16).to_be_bytes());
        r.extend_from_slice(&data);
    }
    Some(r)
}

/// The field manager of what kube-sim writes.
const MANAGER: &str = "kube-sim";

/// Answers a name from the Services and EndpointSlices of the API.
pub fn resolve(
    services: &Store<Service>,
    slices: &Store<EndpointSlice>,
    name: &str,
) -> (Rcode, Vec<IpAddr>) {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let Some(local) = name.strip_suffix(&format!(".{CLUSTER_DOMAIN}")) else {
        return (Rcode::Refused, Vec::new());
    };
    let parts: Vec<&str> = local.split('.').collect();
    match parts.as_slice() {
        [svc, ns, "svc"] => {
            let key = kube::runtime::reflector::ObjectRef::new(svc).within(ns);
            let Some(s) = services.get(&key) else {
                return (Rcode::NxDomain, Vec::new());
            };
            let spec = s.spec.clone().unwrap_or_default();
            match spec.cluster_ip.as_deref() {
                Some("None") | None => {
                    let mut ips: Vec<IpAddr> = slices
                        .state()
                        .iter()
                        .filter(|e| {
                            e.metadata.namespace.as_deref() == Some(*ns)
                                && e.metadata
                                    .labels
                                    .as_ref()
                                    .and_then(|l| l.get("kubernetes.io/service-name"))
                                    .map(String::as_str)
                                    == Some(*svc)
                        })
                        .flat_map(|e| e.endpoints.clone())
                        .filter(|ep| ep.conditions.as_ref().and_then(|c| c.ready) != Some(false))
                        .flat_map(|ep| ep.addresses)
                        .filter_map(|a| a.parse().ok())
                        .collect();
                    ips.sort();
                    ips.dedup();
                    (Rcode::NoError, ips)
                }
                Some(_) => (
                    Rcode::NoError,
                    spec.cluster_ips
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|ip| ip.parse().ok())
                        .collect(),
                ),
            }
        }
        [dashed, _ns, "pod"] => {
            // a-b-c-d, or an IPv6 address with ':' written as '-'.
            let ip: Option<IpAddr> = dashed
                .replace('-', ".")
                .parse::<Ipv4Addr>()
                .map(IpAddr::from)
                .or_else(|_| {
                    dashed
                        .replace('-', ":")
                        .parse::<Ipv6Addr>()
                        .map(IpAddr::from)
                })
                .ok();
            match ip {
                Some(ip) => (Rcode::NoError, vec![ip]),
                None => (Rcode::NxDomain, Vec::new()),
            }
        }
        _ => (Rcode::NxDomain, Vec::new()),
    }
}

/// Writes `kube-system/kube-dns` with the given ClusterIPs and an EndpointSlice per family that
/// points at kube-sim's DNS addresses, as a cluster's DNS add-on would.
pub async fn publish(
    client: &Client,
    service_ips: &[IpAddr],
    server_ips: &[IpAddr],
) -> Result<(), kube::Error> {
    let families: Vec<&str> = service_ips.iter().map(super::address::family).collect();
    let svc = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system",
                     "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
        "spec": {
            "clusterIP": service_ips.first().map(|i| i.to_string()),
            "clusterIPs": service_ips.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
            "ipFamilies": families,
            "ipFamilyPolicy": if service_ips.len() > 1 { "RequireDualStack" } else { "SingleStack" },
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            ],
        },
    });
    let pp = PatchParams::apply(MANAGER).force();
    Api::<Service>::namespaced(client.clone(), "kube-system")
        .patch("kube-dns", &pp, &Patch::Apply(&svc))
        .await?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "kube-system");
    for ip in server_ips {
        let family = super::address::family(ip);
        let name = format!("kube-dns-kube-sim-{}", family.to_ascii_lowercase());
        let slice = json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "kube-system",
                "labels": {"kubernetes.io/service-name": "kube-dns",
                           "endpointslice.kubernetes.io/managed-by": "kube-sim.kdoctor.io"}},
            "addressType": family,
            "endpoints": [{"addresses": [ip.to_string()], "conditions": {"ready": true, "serving": true, "terminating": false}}],
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
            ],
        });
        slices.patch(&name, &pp, &Patch::Apply(&slice)).await?;
    }
    Ok(())
}

/// Serves DNS on `addr` (UDP and TCP) with `resolve` until shutdown.
pub async fn serve_with(
    resolve: Arc<Resolver<'static>>,
    addr: SocketAddr,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let udp = UdpSocket::bind(addr).await?;
    let tcp = TcpListener::bind(addr).await?;
    let mut buf = vec![0u8; 4096];
    loop {
        tokio::select! {
            r = udp.recv_from(&mut buf) => {
                if let Ok((n, peer)) = r
                    && let Some(resp) = answer_with(resolve.as_ref(), &buf[..n])
                {
                    let _ = udp.send_to(&resp, peer).await;
                }
            }
            r = tcp.accept() => {
                if let Ok((mut stream, _)) = r {
                    let resolve = resolve.clone();
                    tokio::spawn(async move {
                        loop {
                            let mut len = [0u8; 2];
                            if stream.read_exact(&mut len).await.is_err() {
                                return;
                            }
                            let mut q = vec![0u8; u16::from_be_bytes(len) as usize];
                            if stream.read_exact(&mut q).await.is_err() {
                                return;
                            }
                            let Some(resp) = answer_with(resolve.as_ref(), &q) else { return };
                            let mut out = (resp.len() as u16).to_be_bytes().to_vec();
                            out.extend_from_slice(&resp);
                            if stream.write_all(&out).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            }
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => return Ok(()),
        }
    }
}

/// A DNS query for `name` (type A), for tests and tools.
pub fn query(id: u16, name: &str) -> Vec<u8> {
    query_type(id, name, TYPE_A)
}

/// A DNS query for `name` of record type `qtype`.
pub fn query_type(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    q
}

/// Reads a response: (rcode, A and AAAA records).
pub fn parse_response(r: &[u8]) -> Option<(u8, Vec<IpAddr>)> {
    if r.len() < 12 {
        return None;
    }
    let rcode = r[3] & 0x0f;
    let ancount = u16::from_be_bytes([r[6], r[7]]) as usize;
    let (_, _, mut i) = parse_question(r)?;
    let mut ips = Vec::new();
    for _ in 0..ancount {
        // Our answers use a 2-byte name pointer.
        let rtype = u16::from_be_bytes([*r.get(i + 2)?, *r.get(i + 3)?]);
        let rdlen = u16::from_be_bytes([*r.get(i + 10)?, *r.get(i + 11)?]) as usize;
        let data = r.get(i + 12..i + 12 + rdlen)?;
        if let (TYPE_A, Ok(v4)) = (rtype, <[u8; 4]>::try_from(data)) {
            ips.push(Ipv4Addr::from(v4).into());
        } else if let (TYPE_AAAA, Ok(v6)) = (rtype, <[u8; 16]>::try_from(data)) {
            ips.push(Ipv6Addr::from(v6).into());
        }
        i += 12 + rdlen;
    }
    Some((rcode, ips))
}

/// Serves DNS on each of `server_ips` until shutdown.
pub async fn serve(
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    server_ips: Vec<IpAddr>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let resolver: Arc<Resolver<'static>> =
        Arc::new(move |name: &str| resolve(&services, &slices, name));
    let servers = server_ips
        .into_iter()
        .map(|ip| serve_with(resolver.clone(), SocketAddr::new(ip, 53), shutdown.clone()));
    for r in futures::future::join_all(servers).await {
        r?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(name: &str) -> (Rcode, Vec<IpAddr>) {
        match name {
            "kube-dns.kube-system.svc.cluster.local" => (
                Rcode::NoError,
                vec![
                    "198.18.32.10".parse().expect("ip"),
                    "fd6b:6474:0:20::a".parse().expect("ip"),
                ],
            ),
            n if n.ends_with(".cluster.local") => (Rcode::NxDomain, Vec::new()),
            _ => (Rcode::Refused, Vec::new()),
        }
    }

    #[test]
    fn answers_carry_the_asked_family_only() {
        let r = answer_with(
            &fixed,
            &query_type(1, "kube-dns.kube-system.svc.cluster.local", TYPE_AAAA),
        )
        .expect("answer");
        assert_eq!(
            parse_response(&r),
            Some((0, vec!["fd6b:6474:0:20::a".parse().expect("ip")]))
        );
        let r = answer_with(&fixed, &query(2, "kube-dns.kube-system.svc.cluster.local"))
            .expect("answer");
        assert_eq!(
            parse_response(&r),
            Some((0, vec!["198.18.32.10".parse().expect("ip")]))
        );
        let r = answer_with(&fixed, &query(3, "nope.default.svc.cluster.local")).expect("answer");
        assert_eq!(parse_response(&r), Some((3, vec![])));
    }

    #[test]
    fn malformed_queries_never_panic() {
        for len in 0..40 {
            let q = query(7, "a.b.svc.cluster.local");
            let _ = answer_with(&fixed, &q[..len.min(q.len())]);
        }
        let mut bad = query(7, "x.cluster.local");
        bad[12] = 200;
        let r = answer_with(&fixed, &bad).expect("answer");
        assert_eq!(r[3] & 0x0f, Rcode::FormErr as u8);
        let r = answer_with(&fixed, &query(9, "example.com")).expect("answer");
        assert_eq!(parse_response(&r), Some((5, vec![])));
    }
}
