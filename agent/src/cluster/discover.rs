//! Reading what a round probes from the Kubernetes API when the round starts: the carrier's
//! pods, Services, this node and the Ingress (NetReach), the cluster DNS Services (Netdns), and
//! an AppHttpHealthy task's body ConfigMap and TLS Secret. Read-only: the agent writes nothing
//! to the API.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kdoctor_api::config::Config;
use kdoctor_api::defaults::ClusterFacts;
use kdoctor_api::task::isolation::MAX_ISOLATED_PODS;
use kdoctor_api::task::{
    AppHttpHealthySpec, Isolation, NetDnsTargetDns, NetReachTarget, Task, TaskResource,
};
use kdoctor_transport::tls::{ServerTrust, client_config, parse_identity, parse_roots};
use kube::api::ListParams;
use kube::core::Selector;
use kube::{Api, Client};
use rustls::ClientConfig;

use super::addresses::{
    Family, HTTP_PORT_NAME, UDP_ECHO_PORT_NAME, carrier_pods, dns_addresses, ingress_url,
    node_address, service_addresses,
};
use super::pods::{FIRST_LIST, PodCaches};
use crate::config::TaskArgs;
use crate::probe::http::client_alpn;
use crate::probe_metrics::ZONE_LABEL;
use crate::round::targets::Carrier;

/// Something a round needs could not be read; the message names the object and the problem.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The object does not exist.
    #[error("{what} not found")]
    NotFound {
        /// Kind, namespace and name.
        what: String,
    },
    /// The API server refused or failed.
    #[error("cannot read {what}: {source}")]
    Api {
        /// Kind, namespace and name.
        what: String,
        /// The client's error.
        source: kube::Error,
    },
    /// The object exists but cannot be used.
    #[error("{what}: {problem}")]
    Unusable {
        /// Kind, namespace and name.
        what: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// Reads one object; absence is an error that names it.
async fn get<K>(api: &Api<K>, what: String, name: &str) -> Result<K, DiscoveryError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await {
        Ok(Some(object)) => Ok(object),
        Ok(None) => Err(DiscoveryError::NotFound { what }),
        Err(source) => Err(DiscoveryError::Api { what, source }),
    }
}

/// The agent's view of the cluster for round set-up.
pub struct Discovery {
    client: Client,
    namespace: String,
    node: String,
    http_port: u16,
    udp_port: u16,
    args: TaskArgs,
    config: Config,
    default_agent: bool,
    /// Pod label selectors of carrier workloads by name (a workload's selector is immutable).
    selectors: Mutex<HashMap<String, String>>,
    /// Carrier pods, watched.
    pods: PodCaches,
    /// Zones of nodes, for the metrics' zone labels.
    zones: Mutex<Zones>,
}

/// Node zones (`topology.kubernetes.io/zone`) as read: a node's zone does not change in its
/// life, so each is read once (a failed read is retried after [`ZONE_RETRY`]).
#[derive(Default)]
struct Zones {
    known: HashMap<String, String>,
    failed: HashMap<String, std::time::Instant>,
    listed: Option<std::time::Instant>,
}

/// How long a node whose zone could not be read is left alone, and the least time between
/// two lists of zoned nodes.
const ZONE_RETRY: std::time::Duration = std::time::Duration::from_secs(600);
/// More unknown nodes than this in one round: one list of every zoned node's metadata instead
/// of one read per node. Also the most single reads per round.
const ZONE_READS: usize = 16;

impl Zones {
    fn unknown(&self, node: &str) -> bool {
        !self.known.contains_key(node)
            && self
                .failed
                .get(node)
                .is_none_or(|at| at.elapsed() >= ZONE_RETRY)
    }
}

