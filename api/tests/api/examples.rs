//! Every example task of upstream's documentation (docs/usage and docs/reference, v0.2.2) and
//! of this repository's examples/ is valid, and the CRD accepts it.

use kdoctor_api::config::Config;
use kdoctor_api::defaults::ClusterFacts;

use crate::support::{crd_rejections, effective};

/// Upstream's documented tasks (status blocks dropped, `${SERVER}` filled in).
const UPSTREAM: &[(&str, &str)] = &[
    (
        "NetReach of docs/usage/netreach.md and get-started-kind.md (seed 002)",
        "apiVersion: kdoctor.io/v1beta1
kind: NetReach
metadata:
  name: task
spec:
  expect:
    meanAccessDelayInMs: 1500
    successRate: 1
  request:
    durationInSecond: 10
    perRequestTimeoutInMS: 1000
    qps: 10
  schedule:
    roundNumber: 1
    roundTimeoutMinute: 1
    schedule: 0 1
  target:
    clusterIP: true
    endpoint: true
    ingress: true
    ipv4: true
    loadBalancer: true
    multusInterface: false
    nodePort: true
",
    ),
    (
        "NetReach of docs/reference/netreach.md",
        "apiVersion: kdoctor.io/v1beta1
kind: NetReach
metadata:
  name: netreach
spec:
  agentSpec:
    hostNetwork: false
    kind: DaemonSet
    terminationGracePeriodMinutes: 60
  expect:
    meanAccessDelayInMs: 1500
    successRate: 1
  request:
    durationInSecond: 10
    perRequestTimeoutInMS: 1000
    qps: 10
  schedule:
    roundNumber: 1
    roundTimeoutMinute: 1
    schedule: 0 1
  target:
    clusterIP: true
    enableLatencyMetric: false
    endpoint: true
    ingress: true
    ipv4: true
    ipv6: true
    loadBalancer: true
    multusInterface: false
    nodePort: true
",
    ),
    (
        "AppHttpHealthy of docs/reference/apphttphealthy.md",
        "apiVersion: kdoctor.io/v1beta1
kind: AppHttpHealthy
metadata:
  name: apphttphealth
spec:
  agentSpec:
    hostNetwork: false
    kind: DaemonSet
    terminationGracePeriodMinutes: 60
  expect:
    meanAccessDelayInMs: 1500
    successRate: 1
  request:
    durationInSecond: 10
    perRequestTimeoutInMS: 2000
    qps: 10
  schedule:
    roundNumber: 1
    roundTimeoutMinute: 1
    schedule: 0 1
  target:
    enableLatencyMetric: false
    host: http://www.baidu.com
    http2: false
    method: GET
",
    ),
    (
        "AppHttpHealthy http1 of docs/usage/apphttphealthy.md",
        "apiVersion: kdoctor.io/v1beta1
kind: AppHttpHealthy
metadata:
  name: http1
spec:
  request:
    durationInSecond: 10
    perRequestTimeoutInMS: 1000
    qps: 10
  schedule:
    roundNumber: 1
    roundTimeoutMinute: 1
    schedule: 0 1
  expect:
    meanAccessDelayInMs: 1000
    successRate: 1
  target:
    host: http://172.41.71.0
    method: GET
",
    ),
    (
        "AppHttpHealthy http-body of docs/usage/apphttphealthy.md",
        "apiVersion: kdoctor.io/v1beta1
kind: AppHttpHealthy
metadata:
  name: http-body
spec:
  request:
    durationInSecond: 10
    perRequestTimeoutInMS: 1000
    qps: 10
  schedule:
    roundNumber: 1
    roundTimeoutMinute: 1
    schedule: 0 1
  expect:
    meanAccessDelayInMs: 1000
    successRate: 1
    statusCode: 200
  target:
    bodyConfigmapName: kdoctor-test-body
    bodyConfigmapNamespace: kdoctor-test-server
    header:
     - \"Content-Type: application/json\"
    host: http://172.41.71.0
    method: POST
",
    ),
    (
        "AppHttpHealthy https of docs/usage/apphttphealthy.md",
        "apiVersion: kdoctor.io/v1beta1
kind: AppHttpHealthy
metadata:
  name: https
spec:
  request:
    durationInSecond: 10
    perRequestTimeoutInMS: 1000
    qps: 10
  schedule:
    roundNumber: 1
    roundTimeoutMinute: 1
    schedule: 0 1
  expect:
    meanAccessDelayInMs: 1000
    successRate: 1
    statusCode: 200
  target:
    host: https://172.40.0.35
    method: GET
    tlsSecretName: https-client-cert
    tlsSecretNamespace: kdoctor-test-server
",
    ),
    (
        "AppHttpHealthy http-test of docs/usage/get-started-kind.md",
        "apiVersion: kdoctor.io/v1beta1
kind: AppHttpHealthy
metadata:
  name: http-test
spec:
  request:
    durationInSecond: 10
    perRequestTimeoutInMS: 1000
    qps: 10
  schedule:
    roundNumber: 1
    roundTimeoutMinute: 1
    schedule: 0 1
  expect:
    meanAccessDelayInMs: 1000
    successRate: 1
  target:
    host: http://172.41.95.144
    method: GET
",
    ),
    (
        "Netdns cluster of docs/usage/netdns.md",
        "apiVersion: kdoctor.io/v1beta1
kind: Netdns
metadata:
  name: cluster
spec:
  expect:
    meanAccessDelayInMs: 1500
    successRate: 1
  request:
    domain: kubernetes.default.svc.cluster.local
    durationInSecond: 10
    perRequestTimeoutInMS: 1000
    protocol: udp
    qps: 10
  schedule:
    roundNumber: 1
    roundTimeoutMinute: 1
    schedule: 0 1
  target:
    targetDns:
      serviceName: kube-dns
      serviceNamespace: kube-system
      testIPv4: true
",
    ),
    (
        "Netdns user of docs/usage/netdns.md",
        "apiVersion: kdoctor.io/v1beta1
kind: Netdns
metadata:
  name: user
spec:
  expect:
    meanAccessDelayInMs: 1500
    successRate: 1
  request:
    domain: kubernetes.default.svc.cluster.local
    durationInSecond: 10
    perRequestTimeoutInMS: 1000
    protocol: udp
    qps: 10
  schedule:
    roundNumber: 1
    roundTimeoutMinute: 1
    schedule: 0 1
  target:
    targetUser:
      port: 53
      server: 172.41.71.0
",
    ),
    (
        "Netdns of docs/reference/netdns.md",
        "apiVersion: kdoctor.io/v1beta1
kind: Netdns
metadata:
  name: netdns-cluster
spec:
  agentSpec:
    hostNetwork: false
    kind: DaemonSet
    terminationGracePeriodMinutes: 60
  expect:
    meanAccessDelayInMs: 1500
    successRate: 1
  request:
    domain: kubernetes.default.svc.cluster.local
    durationInSecond: 10
    perRequestTimeoutInMS: 1000
    protocol: udp
    qps: 10
  schedule:
    roundNumber: 1
    roundTimeoutMinute: 1
    schedule: 0 1
  target:
    enableLatencyMetric: false
    targetDns:
      serviceName: kube-dns
      serviceNamespace: kube-system
      testIPv4: true
      testIPv6: true
",
    ),
];

#[test]
fn upstream_documented_tasks_are_valid_and_accepted_by_the_crd() {
    for (what, yaml) in UPSTREAM {
        let task = effective(yaml, &Config::default(), ClusterFacts::default());
        assert!(!task.name().is_empty(), "{what}");
        let rejections = crd_rejections(yaml, None);
        assert!(
            rejections.is_empty(),
            "{what}: the CRD rejects it: {rejections:?}"
        );
    }
}

#[test]
fn repository_examples_are_valid_and_accepted_by_the_crd() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).expect("examples/ exists") {
        let path = entry.expect("readable").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable");
        for document in text.split("\n---\n").filter(|d| d.contains("apiVersion")) {
            effective(document, &Config::default(), ClusterFacts::default());
            let rejections = crd_rejections(document, None);
            assert!(rejections.is_empty(), "{}: {rejections:?}", path.display());
            seen += 1;
        }
    }
    assert!(
        seen >= 3,
        "expected at least three example tasks, found {seen}"
    );
}
