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

use crate::net::dns::{CLUSTER_DOMAIN, Rcode, Resolver};

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

/// Serves DNS on each of `server_ips` until shutdown.
pub async fn serve(
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    server_ips: Vec<IpAddr>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let resolver: Arc<Resolver<'static>> =
        Arc::new(move |name: &str| resolve(&services, &slices, name));
    let servers = server_ips.into_iter().map(|ip| {
        crate::net::dns::serve_with(resolver.clone(), SocketAddr::new(ip, 53), shutdown.clone())
    });
    for r in futures::future::join_all(servers).await {
        r?;
    }
    Ok(())
}
