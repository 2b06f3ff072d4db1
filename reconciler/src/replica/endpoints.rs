//! The report API's endpoints, kept by the leading replica. kube-apiserver's aggregation layer
//! sends each request to one ready endpoint of the controller's Service, picked at random, and
//! never retries another. With a selector, Kubernetes takes a replica out only when its kubelet
//! says so: when the node dies there is no kubelet, and the dead replica keeps a third of the
//! requests until the node controller gives up on the node (40 s and more). The leader hears
//! every replica at each Raft heartbeat, so when the Service has no selector (as installed), it
//! keeps the Service's EndpointSlices itself and takes out a replica that stopped answering
//! within about two seconds, or within an election when it was the leader that died (the new
//! leader writes them) — as kube-apiserver keeps the `kubernetes` Service's endpoints itself.
//! A replica is ready when its pod is (its own readiness probe), it is not terminating, and
//! the leader heard it within the leader's lease. Every replica's pod is listed, ready or not,
//! so that Prometheus still finds each one's metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kdoctor_api::labels::{APP_NAME, FIELD_MANAGER};
use kdoctor_store::raft::Replica;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

use super::peers::Peers;
use crate::carrier::owner_reference;
use crate::readiness::pod_ready;

/// The label that names a slice's Service (the aggregation layer and kube-proxy find the
/// slices by it).
const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// The label that says who keeps a slice.
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// This controller, as that label's value (as Kubernetes' own is
/// `endpointslice-controller.k8s.io`).
const MANAGER: &str = "controller.kdoctor.io";

/// How often the leader looks at who answers.
const TICK: Duration = Duration::from_millis(500);
/// The pause after a failed write (kube-apiserver away, a refusal).
const BACKOFF: Duration = Duration::from_secs(2);
/// How often the Service is read again and the slices written even when nothing changed
/// (someone edited or deleted them).
const REFRESH: Duration = Duration::from_secs(30);

/// An address family as EndpointSlices name it, and the suffix of its slice's name.
const FAMILIES: [(&str, &str); 2] = [("IPv4", "ipv4"), ("IPv6", "ipv6")];

/// The name of `service`'s slice of `family` (`ipv4` or `ipv6`).
pub fn slice_name(service: &str, family: &str) -> String {
    format!("{service}-replicas-{family}")
}

/// The number `target` means in `pod` (a named target port is looked up among the pod's
/// container ports, as Kubernetes does).
fn target_port(pod: &Pod, target: &IntOrString) -> Option<i32> {
    match target {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(name) => pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port),
    }
}

