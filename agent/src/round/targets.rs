//! Targets of a round, named as upstream names them (`AgentPodV4IP_<pod>_<ip>`,
//! `typeA_<server:port>_<domain>`, …). Pure: addresses come from the caller.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use kdoctor_api::report::protocol::{Protocol, deny_entry_name};
use kdoctor_api::task::apphttphealthy::parse_header;
use kdoctor_api::task::{
    AppHttpHealthySpec, Isolation, IsolationProtocol, NetHttpRequest, NetReachTarget,
    NetdnsRequest, NetdnsSpec,
};

use crate::probe::dns::{DnsRequestSpec, RecordType};
use crate::probe::http::{HttpRequestSpec, Method, parse_url};
use crate::report::APP_HTTP_HEALTHY_TARGET_NAME;

/// The per-request timeout when the spec has none (`netHttpDefaultRequestPerRequestTimeoutInMS`).
pub const DEFAULT_TIMEOUT_MS: i64 = 500;

/// Rate, length and per-request timeout of every target of a round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Load {
    /// Requests per second per target.
    pub qps: f64,
    /// How long each target is probed.
    pub duration: Duration,
    /// Per-request timeout.
    pub timeout: Duration,
}

fn load(duration_s: i64, qps: i64, timeout_ms: Option<i64>) -> Load {
    Load {
        qps: qps.max(1) as f64,
        duration: Duration::from_secs(duration_s.max(1) as u64),
        timeout: Duration::from_millis(timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS).max(1) as u64),
    }
}

/// The load of a NetReach or AppHttpHealthy round.
pub fn http_load(r: &NetHttpRequest) -> Load {
    load(r.duration_in_second, r.qps, r.per_request_timeout_in_ms)
}

/// The load of a Netdns round.
pub fn dns_load(r: &NetdnsRequest) -> Load {
    load(r.duration_in_second, r.qps, r.per_request_timeout_in_ms)
}

/// A target that cannot be built from the spec; names the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct TargetError {
    /// The field path.
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

/// An HTTP target of a round.
#[derive(Clone, Debug)]
pub struct HttpTarget {
    /// Upstream's target name.
    pub name: String,
    /// What to send.
    pub spec: HttpRequestSpec,
}

/// A target probed at a socket address: a TCP connect (NetReach with `spec.target.tcp`) or a
/// UDP echo port (`spec.target.udp`).
#[derive(Clone, Debug, PartialEq)]
pub struct SocketTarget {
    /// The protocol's prefix and the name of the HTTP target at the same address.
    pub name: String,
    /// Where to connect or send.
    pub addr: SocketAddr,
}

/// A peer an isolation check tries to reach (NetReach `spec.isolation`): it must not be
/// reachable.
#[derive(Clone, Debug, PartialEq)]
pub struct IsolationTarget {
    /// `<TCP_|UDP_|ICMP_>Deny_<check>_<peer>_<ip>`.
    pub name: String,
    /// The `spec.isolation` entry.
    pub check: String,
    /// How it is tried.
    pub protocol: IsolationProtocol,
    /// Where (port 0 for ICMP).
    pub addr: SocketAddr,
}

/// The peers of one isolation check (name, address) as targets, in the task's IP families.
/// A check left with no peer is a problem that fails the round: a check of nothing must not
/// pass for an isolation that holds.
pub fn isolation_targets(
    target: &NetReachTarget,
    isolation: &Isolation,
    peers: &[(String, IpAddr)],
) -> Result<Vec<IsolationTarget>, String> {
    let protocol = Protocol::from(isolation.protocol);
    let port = isolation
        .port
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(0);
    let out: Vec<IsolationTarget> = peers
        .iter()
        .filter(|(_, ip)| (ip.is_ipv4() && target.ipv4) || (ip.is_ipv6() && target.ipv6))
        .map(|(peer, ip)| IsolationTarget {
            name: deny_entry_name(protocol, &isolation.name, peer, *ip),
            check: isolation.name.clone(),
            protocol: isolation.protocol,
            addr: SocketAddr::new(*ip, port),
        })
        .collect();
    if out.is_empty() {
        let families = match (target.ipv4, target.ipv6) {
            (true, true) => "IPv4 or IPv6",
            (false, true) => "IPv6",
            _ => "IPv4",
        };
        return Err(format!(
            "isolation {}: no peer with an {families} address in namespace {}: nothing to check",
            isolation.name, isolation.namespace
        ));
    }
    Ok(out)
}

