//! The decisions of one reconcile, without a server: admission, the harvest loop's wishes, the
//! Events of a round, a hung agent at the deadline, and a finished task's carrier retirement.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kdoctor_api::schedule::Schedule;
use kdoctor_api::task::{RoundStatus, RuntimeStatus, SchedulePlan, TaskResource, TaskStatus};
use kdoctor_reconciler::conditions::{self, CARRIER_READY, VALID};
use kdoctor_reconciler::ensure::CarrierState;
use kdoctor_reconciler::harvest::AwaitedRound;
use kdoctor_reconciler::harvest_loop::Pass;
use kdoctor_reconciler::plan::{
    Admission, Candidate, Decision, HarvestWish, Observed, OwnCarrier, admit, advance,
};
use kdoctor_reconciler::readiness::AgentPod;
use kdoctor_store::{ReportMeta, RoundResult};

fn at(text: &str) -> Timestamp {
    text.parse().expect("time")
}

fn agent(node: &str) -> AgentPod {
    AgentPod {
        name: format!("agent-{node}"),
        uid: format!("uid-{node}"),
        node: node.to_string(),
        ip: "10.1.0.1".parse().expect("ip"),
        ready: true,
    }
}

fn report(node: &str, ok: bool, stored_at: Timestamp) -> ReportMeta {
    ReportMeta {
        node: node.to_string(),
        result: if ok {
            RoundResult::Succeed
        } else {
            RoundResult::Fail
        },
        json_bytes: 100,
        stored_bytes: 50,
        stored_at,
    }
}

/// A task's world: its schedule, carrier, stored reports and last harvest pass.
struct World {
    plan: SchedulePlan,
    schedule: Schedule,
    carrier: CarrierState,
    own: Option<OwnCarrier>,
    stored: Vec<ReportMeta>,
    pass: Option<Pass>,
    probing: Duration,
    duration: Duration,
}

impl World {
    fn new(schedule: &str, timeout: i64, rounds: i64, nodes: &[&str]) -> World {
        World {
            plan: SchedulePlan {
                schedule: Some(schedule.into()),
                round_timeout_minute: timeout,
                round_number: rounds,
            },
            schedule: schedule.parse().expect("schedule"),
            carrier: CarrierState {
                resource: TaskResource {
                    runtime_name: "kdoctor-netreach-t".into(),
                    runtime_type: "DaemonSet".into(),
                    service_name_v4: None,
                    service_name_v6: None,
                    runtime_status: RuntimeStatus::Created,
                },
                ready: true,
                agents: nodes.iter().map(|n| agent(n)).collect(),
                not_ready_reason: None,
                applied: false,
            },
            own: None,
            stored: vec![],
            pass: None,
            probing: Duration::from_secs(10),
            duration: Duration::from_secs(8),
        }
    }

    fn decide(&self, status: &TaskStatus, now: Timestamp) -> Decision {
        advance(&Observed {
            now,
            generation: Some(1),
            status,
            conditions: status.conditions.clone().unwrap_or_default(),
            plan: &self.plan,
            schedule: &self.schedule,
            carrier: &self.carrier,
            own_carrier: self.own,
            stored: &self.stored,
            last_pass: self.pass.as_ref(),
            probing: self.probing,
            duration: self.duration,
            max_history: 10,
            poll: Duration::from_secs(5),
            namespace: "kdoctor",
        })
    }

    /// Runs decisions from `status` at `now` until a round is under way.
    fn ongoing(&self, now: Timestamp) -> TaskStatus {
        let planned = self.decide(&TaskStatus::default(), now).status;
        let started = self.decide(&planned, now).status;
        assert_eq!(top(&started).status, RoundStatus::Ongoing);
        started
    }
}

fn top(status: &TaskStatus) -> &kdoctor_api::task::StatusHistoryRecord {
    &status.history.as_ref().expect("history")[0]
}

fn reasons(decision: &Decision) -> Vec<&str> {
    decision
        .before
        .iter()
        .chain(decision.after.iter().map(|h| &h.note))
        .map(|n| n.reason)
        .collect()
}

#[test]
fn an_invalid_task_is_written_once_and_a_marking_one_gets_its_finalizer_first() {
    let now = at("2026-11-25T10:00:00Z");
    let status = TaskStatus::default();
    let candidate = |status, errors: Option<&str>, marks, has_finalizer| Candidate {
        now,
        generation: Some(3),
        status,
        errors: errors.map(str::to_string),
        marks,
        has_finalizer,
    };
    let Admission::Invalid {
        status: Some(written),
        message,
    } = admit(&candidate(
        &status,
        Some("spec.request.qps: must be > 0"),
        false,
        false,
    ))
    else {
        panic!("an invalid task is not admitted");
    };
    assert_eq!(message, "spec.request.qps: must be > 0");
    let valid = conditions::get(written.conditions.as_deref().unwrap_or(&[]), VALID)
        .expect("Valid condition");
    assert_eq!(
        (
            valid.status.as_str(),
            valid.reason.as_str(),
            valid.observed_generation
        ),
        ("False", "InvalidSpec", Some(3))
    );
    // The same verdict again: nothing to write.
    assert_eq!(
        admit(&candidate(
            &written,
            Some("spec.request.qps: must be > 0"),
            false,
            false
        )),
        Admission::Invalid {
            status: None,
            message
        }
    );
    assert_eq!(
        admit(&candidate(&status, None, true, false)),
        Admission::AddFinalizer
    );
    let Admission::Valid(conds) = admit(&candidate(&written, None, true, true)) else {
        panic!("a valid task with its finalizer is admitted");
    };
    let valid = conditions::get(&conds, VALID).expect("Valid condition");
    assert_eq!(
        (valid.status.as_str(), valid.reason.as_str()),
        ("True", "Validated")
    );
}

