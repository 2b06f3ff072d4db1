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

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};

/// The cluster domain.
pub const CLUSTER_DOMAIN: &str = "cluster.local";
const TTL: u32 = 5;

/// Answers a name: its response code (NoError, possibly with no records of the asked type;
/// NXDomain outside the cluster's names; Refused outside the cluster domain) and addresses
/// (both families).
pub type Resolver<'a> = dyn Fn(&str) -> (ResponseCode, Vec<IpAddr>) + Send + Sync + 'a;

/// Builds the response to a query with `resolve` (hickory's wire format, as the agent's DNS
/// server and prober): `None` for bytes too short to carry an ID, or that are not a query;
/// FormErr for a query that does not parse.
pub fn answer_with(resolve: &Resolver<'_>, q: &[u8]) -> Option<Vec<u8>> {
    let id = u16::from_be_bytes([*q.first()?, *q.get(1)?]);
    if q.len() < 12 {
        return None;
    }
    let Ok(request) = Message::from_vec(q) else {
        return Message::error_msg(id, OpCode::Query, ResponseCode::FormErr)
            .to_vec()
            .ok();
    };
    if request.metadata.message_type != MessageType::Query {
        return None;
    }
    let op_code = request.metadata.op_code;
    let Some(question) = request.queries.first().cloned() else {
        return Message::error_msg(id, op_code, ResponseCode::FormErr)
            .to_vec()
            .ok();
    };
    let name = question.name().clone();
    let (rcode, ips) = resolve(&name.to_ascii());
    let mut message = Message::response(id, op_code);
    message.metadata.recursion_desired = request.metadata.recursion_desired;
    message.metadata.authoritative = true;
    message.metadata.response_code = rcode;
    let asked = question.query_type();
    message.add_query(question);
    for ip in ips {
        let data = match ip {
            IpAddr::V4(v4) if asked == RecordType::A => RData::A(A(v4)),
            IpAddr::V6(v6) if asked == RecordType::AAAA => RData::AAAA(AAAA(v6)),
            _ => continue,
        };
        message.add_answer(Record::from_rdata(name.clone(), TTL, data));
    }
    message.to_vec().ok()
}

/// The field manager of what kube-sim writes.
const MANAGER: &str = "kube-sim";

/// Answers a name from the Services and EndpointSlices of the API.
pub fn resolve(
    services: &Store<Service>,
    slices: &Store<EndpointSlice>,
    name: &str,
) -> (ResponseCode, Vec<IpAddr>) {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let Some(local) = name.strip_suffix(&format!(".{CLUSTER_DOMAIN}")) else {
        return (ResponseCode::Refused, Vec::new());
    };
    let parts: Vec<&str> = local.split('.').collect();
    match parts.as_slice() {
        [svc, ns, "svc"] => {
            let key = kube::runtime::reflector::ObjectRef::new(svc).within(ns);
            let Some(s) = services.get(&key) else {
                return (ResponseCode::NXDomain, Vec::new());
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
                    (ResponseCode::NoError, ips)
                }
                Some(_) => (
                    ResponseCode::NoError,
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
                Some(ip) => (ResponseCode::NoError, vec![ip]),
                None => (ResponseCode::NXDomain, Vec::new()),
            }
        }
        _ => (ResponseCode::NXDomain, Vec::new()),
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
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;

    use super::*;

    fn fixed(name: &str) -> (ResponseCode, Vec<IpAddr>) {
        match name.trim_end_matches('.') {
            "kube-dns.kube-system.svc.cluster.local" => (
                ResponseCode::NoError,
                vec![
                    "198.18.32.10".parse().expect("ip"),
                    "fd6b:6474:0:20::a".parse().expect("ip"),
                ],
            ),
            n if n.ends_with(".cluster.local") => (ResponseCode::NXDomain, Vec::new()),
            _ => (ResponseCode::Refused, Vec::new()),
        }
    }

    fn query(id: u16, name: &str, record_type: RecordType) -> Vec<u8> {
        let mut m = Message::query();
        m.metadata.id = id;
        m.add_query(Query::query(
            Name::from_ascii(name).expect("name"),
            record_type,
        ));
        m.to_vec().expect("encodes")
    }

    /// The response code and the addresses answered.
    fn read(answer: &[u8]) -> (ResponseCode, Vec<IpAddr>) {
        let m = Message::from_vec(answer).expect("a DNS message");
        let ips = m
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(IpAddr::V4(a.0)),
                RData::AAAA(a) => Some(IpAddr::V6(a.0)),
                _ => None,
            })
            .collect();
        (m.metadata.response_code, ips)
    }

    #[test]
    fn answers_carry_the_asked_family_only() {
        let name = "kube-dns.kube-system.svc.cluster.local.";
        let r = answer_with(&fixed, &query(1, name, RecordType::AAAA)).expect("answer");
        assert_eq!(
            read(&r),
            (
                ResponseCode::NoError,
                vec!["fd6b:6474:0:20::a".parse().expect("ip")]
            )
        );
        let r = answer_with(&fixed, &query(2, name, RecordType::A)).expect("answer");
        assert_eq!(
            read(&r),
            (
                ResponseCode::NoError,
                vec!["198.18.32.10".parse().expect("ip")]
            )
        );
        assert_eq!(Message::from_vec(&r).expect("message").metadata.id, 2);
        let r = answer_with(
            &fixed,
            &query(3, "nope.default.svc.cluster.local.", RecordType::A),
        )
        .expect("answer");
        assert_eq!(read(&r), (ResponseCode::NXDomain, vec![]));
    }

    #[test]
    fn malformed_queries_never_panic() {
        let q = query(7, "a.b.svc.cluster.local.", RecordType::A);
        for len in 0..q.len() {
            let _ = answer_with(&fixed, &q[..len]);
        }
        let mut bad = query(7, "x.cluster.local.", RecordType::A);
        bad[12] = 200;
        let r = answer_with(&fixed, &bad).expect("answer");
        assert_eq!(read(&r).0, ResponseCode::FormErr);
        let r = answer_with(&fixed, &query(9, "example.com.", RecordType::A)).expect("answer");
        assert_eq!(read(&r), (ResponseCode::Refused, vec![]));
    }
}