/// A DNS target of a round.
#[derive(Clone, Debug)]
pub struct DnsTarget {
    /// Upstream's target name.
    pub name: String,
    /// What to ask.
    pub spec: DnsRequestSpec,
}

fn dns_target(server: SocketAddr, request: &NetdnsRequest) -> DnsTarget {
    let record_type = if server.is_ipv4() {
        RecordType::A
    } else {
        RecordType::AAAA
    };
    DnsTarget {
        name: format!("type{record_type}_{server}_{}", request.domain),
        spec: DnsRequestSpec {
            server,
            domain: request.domain.clone(),
            record_type,
            protocol: request.protocol,
            tls_server_name: None,
        },
    }
}

/// The DNS targets of a Netdns task: `targetUser`'s server (A for IPv4, AAAA for IPv6), or the
/// cluster DNS addresses the caller found (`cluster_dns`), by `testIPv4`/`testIPv6`, port 53.
pub fn netdns_targets(
    spec: &NetdnsSpec,
    cluster_dns: &[IpAddr],
) -> Result<Vec<DnsTarget>, TargetError> {
    let default_request = NetdnsRequest::default();
    let request = spec.request.as_ref().unwrap_or(&default_request);
    let target = spec.target.clone().unwrap_or_default();
    if let Some(user) = &target.target_user {
        let server = user.server.as_deref().unwrap_or_default();
        let ip: IpAddr = server
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| TargetError {
                field: "spec.target.targetUser.server".to_string(),
                problem: format!("{server:?} is not an IP address"),
            })?;
        let port = u16::try_from(user.port).map_err(|_| TargetError {
            field: "spec.target.targetUser.port".to_string(),
            problem: format!("{} is not a port", user.port),
        })?;
        return Ok(vec![dns_target(SocketAddr::new(ip, port), request)]);
    }
    let dns = target.target_dns.unwrap_or_default();
    Ok(cluster_dns
        .iter()
        .filter(|ip| (ip.is_ipv4() && dns.test_ipv4) || (ip.is_ipv6() && dns.test_ipv6))
        .map(|ip| dns_target(SocketAddr::new(*ip, 53), request))
        .collect())
}

/// The AppHttpHealthy target; `body` is the ConfigMap data the caller read, JSON-encoded.
pub fn app_http_target(
    spec: &AppHttpHealthySpec,
    body: Option<Bytes>,
) -> Result<HttpTarget, TargetError> {
    let mut headers = Vec::new();
    for (i, entry) in spec.target.header.iter().flatten().enumerate() {
        let header = parse_header(entry).map_err(|e| TargetError {
            field: format!("spec.target.header[{i}]"),
            problem: e.to_string(),
        })?;
        headers.push(header);
    }
    let method: Method = spec
        .target
        .method
        .as_str()
        .parse()
        .map_err(|_| TargetError {
            field: "spec.target.method".to_string(),
            problem: "not an HTTP method".to_string(),
        })?;
    Ok(HttpTarget {
        name: APP_HTTP_HEALTHY_TARGET_NAME.to_string(),
        spec: HttpRequestSpec {
            url: spec.target.host.clone(),
            method,
            headers,
            body: body.unwrap_or_default(),
            http2: spec.target.http2,
            keep_alive: true,
            expected_status: spec
                .expect
                .as_ref()
                .and_then(|e| e.status_code)
                .and_then(|c| u16::try_from(c).ok()),
        },
    })
}

/// Addresses of a NetReach carrier as seen from one agent, found by the caller.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Carrier {
    /// Every carrier pod: name, pod IPs, multus secondary IPs.
    pub pods: Vec<CarrierPod>,
    /// Port of the echo target (`ENV_AGENT_APP_HTTP_PORT`).
    pub http_port: u16,
    /// Port of the UDP echo target (`ENV_AGENT_APP_UDP_ECHO_PORT`).
    pub udp_port: u16,
    /// The Service's HTTP port (`http`): ClusterIP, this node's address with the NodePort,
    /// LoadBalancer address; IPv4 then IPv6.
    pub http_service: [ServiceAddresses; 2],
    /// The Service's UDP echo port (`udp-echo`), the same way: absent from a Service of an
    /// install that declares none.
    pub udp_service: [ServiceAddresses; 2],
    /// The Ingress URL (`http://<LB IP><path>`), IPv4 only.
    pub ingress: Option<String>,
}

