//! The agent's command line: ports and environment variable names as upstream (§15.2), every
//! port also a flag.

use std::net::IpAddr;
use std::path::PathBuf;

/// Settings of `kdoctor agent`.
#[derive(clap::Args, Clone, Debug)]
pub struct AgentArgs {
    /// Port of the HTTP echo target (NetReach probes it).
    #[arg(long, env = "ENV_AGENT_APP_HTTP_PORT", default_value_t = 80)]
    pub app_http_port: u16,

    /// Port of the HTTPS echo target (HTTP/2 by ALPN).
    #[arg(long, env = "ENV_AGENT_APP_HTTPS_PORT", default_value_t = 443)]
    pub app_https_port: u16,

    /// Port of the UDP echo target (NetReach `spec.target.udp` sends it kdoctor's echo
    /// datagrams; anything else is dropped). Not the echo service's port 7: an unprivileged
    /// port keeps the pod's unprivileged-port sysctl at 80.
    #[arg(long, env = "ENV_AGENT_APP_UDP_ECHO_PORT", default_value_t = 5712)]
    pub udp_echo_port: u16,

    /// Port of the health endpoints (`/healthy/startup|readiness|liveness`).
    #[arg(long, env = "ENV_AGENT_HEALTH_HTTP_PORT", default_value_t = 5710)]
    pub health_port: u16,

    /// Port of `/metrics`.
    #[arg(long, env = "ENV_METRIC_HTTP_PORT", default_value_t = 5711)]
    pub metrics_port: u16,

    /// Addresses to listen on, repeated or comma-separated (`--bind=$(POD_IPS)` with the
    /// downward API's `status.podIPs`); the default `::` accepts IPv4 and IPv6 (falls back to
    /// 0.0.0.0 where IPv6 is disabled).
    #[arg(long = "bind", value_name = "IP", default_value = "::", num_args = 1.., value_delimiter = ',')]
    pub bind: Vec<IpAddr>,

    /// Server certificate (PEM) of the HTTPS target; default: a generated self-signed one.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of `--tls-cert`.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Name the echo API answers with (`serverName`); default: the host name.
    #[arg(long, env = "ENV_POD_NAME")]
    pub pod_name: Option<String>,

    /// Node the agent runs on (reports carry it).
    #[arg(long, env = "ENV_LOCAL_NODE_NAME")]
    pub node_name: Option<String>,

    /// Report spool directory (kept across restarts); with it the report API is served.
    #[arg(long, value_name = "DIR", env = "ENV_AGENT_REPORT_STORAGE_PATH")]
    pub report_dir: Option<PathBuf>,

    /// Port of the report API (HTTPS, client certificates of `--tls-ca-cert` only); upstream's
    /// gRPC port, whose remote commands it replaces.
    #[arg(long, env = "ENV_AGENT_GRPC_LISTEN_PORT", default_value_t = 3000)]
    pub report_port: u16,

    /// Also serve the app-mode DNS test server (upstream §14.3): `netdns-e2e*` names answered,
    /// others forwarded to `--dns-upstream` or refused.
    #[arg(long)]
    pub dns_server: bool,

    /// UDP port of the DNS test server.
    #[arg(long, env = "ENV_AGENT_APP_DNS_UDP_PORT", default_value_t = 53)]
    pub dns_udp_port: u16,

    /// TCP port of the DNS test server.
    #[arg(long, env = "ENV_AGENT_APP_DNS_TCP_PORT", default_value_t = 53)]
    pub dns_tcp_port: u16,

    /// DNS-over-TLS port of the DNS test server (certificate: the HTTPS target's).
    #[arg(long, env = "ENV_AGENT_APP_DNS_TCP_TLS_PORT", default_value_t = 853)]
    pub dns_tls_port: u16,

    /// Where the DNS test server forwards other names (UDP), e.g. the cluster DNS `IP:53`.
    #[arg(long, value_name = "ADDR")]
    pub dns_upstream: Option<std::net::SocketAddr>,

    /// The install's CA certificate (PEM): the report API accepts only clients it signed.
    #[arg(long, value_name = "FILE", default_value = "/etc/tls/ca.crt")]
    pub tls_ca_cert: PathBuf,

