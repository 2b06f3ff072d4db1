//! The configuration file `conf.yml` (ConfigMap `kdoctor`), with upstream's keys and defaults.
//!
//! Upstream reads every missing key as zero (so a missing `crdMaxHistory` breaks the history);
//! here every missing key takes the documented default, unknown keys are an error (a typo must
//! not silently fall back to a default), and nonsensical values are rejected by
//! [`Config::validate`].

use serde::{Deserialize, Serialize};

use crate::validation::field::{ErrorList, FieldError, FieldPath};

/// Settings shared by the controller and the agents.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Config {
    /// IPv4 is available in the cluster.
    #[serde(rename = "enableIPv4")]
    pub enable_ipv4: bool,
    /// IPv6 is available in the cluster.
    #[serde(rename = "enableIPv6")]
    pub enable_ipv6: bool,
    /// How often the controller checks an ongoing round, in seconds.
    pub task_poll_interval_in_second: i64,
    /// qps of an HTTP task whose `request` block is omitted.
    #[serde(rename = "netHttpDefaultRequestQPS")]
    pub net_http_default_request_qps: i64,
    /// durationInSecond of an HTTP task whose `request` block is omitted.
    pub net_http_default_request_duration_in_second: i64,
    /// perRequestTimeoutInMS of any task that does not set it.
    #[serde(rename = "netHttpDefaultRequestPerRequestTimeoutInMS")]
    pub net_http_default_request_per_request_timeout_in_ms: i64,
    /// Netdns qps must be below this.
    #[serde(rename = "netDnsRequestMaxQPS")]
    pub net_dns_request_max_qps: i64,
    /// NetReach qps must be below this.
    #[serde(rename = "netReachRequestMaxQPS")]
    pub net_reach_request_max_qps: i64,
    /// AppHttpHealthy qps must be below this.
    #[serde(rename = "appHttpHealthyRequestMaxQPS")]
    pub app_http_healthy_request_max_qps: i64,
    /// Pod annotation listing multus secondary interfaces.
    pub multus_pod_annotation_key: String,
    /// Minutes a finished task's carrier is kept, when its agentSpec does not say.
    pub agent_default_termination_grace_period_minutes: i64,
    /// Rounds kept in `status.history`.
    pub crd_max_history: i64,
    /// IPv4 Service of the default agent (upstream's spelling `agentSerivceIpv4Name` is kept).
    #[serde(rename = "agentSerivceIpv4Name", alias = "agentServiceIpv4Name")]
    pub agent_service_ipv4_name: String,
    /// IPv6 Service of the default agent (upstream's spelling `agentSerivceIpv6Name` is kept).
    #[serde(rename = "agentSerivceIpv6Name", alias = "agentServiceIpv6Name")]
    pub agent_service_ipv6_name: String,
    /// The default agent DaemonSet.
    pub agent_daemonset_name: String,
    /// Ingress of the default agent.
    pub agent_ingress_name: String,
    /// Agent selection settings.
    pub kdoctor_agent: AgentConfig,
    /// Namespaces, besides the install's, that AppHttpHealthy tasks may read their TLS Secret
    /// and body ConfigMap from (kdoctor's own key; the chart's `taskInputNamespaces`, each of
    /// which also gets the Role that lets the controller read there).
    pub task_input_namespaces: Vec<String>,
}

/// `kdoctorAgent` section of the configuration.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Label key that selects a carrier's pods; empty means `app.kubernetes.io/name`.
    pub unique_match_label_key: String,
}

impl Default for Config {
    /// Upstream's Helm chart values.
    fn default() -> Self {
        Config {
            enable_ipv4: true,
            enable_ipv6: true,
            task_poll_interval_in_second: 5,
            net_http_default_request_qps: 10,
            net_http_default_request_duration_in_second: 2,
            net_http_default_request_per_request_timeout_in_ms: 500,
            net_dns_request_max_qps: 100,
            net_reach_request_max_qps: 20,
            app_http_healthy_request_max_qps: 100,
            multus_pod_annotation_key: "k8s.v1.cni.cncf.io/networks-status".to_string(),
            agent_default_termination_grace_period_minutes: 60,
            crd_max_history: 10,
            agent_service_ipv4_name: "kdoctor-agent-ipv4".to_string(),
            agent_service_ipv6_name: "kdoctor-agent-ipv6".to_string(),
            agent_daemonset_name: "kdoctor-agent".to_string(),
            agent_ingress_name: "kdoctor-agent".to_string(),
            kdoctor_agent: AgentConfig::default(),
            task_input_namespaces: Vec::new(),
        }
    }
}

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not YAML, or a key of the wrong type or unknown.
    #[error("conf.yml: {0}")]
    Parse(#[from] serde_yaml_ng::Error),
    /// Values that make no sense.
    #[error("conf.yml is invalid: {0}")]
    Invalid(ErrorList),
}

impl Config {
    /// Parses `conf.yml` text; missing keys take their defaults. An empty file is all defaults.
    pub fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        let config: Config = if text.trim().is_empty() {
            Config::default()
        } else {
            serde_yaml_ng::from_str(text)?
        };
        config.validate().map_err(ConfigError::Invalid)?;
        Ok(config)
    }

    /// Checks that every value is usable.
    pub fn validate(&self) -> Result<(), ErrorList> {
        let mut errors = ErrorList::default();
        let root = FieldPath::root();
        let positive = [
            (
                "taskPollIntervalInSecond",
                self.task_poll_interval_in_second,
            ),
            (
                "netHttpDefaultRequestQPS",
                self.net_http_default_request_qps,
            ),
            (
                "netHttpDefaultRequestDurationInSecond",
                self.net_http_default_request_duration_in_second,
            ),
            (
                "netHttpDefaultRequestPerRequestTimeoutInMS",
                self.net_http_default_request_per_request_timeout_in_ms,
            ),
            ("netDnsRequestMaxQPS", self.net_dns_request_max_qps),
            ("netReachRequestMaxQPS", self.net_reach_request_max_qps),
            (
                "appHttpHealthyRequestMaxQPS",
                self.app_http_healthy_request_max_qps,
            ),
            ("crdMaxHistory", self.crd_max_history),
        ];
        for (key, value) in positive {
            if value < 1 {
                errors.push(FieldError::invalid(
                    root.child(key),
                    value,
                    "must be at least 1",
                ));
            }
        }
        if self.agent_default_termination_grace_period_minutes < 0 {
            errors.push(FieldError::invalid(
                root.child("agentDefaultTerminationGracePeriodMinutes"),
                self.agent_default_termination_grace_period_minutes,
                "must not be negative",
            ));
        }
        if !self.enable_ipv4 && !self.enable_ipv6 {
            errors.push(FieldError::invalid(
                root.child("enableIPv6"),
                false,
                "at least one of enableIPv4 and enableIPv6 must be true",
            ));
        }
        errors.into_result()
    }

    /// Label key that selects a carrier's pods.
    pub fn unique_match_label_key(&self) -> &str {
        if self.kdoctor_agent.unique_match_label_key.is_empty() {
            "app.kubernetes.io/name"
        } else {
            &self.kdoctor_agent.unique_match_label_key
        }
    }
}
