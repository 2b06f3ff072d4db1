//! The start of every round's plan, in a cluster and on one machine alike: the effective task
//! (conf.yml's defaults applied by `kdoctor_api::defaults::effective`, the function the
//! controller and `kdoctor validate` use) and the rate, length, timeouts and success condition
//! read from it. Targets are added by the caller from what it discovered.

use std::time::Duration;

use kdoctor_api::config::Config;
use kdoctor_api::defaults::{self, ClusterFacts};
use kdoctor_api::task::{NetHttpRequest, Task};

use super::execute::RoundPlan;
use super::targets::{dns_load, http_load};
use crate::resource::Source;

/// Who runs the round.
#[derive(Clone, Debug)]
pub struct Actor {
    /// Node name.
    pub node: String,
    /// Pod name.
    pub pod: String,
    /// Where CPU and memory are read.
    pub resources: Source,
}

/// The effective task and the plan of its round `round`, without targets, time-boxed to
/// `round_timeout`.
pub fn prepare(
    task: &Task,
    config: &Config,
    facts: ClusterFacts,
    actor: &Actor,
    round: i64,
    round_timeout: Duration,
) -> (Task, RoundPlan) {
    let task = defaults::effective(task, config, facts);
    // Defaults filled every `request`; the fallbacks only keep this total.
    let http = |r: Option<&NetHttpRequest>| match r {
        Some(r) => http_load(r),
        None => http_load(&defaults::omitted_http_request(config)),
    };
    let (load, expect) = match &task {
        Task::NetReach(t) => (http(t.spec.request.as_ref()), &t.spec.expect),
        Task::AppHttpHealthy(t) => (http(t.spec.request.as_ref()), &t.spec.expect),
        Task::Netdns(t) => (
            match &t.spec.request {
                Some(r) => dns_load(r),
                None => dns_load(&defaults::omitted_netdns_request(config)),
            },
            &t.spec.expect,
        ),
    };
    let expect = expect.clone();
    let plan = RoundPlan {
        kind: task.kind(),
        round,
        task_uid: None,
        node: actor.node.clone(),
        pod: actor.pod.clone(),
        http: Vec::new(),
        tcp: Vec::new(),
        udp: Vec::new(),
        icmp: Vec::new(),
        isolation: Vec::new(),
        path_mtu: false,
        dns: Vec::new(),
        load,
        expect,
        tls: None,
        round_timeout,
        setup_failures: Vec::new(),
        resources: actor.resources.clone(),
    };
    (task, plan)
}
