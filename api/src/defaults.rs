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

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;

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

impl ClusterFacts {
    /// Whether defaulting `task` depends on the facts (a NetReach task without `target`); the
    /// cluster is read only then.
    pub fn needed(task: &Task) -> bool {
        matches!(task, Task::NetReach(t) if t.spec.target.is_none())
    }

    /// The facts from the default agent's IPv4 Service and its Ingress (`None`: not found), as
    /// the controller and the agents both read them.
    pub fn of(service: Option<&Service>, ingress: Option<&Ingress>) -> ClusterFacts {
        let service_lb = service
            .and_then(|s| s.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref())
            .is_some_and(|i| !i.is_empty());
        let ingress_lb = ingress
            .and_then(|i| i.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref())
            .is_some_and(|i| !i.is_empty());
        ClusterFacts {
            default_agent_has_load_balancer: service_lb,
            default_agent_has_ingress: ingress_lb,
        }
    }
}

/// The effective task: `task` with every omitted field defaulted from `config` (conf.yml) and
/// `facts`. The one function the controller, the agents, `kdoctor local` and `kdoctor validate`
/// use, so one task file means one thing everywhere; applying it twice changes nothing.
pub fn effective(task: &Task, config: &Config, facts: ClusterFacts) -> Task {
    let mut task = task.clone();
    apply(&mut task, config, facts);
    task
}

/// The `request` of a NetReach or AppHttpHealthy task that omits it (conf.yml's defaults).
pub fn omitted_http_request(config: &Config) -> NetHttpRequest {
    NetHttpRequest {
        duration_in_second: config.net_http_default_request_duration_in_second,
        qps: config.net_http_default_request_qps,
        per_request_timeout_in_ms: Some(config.net_http_default_request_per_request_timeout_in_ms),
    }
}

/// The `request` of a Netdns task that omits it.
pub fn omitted_netdns_request(config: &Config) -> NetdnsRequest {
    NetdnsRequest {
        per_request_timeout_in_ms: Some(config.net_http_default_request_per_request_timeout_in_ms),
        ..NetdnsRequest::default()
    }
}

/// Fills every omitted field of the task's spec with its default.
///
/// Meant for the object as the user wrote it or as the API server stores it; applying it to an
/// effective task changes nothing.
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
    spec.request
        .get_or_insert_with(|| omitted_netdns_request(config))
        .per_request_timeout_in_ms
        .get_or_insert(config.net_http_default_request_per_request_timeout_in_ms);
    expect(&mut spec.expect);
    agent_spec(&mut spec.agent_spec, config);
}

fn schedule(plan: &mut Option<SchedulePlan>) {
    plan.get_or_insert_with(omitted_schedule);
}

fn http_request(request: &mut Option<NetHttpRequest>, config: &Config) {
    request
        .get_or_insert_with(|| omitted_http_request(config))
        .per_request_timeout_in_ms
        .get_or_insert(config.net_http_default_request_per_request_timeout_in_ms);
}

fn expect(expect: &mut Option<NetSuccessCondition>) {
    // Omitted: `{successRate: 1}`, as upstream's webhook set it, and then the CRD's defaults,
    // which the API server applies to a webhook's patch too; present: the CRD's defaults. One
    // rule for both keeps defaulting idempotent.
    let e = expect.get_or_insert_with(|| NetSuccessCondition {
        success_rate: Some(DEFAULT_SUCCESS_RATE),
        ..NetSuccessCondition::default()
    });
    e.success_rate.get_or_insert(DEFAULT_SUCCESS_RATE);
    e.mean_access_delay_in_ms
        .get_or_insert(DEFAULT_MEAN_ACCESS_DELAY_IN_MS);
}

fn agent_spec(agent: &mut Option<AgentSpec>, config: &Config) {
    if let Some(agent) = agent {
        agent
            .termination_grace_period_minutes
            .get_or_insert(config.agent_default_termination_grace_period_minutes);
    }
}
