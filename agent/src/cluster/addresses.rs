//! Addresses of a carrier read off Kubernetes objects (pure): pod and multus IPs, a Service's
//! ClusterIP, NodePort and LoadBalancer for its `http` port, a Node's address, an Ingress URL,
//! the cluster DNS ClusterIPs. Each follows upstream's choice (§9.3, §9.5).

use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::networking::v1::Ingress;

use crate::round::targets::CarrierPod;
pub use crate::round::targets::ServiceAddresses;

/// An IP family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// Whether `ip` is of this family.
    pub fn holds(self, ip: &IpAddr) -> bool {
        match self {
            Family::V4 => ip.is_ipv4(),
            Family::V6 => ip.is_ipv6(),
        }
    }
}

/// Parses an address as Kubernetes writes it (a multus entry may carry a prefix length).
fn ip(text: &str) -> Option<IpAddr> {
    text.split('/').next()?.trim().parse().ok()
}

/// The Service port HTTP targets use.
pub const HTTP_PORT_NAME: &str = "http";
/// The Service port UDP echo targets use (`spec.target.udp`).
pub const UDP_ECHO_PORT_NAME: &str = "udp-echo";

/// The addresses `service` offers in `family` for its port named `port_name`; `node_ip` is
/// this node's address of that family, for the NodePort.
pub fn service_addresses(
    service: &Service,
    family: Family,
    node_ip: Option<IpAddr>,
    port_name: &str,
) -> ServiceAddresses {
    let spec = service.spec.as_ref();
    let port = spec
        .and_then(|s| s.ports.as_ref())
        .and_then(|ports| ports.iter().find(|p| p.name.as_deref() == Some(port_name)));
    let Some(port) = port else {
        return ServiceAddresses::default();
    };
    let service_port = u16::try_from(port.port).ok();
    let cluster_ips = spec
        .and_then(|s| s.cluster_ips.clone())
        .or_else(|| spec.and_then(|s| s.cluster_ip.clone()).map(|ip| vec![ip]))
        .unwrap_or_default();
    let cluster_ip = cluster_ips
        .iter()
        .filter_map(|text| ip(text))
        .find(|a| family.holds(a));
    let node_port = port
        .node_port
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0);
    let load_balancer = service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .and_then(|ingress| ingress.first())
        .and_then(|first| first.ip.as_deref())
        .and_then(ip)
        .filter(|a| family.holds(a));
    let with_port = |ip: Option<IpAddr>, port: Option<u16>| Some(SocketAddr::new(ip?, port?));
    ServiceAddresses {
        cluster_ip: with_port(cluster_ip, service_port),
        node_port: with_port(node_ip.filter(|a| family.holds(a)), node_port),
        load_balancer: with_port(load_balancer, service_port),
    }
}

/// The node's address of `family`: the last one listed, as upstream.
pub fn node_address(node: &Node, family: Family) -> Option<IpAddr> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .filter_map(|a| ip(&a.address))
        .rfind(|a| family.holds(a))
}

/// The URL of an agent Ingress: `http://<load-balancer address><first path>` (https when the
/// Ingress has TLS); `None` until it has a load-balancer address.
pub fn ingress_url(ingress: &Ingress) -> Option<String> {
    let first = ingress
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?;
    let host = match (first.ip.as_deref(), first.hostname.as_deref()) {
        (Some(address), _) => match ip(address)? {
            IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        },
        (None, Some(name)) => name.to_string(),
        (None, None) => return None,
    };
    let spec = ingress.spec.as_ref();
    let path = spec
        .and_then(|s| s.rules.as_ref())
        .and_then(|rules| rules.first())
        .and_then(|rule| rule.http.as_ref())
        .and_then(|http| http.paths.first())
        .and_then(|p| p.path.clone())
        .unwrap_or_default();
    let scheme = if spec
        .and_then(|s| s.tls.as_ref())
        .is_some_and(|t| !t.is_empty())
    {
        "https"
    } else {
        "http"
    };
    Some(format!("{scheme}://{host}{path}"))
}

/// One entry of the multus network-status annotation.
#[derive(serde::Deserialize)]
struct NetworkStatus {
    #[serde(default)]
    interface: Option<String>,
    #[serde(default)]
    ips: Vec<String>,
}

