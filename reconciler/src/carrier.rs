//! The objects of a task's own carrier (pure builders): a DaemonSet or Deployment of agents, one
//! Service per enabled IP family and, for NetReach with an ingress target, an Ingress at
//! `/kdoctoragent`. Names, labels, ownerReferences and agentSpec overrides as upstream (§8.2);
//! the controller server-side applies what these return.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, KeyToPath, ObjectFieldSelector, PodSpec, PodTemplateSpec, Probe,
    ProjectedVolumeSource, SecretVolumeSource, Service, ServiceAccountTokenProjection, ServicePort,
    ServiceSpec, Toleration, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kdoctor_api::config::Config;
use kdoctor_api::labels;
use kdoctor_api::naming::{IPV4_SERVICE_SUFFIX, IPV6_SERVICE_SUFFIX, carrier_name};
use kdoctor_api::task::{API_VERSION, AgentKind, AgentSpec, RuntimeStatus, TaskKind, TaskResource};
use kdoctor_transport::report_api;

use crate::options::{AgentPorts, ControllerOptions};
use crate::pod_security::agent_security;

/// Path of the agent's echo API that carrier Ingresses route (as upstream).
pub const INGRESS_PATH: &str = "/kdoctoragent";
/// Where agents keep their report spool.
pub const REPORT_DIR: &str = "/report";
/// Where the install's CA certificate is mounted in agents.
pub const CA_DIR: &str = "/etc/tls";
/// Where the `kdoctor` ConfigMap (`conf.yml`) is mounted, as upstream.
pub const CONFIG_DIR: &str = "/tmp/config-map";
/// Name of the agent container.
pub const AGENT_CONTAINER: &str = "agent";
/// `app.kubernetes.io/component` of every agent pod (the controller watches agent pods by it).
pub const AGENT_COMPONENT: &str = "agent";

/// The task a carrier belongs to.
#[derive(Clone, Debug)]
pub struct Owner<'a> {
    /// Kind.
    pub kind: TaskKind,
    /// Name.
    pub name: &'a str,
    /// `metadata.uid`.
    pub uid: &'a str,
}

/// The workload of a carrier.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    /// One agent per node.
    DaemonSet(DaemonSet),
    /// A fixed number of agents.
    Deployment(Deployment),
}

impl Workload {
    /// The workload's kind name.
    pub fn kind(&self) -> &'static str {
        match self {
            Workload::DaemonSet(_) => "DaemonSet",
            Workload::Deployment(_) => "Deployment",
        }
    }
}

/// Everything a task's own carrier consists of.
#[derive(Clone, Debug, PartialEq)]
pub struct Carrier {
    /// Name of the workload (and prefix of the Services).
    pub name: String,
    /// The workload; its owner is the task.
    pub workload: Workload,
    /// One Service per enabled family; their owner is the workload (set by [`owned_by`]).
    pub services: Vec<Service>,
    /// The Ingress of a NetReach task with an ingress target; owned by the workload.
    pub ingress: Option<Ingress>,
    /// `status.resource` of the task while the carrier is being created.
    pub resource: TaskResource,
}

/// Labels of everything made for `owner`'s carrier, pods included.
pub fn carrier_labels(owner: &Owner<'_>, config: &Config) -> BTreeMap<String, String> {
    let name = carrier_name(owner.kind, owner.name);
    let mut labels = BTreeMap::from([
        (
            labels::TASK_KIND.to_string(),
            owner.kind.as_str().to_string(),
        ),
        (labels::TASK_NAME.to_string(), owner.name.to_string()),
        (labels::APP_NAME.to_string(), name.clone()),
        (
            labels::APP_COMPONENT.to_string(),
            AGENT_COMPONENT.to_string(),
        ),
        (
            labels::MANAGED_BY.to_string(),
            labels::MANAGED_BY_KDOCTOR.to_string(),
        ),
    ]);
    labels.insert(config.unique_match_label_key().to_string(), name);
    labels
}

/// The selector of `owner`'s carrier pods (immutable once the workload exists, so minimal).
pub fn carrier_selector(owner: &Owner<'_>, config: &Config) -> BTreeMap<String, String> {
    BTreeMap::from([(
        config.unique_match_label_key().to_string(),
        carrier_name(owner.kind, owner.name),
    )])
}

