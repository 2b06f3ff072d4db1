//! Defaults equal upstream's (CRD schema defaults plus its webhook's block defaults), with the
//! documented fixes, and the CRD's schema defaults agree with the Rust ones.

use kdoctor_api::config::Config;
use kdoctor_api::defaults::ClusterFacts;
use kdoctor_api::document::{decode_task, schema};
use kdoctor_api::task::{
    AgentKind, DnsProtocol, NetReachTarget, NetSuccessCondition, Task, TaskKind,
};

use crate::support::{effective, json, task};

fn net_reach(task: &Task) -> &kdoctor_api::task::NetReachSpec {
    match task {
        Task::NetReach(t) => &t.spec,
        other => panic!("not a NetReach: {other:?}"),
    }
}

#[test]
fn omitted_net_reach_blocks_take_upstream_webhook_defaults() {
    let t = effective(
        &task("NetReach", "t", "{}"),
        &Config::default(),
        ClusterFacts::default(),
    );
    let spec = net_reach(&t);
    assert_eq!(
        spec.target,
        Some(NetReachTarget {
            ipv4: true,
            ipv6: true, // conf.yml enableIPv6 defaults to true, as upstream's chart
            endpoint: true,
            multus_interface: false,
            cluster_ip: true,
            node_port: true,
            load_balancer: false,
            ingress: false,
            tcp: false,
            udp: false,
            icmp: false,
            path_mtu: false,
            enable_latency_metric: false,
            max_peers: None,
        })
    );
    let request = spec.request.as_ref().expect("request");
    assert_eq!(
        (
            request.qps,
            request.duration_in_second,
            request.per_request_timeout_in_ms
        ),
        (10, 2, Some(500))
    );
    // The webhook's `{successRate: 1}`, with the CRD default the API server adds to a patch.
    assert_eq!(
        spec.expect,
        Some(NetSuccessCondition {
            success_rate: Some(1.0),
            mean_access_delay_in_ms: Some(5000),
            status_code: None,
            max_jitter_in_ms: None,
            min_path_mtu: None,
        })
    );
    let schedule = spec.schedule.as_ref().expect("schedule");
    // Upstream's default (roundTimeoutMinute 60 with "0 1") broke its own rule; see defaults.rs.
    assert_eq!(
        (
            schedule.schedule.as_deref(),
            schedule.round_timeout_minute,
            schedule.round_number
        ),
        (Some("0 1"), 1, 1)
    );
    assert_eq!(spec.agent_spec, None);
}

#[test]
fn the_default_target_follows_the_configuration_and_the_cluster() {
    let config = Config {
        enable_ipv6: false,
        ..Config::default()
    };
    let facts = ClusterFacts {
        default_agent_has_load_balancer: true,
        default_agent_has_ingress: true,
    };
    let t = effective(&task("NetReach", "t", "{}"), &config, facts);
    let target = net_reach(&t).target.clone().expect("target");
    assert!(target.ipv4 && !target.ipv6 && target.load_balancer && target.ingress);

    // Ingress is probed over IPv4 only: never defaulted on without it.
    let config = Config {
        enable_ipv4: false,
        ..Config::default()
    };
    let t = effective(&task("NetReach", "t", "{}"), &config, facts);
    let target = net_reach(&t).target.clone().expect("target");
    assert!(!target.ipv4 && target.ipv6 && !target.ingress);
}

#[test]
fn present_blocks_take_the_crd_defaults() {
    let spec = "request: {}\ntarget: {}\nexpect: {}\nschedule: {schedule: '0 90'}\nagentSpec: {}";
    let t = effective(
        &task("NetReach", "t", spec),
        &Config::default(),
        ClusterFacts::default(),
    );
    let spec = net_reach(&t);
    let request = spec.request.as_ref().expect("request");
    // qps 5 and duration 2 as upstream's CRD; the timeout is NOT upstream's 5 ms but 500 ms.
    assert_eq!(
        (
            request.qps,
            request.duration_in_second,
            request.per_request_timeout_in_ms
        ),
        (5, 2, Some(500))
    );
    assert_eq!(spec.target, Some(NetReachTarget::default()));
    let target = NetReachTarget::default();
    assert!(
        target.ipv4 && !target.ipv6 && target.endpoint && target.cluster_ip && target.node_port
    );
    assert!(!target.load_balancer && !target.ingress && !target.multus_interface);
    assert_eq!(
        spec.expect,
        Some(NetSuccessCondition {
            success_rate: Some(1.0),
            mean_access_delay_in_ms: Some(5000),
            status_code: None,
            max_jitter_in_ms: None,
            min_path_mtu: None,
        })
    );
    let schedule = spec.schedule.as_ref().expect("schedule");
    assert_eq!(
        (schedule.round_timeout_minute, schedule.round_number),
        (60, 1)
    );
    let agent = spec.agent_spec.as_ref().expect("agentSpec");
    assert_eq!(agent.kind, AgentKind::DaemonSet);
    assert!(!agent.host_network);
    assert_eq!(agent.termination_grace_period_minutes, Some(60));
}

