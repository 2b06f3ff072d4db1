//! Rules specific to each kind: the target blocks, and which maximum qps applies.

use super::address::{check_http_url, is_dns_name, is_server_address};
use super::common::{self, Load, object, round_window_ms};
use super::field::{ErrorList, FieldError, FieldPath};
use crate::config::Config;
use crate::task::apphttphealthy::parse_header;
use crate::task::{
    AgentSpec, AppHttpHealthySpec, NetHttpRequest, NetReachSpec, NetSuccessCondition, NetdnsSpec,
    SchedulePlan,
};

pub(super) fn net_reach(
    spec: &NetReachSpec,
    config: &Config,
    path: &FieldPath,
    errors: &mut ErrorList,
) {
    http_blocks(
        HttpBlocks {
            schedule: spec.schedule.as_ref(),
            request: spec.request.as_ref(),
            expect: spec.expect.as_ref(),
            agent_spec: spec.agent_spec.as_ref(),
        },
        config.net_reach_request_max_qps,
        path,
        errors,
    );

    if let Some(isolations) = &spec.isolation {
        super::isolation::check(isolations, &path.child("isolation"), errors);
    }
    let expect_path = path.child("expect");
    let path = path.child("target");
    let Some(target) = &spec.target else {
        errors.push(FieldError::required(path, "target is required"));
        return;
    };
    ip_families(
        target.ipv4,
        target.ipv6,
        ("ipv4", "ipv6"),
        config,
        &path,
        errors,
    );
    if !(target.endpoint
        || target.cluster_ip
        || target.node_port
        || target.load_balancer
        || target.ingress)
    {
        errors.push(FieldError::invalid(
            path.clone(),
            object(),
            "at least one of endpoint, clusterIP, nodePort, loadBalancer and ingress must be true",
        ));
    }
    // Fields that only mean something with another one.
    for (set, field, needed, message) in [
        (
            target.ingress,
            "ingress",
            target.ipv4,
            "ingress targets are IPv4 only: ingress requires ipv4",
        ),
        (
            target.multus_interface,
            "multusInterface",
            target.endpoint,
            "multusInterface adds secondary pod IPs: it requires endpoint",
        ),
        (
            target.udp,
            "udp",
            target.endpoint,
            "udp sends echoes to the agent pods' IPs: it requires endpoint",
        ),
        (
            target.icmp,
            "icmp",
            target.endpoint,
            "icmp sends echoes to the agent pods' IPs: it requires endpoint",
        ),
        (
            target.path_mtu,
            "pathMTU",
            target.udp,
            "pathMTU is searched with UDP echoes: it requires udp",
        ),
    ] {
        if set && !needed {
            errors.push(FieldError::invalid(path.child(field), true, message));
        }
    }
    if !target.path_mtu {
        no_path_mtu_bound(spec.expect.as_ref(), &expect_path, errors);
    }
    if !target.udp && !target.icmp {
        no_jitter_bound(
            spec.expect.as_ref(),
            "without target.udp or target.icmp",
            &expect_path,
            errors,
        );
    }
}

/// `spec.expect.minPathMTU` where no path MTU is searched for.
fn no_path_mtu_bound(
    expect: Option<&NetSuccessCondition>,
    path: &FieldPath,
    errors: &mut ErrorList,
) {
    if expect.is_some_and(|e| e.min_path_mtu.is_some()) {
        errors.push(FieldError::forbidden(
            path.child("minPathMTU"),
            PATH_MTU_BOUND_ALONE,
        ));
    }
}

/// Why `spec.expect.minPathMTU` is refused without `spec.target.pathMTU`.
pub const PATH_MTU_BOUND_ALONE: &str =
    "minPathMTU bounds the path MTU, which only a NetReach task's target.pathMTU searches for";

/// `spec.expect.maxJitterInMs` where nothing measures jitter (only UDP and ICMP echoes do).
fn no_jitter_bound(
    expect: Option<&NetSuccessCondition>,
    why: &str,
    path: &FieldPath,
    errors: &mut ErrorList,
) {
    if expect.is_some_and(|e| e.max_jitter_in_ms.is_some()) {
        errors.push(FieldError::forbidden(
            path.child("maxJitterInMs"),
            format!("jitter is measured by UDP and ICMP echoes only: nothing measures it {why}"),
        ));
    }
}

pub(super) fn app_http_healthy(
    spec: &AppHttpHealthySpec,
    config: &Config,
    path: &FieldPath,
    errors: &mut ErrorList,
) {
    http_blocks(
        HttpBlocks {
            schedule: spec.schedule.as_ref(),
            request: spec.request.as_ref(),
            expect: spec.expect.as_ref(),
            agent_spec: spec.agent_spec.as_ref(),
        },
        config.app_http_healthy_request_max_qps,
        path,
        errors,
    );
    no_jitter_bound(
        spec.expect.as_ref(),
        "in an AppHttpHealthy task",
        &path.child("expect"),
        errors,
    );
    no_path_mtu_bound(spec.expect.as_ref(), &path.child("expect"), errors);

    let path = path.child("target");
    let target = &spec.target;
    if let Err(rule) = check_http_url(&target.host) {
        errors.push(FieldError::invalid(path.child("host"), &target.host, rule));
    }
    for (i, entry) in target.header.iter().flatten().enumerate() {
        if let Err(e) = parse_header(entry) {
            errors.push(FieldError::invalid(
                path.child("header").index(i),
                entry,
                e.to_string(),
            ));
        }
    }
    paired(
        (&target.tls_secret_name, "tlsSecretName"),
        (&target.tls_secret_namespace, "tlsSecretNamespace"),
        &path,
        errors,
    );
    paired(
        (&target.body_configmap_name, "bodyConfigmapName"),
        (&target.body_configmap_namespace, "bodyConfigmapNamespace"),
        &path,
        errors,
    );
}