/// One carrier pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CarrierPod {
    /// Pod name.
    pub name: String,
    /// Pod IPs.
    pub ips: Vec<IpAddr>,
    /// Multus secondary IPs (interfaces other than eth0).
    pub multus: Vec<IpAddr>,
}

/// A Service's addresses for one of its ports, in one family.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServiceAddresses {
    /// ClusterIP and port.
    pub cluster_ip: Option<SocketAddr>,
    /// This node's address and the NodePort.
    pub node_port: Option<SocketAddr>,
    /// First load-balancer ingress IP and the port.
    pub load_balancer: Option<SocketAddr>,
}

/// How the name of every agent pod IP target begins (`AgentPodV4IP_…`, `AgentPodV6IP_…`).
const POD_TARGET_PREFIX: &str = "AgentPodV";

fn get(name: String, url: String) -> HttpTarget {
    HttpTarget {
        name,
        spec: HttpRequestSpec {
            url,
            method: Method::GET,
            headers: Vec::new(),
            body: Bytes::new(),
            http2: false,
            keep_alive: true,
            expected_status: None,
        },
    }
}

/// NetReach targets with upstream's names, and the reasons for targets that could not be
/// built (upstream's messages, e.g. `failed to get cluster IPv4 IP`).
pub fn netreach_targets(
    target: &NetReachTarget,
    carrier: &Carrier,
) -> (Vec<HttpTarget>, Vec<String>) {
    let mut targets = Vec::new();
    let mut missing = Vec::new();
    if target.endpoint {
        for pod in &carrier.pods {
            let extra = if target.multus_interface {
                pod.multus.as_slice()
            } else {
                &[]
            };
            for ip in pod.ips.iter().chain(extra) {
                let (family, wanted) = if ip.is_ipv4() {
                    ("4", target.ipv4)
                } else {
                    ("6", target.ipv6)
                };
                if wanted {
                    let addr = SocketAddr::new(*ip, carrier.http_port);
                    targets.push(get(
                        format!("{POD_TARGET_PREFIX}{family}IP_{}_{ip}", pod.name),
                        format!("http://{addr}"),
                    ));
                }
            }
        }
    }
    for (name, addr) in service_entries(target, &carrier.http_service) {
        match addr {
            Ok(addr) => targets.push(get(name, format!("http://{addr}"))),
            Err(problem) => missing.push(problem),
        }
    }
    if target.ingress && target.ipv4 {
        match &carrier.ingress {
            Some(url) => targets.push(get(format!("AgentIngress_v4_{url}"), url.clone())),
            None => missing.push("failed to get agent v4 ingress address".to_string()),
        }
    }
    (targets, missing)
}

/// The TCP connect targets of a NetReach round: with `spec.target.tcp`, one at the address and
/// port of each HTTP target (an Ingress URL's address, port 80 unless it names one); none
/// without it.
pub fn tcp_targets(target: &NetReachTarget, http: &[HttpTarget]) -> Vec<SocketTarget> {
    if !target.tcp {
        return Vec::new();
    }
    http.iter()
        .filter_map(|t| {
            Some(SocketTarget {
                name: Protocol::Tcp.entry_name(&t.name),
                addr: socket_addr(&t.spec.url)?,
            })
        })
        .collect()
}

/// The UDP echo targets of a NetReach round: with `spec.target.udp`, every agent pod IP the
/// HTTP targets probe at the echo port, and each Service address the task asks for
/// (`clusterIP`, `nodePort`, `loadBalancer`) at the Service's `udp-echo` port, where kube-proxy
/// carries each flow to one agent; none without it. A Service without that port (an install
/// older than it) gets no UDP entry: its HTTP entries still report it.
pub fn udp_targets(
    target: &NetReachTarget,
    http: &[HttpTarget],
    carrier: &Carrier,
) -> Vec<SocketTarget> {
    if !target.udp {
        return Vec::new();
    }
    let mut out = pod_targets(Protocol::Udp, http, carrier.udp_port);
    out.extend(
        service_entries(target, &carrier.udp_service)
            .into_iter()
            .filter_map(|(name, addr)| {
                Some(SocketTarget {
                    name: Protocol::Udp.entry_name(&name),
                    addr: addr.ok()?,
                })
            }),
    );
    out
}