/// Secondary IPs from the multus annotation `key`: every interface but `eth0`. An annotation
/// that is not multus' JSON is an error that names the pod (upstream's
/// `failed to ListDaemonsetPodMultusIPs`).
pub fn multus_ips(pod: &Pod, key: &str) -> Result<Vec<IpAddr>, String> {
    let Some(text) = pod.metadata.annotations.as_ref().and_then(|a| a.get(key)) else {
        return Ok(Vec::new());
    };
    let entries: Vec<NetworkStatus> = serde_json::from_str(text).map_err(|e| {
        format!(
            "failed to ListDaemonsetPodMultusIPs, error=pod {}: annotation {key}: {e}",
            pod.metadata.name.as_deref().unwrap_or_default()
        )
    })?;
    Ok(entries
        .iter()
        .filter(|e| e.interface.as_deref() != Some("eth0"))
        .flat_map(|e| e.ips.iter().filter_map(|text| ip(text)))
        .collect())
}

/// The carrier's pods as targets: every pod with an address that is not being deleted,
/// sorted by name; with `multus_key`, their secondary IPs too. Also the problems met.
pub fn carrier_pods(pods: &[Pod], multus_key: Option<&str>) -> (Vec<CarrierPod>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let status = pod.status.as_ref();
        let mut ips: Vec<IpAddr> = status
            .and_then(|s| s.pod_ips.as_ref())
            .map(|list| list.iter().filter_map(|p| ip(&p.ip)).collect())
            .unwrap_or_default();
        if ips.is_empty()
            && let Some(one) = status.and_then(|s| s.pod_ip.as_deref()).and_then(ip)
        {
            ips.push(one);
        }
        if ips.is_empty() {
            continue;
        }
        let multus = match multus_key.map(|key| multus_ips(pod, key)) {
            Some(Ok(list)) => list,
            Some(Err(problem)) => {
                problems.push(problem);
                Vec::new()
            }
            None => Vec::new(),
        };
        out.push(CarrierPod {
            name: pod.metadata.name.clone().unwrap_or_default(),
            ips,
            multus,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    (out, problems)
}

/// Every ClusterIP of the cluster DNS Services (headless ones have none).
pub fn dns_addresses(services: &[Service]) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = services
        .iter()
        .filter_map(|s| s.spec.as_ref())
        .flat_map(|spec| {
            spec.cluster_ips
                .clone()
                .or_else(|| spec.cluster_ip.clone().map(|ip| vec![ip]))
                .unwrap_or_default()
        })
        .filter_map(|text| ip(&text))
        .collect();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_json<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
        serde_json::from_value(value).expect("fixture")
    }

    #[test]
    fn service_addresses_per_family_for_the_http_port() {
        let svc: Service = from_json(serde_json::json!({
            "metadata": {"name": "kdoctor-agent-ipv4"},
            "spec": {
                "type": "LoadBalancer",
                "clusterIP": "10.96.0.20",
                "clusterIPs": ["10.96.0.20", "fd00::20"],
                "ports": [
                    {"name": "https", "port": 443, "nodePort": 31443},
                    {"name": "http", "port": 80, "nodePort": 31080},
                    {"name": "udp-echo", "port": 5712, "nodePort": 31712, "protocol": "UDP"}
                ]
            },
            "status": {"loadBalancer": {"ingress": [{"ip": "172.18.0.50"}, {"ip": "172.18.0.51"}]}}
        }));
        let v4 = service_addresses(
            &svc,
            Family::V4,
            Some("172.18.0.2".parse().unwrap()),
            HTTP_PORT_NAME,
        );
        assert_eq!(v4.cluster_ip, Some("10.96.0.20:80".parse().unwrap()));
        assert_eq!(v4.node_port, Some("172.18.0.2:31080".parse().unwrap()));
        assert_eq!(v4.load_balancer, Some("172.18.0.50:80".parse().unwrap()));
        let v6 = service_addresses(
            &svc,
            Family::V6,
            Some("172.18.0.2".parse().unwrap()),
            HTTP_PORT_NAME,
        );
        assert_eq!(v6.cluster_ip, Some("[fd00::20]:80".parse().unwrap()));
        assert_eq!(v6.node_port, None, "no IPv6 node address");
        assert_eq!(v6.load_balancer, None);
        let udp = service_addresses(
            &svc,
            Family::V4,
            Some("172.18.0.2".parse().unwrap()),
            UDP_ECHO_PORT_NAME,
        );
        assert_eq!(udp.cluster_ip, Some("10.96.0.20:5712".parse().unwrap()));
        assert_eq!(udp.node_port, Some("172.18.0.2:31712".parse().unwrap()));
        assert_eq!(udp.load_balancer, Some("172.18.0.50:5712".parse().unwrap()));

        let cluster_ip_only: Service = from_json(serde_json::json!({
            "spec": {"clusterIP": "10.96.0.21", "ports": [{"name": "http", "port": 8080}]}
        }));
        let a = service_addresses(
            &cluster_ip_only,
            Family::V4,
            Some("172.18.0.2".parse().unwrap()),
            HTTP_PORT_NAME,
        );
        assert_eq!(a.cluster_ip, Some("10.96.0.21:8080".parse().unwrap()));
        assert_eq!((a.node_port, a.load_balancer), (None, None));
        let unnamed: Service = from_json(serde_json::json!({
            "spec": {"clusterIP": "10.96.0.22", "ports": [{"port": 80}]}
        }));
        assert_eq!(
            service_addresses(&unnamed, Family::V4, None, HTTP_PORT_NAME),
            ServiceAddresses::default()
        );
    }

    #[test]
    fn node_address_is_the_last_of_its_family() {
        let node: Node = from_json(serde_json::json!({
            "status": {"addresses": [
                {"type": "InternalIP", "address": "172.18.0.2"},
                {"type": "InternalIP", "address": "fc00::2"},
                {"type": "Hostname", "address": "worker"},
                {"type": "ExternalIP", "address": "192.0.2.7"}
            ]}
        }));
        assert_eq!(
            node_address(&node, Family::V4),
            Some("192.0.2.7".parse().unwrap())
        );
        assert_eq!(
            node_address(&node, Family::V6),
            Some("fc00::2".parse().unwrap())
        );
        assert_eq!(node_address(&Node::default(), Family::V4), None);
    }

    #[test]
    fn ingress_url_needs_a_load_balancer_address() {
        let mut ing: Ingress = from_json(serde_json::json!({
            "spec": {"rules": [{"http": {"paths": [{"path": "/kdoctoragent", "pathType": "Exact",
                "backend": {"service": {"name": "kdoctor-agent-ipv4", "port": {"name": "http"}}}}]}}]}
        }));
        assert_eq!(ingress_url(&ing), None);
        ing.status =
            from_json(serde_json::json!({"loadBalancer": {"ingress": [{"ip": "172.18.0.50"}]}}));
        assert_eq!(
            ingress_url(&ing).as_deref(),
            Some("http://172.18.0.50/kdoctoragent")
        );
        ing.spec.as_mut().unwrap().tls = from_json(serde_json::json!([{"hosts": ["a"]}]));
        assert_eq!(
            ingress_url(&ing).as_deref(),
            Some("https://172.18.0.50/kdoctoragent")
        );
    }

    #[test]
    fn carrier_pods_with_multus_secondary_ips() {
        let key = "k8s.v1.cni.cncf.io/networks-status";
        let pods: Vec<Pod> = vec![
            from_json(serde_json::json!({
                "metadata": {"name": "b", "annotations": {key: r#"[{"interface":"eth0","ips":["10.1.0.6"]},{"interface":"net1","ips":["192.168.1.6/24"]}]"#}},
                "status": {"podIP": "10.1.0.6", "podIPs": [{"ip": "10.1.0.6"}, {"ip": "fd00::6"}]}
            })),
            from_json(serde_json::json!({
                "metadata": {"name": "a"},
                "status": {"podIP": "10.1.0.5"}
            })),
            from_json(serde_json::json!({"metadata": {"name": "pending"}, "status": {}})),
            from_json(serde_json::json!({
                "metadata": {"name": "going", "deletionTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"podIP": "10.1.0.9"}
            })),
            from_json(serde_json::json!({
                "metadata": {"name": "odd", "annotations": {key: "not json"}},
                "status": {"podIP": "10.1.0.7"}
            })),
        ];
        let (found, problems) = carrier_pods(&pods, Some(key));
        let names: Vec<&str> = found.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, vec!["a", "b", "odd"]);
        assert_eq!(
            found[1].ips,
            vec![
                "10.1.0.6".parse::<IpAddr>().unwrap(),
                "fd00::6".parse().unwrap()
            ]
        );
        assert_eq!(
            found[1].multus,
            vec!["192.168.1.6".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].starts_with("failed to ListDaemonsetPodMultusIPs, error=pod odd"),
            "{problems:?}"
        );
        let (plain, problems) = carrier_pods(&pods, None);
        assert!(plain.iter().all(|p| p.multus.is_empty()) && problems.is_empty());
    }

    #[test]
    fn dns_addresses_skip_headless_services() {
        let services: Vec<Service> = vec![
            from_json(
                serde_json::json!({"spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::a"]}}),
            ),
            from_json(serde_json::json!({"spec": {"clusterIP": "None"}})),
        ];
        assert_eq!(
            dns_addresses(&services),
            vec![
                "10.96.0.10".parse::<IpAddr>().unwrap(),
                "fd00::a".parse().unwrap()
            ]
        );
    }
}
