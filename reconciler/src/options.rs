//! Settings of the controller that are not in `conf.yml`: where it runs and what the carriers
//! it creates look like.

use std::collections::BTreeMap;
use std::time::Duration;

/// The agent's ports (upstream §15.2 defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentPorts {
    /// Echo API over HTTP (`ENV_AGENT_APP_HTTP_PORT`).
    pub http: u16,
    /// Echo API over HTTPS (`ENV_AGENT_APP_HTTPS_PORT`).
    pub https: u16,
    /// UDP echo target (`ENV_AGENT_APP_UDP_ECHO_PORT`).
    pub udp_echo: u16,
    /// Health endpoints (`ENV_AGENT_HEALTH_HTTP_PORT`).
    pub health: u16,
    /// Metrics (`ENV_METRIC_HTTP_PORT`).
    pub metrics: u16,
    /// Report API (`ENV_AGENT_GRPC_LISTEN_PORT`: the port upstream's gRPC used).
    pub report: u16,
}

impl Default for AgentPorts {
    fn default() -> Self {
        AgentPorts {
            http: 80,
            https: 443,
            udp_echo: 5712,
            health: 5710,
            metrics: 5711,
            report: 3000,
        }
    }
}

/// How the controller creates carriers and where it runs.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Namespace of the controller, the default agent and every carrier.
    pub namespace: String,
    /// Container image of the agent.
    pub agent_image: String,
    /// Image pull policy of carrier pods.
    pub image_pull_policy: String,
    /// Service account of carrier pods.
    pub agent_service_account: String,
    /// Secret holding the install's CA certificate (`ca.crt`), mounted into agents.
    pub ca_secret: String,
    /// Secret holding the controller's serving certificate (like the CA's, never a task input).
    pub serving_secret: String,
    /// ConfigMap holding `conf.yml`, mounted into carrier agents.
    pub config_map: String,
    /// Extra arguments appended to carrier agents' command lines.
    pub agent_extra_args: Vec<String>,
    /// Node selector of carrier pods (none by default: every node).
    pub agent_node_selector: BTreeMap<String, String>,
    /// Type of carrier Services (upstream: LoadBalancer).
    pub service_type: String,
    /// Ingress class of carrier Ingresses.
    pub ingress_class: Option<String>,
    /// Agent ports.
    pub ports: AgentPorts,
    /// How often an ongoing round is looked at (and reports harvested).
    pub poll: Duration,
    /// Time allowed for one harvest request to an agent.
    pub harvest_timeout: Duration,
    /// How often carrier objects whose task is gone are looked for and deleted.
    pub orphan_sweep: Duration,
    /// Whether an agent must prove, with its pod-bound ServiceAccount token, that it is the pod
    /// the harvester meant to reach before its reports are read.
    pub verify_agent_identity: bool,
    /// The controller's Service (the report API's, which the APIService names). When it has no
    /// selector, the leading replica keeps its EndpointSlices (crate::replica::endpoints).
    pub service_name: String,
}

impl ControllerOptions {
    /// Defaults for a controller in `namespace`.
    pub fn new(namespace: impl Into<String>) -> ControllerOptions {
        ControllerOptions {
            namespace: namespace.into(),
            agent_image: format!("ghcr.io/kdoctor-io/kdoctor:{}", env!("CARGO_PKG_VERSION")),
            image_pull_policy: "IfNotPresent".to_string(),
            agent_service_account: "kdoctor-agent".to_string(),
            ca_secret: "kdoctor-ca".to_string(),
            serving_secret: "kdoctor-controller-cert".to_string(),
            config_map: "kdoctor".to_string(),
            agent_extra_args: Vec::new(),
            agent_node_selector: BTreeMap::new(),
            service_type: "LoadBalancer".to_string(),
            ingress_class: None,
            ports: AgentPorts::default(),
            poll: Duration::from_secs(5),
            harvest_timeout: Duration::from_secs(5),
            orphan_sweep: Duration::from_secs(60),
            verify_agent_identity: true,
            service_name: "kdoctor-controller".to_string(),
        }
    }
}