#[test]
fn the_harvest_loop_is_asked_only_for_the_nodes_that_have_not_reported_once_their_reports_can_be_written()
 {
    let t0 = at("2026-11-25T10:00:00Z");
    let mut w = World::new("0 5", 2, 2, &["n1", "n2", "n3"]);
    let planned = w.decide(&TaskStatus::default(), t0);
    // No round under way yet: nothing to harvest.
    assert_eq!(planned.harvest, HarvestWish::Drop);
    let started = w.decide(&planned.status, t0);
    assert_eq!(reasons(&started), ["RoundStarted"]);
    assert_eq!(
        started.after[0].note.message,
        "round 1 started; 3 nodes are expected to report"
    );
    // Started in this reconcile: the loop is asked at the next one.
    assert_eq!(started.harvest, HarvestWish::Keep);
    let ready = conditions::get(
        started.status.conditions.as_deref().unwrap_or(&[]),
        CARRIER_READY,
    )
    .expect("CarrierReady");
    assert_eq!(ready.status, "True");

    w.stored = vec![report("n2", true, at("2026-11-25T10:00:20Z"))];
    let partial = w.decide(&started.status, at("2026-11-25T10:00:30Z"));
    // Not before the round's start plus its duration: no agent has a report sooner; until its
    // probing time is over, agents hold their answer until their report is written.
    assert_eq!(
        partial.harvest,
        HarvestWish::Want {
            agents: vec![agent("n1"), agent("n3")],
            not_before: at("2026-11-25T10:00:08Z"),
            awaited: Some(AwaitedRound {
                round: 1,
                until: at("2026-11-25T10:00:10Z"),
            }),
        }
    );
    assert!(partial.after.is_empty());

    w.stored
        .push(report("n1", true, at("2026-11-25T10:00:40Z")));
    w.stored
        .push(report("n3", false, at("2026-11-25T10:00:50Z")));
    let done = w.decide(&started.status, at("2026-11-25T10:00:51Z"));
    assert_eq!(reasons(&done), ["RoundFailed"]);
    let finished = done.after[0].finished.as_ref().expect("a finished round");
    assert_eq!(
        (
            finished.summary.round,
            finished.summary.succeeded_nodes,
            finished.summary.failed_nodes
        ),
        (1, 2, 1)
    );
    // Every node reported: the lag runs from the last report stored.
    assert_eq!(finished.finalise_lag, Some(Duration::from_secs(1)));
    assert_eq!(finished.duration, Some(Duration::from_secs(51)));
    let message = &done.after[0].note.message;
    assert!(
        message.starts_with("round 1 fail")
            && message.ends_with("(2 succeeded, 1 failed, 0 not reported)"),
        "{message}"
    );
    // Round 2 is planned, not under way: nothing left to harvest.
    assert_eq!(done.harvest, HarvestWish::Drop);
    assert_eq!(top(&done.status).round_number, 2);
}

#[test]
fn an_agent_that_never_answers_is_not_reported_at_the_deadline() {
    let t0 = at("2026-11-25T10:00:00Z");
    let mut w = World::new("0 5", 1, 1, &["n1", "n2"]);
    let ongoing = w.ongoing(t0);
    w.stored = vec![report("n1", true, at("2026-11-25T10:00:10Z"))];
    let waiting = w.decide(&ongoing, at("2026-11-25T10:00:30Z"));
    assert_eq!(
        waiting.harvest,
        HarvestWish::Want {
            agents: vec![agent("n2")],
            not_before: t0 + SignedDuration::from_secs(8),
            awaited: Some(AwaitedRound {
                round: 1,
                until: t0 + SignedDuration::from_secs(10),
            }),
        }
    );
    assert!(waiting.requeue.is_some_and(|r| r <= Duration::from_secs(5)));

    let deadline = w.decide(&ongoing, at("2026-11-25T10:01:01Z"));
    let finished = deadline.after[0].finished.as_ref().expect("finished");
    assert_eq!(finished.summary.result, RoundResult::Fail);
    assert_eq!(finished.summary.not_reported, ["n2"]);
    // Not every node reported: no finalise lag.
    assert_eq!(finished.finalise_lag, None);
    assert_eq!(reasons(&deadline), ["RoundFailed"]);
    assert!(deadline.status.finish);
    // Finished on the default agent: nothing more to harvest, nothing to look at again.
    assert_eq!(deadline.harvest, HarvestWish::Drop);
    assert_eq!(deadline.retire, None);
}

