//! The round plan of a due task: the effective task (conf.yml's defaults, as the controller
//! applies them), its targets from the spec and what discovery found, its load, and every
//! set-up problem as a reason the round fails (the report says why, as upstream's does, instead
//! of the round silently not running).

use std::time::Duration;

use kdoctor_api::task::Task;

use super::discover::Discovery;
use super::duty::Duty;
use super::pods::FIRST_LIST;
use crate::round::execute::RoundPlan;
use crate::round::peers;
pub use crate::round::prepare::Actor;
use crate::round::prepare::prepare;
use crate::round::targets::{
    app_http_target, icmp_targets, isolation_targets, netdns_targets, netreach_targets,
    tcp_targets, udp_targets,
};

/// Builds the plan of `duty` for `task`, probing for at most `time_box`.
pub async fn plan(
    task: &Task,
    duty: &Duty,
    discovery: &Discovery,
    actor: &Actor,
    time_box: Duration,
) -> RoundPlan {
    let (facts, facts_problem) = discovery.cluster_facts(task).await;
    let (task, mut plan) = prepare(task, discovery.config(), facts, actor, duty.round, time_box);
    plan.task_uid = Some(duty.uid.clone());
    plan.setup_failures.extend(facts_problem);
    match &task {
        Task::NetReach(t) => {
            let target = t.spec.target.clone().unwrap_or_default();
            let resource = t.status.as_ref().and_then(|s| s.resource.as_ref());
            let wait = peer_list_wait(plan.round_timeout, plan.load.duration);
            let asked = std::time::Instant::now();
            let (mut carrier, problems) = discovery.netreach(&target, resource, wait).await;
            // The time waited for peers is the round's: it still ends by its deadline.
            plan.round_timeout = plan.round_timeout.saturating_sub(asked.elapsed());
            if let Some(k) = target.max_peers {
                carrier.pods = peers::sample(&carrier.pods, &actor.pod, duty.round, k as usize);
            }
            let (targets, missing) = netreach_targets(&target, &carrier);
            plan.tcp = tcp_targets(&target, &targets);
            plan.udp = udp_targets(&target, &targets, &carrier);
            plan.icmp = icmp_targets(&target, &targets);
            plan.path_mtu = target.path_mtu;
            plan.http = targets;
            plan.setup_failures.extend(problems);
            plan.setup_failures.extend(missing);
            for isolation in t.spec.isolation.iter().flatten() {
                match discovery.isolation_peers(isolation).await {
                    Ok((peers, more)) => {
                        plan.setup_failures.extend(more);
                        match isolation_targets(&target, isolation, &peers) {
                            Ok(found) => plan.isolation.extend(found),
                            Err(problem) => plan.setup_failures.push(problem),
                        }
                    }
                    Err(e) => plan
                        .setup_failures
                        .push(format!("isolation {}: {e}", isolation.name)),
                }
            }
        }
        Task::AppHttpHealthy(t) => match discovery.app_http(&t.spec).await {
            Ok((body, tls)) => {
                plan.tls = tls;
                match app_http_target(&t.spec, body) {
                    Ok(target) => plan.http.push(target),
                    Err(e) => plan.setup_failures.push(e.to_string()),
                }
            }
            Err(e) => plan.setup_failures.push(e.to_string()),
        },
        Task::Netdns(t) => {
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

/// How long a round waits for the first list of its carrier's pods: as long as it can and
/// still probe for its whole `duration` within `round_timeout` — the first round after an
/// install or a restart meets an API server listing every carrier pod to every agent at once,
/// and failing it for a slow list says nothing about the network — but never less than
/// [`FIRST_LIST`].
fn peer_list_wait(round_timeout: Duration, duration: Duration) -> Duration {
    round_timeout.saturating_sub(duration).max(FIRST_LIST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_waits_for_its_peers_as_long_as_it_can_still_probe_in_full() {
        let minute = Duration::from_secs(60);
        assert_eq!(
            peer_list_wait(minute, Duration::from_secs(5)),
            Duration::from_secs(55)
        );
        // A round with no time to spare still gets the least wait.
        assert_eq!(
            peer_list_wait(Duration::from_secs(12), Duration::from_secs(10)),
            FIRST_LIST
        );
        assert_eq!(peer_list_wait(Duration::from_secs(5), minute), FIRST_LIST);
    }
}