pub(super) fn netdns(spec: &NetdnsSpec, config: &Config, path: &FieldPath, errors: &mut ErrorList) {
    common::schedule(spec.schedule.as_ref(), &path.child("schedule"), errors);
    let request_path = path.child("request");
    match &spec.request {
        None => errors.push(FieldError::required(request_path, "request is required")),
        Some(request) => {
            common::load(
                &Load {
                    duration_in_second: request.duration_in_second,
                    qps: request.qps,
                    per_request_timeout_in_ms: request.per_request_timeout_in_ms,
                },
                config.net_dns_request_max_qps,
                round_window_ms(spec.schedule.as_ref()),
                &request_path,
                errors,
            );
            if !is_dns_name(&request.domain) {
                errors.push(FieldError::invalid(
                    request_path.child("domain"),
                    &request.domain,
                    "must be a DNS name: dot-separated labels of at most 63 letters, digits, \
                     '-' or '_', at most 253 characters",
                ));
            }
        }
    }
    common::expect(spec.expect.as_ref(), false, &path.child("expect"), errors);
    no_jitter_bound(
        spec.expect.as_ref(),
        "in a Netdns task",
        &path.child("expect"),
        errors,
    );
    no_path_mtu_bound(spec.expect.as_ref(), &path.child("expect"), errors);
    common::agent_spec(spec.agent_spec.as_ref(), &path.child("agentSpec"), errors);

    let path = path.child("target");
    let Some(target) = &spec.target else {
        errors.push(FieldError::required(path, "target is required"));
        return;
    };
    match (&target.target_user, &target.target_dns) {
        (Some(user), None) => {
            let path = path.child("targetUser");
            match user.server.as_deref() {
                None => errors.push(FieldError::required(
                    path.child("server"),
                    "the address of the DNS server is required",
                )),
                Some(server) if !is_server_address(server) => errors.push(FieldError::invalid(
                    path.child("server"),
                    server,
                    "must be an IP address or a host name",
                )),
                Some(_) => {}
            }
            common::within(user.port, 1, 65_535, path.child("port"), errors);
        }
        (None, Some(dns)) => {
            let path = path.child("targetDns");
            paired(
                (&dns.service_name, "serviceName"),
                (&dns.service_namespace, "serviceNamespace"),
                &path,
                errors,
            );
            ip_families(
                dns.test_ipv4,
                dns.test_ipv6,
                ("testIPv4", "testIPv6"),
                config,
                &path,
                errors,
            );
        }
        _ => errors.push(FieldError::invalid(
            path,
            object(),
            "exactly one of targetUser and targetDns must be set",
        )),
    }
}

/// The blocks NetReach and AppHttpHealthy share.
struct HttpBlocks<'a> {
    schedule: Option<&'a SchedulePlan>,
    request: Option<&'a NetHttpRequest>,
    expect: Option<&'a NetSuccessCondition>,
    agent_spec: Option<&'a AgentSpec>,
}

fn http_blocks(blocks: HttpBlocks<'_>, max_qps: i64, path: &FieldPath, errors: &mut ErrorList) {
    common::schedule(blocks.schedule, &path.child("schedule"), errors);
    match blocks.request {
        None => errors.push(FieldError::required(
            path.child("request"),
            "request is required",
        )),
        Some(request) => common::load(
            &Load {
                duration_in_second: request.duration_in_second,
                qps: request.qps,
                per_request_timeout_in_ms: request.per_request_timeout_in_ms,
            },
            max_qps,
            round_window_ms(blocks.schedule),
            &path.child("request"),
            errors,
        ),
    }
    common::expect(blocks.expect, true, &path.child("expect"), errors);
    common::agent_spec(blocks.agent_spec, &path.child("agentSpec"), errors);
}

/// Two fields that only make sense together.
fn paired(
    a: (&Option<String>, &str),
    b: (&Option<String>, &str),
    path: &FieldPath,
    errors: &mut ErrorList,
) {
    match (a.0, b.0) {
        (Some(_), None) => errors.push(FieldError::required(
            path.child(b.1),
            format!("{} needs {}", a.1, b.1),
        )),
        (None, Some(_)) => errors.push(FieldError::required(
            path.child(a.1),
            format!("{} needs {}", b.1, a.1),
        )),
        _ => {}
    }
}

/// IP families asked for: at least one, and each enabled in the configuration.
fn ip_families(
    v4: bool,
    v6: bool,
    names: (&str, &str),
    config: &Config,
    path: &FieldPath,
    errors: &mut ErrorList,
) {
    if !v4 && !v6 {
        errors.push(FieldError::invalid(
            path.clone(),
            object(),
            format!("at least one of {} and {} must be true", names.0, names.1),
        ));
    }
    if v4 && !config.enable_ipv4 {
        errors.push(FieldError::invalid(
            path.child(names.0),
            true,
            "IPv4 is disabled in the kdoctor configuration (enableIPv4: false)",
        ));
    }
    if v6 && !config.enable_ipv6 {
        errors.push(FieldError::invalid(
            path.child(names.1),
            true,
            "IPv6 is disabled in the kdoctor configuration (enableIPv6: false)",
        ));
    }
}