#[test]
fn a_carrier_that_is_not_ready_is_said_so_and_looked_at_within_the_poll() {
    let t0 = at("2026-11-25T10:00:00Z");
    let mut w = World::new("0 60", 5, 1, &["n1"]);
    w.carrier.ready = false;
    w.carrier.not_ready_reason = Some("DaemonSet kdoctor/x: 0 of 1 pods ready".into());
    let planned = w.decide(&TaskStatus::default(), t0);
    let started = w.decide(&planned.status, t0);
    // A round starts only on a ready carrier.
    assert!(started.after.is_empty());
    assert!(started.requeue.is_some_and(|r| r <= Duration::from_secs(5)));
    let ready = conditions::get(
        started.status.conditions.as_deref().unwrap_or(&[]),
        CARRIER_READY,
    )
    .expect("CarrierReady");
    assert_eq!(
        (
            ready.status.as_str(),
            ready.reason.as_str(),
            ready.message.as_str()
        ),
        (
            "False",
            "AgentsNotReady",
            "DaemonSet kdoctor/x: 0 of 1 pods ready"
        )
    );
}

#[test]
fn a_finished_tasks_carrier_goes_after_its_grace_period_and_one_last_harvest() {
    let t0 = at("2026-11-25T10:00:00Z");
    let mut w = World::new("0 5", 1, 1, &["n1", "n2"]);
    w.own = Some(OwnCarrier { grace_minutes: 2 });
    w.carrier.applied = true;
    let planned = w.decide(&TaskStatus::default(), t0);
    assert_eq!(reasons(&planned), ["CarrierCreated"]);
    assert_eq!(
        planned.before[0].message,
        "DaemonSet kdoctor/kdoctor-netreach-t created"
    );
    w.carrier.applied = false;
    let ongoing = w.decide(&planned.status, t0).status;
    w.stored = vec![
        report("n1", true, at("2026-11-25T10:00:10Z")),
        report("n2", true, at("2026-11-25T10:00:11Z")),
    ];
    let end = at("2026-11-25T10:00:12Z");
    let finished = w.decide(&ongoing, end);
    assert!(finished.status.finish);
    let status = finished.status;
    // The grace period runs: no harvest, look again when it ends.
    assert_eq!(finished.harvest, HarvestWish::Forget);
    assert_eq!(finished.requeue, Some(Duration::from_secs(120)));
    w.stored.clear();

    let due = end + SignedDuration::from_mins(2);
    let after = due + SignedDuration::from_secs(1);
    // Past it: one harvest of every agent first.
    let first = w.decide(&status, after);
    // At once: the round's probing is long over.
    assert_eq!(
        first.harvest,
        HarvestWish::Want {
            agents: vec![agent("n1"), agent("n2")],
            not_before: after,
            awaited: None,
        }
    );
    assert_eq!(first.retire, None);
    // A pass from before the grace period ended does not count.
    w.pass = Some(Pass {
        started: end,
        failures: vec![],
        stored: 0,
    });
    assert_eq!(w.decide(&status, after).retire, None);
    // One that missed an agent is tried again for a while.
    w.pass = Some(Pass {
        started: due,
        failures: vec![("agent-n2".into(), "timeout".into())],
        stored: 0,
    });
    let retry = w.decide(&status, after);
    assert_eq!(
        (retry.retire, retry.requeue),
        (None, Some(Duration::from_secs(10)))
    );
    // ... then the carrier goes anyway, and says what was missed.
    let late = w.decide(&status, due + SignedDuration::from_mins(6));
    assert_eq!(late.retire, Some(1));
    assert_eq!(reasons(&late), ["HarvestIncomplete", "CarrierDeleted"]);
    assert_eq!(
        late.status.resource.as_ref().map(|r| r.runtime_status),
        Some(RuntimeStatus::Deleted)
    );
    assert_eq!(late.harvest, HarvestWish::Drop);
    assert_eq!(late.requeue, None);
    // A clean pass: gone at once, without a warning.
    w.pass = Some(Pass {
        started: due,
        failures: vec![],
        stored: 2,
    });
    let clean = w.decide(&status, after);
    assert_eq!(clean.retire, Some(0));
    assert_eq!(reasons(&clean), ["CarrierDeleted"]);
    assert_eq!(
        clean.before[0].message,
        "DaemonSet kdoctor/kdoctor-netreach-t deleted 2 minutes after the task finished"
    );
    // Once deleted (ensure reports it so from the status), the carrier is no longer judged.
    w.carrier.resource.runtime_status = RuntimeStatus::Deleted;
    let gone = w.decide(&clean.status, after + SignedDuration::from_mins(1));
    assert_eq!(
        (gone.retire, gone.harvest.clone()),
        (None, HarvestWish::Drop)
    );
    assert!(gone.before.is_empty());
    assert_eq!(gone.status, clean.status);
}
