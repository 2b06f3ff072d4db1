//! conf.yml: upstream's keys and defaults; missing keys default, unknown keys and nonsense fail.

use kdoctor_api::config::{Config, ConfigError};

/// conf.yml as upstream's Helm chart renders it with its default values.
const UPSTREAM_CHART: &str = "
enableIPv4: true
enableIPv6: true
taskPollIntervalInSecond: 5
netHttpDefaultRequestQPS: 10
netHttpDefaultRequestDurationInSecond: 2
netHttpDefaultRequestPerRequestTimeoutInMS: 500
netDnsRequestMaxQPS: 100
netReachRequestMaxQPS: 20
appHttpHealthyRequestMaxQPS: 100
multusPodAnnotationKey: k8s.v1.cni.cncf.io/networks-status
agentDefaultTerminationGracePeriodMinutes: 60
crdMaxHistory: 10
agentSerivceIpv4Name: kdoctor-agent-ipv4
agentSerivceIpv6Name: kdoctor-agent-ipv6
agentDaemonsetName: kdoctor-agent
agentIngressName: kdoctor-agent
kdoctorAgent:
  uniqueMatchLabelKey:
";

#[test]
fn upstream_chart_config_reads_and_equals_the_defaults() {
    let config = Config::from_yaml(UPSTREAM_CHART).expect("reads");
    assert_eq!(config, Config::default());
    assert_eq!(config.unique_match_label_key(), "app.kubernetes.io/name");
}

#[test]
fn missing_keys_take_defaults_instead_of_zero() {
    let config = Config::from_yaml("netReachRequestMaxQPS: 50\n").expect("reads");
    assert_eq!(config.net_reach_request_max_qps, 50);
    assert_eq!(config.crd_max_history, 10);
    assert_eq!(
        Config::from_yaml("").expect("empty is all defaults"),
        Config::default()
    );
}

#[test]
fn unknown_keys_are_errors_that_name_the_key() {
    let err = Config::from_yaml("crdMaxHistroy: 5\n").expect_err("typo");
    assert!(matches!(err, ConfigError::Parse(_)));
    assert!(err.to_string().contains("crdMaxHistroy"), "{err}");
}

#[test]
fn nonsense_values_are_errors_that_name_the_key() {
    let err = Config::from_yaml("crdMaxHistory: 0\nenableIPv4: false\nenableIPv6: false\n")
        .expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "conf.yml is invalid: [crdMaxHistory: Invalid value: 0: must be at least 1, \
         enableIPv6: Invalid value: false: at least one of enableIPv4 and enableIPv6 must be true]"
    );
}

#[test]
fn the_corrected_service_key_spelling_is_accepted_too() {
    let config = Config::from_yaml("agentServiceIpv4Name: other\n").expect("reads");
    assert_eq!(config.agent_service_ipv4_name, "other");
}