    /// This pod's ServiceAccount token for the report API's audience (a projected volume,
    /// rotated by the kubelet): the report API shows it to the harvester, which has the API
    /// server check that it belongs to the pod it meant to reach.
    #[arg(long, value_name = "FILE", default_value = kdoctor_transport::report_api::DEFAULT_TOKEN_PATH)]
    pub report_token: PathBuf,

    /// Most time series the per-probe metrics hold (a histogram counts its buckets, +Inf,
    /// _sum and _count); a new label set beyond it is refused and counted.
    #[arg(long, value_name = "N", default_value_t = crate::probe_metrics::DEFAULT_MAX_SERIES)]
    pub metrics_max_series: usize,
}

impl AgentArgs {
    /// Settings for tests and embedding: every port 0 (chosen by the OS) on `bind`.
    pub fn ephemeral(bind: Vec<IpAddr>) -> AgentArgs {
        AgentArgs {
            app_http_port: 0,
            app_https_port: 0,
            udp_echo_port: 0,
            health_port: 0,
            metrics_port: 0,
            bind,
            tls_cert: None,
            tls_key: None,
            pod_name: Some("kdoctor-agent-test".to_string()),
            node_name: None,
            report_dir: None,
            report_port: 0,
            dns_server: false,
            dns_udp_port: 0,
            dns_tcp_port: 0,
            dns_tls_port: 0,
            dns_upstream: None,
            tls_ca_cert: PathBuf::from("/etc/tls/ca.crt"),
            report_token: PathBuf::from(kdoctor_transport::report_api::DEFAULT_TOKEN_PATH),
            metrics_max_series: crate::probe_metrics::DEFAULT_MAX_SERIES,
        }
    }
}

/// Which tasks the agent runs and where it finds what they probe (upstream's agent flags).
/// Without `--default-agent` or `--task-kind` the agent only serves its targets.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TaskArgs {
    /// Run the rounds of every task without `agentSpec` (the default agent DaemonSet).
    #[arg(long, conflicts_with = "task_kind")]
    pub default_agent: bool,

    /// Run the rounds of one task only: its kind (a task's own carrier).
    #[arg(long, value_name = "KIND", requires = "task_name")]
    pub task_kind: Option<kdoctor_api::task::TaskKind>,

    /// The one task's name (with `--task-kind`).
    #[arg(long, value_name = "NAME", requires = "task_kind")]
    pub task_name: Option<String>,

    /// The carrier's IPv4 Service (ClusterIP, NodePort and LoadBalancer targets); default: the
    /// one the task's `status.resource` names.
    #[arg(long, value_name = "NAME")]
    pub service_ipv4_name: Option<String>,

    /// The carrier's IPv6 Service.
    #[arg(long, value_name = "NAME")]
    pub service_ipv6_name: Option<String>,

    /// `conf.yml` of the install (multus annotation key, Ingress and DaemonSet names);
    /// default: upstream's values.
    #[arg(long, short = 'C', value_name = "FILE")]
    pub config_path: Option<PathBuf>,

    /// Namespace of the agents, their Services and Ingresses.
    #[arg(long, env = "ENV_POD_NAMESPACE", default_value = "kdoctor")]
    pub namespace: String,

    /// This node's address for NodePort targets (the pod's `status.hostIP`); default: the
    /// Node object's last InternalIP of each family, as upstream.
    #[arg(long, env = "ENV_LOCAL_NODE_IP", value_name = "IP")]
    pub node_ip: Option<IpAddr>,

    /// Label key selecting the cluster DNS Services in kube-system (Netdns `targetDns`).
    #[arg(
        long,
        env = "ENV_DNS_SERVICE_SELECT_LABEL_KEY",
        default_value = "kubernetes.io/name"
    )]
    pub dns_service_label_key: String,

    /// Label value selecting the cluster DNS Services.
    #[arg(
        long,
        env = "ENV_DNS_SERVICE_SELECT_LABEL_VALUE",
        default_value = "CoreDNS"
    )]
    pub dns_service_label_value: String,

    /// Hours a spooled report waits for the harvester before it is dropped.
    #[arg(long, value_name = "HOURS", default_value_t = 24)]
    pub report_expiry_hours: u64,
}

impl TaskArgs {
    /// Whether the agent runs rounds at all.
    pub fn runs_tasks(&self) -> bool {
        self.default_agent || self.task_kind.is_some()
    }
}

/// The host name, for `serverName` when no pod name is given.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "kdoctor-agent".to_string())
}
