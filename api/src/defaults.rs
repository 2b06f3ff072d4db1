//! Defaulting: what a task means when fields are left out.
//!
//! Two layers, as upstream: the CRD's schema defaults (applied by the API server to blocks that
//! are present) and the defaults of omitted blocks, which upstream's mutating webhook set and the
//! controller applies here in memory. Both are applied by [`apply`], so `kdoctor validate`, the
//! controller and the agents see the same effective spec.
//!
//! Deviations from upstream, each fixing a quirk:
//! - an omitted `schedule` is `{schedule: "0 1", roundTimeoutMinute: 1, roundNumber: 1}`;
//!   upstream's `roundTimeoutMinute: 60` broke its own rule (timeout ≤ interval), so a task
//!   without a schedule was always rejected;
//! - `perRequestTimeoutInMS`, when not set, is `netHttpDefaultRequestPerRequestTimeoutInMS`
//!   (500 ms) for every kind; upstream's CRD default silently chose 5 ms;
//! - Netdns gets the same block defaults as the other kinds (upstream crashed on a nil block),
//!   and an omitted Netdns `target` means the cluster DNS;
//! - the default NetReach `ingress` target needs IPv4 (ingress is probed over IPv4 only).

use crate::config::Config;
use crate::task::common::{DEFAULT_MEAN_ACCESS_DELAY_IN_MS, DEFAULT_SUCCESS_RATE};
use crate::task::{
    AgentSpec, AppHttpHealthySpec, NetDnsTarget, NetDnsTargetDns, NetHttpRequest, NetReachSpec,
    NetReachTarget, NetSuccessCondition, NetdnsRequest, NetdnsSpec, SchedulePlan, Task,
};

/// `roundTimeoutMinute` when the whole `schedule` block is omitted.
pub const OMITTED_SCHEDULE_ROUND_TIMEOUT_MINUTE: i64 = 1;

/// Facts about the cluster that upstream's webhook looked up to default a NetReach target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterFacts {
    /// A default agent Service has a LoadBalancer ingress address.
    pub default_agent_has_load_balancer: bool,
    /// The default agent Ingress has a load balancer address.
    pub default_agent_has_ingress: bool,
}

/// Fills every omitted field of the task's spec with its default.
///
/// Meant for the object as the user wrote it or as the API server stores it: an omitted
/// `expect` becomes `{successRate: 1}`, and the API server would add `meanAccessDelayInMs: 5000`
/// to that block if it were applied as written.
pub fn apply(task: &mut Task, config: &Config, facts: ClusterFacts) {
    match task {
        Task::NetReach(t) => net_reach(&mut t.spec, config, facts),
        Task::AppHttpHealthy(t) => app_http_healthy(&mut t.spec, config),
        Task::Netdns(t) => netdns(&mut t.spec, config),
    }
}

/// The schedule used when `spec.schedule` is omitted.
pub fn omitted_schedule() -> SchedulePlan {
    SchedulePlan {
        schedule: Some("0 1".to_string()),
        round_timeout_minute: OMITTED_SCHEDULE_ROUND_TIMEOUT_MINUTE,
        round_number: 1,
    }
}

fn net_reach(spec: &mut NetReachSpec, config: &Config, facts: ClusterFacts) {
    spec.target.get_or_insert_with(|| NetReachTarget {
        ipv4: config.enable_ipv4,
        ipv6: config.enable_ipv6,
        load_balancer: facts.default_agent_has_load_balancer,
        ingress: facts.default_agent_has_ingress && config.enable_ipv4,
        ..NetReachTarget::default()
    });
    schedule(&mut spec.schedule);
    http_request(&mut spec.request, config);
    expect(&mut spec.expect);
    agent_spec(&mut spec.agent_spec, config);
}

fn app_http_healthy(spec: &mut AppHttpHealthySpec, config: &Config) {
    if !spec.target.host.contains("://") {
        spec.target.host = format!("http://{}", spec.target.host);
    }
    schedule(&mut spec.schedule);
    http_request(&mut spec.request, config);
    expect(&mut spec.expect);
    agent_spec(&mut spec.agent_spec, config);
}

fn netdns(spec: &mut NetdnsSpec, config: &Config) {
    spec.target.get_or_insert_with(|| NetDnsTarget {
        target_user: None,
        target_dns: Some(NetDnsTargetDns {
            test_ipv4: config.enable_ipv4,
            test_ipv6: config.enable_ipv6,
            ..NetDnsTargetDns::default()
        }),
        enable_latency_metric: false,
    });
    schedule(&mut spec.schedule);
    let request = spec.request.get_or_insert_with(NetdnsRequest::default);
    request
        .per_request_timeout_in_ms
        .get_or_insert(config.net_http_default_request_per_request_timeout_in_ms);
    expect(&mut spec.expect);
    agent_spec(&mut spec.agent_spec, config);
}

fn schedule(plan: &mut Option<SchedulePlan>) {
    plan.get_or_insert_with(omitted_schedule);
}

fn http_request(request: &mut Option<NetHttpRequest>, config: &Config) {
    let request = request.get_or_insert_with(|| NetHttpRequest {
        duration_in_second: config.net_http_default_request_duration_in_second,
        qps: config.net_http_default_request_qps,
        per_request_timeout_in_ms: None,
    });
    request
        .per_request_timeout_in_ms
        .get_or_insert(config.net_http_default_request_per_request_timeout_in_ms);
}

fn expect(expect: &mut Option<NetSuccessCondition>) {
    match expect {
        // Omitted: success rate only, as upstream's webhook.
        None => {
            *expect = Some(NetSuccessCondition {
                success_rate: Some(DEFAULT_SUCCESS_RATE),
                ..NetSuccessCondition::default()
            })
        }
        // Present: the CRD's schema defaults, exactly as the API server applies them.
        Some(e) => {
            e.success_rate.get_or_insert(DEFAULT_SUCCESS_RATE);
            e.mean_access_delay_in_ms
                .get_or_insert(DEFAULT_MEAN_ACCESS_DELAY_IN_MS);
        }
    }
}

fn agent_spec(agent: &mut Option<AgentSpec>, config: &Config) {
    if let Some(agent) = agent {
        agent
            .termination_grace_period_minutes
            .get_or_insert(config.agent_default_termination_grace_period_minutes);
    }
}