/// `status.resource` of a task that runs on the default agent (created from the start).
pub fn default_agent_resource(config: &Config) -> TaskResource {
    TaskResource {
        runtime_name: config.agent_daemonset_name.clone(),
        runtime_type: "DaemonSet".to_string(),
        service_name_v4: config
            .enable_ipv4
            .then(|| config.agent_service_ipv4_name.clone()),
        service_name_v6: config
            .enable_ipv6
            .then(|| config.agent_service_ipv6_name.clone()),
        runtime_status: RuntimeStatus::Created,
    }
}

/// A controlling owner reference (what the garbage collector follows).
pub(crate) fn owner_reference(
    api_version: &str,
    kind: &str,
    name: &str,
    uid: &str,
) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
        uid: uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn metadata(
    name: &str,
    options: &ControllerOptions,
    labels: &BTreeMap<String, String>,
    annotations: Option<&BTreeMap<String, String>>,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(options.namespace.clone()),
        labels: Some(labels.clone()),
        annotations: annotations.filter(|a| !a.is_empty()).cloned(),
        ..ObjectMeta::default()
    }
}

fn env_from_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_string(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn env_value(name: &str, value: impl ToString) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.to_string()),
        ..EnvVar::default()
    }
}

fn http_probe(path: &str, port: u16, failure_threshold: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::Int(i32::from(port)),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(10),
        failure_threshold: Some(failure_threshold),
        ..Probe::default()
    }
}

fn port(name: &str, number: u16) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_string()),
        container_port: i32::from(number),
        protocol: Some("TCP".to_string()),
        ..ContainerPort::default()
    }
}

fn udp_port(name: &str, number: u16) -> ContainerPort {
    ContainerPort {
        protocol: Some("UDP".to_string()),
        ..port(name, number)
    }
}

/// The agent's arguments: upstream's, the carrier's Services, and the install's extras.
fn agent_args(
    owner: &Owner<'_>,
    service_v4: Option<&str>,
    service_v6: Option<&str>,
    options: &ControllerOptions,
) -> Vec<String> {
    let mut args = vec![
        "agent".to_string(),
        format!("--task-kind={}", owner.kind),
        format!("--task-name={}", owner.name),
        format!("--report-dir={REPORT_DIR}"),
        format!("--tls-ca-cert={CA_DIR}/ca.crt"),
        format!("--config-path={CONFIG_DIR}/conf.yml"),
    ];
    if let Some(v4) = service_v4 {
        args.push(format!("--service-ipv4-name={v4}"));
    }
    if let Some(v6) = service_v6 {
        args.push(format!("--service-ipv6-name={v6}"));
    }
    args.extend(options.agent_extra_args.iter().cloned());
    args
}

/// The agent's environment, as upstream's agents read it.
fn agent_env(ports: &AgentPorts) -> Vec<EnvVar> {
    vec![
        env_from_field("ENV_LOCAL_NODE_NAME", "spec.nodeName"),
        env_from_field("ENV_LOCAL_NODE_IP", "status.hostIP"),
        env_from_field("ENV_POD_NAME", "metadata.name"),
        env_from_field("ENV_POD_NAMESPACE", "metadata.namespace"),
        env_value("ENV_AGENT_APP_HTTP_PORT", ports.http),
        env_value("ENV_AGENT_APP_HTTPS_PORT", ports.https),
        env_value("ENV_AGENT_APP_UDP_ECHO_PORT", ports.udp_echo),
        env_value("ENV_AGENT_HEALTH_HTTP_PORT", ports.health),
        env_value("ENV_METRIC_HTTP_PORT", ports.metrics),
        env_value("ENV_AGENT_GRPC_LISTEN_PORT", ports.report),
    ]
}