#[test]
fn the_termination_grace_period_comes_from_the_configuration() {
    let config = Config {
        agent_default_termination_grace_period_minutes: 5,
        ..Config::default()
    };
    let t = effective(
        &task("NetReach", "t", "agentSpec: {}"),
        &config,
        ClusterFacts::default(),
    );
    let agent = net_reach(&t).agent_spec.clone().expect("agentSpec");
    assert_eq!(agent.termination_grace_period_minutes, Some(5));
}

#[test]
fn app_http_healthy_host_gets_http_when_it_has_no_scheme() {
    for (given, want) in [
        ("example.com:8080/x", "http://example.com:8080/x"),
        // Upstream only checked for the substring "http": this host was left without a scheme.
        (
            "myhttpserver.example.com",
            "http://myhttpserver.example.com",
        ),
        ("https://example.com", "https://example.com"),
    ] {
        let yaml = task(
            "AppHttpHealthy",
            "t",
            &format!("target: {{host: '{given}', method: GET}}"),
        );
        match effective(&yaml, &Config::default(), ClusterFacts::default()) {
            Task::AppHttpHealthy(t) => assert_eq!(t.spec.target.host, want),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn netdns_blocks_are_defaulted_instead_of_crashing() {
    let t = effective(
        &task("Netdns", "t", "{}"),
        &Config::default(),
        ClusterFacts::default(),
    );
    let Task::Netdns(t) = t else {
        panic!("not Netdns")
    };
    let request = t.spec.request.expect("request");
    assert_eq!(request.domain, "kubernetes.default.svc.cluster.local");
    assert_eq!(request.protocol, DnsProtocol::Udp);
    assert_eq!((request.qps, request.duration_in_second), (5, 2));
    assert_eq!(request.per_request_timeout_in_ms, Some(500));
    let target = t.spec.target.expect("target");
    let dns = target.target_dns.expect("the cluster DNS by default");
    assert!(dns.test_ipv4 && dns.test_ipv6 && dns.service_name.is_none());
    assert_eq!(t.spec.expect.and_then(|e| e.success_rate), Some(1.0));
    let user = effective(
        &task("Netdns", "t", "target: {targetUser: {server: 10.96.0.10}}"),
        &Config::default(),
        ClusterFacts::default(),
    );
    let Task::Netdns(user) = user else {
        panic!("not Netdns")
    };
    assert_eq!(
        user.spec.target.and_then(|t| t.target_user).map(|u| u.port),
        Some(53)
    );
}

/// What the API server stores (schema defaults applied) must mean the same task as what the
/// user wrote: decoding either, then applying the controller's defaults, gives one result.
#[test]
fn crd_schema_defaults_agree_with_the_rust_defaults() {
    let specs = [
        ("NetReach", "{}"),
        (
            "NetReach",
            "request: {}\ntarget: {}\nexpect: {}\nschedule: {schedule: '0 90'}\nagentSpec: {}",
        ),
        (
            "NetReach",
            "expect: {meanAccessDelayInMs: 10}\nrequest: {qps: 3}",
        ),
        (
            "AppHttpHealthy",
            "target: {host: 'a.example.com', method: GET}\nrequest: {}\nexpect: {statusCode: 200}",
        ),
        (
            "Netdns",
            "target: {targetUser: {server: 1.1.1.1}}\nrequest: {}",
        ),
        (
            "Netdns",
            "target: {targetDns: {}}\nrequest: {protocol: tcp}\nagentSpec: {kind: Deployment, deploymentReplicas: 2}",
        ),
    ];
    let config = Config::default();
    for (kind, spec) in specs {
        let raw = json(&task(kind, "t", spec));
        let kind_enum: TaskKind = kind.parse().expect("kind");
        let stored = kube::core::cel::apply_defaults(schema(kind_enum), &raw);
        let mut from_user = decode_task(&mut raw.clone()).expect("decodes");
        let mut from_server = decode_task(&mut stored.clone()).expect("decodes");
        kdoctor_api::defaults::apply(&mut from_user, &config, ClusterFacts::default());
        kdoctor_api::defaults::apply(&mut from_server, &config, ClusterFacts::default());
        assert_eq!(from_user, from_server, "{kind} {spec}");
        // Defaulting an effective task again changes nothing: whoever applies the defaults
        // last (controller, agent, local mode) gets the same task.
        let again = kdoctor_api::defaults::effective(&from_user, &config, ClusterFacts::default());
        assert_eq!(again, from_user, "defaults applied twice: {kind} {spec}");
    }
}