impl Discovery {
    /// Discovery for the agent on `node` whose echo targets listen on `http_port` (HTTP) and
    /// `udp_port` (UDP echo).
    pub fn new(
        client: Client,
        node: String,
        http_port: u16,
        udp_port: u16,
        args: TaskArgs,
        config: Config,
    ) -> Discovery {
        Discovery {
            pods: PodCaches::new(client.clone(), args.namespace.clone()),
            client,
            namespace: args.namespace.clone(),
            node,
            http_port,
            udp_port,
            default_agent: args.default_agent,
            args,
            config,
            selectors: Mutex::new(HashMap::new()),
            zones: Mutex::new(Zones::default()),
        }
    }

    fn zones(&self) -> std::sync::MutexGuard<'_, Zones> {
        self.zones.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The zone of `node` ("" when it has none or cannot be read); read once (its metadata
    /// only), then from memory.
    pub async fn node_zone(&self, node: &str) -> String {
        {
            let zones = self.zones();
            if let Some(zone) = zones.known.get(node) {
                return zone.clone();
            }
            if !zones.unknown(node) {
                return String::new();
            }
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        match nodes.get_metadata_opt(node).await {
            Ok(found) => {
                let zone = found
                    .and_then(|m| m.metadata.labels)
                    .and_then(|mut l| l.remove(ZONE_LABEL))
                    .unwrap_or_default();
                self.zones().known.insert(node.to_string(), zone.clone());
                zone
            }
            Err(error) => {
                tracing::debug!(%node, %error, "cannot read the node's zone");
                self.zones()
                    .failed
                    .insert(node.to_string(), std::time::Instant::now());
                String::new()
            }
        }
    }

    /// The zones of the nodes of NetReach carrier pods `pods`, by pod name (pods on nodes
    /// without a zone are left out). Pods come from the watched cache; node zones are read
    /// once each — with many new nodes, one list of the zoned nodes' metadata.
    pub async fn pod_zones(
        &self,
        resource: Option<&TaskResource>,
        pods: &[&str],
    ) -> HashMap<String, String> {
        let mut out = HashMap::new();
        let Some(resource) = resource.filter(|_| !pods.is_empty()) else {
            return out;
        };
        let Ok(selector) = self.pod_selector(resource).await else {
            return out;
        };
        let Ok(cached) = self.pods.pods(&selector, FIRST_LIST).await else {
            return out;
        };
        let wanted: std::collections::HashSet<&str> = pods.iter().copied().collect();
        let pod_nodes: Vec<(String, String)> = cached
            .iter()
            .filter_map(|p| {
                let name = p.metadata.name.as_deref()?;
                let node = p.spec.as_ref()?.node_name.clone()?;
                wanted.contains(name).then(|| (name.to_string(), node))
            })
            .collect();
        let unknown: Vec<String> = {
            let zones = self.zones();
            let mut nodes: Vec<String> = pod_nodes
                .iter()
                .map(|(_, n)| n.clone())
                .filter(|n| zones.unknown(n))
                .collect();
            nodes.sort();
            nodes.dedup();
            nodes
        };
        let may_list = self
            .zones()
            .listed
            .is_none_or(|at| at.elapsed() >= ZONE_RETRY);
        if unknown.len() > ZONE_READS && may_list {
            self.list_zones(&unknown).await;
        }
        let still: Vec<String> = {
            let zones = self.zones();
            unknown.into_iter().filter(|n| zones.unknown(n)).collect()
        };
        for node in still.iter().take(ZONE_READS) {
            self.node_zone(node).await;
        }
        let zones = self.zones();
        for (pod, node) in pod_nodes {
            if let Some(zone) = zones.known.get(&node).filter(|z| !z.is_empty()) {
                out.insert(pod, zone.clone());
            }
        }
        out
    }

    /// Reads the zones of every zoned node at once (metadata only); `unknown` nodes missing
    /// from the answer have no zone.
    async fn list_zones(&self, unknown: &[String]) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        self.zones().listed = Some(std::time::Instant::now());
        match nodes
            .list_metadata(&ListParams::default().labels(ZONE_LABEL))
            .await
        {
            Ok(list) => {
                let mut zones = self.zones();
                for node in list.items {
                    if let (Some(name), Some(zone)) = (
                        node.metadata.name,
                        node.metadata.labels.and_then(|mut l| l.remove(ZONE_LABEL)),
                    ) {
                        zones.known.insert(name, zone);
                    }
                }
                for node in unknown {
                    zones.known.entry(node.clone()).or_default();
                }
            }
            Err(error) => tracing::debug!(%error, "cannot list the zones of nodes"),
        }
    }

    fn namespaced<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn what(&self, kind: &str, name: &str) -> String {
        format!("{kind} {}/{name}", self.namespace)
    }

    /// The label selector of the carrier workload's pods.
    async fn pod_selector(&self, resource: &TaskResource) -> Result<String, DiscoveryError> {
        let name = &resource.runtime_name;
        if let Some(known) = self
            .selectors
            .lock()
            .ok()
            .and_then(|s| s.get(name).cloned())
        {
            return Ok(known);
        }
        let (what, selector) = if resource.runtime_type == "Deployment" {
            let what = self.what("Deployment", name);
            let d: Deployment = get(&self.namespaced(), what.clone(), name).await?;
            (what, d.spec.map(|s| s.selector))
        } else {
            let what = self.what("DaemonSet", name);
            let d: DaemonSet = get(&self.namespaced(), what.clone(), name).await?;
            (what, d.spec.map(|s| s.selector))
        };
        let labels = selector.and_then(|s| s.match_labels).unwrap_or_default();
        if labels.is_empty() {
            return Err(DiscoveryError::Unusable {
                what,
                problem: "its selector has no matchLabels".to_string(),
            });
        }
        let text = labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        if let Ok(mut known) = self.selectors.lock() {
            known.insert(name.clone(), text.clone());
        }
        Ok(text)
    }

    /// The install's conf.yml, whose defaults make a task effective.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The facts that default an omitted NetReach target, read as the controller reads them
    /// (the default agent's IPv4 Service and Ingress); a read that fails leaves them unset and
    /// says why, for the round's report.
    pub async fn cluster_facts(&self, task: &Task) -> (ClusterFacts, Option<String>) {
        if !ClusterFacts::needed(task) {
            return (ClusterFacts::default(), None);
        }
        let services: Api<Service> = self.namespaced();
        let ingresses: Api<Ingress> = self.namespaced();
        let (service_name, ingress_name) = (
            &self.config.agent_service_ipv4_name,
            &self.config.agent_ingress_name,
        );
        let failed = |kind: &str, name: &str| {
            let what = self.what(kind, name);
            move |source| DiscoveryError::Api { what, source }
        };
        let read = async {
            let service = services
                .get_opt(service_name)
                .await
                .map_err(failed("Service", service_name))?;
            let ingress = ingresses
                .get_opt(ingress_name)
                .await
                .map_err(failed("Ingress", ingress_name))?;
            Ok::<_, DiscoveryError>(ClusterFacts::of(service.as_ref(), ingress.as_ref()))
        };
        match read.await {
            Ok(facts) => (facts, None),
            Err(e) => (ClusterFacts::default(), Some(e.to_string())),
        }
    }

    /// This node's address of `family` for NodePort targets: `--node-ip` when it is of that
    /// family, else the Node object's.
    async fn node_ip(&self, family: Family) -> Result<Option<IpAddr>, DiscoveryError> {
        if let Some(ip) = self.args.node_ip.filter(|ip| family.holds(ip)) {
            return Ok(Some(ip));
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = get(&nodes, format!("Node {}", self.node), &self.node).await?;
        Ok(node_address(&node, family))
    }

    /// A NetReach carrier's addresses as seen from this node, and the problems met (each
    /// fails the round, as upstream's set-up errors do). Targets whose address is missing are
    /// reported by the target builder with upstream's messages. The carrier's pods come from
    /// a watch; its first list is waited for up to `peers_wait`.
    pub async fn netreach(
        &self,
        target: &NetReachTarget,
        resource: Option<&TaskResource>,
        peers_wait: Duration,
    ) -> (Carrier, Vec<String>) {
        let mut carrier = Carrier {
            http_port: self.http_port,
            udp_port: self.udp_port,
            ..Carrier::default()
        };
        let mut problems = Vec::new();
        let Some(resource) = resource else {
            problems.push("the task has no status.resource (carrier) yet".to_string());
            return (carrier, problems);
        };
        if target.endpoint {
            match self.pod_selector(resource).await {
                Ok(selector) => match self.pods.pods(&selector, peers_wait).await {
                    Ok(pods) => {
                        let key = target
                            .multus_interface
                            .then_some(self.config.multus_pod_annotation_key.as_str());
                        let (found, multus_problems) = carrier_pods(&pods, key);
                        carrier.pods = found;
                        problems.extend(multus_problems);
                    }
                    Err(e) => problems.push(e),
                },
                Err(e) => problems.push(e.to_string()),
            }
        }
        let wants_service = target.cluster_ip || target.node_port || target.load_balancer;
        let families = [
            (
                Family::V4,
                target.ipv4,
                0,
                self.service_name(resource, Family::V4),
            ),
            (
                Family::V6,
                target.ipv6,
                1,
                self.service_name(resource, Family::V6),
            ),
        ];
        for (family, wanted, i, name) in families {
            let (true, true, Some(name)) = (wanted, wants_service, name) else {
                continue;
            };
            let services: Api<Service> = self.namespaced();
            let service = match get(&services, self.what("Service", &name), &name).await {
                Ok(s) => s,
                Err(DiscoveryError::NotFound { .. }) => continue,
                Err(e) => {
                    problems.push(e.to_string());
                    continue;
                }
            };
            let node_ip = if target.node_port {
                match self.node_ip(family).await {
                    Ok(ip) => ip,
                    Err(e) => {
                        problems.push(e.to_string());
                        None
                    }
                }
            } else {
                None
            };
            carrier.http_service[i] = service_addresses(&service, family, node_ip, HTTP_PORT_NAME);
            if target.udp {
                carrier.udp_service[i] =
                    service_addresses(&service, family, node_ip, UDP_ECHO_PORT_NAME);
            }
        }
        if target.ingress
            && target.ipv4
            && let Some(v4) = &resource.service_name_v4
        {
            // Upstream: the default agent's Ingress is named in conf.yml, a carrier's like
            // its IPv4 Service.
            let name = if self.default_agent {
                self.config.agent_ingress_name.clone()
            } else {
                v4.clone()
            };
            let ingresses: Api<Ingress> = self.namespaced();
            match get(&ingresses, self.what("Ingress", &name), &name).await {
                Ok(ingress) => carrier.ingress = ingress_url(&ingress),
                Err(DiscoveryError::NotFound { .. }) => {}
                Err(e) => problems.push(e.to_string()),
            }
        }
        (carrier, problems)
    }

    /// The Service of `family` the task names, else the flag's.
    fn service_name(&self, resource: &TaskResource, family: Family) -> Option<String> {
        match family {
            Family::V4 => resource
                .service_name_v4
                .clone()
                .or_else(|| self.args.service_ipv4_name.clone()),
            Family::V6 => resource
                .service_name_v6
                .clone()
                .or_else(|| self.args.service_ipv6_name.clone()),
        }
    }

    /// The peers of an isolation check (`spec.isolation[]`): its Service's ClusterIPs, or the
    /// running pods its selector picks (the first [`MAX_ISOLATED_PODS`] by name; more are a
    /// problem the round reports, since the rest go unchecked). Each as (name, address).
    pub async fn isolation_peers(
        &self,
        isolation: &Isolation,
    ) -> Result<(Vec<(String, IpAddr)>, Option<String>), DiscoveryError> {
        let namespace = &isolation.namespace;
        if let Some(name) = &isolation.service {
            let api: Api<Service> = Api::namespaced(self.client.clone(), namespace);
            let what = format!("Service {namespace}/{name}");
            let service = get(&api, what.clone(), name).await?;
            let ips = dns_addresses(std::slice::from_ref(&service));
            if ips.is_empty() {
                return Err(DiscoveryError::Unusable {
                    what,
                    problem: "it has no ClusterIP (headless): name its pods with podSelector"
                        .into(),
                });
            }
            let peer = format!("svc-{name}");
            return Ok((ips.into_iter().map(|ip| (peer.clone(), ip)).collect(), None));
        }
        let selector = match isolation.pod_selector.clone().map(Selector::try_from) {
            Some(Ok(selector)) => selector.to_string(),
            Some(Err(e)) => {
                return Err(DiscoveryError::Unusable {
                    what: format!("isolation {} podSelector", isolation.name),
                    problem: e.to_string(),
                });
            }
            None => String::new(),
        };
        let what = format!("pods in {namespace} selected by {selector:?}");
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        // One more than checked: whether some were left out.
        let params = ListParams::default()
            .labels(&selector)
            .limit(MAX_ISOLATED_PODS as u32 + 1);
        let list = api
            .list(&params)
            .await
            .map_err(|source| DiscoveryError::Api {
                what: what.clone(),
                source,
            })?;
        let (mut pods, _) = carrier_pods(&list.items, None);
        let more =
            (pods.len() > MAX_ISOLATED_PODS || list.metadata.continue_.is_some()).then(|| {
                format!(
                    "isolation {}: {what} are more than {MAX_ISOLATED_PODS}: only the first \
                     {MAX_ISOLATED_PODS} by name are checked",
                    isolation.name
                )
            });
        pods.truncate(MAX_ISOLATED_PODS);
        let peers = pods
            .into_iter()
            .flat_map(|pod| pod.ips.into_iter().map(move |ip| (pod.name.clone(), ip)))
            .collect();
        Ok((peers, more))
    }

    /// The ClusterIPs of the DNS Service a Netdns `targetDns` names, or of the cluster DNS
    /// Services in kube-system selected by label (upstream's `kubernetes.io/name=CoreDNS`).
    pub async fn cluster_dns(&self, dns: &NetDnsTargetDns) -> Result<Vec<IpAddr>, DiscoveryError> {
        let services = match &dns.service_name {
            Some(name) => {
                let namespace = dns.service_namespace.as_deref().unwrap_or("kube-system");
                let api: Api<Service> = Api::namespaced(self.client.clone(), namespace);
                vec![get(&api, format!("Service {namespace}/{name}"), name).await?]
            }
            None => {
                let selector = format!(
                    "{}={}",
                    self.args.dns_service_label_key, self.args.dns_service_label_value
                );
                let what = format!("Services in kube-system labelled {selector}");
                let api: Api<Service> = Api::namespaced(self.client.clone(), "kube-system");
                let list = api
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .map_err(|source| DiscoveryError::Api {
                        what: what.clone(),
                        source,
                    })?;
                if list.items.is_empty() {
                    return Err(DiscoveryError::NotFound { what });
                }
                list.items
            }
        };
        Ok(dns_addresses(&services))
    }

    /// An AppHttpHealthy task's request body (its ConfigMap's data as a JSON object) and TLS
    /// (its Secret: `ca.crt` turns verification on, `tls.crt` and `tls.key` are the client
    /// certificate), read when the round starts as upstream does.
    pub async fn app_http(
        &self,
        spec: &AppHttpHealthySpec,
    ) -> Result<(Option<Bytes>, Option<Arc<ClientConfig>>), DiscoveryError> {
        let target = &spec.target;
        // The controller refuses such a task before it runs; an agent checks again rather than
        // read what a task author should not reach (RBAC grants it only the named inputs).
        let policy = kdoctor_api::inputs::InputPolicy::new(
            &self.namespace,
            &self.config.task_input_namespaces,
            &["kdoctor-ca", "kdoctor-controller-cert"],
        );
        let task = kdoctor_api::task::Task::AppHttpHealthy(kdoctor_api::task::AppHttpHealthy::new(
            "input-check",
            spec.clone(),
        ));
        if let Err(refused) = policy.check(&task) {
            return Err(DiscoveryError::Unusable {
                what: "the task's inputs".to_string(),
                problem: refused.to_string(),
            });
        }
        let body = match (
            &target.body_configmap_name,
            &target.body_configmap_namespace,
        ) {
            (Some(name), Some(namespace)) => {
                let what = format!("ConfigMap {namespace}/{name}");
                let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
                let map = get(&api, what.clone(), name).await?;
                let data = map.data.unwrap_or_default();
                let json = serde_json::to_vec(&data).map_err(|e| DiscoveryError::Unusable {
                    what,
                    problem: e.to_string(),
                })?;
                Some(Bytes::from(json))
            }
            _ => None,
        };
        let tls = match (&target.tls_secret_name, &target.tls_secret_namespace) {
            (Some(name), Some(namespace)) => {
                let what = format!("Secret {namespace}/{name}");
                let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
                let secret = get(&api, what.clone(), name).await?;
                Some(Arc::new(secret_tls(&secret, &what, target.http2)?))
            }
            _ => None,
        };
        Ok((body, tls))
    }
}

/// The client TLS of an AppHttpHealthy Secret.
fn secret_tls(secret: &Secret, what: &str, http2: bool) -> Result<ClientConfig, DiscoveryError> {
    let data = secret.data.clone().unwrap_or_default();
    let key = |k: &str| data.get(k).map(|b| b.0.clone());
    let unusable = |problem: String| DiscoveryError::Unusable {
        what: what.to_string(),
        problem,
    };
    let trust = match key("ca.crt") {
        Some(ca) => ServerTrust::Roots(
            parse_roots(&ca, &format!("{what} key ca.crt")).map_err(|e| unusable(e.to_string()))?,
        ),
        None => ServerTrust::Any,
    };
    let identity = match (key("tls.crt"), key("tls.key")) {
        (Some(cert), Some(private)) => Some(
            parse_identity(&cert, &private, &format!("{what} keys tls.crt/tls.key"))
                .map_err(|e| unusable(e.to_string()))?,
        ),
        (None, None) => None,
        _ => {
            return Err(unusable(
                "tls.crt and tls.key must be given together".to_string(),
            ));
        }
    };
    client_config(trust, identity, client_alpn(http2)).map_err(|e| unusable(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    fn secret(keys: &[(&str, Vec<u8>)]) -> Secret {
        Secret {
            data: Some(
                keys.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.clone())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn secret_tls_names_the_secret_and_key_in_errors() {
        let identity = rcgen::generate_simple_self_signed(vec!["app.test".to_string()]).unwrap();
        let cert = identity.cert.pem().into_bytes();
        let key = identity.signing_key.serialize_pem().into_bytes();
        assert!(secret_tls(&secret(&[]), "Secret a/b", false).is_ok());
        assert!(
            secret_tls(
                &secret(&[
                    ("ca.crt", cert.clone()),
                    ("tls.crt", cert.clone()),
                    ("tls.key", key)
                ]),
                "Secret a/b",
                true
            )
            .is_ok()
        );
        let err = secret_tls(
            &secret(&[("ca.crt", b"junk".to_vec())]),
            "Secret a/b",
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("Secret a/b: Secret a/b key ca.crt:"),
            "{err}"
        );
        let err = secret_tls(&secret(&[("tls.crt", cert)]), "Secret a/b", false)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "Secret a/b: tls.crt and tls.key must be given together"
        );
    }
}