/// The Service addresses a NetReach task asks for (`clusterIP`, `nodePort`, `loadBalancer`),
/// in its families and upstream's order, each under upstream's target name, or the message
/// upstream gives when the Service does not offer it.
fn service_entries(
    target: &NetReachTarget,
    services: &[ServiceAddresses; 2],
) -> Vec<(String, Result<SocketAddr, String>)> {
    let mut out = Vec::new();
    for (service, family, wanted) in [
        (&services[0], "4", target.ipv4),
        (&services[1], "6", target.ipv6),
    ] {
        if !wanted {
            continue;
        }
        if target.cluster_ip {
            out.push(match service.cluster_ip {
                Some(addr) => (format!("AgentClusterV{family}IP_{addr}"), Ok(addr)),
                None => (
                    String::new(),
                    Err(format!("failed to get cluster IPv{family} IP")),
                ),
            });
        }
        if target.node_port {
            out.push(match service.node_port {
                Some(addr) => (
                    format!("AgentNodePortV{family}IP_{}_{}", addr.ip(), addr.port()),
                    Ok(addr),
                ),
                None => (
                    String::new(),
                    Err(format!("failed to get nodePort IPv{family} address")),
                ),
            });
        }
        if target.load_balancer {
            out.push(match service.load_balancer {
                Some(addr) => (format!("AgentLoadbalancerV{family}IP_{addr}"), Ok(addr)),
                None => (
                    String::new(),
                    Err(format!("failed to get loadbalancer IPv{family} address")),
                ),
            });
        }
    }
    out
}

/// The ICMP echo targets of a NetReach round: with `spec.target.icmp`, every agent pod IP the
/// HTTP targets probe (port 0: ICMP has none); none without it.
pub fn icmp_targets(target: &NetReachTarget, http: &[HttpTarget]) -> Vec<SocketTarget> {
    match target.icmp {
        true => pod_targets(Protocol::Icmp, http, 0),
        false => Vec::new(),
    }
}

/// The pod IPs of the HTTP targets, at `port`, named for `protocol`.
fn pod_targets(protocol: Protocol, http: &[HttpTarget], port: u16) -> Vec<SocketTarget> {
    http.iter()
        .filter(|t| t.name.starts_with(POD_TARGET_PREFIX))
        .filter_map(|t| {
            Some(SocketTarget {
                name: protocol.entry_name(&t.name),
                addr: SocketAddr::new(socket_addr(&t.spec.url)?.ip(), port),
            })
        })
        .collect()
}

