//! The round plan of a due task: its targets from the spec and what discovery found, its load,
//! and every set-up problem as a reason the round fails (the report says why, as upstream's
//! does, instead of the round silently not running).

use std::time::Duration;

use kdoctor_api::task::Task;

use super::discover::Discovery;
use super::duty::Duty;
use crate::resource::Source;
use crate::round::execute::RoundPlan;
use crate::round::peers;
use crate::round::targets::{
    app_http_target, dns_load, http_load, netdns_targets, netreach_targets,
};

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

/// Builds the plan of `duty` for `task`, probing for at most `time_box`.
pub async fn plan(
    task: &Task,
    duty: &Duty,
    discovery: &Discovery,
    actor: &Actor,
    time_box: Duration,
) -> RoundPlan {
    let mut plan = RoundPlan {
        kind: duty.kind,
        round: duty.round,
        task_uid: Some(duty.uid.clone()),
        node: actor.node.clone(),
        pod: actor.pod.clone(),
        http: Vec::new(),
        dns: Vec::new(),
        load: http_load(None),
        expect: None,
        tls: None,
        round_timeout: time_box,
        setup_failures: Vec::new(),
        resources: actor.resources.clone(),
    };
    match task {
        Task::NetReach(t) => {
            plan.load = http_load(t.spec.request.as_ref());
            plan.expect = t.spec.expect.clone();
            let target = t.spec.target.clone().unwrap_or_default();
            let resource = t.status.as_ref().and_then(|s| s.resource.as_ref());
            let (mut carrier, problems) = discovery.netreach(&target, resource).await;
            if let Some(k) = target.max_peers {
                carrier.pods = peers::sample(&carrier.pods, &actor.pod, duty.round, k as usize);
            }
            let (targets, missing) = netreach_targets(&target, &carrier);
            plan.http = targets;
            plan.setup_failures.extend(problems);
            plan.setup_failures.extend(missing);
        }
        Task::AppHttpHealthy(t) => {
            plan.load = http_load(t.spec.request.as_ref());
            plan.expect = t.spec.expect.clone();
            match discovery.app_http(&t.spec).await {
                Ok((body, tls)) => {
                    plan.tls = tls;
                    match app_http_target(&t.spec, body) {
                        Ok(target) => plan.http.push(target),
                        Err(e) => plan.setup_failures.push(e.to_string()),
                    }
                }
                Err(e) => plan.setup_failures.push(e.to_string()),
            }
        }
        Task::Netdns(t) => {
            plan.load = dns_load(t.spec.request.as_ref());
            plan.expect = t.spec.expect.clone();
            let target = t.spec.target.clone().unwrap_or_default();
            let mut cluster = Vec::new();
            if target.target_user.is_none() {
                let dns = target.target_dns.clone().unwrap_or_default();
                match discovery.cluster_dns(&dns).await {
                    Ok(ips) => cluster = ips,
                    Err(e) => plan.setup_failures.push(e.to_string()),
                }
            }
            match netdns_targets(&t.spec, &cluster) {
                Ok(targets) => plan.dns = targets,
                Err(e) => plan.setup_failures.push(e.to_string()),
            }
        }
    }
    plan
}