/// The EndpointSlices of `service` over `pods` (the replicas' pods), one per address family the
/// pods have, when `answering` names the replicas the leader hears. None when the Service has
/// a selector: Kubernetes keeps its endpoints then.
pub fn slices(
    service: &Service,
    pods: &[Arc<Pod>],
    answering: &BTreeSet<String>,
) -> Option<Vec<EndpointSlice>> {
    let spec = service.spec.as_ref()?;
    if spec.selector.as_ref().is_some_and(|s| !s.is_empty()) {
        return None;
    }
    let name = service.metadata.name.clone()?;
    let mut pods: Vec<&Arc<Pod>> = pods.iter().collect();
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    // Ports from the first pod that has them all (every replica's pod has the same spec).
    let service_ports = spec.ports.clone().unwrap_or_default();
    let ports: Vec<EndpointPort> = pods
        .iter()
        .find_map(|pod| {
            service_ports
                .iter()
                .map(|p| {
                    let target = p.target_port.clone().unwrap_or(IntOrString::Int(p.port));
                    Some(EndpointPort {
                        name: p.name.clone(),
                        port: Some(target_port(pod, &target)?),
                        protocol: p.protocol.clone().or_else(|| Some("TCP".to_string())),
                        app_protocol: p.app_protocol.clone(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let owner = owner_reference(
        "v1",
        "Service",
        &name,
        service.metadata.uid.as_deref().unwrap_or_default(),
    );
    let mut by_family: BTreeMap<&str, Vec<Endpoint>> = BTreeMap::new();
    for pod in pods {
        let Some(pod_name) = pod.metadata.name.clone() else {
            continue;
        };
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let serving = pod_ready(pod) && answering.contains(&pod_name);
        let ips = pod.status.as_ref().and_then(|s| s.pod_ips.clone());
        for ip in ips.into_iter().flatten().map(|p| p.ip) {
            let Ok(parsed) = ip.parse::<std::net::IpAddr>() else {
                continue;
            };
            let family = if parsed.is_ipv4() { "IPv4" } else { "IPv6" };
            by_family.entry(family).or_default().push(Endpoint {
                addresses: vec![ip],
                conditions: Some(EndpointConditions {
                    ready: Some(serving && !terminating),
                    serving: Some(serving),
                    terminating: Some(terminating),
                }),
                node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                target_ref: Some(ObjectReference {
                    kind: Some("Pod".to_string()),
                    name: Some(pod_name.clone()),
                    namespace: pod.metadata.namespace.clone(),
                    uid: pod.metadata.uid.clone(),
                    ..ObjectReference::default()
                }),
                ..Endpoint::default()
            });
        }
    }
    Some(
        FAMILIES
            .iter()
            .filter_map(|(family, suffix)| {
                let endpoints = by_family.remove(family)?;
                Some(EndpointSlice {
                    metadata: ObjectMeta {
                        name: Some(slice_name(&name, suffix)),
                        namespace: service.metadata.namespace.clone(),
                        labels: Some(BTreeMap::from([
                            (SERVICE_NAME.to_string(), name.clone()),
                            (MANAGED_BY.to_string(), MANAGER.to_string()),
                            (APP_NAME.to_string(), name.clone()),
                        ])),
                        owner_references: Some(vec![owner.clone()]),
                        ..ObjectMeta::default()
                    },
                    address_type: family.to_string(),
                    endpoints,
                    ports: Some(ports.clone()),
                })
            })
            .collect(),
    )
}

/// Keeps the slices of the Service `service` in `namespace` while this replica leads (run it
/// through the fenced client: a deposed leader's writes do not leave).
pub async fn run(
    client: Client,
    namespace: String,
    service: String,
    replica: Replica,
    peers: Peers,
) {
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let slices_api: Api<EndpointSlice> = Api::namespaced(client, &namespace);
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let mut current: Option<Service> = None;
    let mut written: Option<Vec<EndpointSlice>> = None;
    let mut next_read = tokio::time::Instant::now();
    let mut told_selector = false;
    loop {
        // Read at the start of the leadership, then every REFRESH (a missing Service too: a
        // controller run without one asks twice a minute, not twice a second); again soon after
        // a failed read.
        if tokio::time::Instant::now() >= next_read {
            match services.get_opt(&service).await {
                Ok(s) => {
                    current = s;
                    next_read = tokio::time::Instant::now() + REFRESH;
                    // Written again even if unchanged: someone may have edited or deleted them.
                    written = None;
                }
                Err(e) => {
                    tracing::debug!(service, error = %e, "reading the controller's Service (retrying)");
                    next_read = tokio::time::Instant::now() + BACKOFF;
                }
            }
        }
        let wanted = current
            .as_ref()
            .and_then(|s| slices(s, &peers.pods(), &replica.answering()));
        match wanted {
            None => {
                if current.is_some() && !told_selector {
                    tracing::info!(
                        service,
                        "the controller's Service has a selector: Kubernetes keeps its endpoints"
                    );
                    told_selector = true;
                }
            }
            Some(wanted) if written.as_ref() != Some(&wanted) => {
                match write(&slices_api, &apply, &service, &wanted).await {
                    Ok(()) => {
                        let ready: Vec<String> = ready_pods(&wanted);
                        tracing::info!(service, ready = ?ready, "the report API's endpoints");
                        written = Some(wanted);
                    }
                    Err(e) => {
                        tracing::warn!(service, error = %e, "writing the report API's endpoints (retrying)");
                        tokio::time::sleep(BACKOFF).await;
                    }
                }
            }
            Some(_) => {}
        }
        tokio::time::sleep(TICK).await;
    }
}

/// The pods `slices` make ready.
fn ready_pods(slices: &[EndpointSlice]) -> Vec<String> {
    let mut ready: Vec<String> = slices
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .filter_map(|e| e.target_ref.as_ref()?.name.clone())
        .collect();
    ready.sort();
    ready.dedup();
    ready
}

/// Applies `wanted` and deletes this controller's other slices of `service` (an address family
/// no replica has any more).
async fn write(
    api: &Api<EndpointSlice>,
    apply: &PatchParams,
    service: &str,
    wanted: &[EndpointSlice],
) -> Result<(), kube::Error> {
    for slice in wanted {
        api.patch(&slice.name_any(), apply, &Patch::Apply(slice))
            .await?;
    }
    let keep: BTreeSet<String> = wanted.iter().map(ResourceExt::name_any).collect();
    let ours =
        ListParams::default().labels(&format!("{SERVICE_NAME}={service},{MANAGED_BY}={MANAGER}"));
    for old in api.list_metadata(&ours).await? {
        let name = old.name_any();
        if !keep.contains(&name) {
            api.delete(&name, &DeleteParams::default()).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, PodCondition, PodIP, PodSpec, PodStatus, ServicePort, ServiceSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn service(selector: bool) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("kdoctor-controller".into()),
                namespace: Some("kdoctor".into()),
                uid: Some("svc-uid".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                selector: selector.then(|| {
                    BTreeMap::from([(APP_NAME.to_string(), "kdoctor-controller".to_string())])
                }),
                ports: Some(vec![
                    ServicePort {
                        name: Some("https".into()),
                        port: 443,
                        target_port: Some(IntOrString::String("https".into())),
                        ..ServicePort::default()
                    },
                    ServicePort {
                        name: Some("metrics".into()),
                        port: 5721,
                        target_port: Some(IntOrString::Int(5721)),
                        ..ServicePort::default()
                    },
                ]),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    fn pod(name: &str, ips: &[&str], ready: bool, terminating: bool) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("kdoctor".into()),
                uid: Some(format!("{name}-uid")),
                deletion_timestamp: terminating.then_some(Time(jiff::Timestamp::UNIX_EPOCH)),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(format!("node-of-{name}")),
                containers: vec![Container {
                    name: "controller".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some("https".into()),
                        container_port: 6443,
                        ..ContainerPort::default()
                    }]),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                pod_ips: Some(ips.iter().map(|ip| PodIP { ip: ip.to_string() }).collect()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        })
    }

    fn answering(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn ready_of(slice: &EndpointSlice) -> Vec<(String, bool)> {
        slice
            .endpoints
            .iter()
            .map(|e| {
                (
                    e.target_ref
                        .as_ref()
                        .and_then(|r| r.name.clone())
                        .unwrap_or_default(),
                    e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false),
                )
            })
            .collect()
    }

    #[test]
    fn a_replica_the_leader_no_longer_hears_is_listed_but_not_ready() {
        let pods = [
            pod("kdoctor-controller-0", &["10.0.0.1"], true, false),
            pod("kdoctor-controller-1", &["10.0.0.2"], true, false),
            pod("kdoctor-controller-2", &["10.0.0.3"], true, false),
        ];
        let heard = answering(&["kdoctor-controller-0", "kdoctor-controller-2"]);
        let slices = slices(&service(false), &pods, &heard).expect("selector-less Service");
        assert_eq!(slices.len(), 1);
        assert_eq!(slices[0].address_type, "IPv4");
        assert_eq!(
            ready_of(&slices[0]),
            vec![
                ("kdoctor-controller-0".to_string(), true),
                ("kdoctor-controller-1".to_string(), false),
                ("kdoctor-controller-2".to_string(), true),
            ]
        );
        let labels = slices[0].metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(SERVICE_NAME).map(String::as_str),
            Some("kdoctor-controller")
        );
        assert_eq!(labels.get(MANAGED_BY).map(String::as_str), Some(MANAGER));
    }

    #[test]
    fn an_unready_or_terminating_pod_is_not_ready_even_when_it_answers() {
        let pods = [
            pod("kdoctor-controller-0", &["10.0.0.1"], false, false),
            pod("kdoctor-controller-1", &["10.0.0.2"], true, true),
        ];
        let heard = answering(&["kdoctor-controller-0", "kdoctor-controller-1"]);
        let slices = slices(&service(false), &pods, &heard).expect("selector-less Service");
        assert_eq!(
            ready_of(&slices[0]),
            vec![
                ("kdoctor-controller-0".to_string(), false),
                ("kdoctor-controller-1".to_string(), false),
            ]
        );
        let terminating = slices[0].endpoints[1]
            .conditions
            .clone()
            .unwrap_or_default();
        assert_eq!(terminating.serving, Some(true));
        assert_eq!(terminating.terminating, Some(true));
    }

    #[test]
    fn named_target_ports_are_the_pods_container_ports() {
        let pods = [pod("kdoctor-controller-0", &["10.0.0.1"], true, false)];
        let slices = slices(
            &service(false),
            &pods,
            &answering(&["kdoctor-controller-0"]),
        )
        .expect("selector-less Service");
        let ports: Vec<(Option<String>, Option<i32>)> = slices[0]
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.clone(), p.port))
            .collect();
        assert_eq!(
            ports,
            vec![
                (Some("https".to_string()), Some(6443)),
                (Some("metrics".to_string()), Some(5721)),
            ]
        );
    }

    #[test]
    fn dual_stack_pods_give_a_slice_per_family() {
        let pods = [pod(
            "kdoctor-controller-0",
            &["10.0.0.1", "fd00::1"],
            true,
            false,
        )];
        let slices = slices(
            &service(false),
            &pods,
            &answering(&["kdoctor-controller-0"]),
        )
        .expect("selector-less Service");
        let families: Vec<(&str, String)> = slices
            .iter()
            .map(|s| (s.address_type.as_str(), s.endpoints[0].addresses[0].clone()))
            .collect();
        assert_eq!(
            families,
            vec![
                ("IPv4", "10.0.0.1".to_string()),
                ("IPv6", "fd00::1".to_string())
            ]
        );
        assert_eq!(
            slices[1].metadata.name.as_deref(),
            Some("kdoctor-controller-replicas-ipv6")
        );
    }

    #[test]
    fn a_service_with_a_selector_is_left_to_kubernetes() {
        let pods = [pod("kdoctor-controller-0", &["10.0.0.1"], true, false)];
        assert!(slices(&service(true), &pods, &answering(&["kdoctor-controller-0"])).is_none());
    }
}
