//! The start of every round's plan, in a cluster and on one machine alike: the effective task
//! (conf.yml's defaults applied by `kdoctor_api::defaults::effective`, the function the
//! controller and `kdoctor validate` use) and the rate, length, timeouts and success condition
//! read from it. Targets are added by the caller from what it discovered.

use std::time::Duration;

use kdoctor_api::config::Config;
use kdoctor_api::defaults::{self, ClusterFacts};
use kdoctor_api::task::Task;

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
    let (load, expect) = match &task {
        Task::NetReach(t) => (
            http_load(
                t.spec
                    .request
                    .as_ref()
                    .unwrap_or(&defaults::omitted_http_request(config)),
            ),
            t.spec.expect.clone(),
        ),
        Task::AppHttpHealthy(t) => (
            http_load(
                t.spec
                    .request
                    .as_ref()
                    .unwrap_or(&defaults::omitted_http_request(config)),
            ),
            t.spec.expect.clone(),
        ),
        Task::Netdns(t) => (
            dns_load(
                t.spec
                    .request
                    .as_ref()
                    .unwrap_or(&defaults::omitted_netdns_request(config)),
            ),
            t.spec.expect.clone(),
        ),
    };
    let plan = RoundPlan {
        kind: task.kind(),
        round,
        task_uid: None,
        node: actor.node.clone(),
        pod: actor.pod.clone(),
        http: Vec::new(),
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