/// Where the agent finds the CA, its configuration, its spool and its identity token.
fn volume_mounts() -> Vec<VolumeMount> {
    vec![
        VolumeMount {
            name: "tls".to_string(),
            mount_path: CA_DIR.to_string(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
        VolumeMount {
            name: "config".to_string(),
            mount_path: CONFIG_DIR.to_string(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
        VolumeMount {
            name: "reports".to_string(),
            mount_path: REPORT_DIR.to_string(),
            ..VolumeMount::default()
        },
        VolumeMount {
            name: "report-token".to_string(),
            mount_path: report_api::TOKEN_DIR.to_string(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    ]
}

/// The volumes behind [`volume_mounts`].
fn volumes(options: &ControllerOptions) -> Vec<Volume> {
    vec![
        Volume {
            name: "tls".to_string(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(options.ca_secret.clone()),
                // The agents trust the CA; only the controller may sign with it.
                items: Some(vec![KeyToPath {
                    key: "ca.crt".to_string(),
                    path: "ca.crt".to_string(),
                    ..KeyToPath::default()
                }]),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        Volume {
            name: "config".to_string(),
            config_map: Some(ConfigMapVolumeSource {
                name: options.config_map.clone(),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        Volume {
            name: "reports".to_string(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        // The pod's identity for the harvester (see kdoctor_reconciler::identity).
        Volume {
            name: "report-token".to_string(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(vec![VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        audience: Some(report_api::TOKEN_AUDIENCE.to_string()),
                        expiration_seconds: Some(report_api::TOKEN_SECONDS),
                        path: report_api::TOKEN_FILE.to_string(),
                    }),
                    ..VolumeProjection::default()
                }]),
                ..ProjectedVolumeSource::default()
            }),
            ..Volume::default()
        },
    ]
}

/// The agent pod of a carrier: upstream's arguments and environment, the install's CA (the
/// certificate only), the configuration, a spool directory, and agentSpec's overrides.
fn pod_template(
    owner: &Owner<'_>,
    agent: &AgentSpec,
    service_v4: Option<&str>,
    service_v6: Option<&str>,
    labels: &BTreeMap<String, String>,
    options: &ControllerOptions,
) -> PodTemplateSpec {
    let ports = &options.ports;
    let args = agent_args(owner, service_v4, service_v6, options);
    let mut env = agent_env(ports);
    env.extend(agent.env.iter().flatten().cloned());
    let (pod_security, container_security) = agent_security(
        agent.host_network,
        &[
            ports.http,
            ports.https,
            ports.udp_echo,
            ports.health,
            ports.metrics,
            ports.report,
        ],
    );
    let container = Container {
        name: AGENT_CONTAINER.to_string(),
        image: Some(options.agent_image.clone()),
        image_pull_policy: Some(options.image_pull_policy.clone()),
        args: Some(args),
        env: Some(env),
        ports: Some(vec![
            port("http", ports.http),
            port("https", ports.https),
            udp_port("udp-echo", ports.udp_echo),
            port("health", ports.health),
            port("metrics", ports.metrics),
            port("reports", ports.report),
        ]),
        startup_probe: Some(http_probe("/healthy/startup", ports.health, 30)),
        readiness_probe: Some(http_probe("/healthy/readiness", ports.health, 3)),
        liveness_probe: Some(http_probe("/healthy/liveness", ports.health, 6)),
        resources: agent.resources.clone(),
        security_context: Some(container_security),
        volume_mounts: Some(volume_mounts()),
        ..Container::default()
    };
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels.clone()),
            annotations: agent.annotation.clone().filter(|a| !a.is_empty()),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers: vec![container],
            volumes: Some(volumes(options)),
            service_account_name: Some(options.agent_service_account.clone()),
            security_context: Some(pod_security),
            host_network: agent.host_network.then_some(true),
            dns_policy: agent
                .host_network
                .then(|| "ClusterFirstWithHostNet".to_string()),
            affinity: agent.affinity.clone(),
            node_selector: (!options.agent_node_selector.is_empty())
                .then(|| options.agent_node_selector.clone()),
            // As upstream: probe every node, tainted or not.
            tolerations: Some(vec![Toleration {
                operator: Some("Exists".to_string()),
                ..Toleration::default()
            }]),
            termination_grace_period_seconds: Some(10),
            ..PodSpec::default()
        }),
    }
}

fn service(
    name: &str,
    family: &str,
    selector: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
    agent: &AgentSpec,
    options: &ControllerOptions,
) -> Service {
    let service_port = |port_name: &str, number: u16, protocol: &str| ServicePort {
        name: Some(port_name.to_string()),
        port: i32::from(number),
        target_port: Some(IntOrString::String(port_name.to_string())),
        protocol: Some(protocol.to_string()),
        ..ServicePort::default()
    };
    Service {
        metadata: metadata(name, options, labels, agent.annotation.as_ref()),
        spec: Some(ServiceSpec {
            type_: Some(options.service_type.clone()),
            selector: Some(selector.clone()),
            ip_families: Some(vec![family.to_string()]),
            ip_family_policy: Some("SingleStack".to_string()),
            ports: Some(vec![
                service_port("http", options.ports.http, "TCP"),
                service_port("https", options.ports.https, "TCP"),
                // NetReach `spec.target.udp` echoes through the Service too.
                service_port("udp-echo", options.ports.udp_echo, "UDP"),
            ]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

fn ingress(
    name: &str,
    service_name: &str,
    labels: &BTreeMap<String, String>,
    agent: &AgentSpec,
    options: &ControllerOptions,
) -> Ingress {
    Ingress {
        metadata: metadata(name, options, labels, agent.annotation.as_ref()),
        spec: Some(IngressSpec {
            ingress_class_name: options.ingress_class.clone(),
            rules: Some(vec![IngressRule {
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some(INGRESS_PATH.to_string()),
                        path_type: "Exact".to_string(),
                        backend: IngressBackend {
                            service: Some(IngressServiceBackend {
                                name: service_name.to_string(),
                                port: Some(ServiceBackendPort {
                                    name: Some("http".to_string()),
                                    ..ServiceBackendPort::default()
                                }),
                            }),
                            ..IngressBackend::default()
                        },
                    }],
                }),
                ..IngressRule::default()
            }]),
            ..IngressSpec::default()
        }),
        ..Ingress::default()
    }
}

/// The carrier of a task with `agentSpec`. `wants_ingress`: a NetReach task whose target asks
/// for the ingress (served over IPv4 only, as upstream).
pub fn build(
    owner: &Owner<'_>,
    agent: &AgentSpec,
    wants_ingress: bool,
    config: &Config,
    options: &ControllerOptions,
) -> Carrier {
    let name = carrier_name(owner.kind, owner.name);
    let labels = carrier_labels(owner, config);
    let selector = carrier_selector(owner, config);
    let v4 = config
        .enable_ipv4
        .then(|| format!("{name}{IPV4_SERVICE_SUFFIX}"));
    let v6 = config
        .enable_ipv6
        .then(|| format!("{name}{IPV6_SERVICE_SUFFIX}"));
    let template = pod_template(owner, agent, v4.as_deref(), v6.as_deref(), &labels, options);
    let mut meta = metadata(&name, options, &labels, agent.annotation.as_ref());
    meta.owner_references = Some(vec![owner_reference(
        API_VERSION,
        owner.kind.as_str(),
        owner.name,
        owner.uid,
    )]);
    let label_selector = LabelSelector {
        match_labels: Some(selector.clone()),
        ..LabelSelector::default()
    };
    let workload = match agent.kind {
        AgentKind::DaemonSet => Workload::DaemonSet(DaemonSet {
            metadata: meta,
            spec: Some(DaemonSetSpec {
                selector: label_selector,
                template,
                ..DaemonSetSpec::default()
            }),
            ..DaemonSet::default()
        }),
        AgentKind::Deployment => Workload::Deployment(Deployment {
            metadata: meta,
            spec: Some(DeploymentSpec {
                replicas: Some(agent.deployment_replicas.unwrap_or(1)),
                selector: label_selector,
                template,
                ..DeploymentSpec::default()
            }),
            ..Deployment::default()
        }),
    };
    let mut services = Vec::new();
    if let Some(v4) = &v4 {
        services.push(service(v4, "IPv4", &selector, &labels, agent, options));
    }
    if let Some(v6) = &v6 {
        services.push(service(v6, "IPv6", &selector, &labels, agent, options));
    }
    let ingress = match (&v4, wants_ingress) {
        (Some(v4), true) => Some(ingress(v4, v4, &labels, agent, options)),
        _ => None,
    };
    Carrier {
        resource: TaskResource {
            runtime_name: name.clone(),
            runtime_type: workload.kind().to_string(),
            service_name_v4: v4,
            service_name_v6: v6,
            runtime_status: RuntimeStatus::Creating,
        },
        name,
        workload,
        services,
        ingress,
    }
}

/// Sets the owner of Services and Ingresses: the workload (so they go with it).
pub fn owned_by(meta: &mut ObjectMeta, workload_kind: &str, name: &str, uid: &str) {
    meta.owner_references = Some(vec![owner_reference("apps/v1", workload_kind, name, uid)]);
}