/// The address and port of a URL whose host is an IP address (NetReach's are: discovery puts
/// addresses in them, never names).
fn socket_addr(url: &str) -> Option<SocketAddr> {
    let uri = parse_url(url).ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let default_port = if uri.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    let ip: IpAddr = host.parse().ok()?;
    Some(SocketAddr::new(ip, uri.port_u16().unwrap_or(default_port)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kdoctor_api::task::{NetDnsTarget, NetDnsTargetDns, NetDnsTargetUser};

    #[test]
    fn isolation_peers_are_named_per_address_of_the_task_s_families_and_none_is_a_failure() {
        let isolation = Isolation {
            name: "db".into(),
            namespace: "shop".into(),
            pod_selector: Some(Default::default()),
            service: None,
            protocol: IsolationProtocol::Udp,
            port: Some(5712),
        };
        let peers = [
            ("db-0".to_string(), "10.0.0.5".parse().expect("ip")),
            ("db-0".to_string(), "fd00::5".parse().expect("ip")),
        ];
        let v4_only = NetReachTarget::default();
        let found = isolation_targets(&v4_only, &isolation, &peers).expect("a peer");
        assert_eq!(
            found,
            [IsolationTarget {
                name: "UDP_Deny_db_db-0_10.0.0.5".into(),
                check: "db".into(),
                protocol: IsolationProtocol::Udp,
                addr: "10.0.0.5:5712".parse().expect("addr"),
            }]
        );
        let both = NetReachTarget {
            ipv6: true,
            ..NetReachTarget::default()
        };
        assert_eq!(
            isolation_targets(&both, &isolation, &peers)
                .expect("peers")
                .len(),
            2
        );
        let icmp = Isolation {
            protocol: IsolationProtocol::Icmp,
            port: None,
            ..isolation.clone()
        };
        let ping = isolation_targets(&v4_only, &icmp, &peers).expect("a peer");
        assert_eq!(ping[0].addr.port(), 0);
        assert_eq!(ping[0].name, "ICMP_Deny_db_db-0_10.0.0.5");
        let only_v6 = &peers[1..];
        let none = isolation_targets(&v4_only, &isolation, only_v6).expect_err("nothing left");
        assert_eq!(
            none,
            "isolation db: no peer with an IPv4 address in namespace shop: nothing to check"
        );
    }

    #[test]
    fn netdns_user_and_cluster_targets_as_upstream() {
        let mut spec = NetdnsSpec {
            target: Some(NetDnsTarget {
                target_user: Some(NetDnsTargetUser {
                    server: Some("10.0.0.10".into()),
                    port: 5353,
                }),
                ..Default::default()
            }),
            request: Some(NetdnsRequest {
                per_request_timeout_in_ms: Some(200),
                domain: "a.test".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let t = netdns_targets(&spec, &[]).unwrap();
        assert_eq!(t[0].name, "typeA_10.0.0.10:5353_a.test");
        assert_eq!(
            dns_load(spec.request.as_ref().unwrap()).timeout,
            Duration::from_millis(200)
        );
        spec.target
            .as_mut()
            .unwrap()
            .target_user
            .as_mut()
            .unwrap()
            .server = Some("fd00::a".into());
        let t = netdns_targets(&spec, &[]).unwrap();
        assert_eq!(t[0].name, "typeAAAA_[fd00::a]:5353_a.test");
        assert_eq!(t[0].spec.record_type, RecordType::AAAA);
        spec.target
            .as_mut()
            .unwrap()
            .target_user
            .as_mut()
            .unwrap()
            .server = Some("dns.example".into());
        let err = netdns_targets(&spec, &[]).unwrap_err();
        assert_eq!(err.field, "spec.target.targetUser.server");
        spec.target = Some(NetDnsTarget {
            target_dns: Some(NetDnsTargetDns {
                test_ipv6: true,
                ..Default::default()
            }),
            ..Default::default()
        });
        let cluster: Vec<IpAddr> = vec!["10.96.0.10".parse().unwrap(), "fd00::10".parse().unwrap()];
        let names: Vec<String> = netdns_targets(&spec, &cluster)
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(
            names,
            vec![
                "typeA_10.96.0.10:53_a.test",
                "typeAAAA_[fd00::10]:53_a.test"
            ]
        );
        spec.target = None;
        assert_eq!(
            netdns_targets(&spec, &cluster).unwrap().len(),
            1,
            "default: IPv4 only"
        );
    }

    #[test]
    fn netreach_names_and_missing_addresses_as_upstream() {
        let target = NetReachTarget {
            ipv4: true,
            ipv6: true,
            endpoint: true,
            multus_interface: true,
            cluster_ip: true,
            node_port: true,
            load_balancer: true,
            ingress: true,
            tcp: false,
            udp: false,
            icmp: false,
            path_mtu: false,
            enable_latency_metric: false,
            max_peers: None,
        };
        let carrier = Carrier {
            pods: vec![CarrierPod {
                name: "kdoctor-agent-x".into(),
                ips: vec!["10.1.0.5".parse().unwrap(), "fd00::5".parse().unwrap()],
                multus: vec!["192.168.1.5".parse().unwrap()],
            }],
            http_port: 80,
            udp_port: 7,
            http_service: [
                ServiceAddresses {
                    cluster_ip: Some("10.96.1.1:80".parse().unwrap()),
                    node_port: Some("172.18.0.2:31000".parse().unwrap()),
                    load_balancer: None,
                },
                ServiceAddresses {
                    node_port: Some("[fc00::2]:31000".parse().unwrap()),
                    ..ServiceAddresses::default()
                },
            ],
            udp_service: [
                ServiceAddresses {
                    cluster_ip: Some("10.96.1.1:5712".parse().unwrap()),
                    node_port: Some("172.18.0.2:31712".parse().unwrap()),
                    load_balancer: None,
                },
                ServiceAddresses {
                    node_port: Some("[fc00::2]:31712".parse().unwrap()),
                    ..ServiceAddresses::default()
                },
            ],
            ingress: Some("http://172.18.0.50/kdoctoragent".into()),
        };
        let (targets, missing) = netreach_targets(&target, &carrier);
        let names: Vec<(&str, &str)> = targets
            .iter()
            .map(|t| (t.name.as_str(), t.spec.url.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                (
                    "AgentPodV4IP_kdoctor-agent-x_10.1.0.5",
                    "http://10.1.0.5:80"
                ),
                (
                    "AgentPodV6IP_kdoctor-agent-x_fd00::5",
                    "http://[fd00::5]:80"
                ),
                (
                    "AgentPodV4IP_kdoctor-agent-x_192.168.1.5",
                    "http://192.168.1.5:80"
                ),
                ("AgentClusterV4IP_10.96.1.1:80", "http://10.96.1.1:80"),
                (
                    "AgentNodePortV4IP_172.18.0.2_31000",
                    "http://172.18.0.2:31000"
                ),
                ("AgentNodePortV6IP_fc00::2_31000", "http://[fc00::2]:31000"),
                (
                    "AgentIngress_v4_http://172.18.0.50/kdoctoragent",
                    "http://172.18.0.50/kdoctoragent"
                ),
            ]
        );
        assert!(tcp_targets(&target, &targets).is_empty(), "tcp is off");
        let tcp: Vec<(String, SocketAddr)> = tcp_targets(
            &NetReachTarget {
                tcp: true,
                ..target.clone()
            },
            &targets,
        )
        .into_iter()
        .map(|t| (t.name, t.addr))
        .collect();
        assert_eq!(tcp.len(), targets.len(), "one TCP target per HTTP target");
        assert_eq!(
            tcp[1],
            (
                "TCP_AgentPodV6IP_kdoctor-agent-x_fd00::5".to_string(),
                "[fd00::5]:80".parse().unwrap()
            )
        );
        assert_eq!(
            tcp[6],
            (
                "TCP_AgentIngress_v4_http://172.18.0.50/kdoctoragent".to_string(),
                "172.18.0.50:80".parse().unwrap()
            )
        );
        assert!(
            udp_targets(&target, &targets, &carrier).is_empty(),
            "udp is off"
        );
        let udp: Vec<(String, SocketAddr)> = udp_targets(
            &NetReachTarget {
                udp: true,
                ..target.clone()
            },
            &targets,
            &carrier,
        )
        .into_iter()
        .map(|t| (t.name, t.addr))
        .collect();
        assert_eq!(
            udp,
            vec![
                (
                    "UDP_AgentPodV4IP_kdoctor-agent-x_10.1.0.5".to_string(),
                    "10.1.0.5:7".parse().unwrap()
                ),
                (
                    "UDP_AgentPodV6IP_kdoctor-agent-x_fd00::5".to_string(),
                    "[fd00::5]:7".parse().unwrap()
                ),
                (
                    "UDP_AgentPodV4IP_kdoctor-agent-x_192.168.1.5".to_string(),
                    "192.168.1.5:7".parse().unwrap()
                ),
                (
                    "UDP_AgentClusterV4IP_10.96.1.1:5712".to_string(),
                    "10.96.1.1:5712".parse().unwrap()
                ),
                (
                    "UDP_AgentNodePortV4IP_172.18.0.2_31712".to_string(),
                    "172.18.0.2:31712".parse().unwrap()
                ),
                (
                    "UDP_AgentNodePortV6IP_fc00::2_31712".to_string(),
                    "[fc00::2]:31712".parse().unwrap()
                ),
            ],
            "one UDP target per agent pod IP, then the Services' UDP echo ports the task asks for"
        );
        let icmp: Vec<(String, SocketAddr)> = icmp_targets(
            &NetReachTarget {
                icmp: true,
                ..target.clone()
            },
            &targets,
        )
        .into_iter()
        .map(|t| (t.name, t.addr))
        .collect();
        assert_eq!(icmp.len(), 3, "one ICMP target per agent pod IP");
        assert_eq!(
            icmp[1],
            (
                "ICMP_AgentPodV6IP_kdoctor-agent-x_fd00::5".to_string(),
                "[fd00::5]:0".parse().unwrap()
            )
        );
        assert!(icmp_targets(&target, &targets).is_empty(), "icmp is off");
        assert_eq!(
            missing,
            vec![
                "failed to get loadbalancer IPv4 address",
                "failed to get cluster IPv6 IP",
                "failed to get loadbalancer IPv6 address",
            ]
        );
    }
}
