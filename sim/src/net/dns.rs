//! The cluster-DNS stand-in: answers `<svc>.<ns>.svc.cluster.local` (the ClusterIPs, or the
//! Ready pod addresses of a headless Service) and `<a-b-c-d>.<ns>.pod.cluster.local` from the
//! Service table, with A and AAAA records, over UDP and TCP on the kube-dns Service address;
//! NXDOMAIN for unknown names in the cluster domain, REFUSED outside it (there is no upstream
//! to forward to).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};

use crate::cluster::Cluster;

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

/// The addresses of a name (both families) and the response code.
pub fn resolve(c: &Cluster, name: &str) -> (Rcode, Vec<IpAddr>) {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let Some(local) = name.strip_suffix(&format!(".{CLUSTER_DOMAIN}")) else {
        return (Rcode::Refused, Vec::new());
    };
    let parts: Vec<&str> = local.split('.').collect();
    match parts.as_slice() {
        [svc, ns, "svc"] => {
            let Some(s) = c.store.get("core/services", ns, svc) else {
                return (Rcode::NxDomain, Vec::new());
            };
            match s.pointer("/spec/clusterIP").and_then(Value::as_str) {
                Some("None") | None => {
                    let mut ips: Vec<IpAddr> = [false, true]
                        .into_iter()
                        .flat_map(|v6| crate::net::ready_endpoints(c, ns, svc, "", v6))
                        .map(|a| a.ip())
                        .collect();
                    ips.sort();
                    ips.dedup();
                    (Rcode::NoError, ips)
                }
                Some(_) => (
                    Rcode::NoError,
                    s.pointer("/spec/clusterIPs")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|ip| ip.as_str()?.parse().ok())
                        .collect(),
                ),
            }
        }
        [dashed, ns, "pod"] => {
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
                Some(ip) if c.store.get("core/namespaces", "", ns).is_some() => {
                    (Rcode::NoError, vec![ip])
                }
                _ => (Rcode::NxDomain, Vec::new()),
            }
        }
        _ => (Rcode::NxDomain, Vec::new()),
    }
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

/// Builds the response to a query from the simulated cluster's tables.
pub fn answer(c: &Cluster, q: &[u8]) -> Option<Vec<u8>> {
    answer_with(&|name| resolve(c, name), q)
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

/// Serves DNS on `addr` (UDP and TCP) from the simulated cluster's tables until shutdown.
pub async fn serve(
    c: Arc<Cluster>,
    addr: SocketAddr,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let resolver: Arc<Resolver<'static>> = Arc::new(move |name: &str| resolve(&c, name));
    serve_with(resolver, addr, shutdown).await
}

/// Serves DNS on `addr` (UDP and TCP) with `resolve` until shutdown.
pub async fn serve_with(
    resolve: Arc<Resolver<'static>>,
    addr: SocketAddr,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let udp = UdpSocket::from_std(crate::net::ipv6::udp_socket(addr)?)?;
    let tcp = TcpListener::from_std(crate::net::ipv6::tcp_listener(addr)?)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_queries_never_panic() {
        let c = Cluster::new(10, 1);
        for len in 0..40 {
            let q = query(7, "a.b.svc.cluster.local");
            let _ = answer(&c, &q[..len.min(q.len())]);
        }
        let mut bad = query(7, "x.cluster.local");
        bad[12] = 200;
        let r = answer(&c, &bad).expect("answer");
        assert_eq!(r[3] & 0x0f, Rcode::FormErr as u8);
        let r = answer(&c, &query(9, "example.com")).expect("answer");
        assert_eq!(parse_response(&r), Some((5, vec![])));
    }
}
