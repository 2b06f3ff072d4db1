//! What one reconcile decides, as pure functions of what it observed: whether the task is
//! admitted (valid, finalizer in place), then the next status, the Events, what the harvest
//! loop is asked for, whether a finished task's carrier goes, and when to look again.
//! reconcile.rs reads the inputs and carries the decisions out; nothing here does IO, so every
//! decision is tested without a server.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kdoctor_api::schedule::Schedule;
use kdoctor_api::task::{
    RoundStatus, RuntimeStatus, SchedulePlan, StatusHistoryRecord, TaskResource, TaskStatus,
};
use kdoctor_store::{ReportMeta, RoundResult, RoundSummary};

use crate::conditions::{self, CARRIER_READY, VALID, Wanted};
use crate::ensure::CarrierState;
use crate::harvest::AwaitedRound;
use crate::harvest_loop::Pass;
use crate::readiness::AgentPod;
use crate::rounds::{self, Inputs, RoundEvent, round_expected_nodes};

/// How long a finished task's carrier is kept past its grace period while its agents still
/// cannot be harvested.
pub const HARVEST_BEFORE_DELETE: SignedDuration = SignedDuration::from_mins(5);
/// How soon an invalid task is looked at again (a missing Secret or ConfigMap may appear).
pub const INVALID_RETRY: Duration = Duration::from_secs(60);
/// How soon a task is looked at again after its finalizer was added.
pub const AFTER_FINALIZER: Duration = Duration::from_millis(100);
/// How soon a finished carrier is looked at again while its last harvest keeps failing.
const RETRY_LAST_HARVEST: Duration = Duration::from_secs(10);

/// An Event to publish on the task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Warning (or Normal).
    pub warning: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Human message.
    pub message: String,
}

impl Note {
    fn normal(reason: &'static str, message: String) -> Note {
        Note {
            warning: false,
            reason,
            message,
        }
    }

    fn warning(reason: &'static str, message: String) -> Note {
        Note {
            warning: true,
            reason,
            message,
        }
    }
}

/// What admission looks at.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    /// Now.
    pub now: Timestamp,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The status as read.
    pub status: &'a TaskStatus,
    /// Every validation error, if any (the list's text).
    pub errors: Option<String>,
    /// The task has a marker policy (its markers need the finalizer).
    pub marks: bool,
    /// The markers finalizer is on the task.
    pub has_finalizer: bool,
}

/// Whether a task goes on to its rounds.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    /// It never runs: the status to write (`None`: already says so) and the Event that goes
    /// with a new verdict.
    Invalid {
        /// The status to write.
        status: Option<Box<TaskStatus>>,
        /// Every problem, for the log and the Event.
        message: String,
    },
    /// The finalizer goes on first, before any Node is marked, so that deleting the task
    /// always cleans up.
    AddFinalizer,
    /// It runs: the conditions with `Valid` set.
    Valid(Vec<Condition>),
}

/// Decides whether the task runs.
pub fn admit(candidate: &Candidate<'_>) -> Admission {
    let mut conds = candidate.status.conditions.clone().unwrap_or_default();
    if let Some(message) = &candidate.errors {
        let changed = conditions::set(
            &mut conds,
            Wanted {
                type_: VALID,
                ok: false,
                reason: "InvalidSpec",
                message: message.clone(),
            },
            candidate.generation,
            candidate.now,
        );
        let status = changed.then(|| {
            Box::new(TaskStatus {
                conditions: Some(conds),
                ..candidate.status.clone()
            })
        });
        return Admission::Invalid {
            status,
            message: message.clone(),
        };
    }
    conditions::set(
        &mut conds,
        Wanted {
            type_: VALID,
            ok: true,
            reason: "Validated",
            message: "the task passed validation".to_string(),
        },
        candidate.generation,
        candidate.now,
    );
    if candidate.marks && !candidate.has_finalizer {
        return Admission::AddFinalizer;
    }
    Admission::Valid(conds)
}

/// A task's own carrier, when it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnCarrier {
    /// Minutes it is kept after the task finished.
    pub grace_minutes: i64,
}

/// What a reconcile of an admitted task observed.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    /// Now.
    pub now: Timestamp,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The status as read.
    pub status: &'a TaskStatus,
    /// The conditions admission set.
    pub conditions: Vec<Condition>,
    /// The task's (defaulted) schedule block.
    pub plan: &'a SchedulePlan,
    /// The parsed schedule.
    pub schedule: &'a Schedule,
    /// The carrier as ensured.
    pub carrier: &'a CarrierState,
    /// The task's own carrier (`None`: it runs on the default agent).
    pub own_carrier: Option<OwnCarrier>,
    /// The ongoing round's reports as the store holds them.
    pub stored: &'a [ReportMeta],
    /// The harvest loop's last pass for this incarnation.
    pub last_pass: Option<&'a Pass>,
    /// How long after a round's start its agents have finished probing (`durationInSecond`
    /// and the last request's timeout: [`kdoctor_api::task::Task::probing_time`]).
    pub probing: Duration,
    /// `durationInSecond`: the soonest after a round's start that an agent can have written its
    /// report.
    pub duration: Duration,
    /// `crdMaxHistory`.
    pub max_history: usize,
    /// How soon to look again while something is under way.
    pub poll: Duration,
    /// The controller's namespace (for messages).
    pub namespace: &'a str,
}

/// What the harvest loop is asked for this incarnation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HarvestWish {
    /// Nothing changes.
    Keep,
    /// Harvest these agents, not before `not_before` (when no report can be there yet).
    Want {
        /// The agents to ask.
        agents: Vec<AgentPod>,
        /// The ongoing round's start plus its `durationInSecond`; now for a last harvest.
        not_before: Timestamp,
        /// The ongoing round, which agents may be finishing until its start plus its probing
        /// time; `None` for a last harvest.
        awaited: Option<AwaitedRound>,
    },
    /// Nothing to harvest now (the last pass is kept: a later decision waits on it).
    Forget,
    /// Nothing more at all: no round under way and no last harvest due.
    Drop,
}

/// A round that finished in this reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct FinishedRound {
    /// The store's summary.
    pub summary: RoundSummary,
    /// From its start to its end as this reconcile saw it.
    pub duration: Option<Duration>,
    /// From the last report stored to the round's end, when every node reported.
    pub finalise_lag: Option<Duration>,
}

/// Something that happened to a round: its Event, and its summary when it finished.
#[derive(Clone, Debug, PartialEq)]
pub struct Happening {
    /// The Event.
    pub note: Note,
    /// The round that finished, if it did.
    pub finished: Option<FinishedRound>,
}

/// What one reconcile of an admitted task does.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The status to write (written only when it differs from the one read).
    pub status: TaskStatus,
    /// When to look again (`None`: only on a change).
    pub requeue: Option<Duration>,
    /// What the harvest loop is asked for.
    pub harvest: HarvestWish,
    /// Delete the task's own carrier now; the number of agents its last harvest missed.
    pub retire: Option<usize>,
    /// Events published before the status is written.
    pub before: Vec<Note>,
    /// Rounds started and finished, after the status is written.
    pub after: Vec<Happening>,
}

/// The store's summary of a finalised round.
pub fn summary(record: &StatusHistoryRecord) -> RoundSummary {
    RoundSummary {
        round: record.round_number.max(0) as u64,
        result: match record.status {
            RoundStatus::Succeed => RoundResult::Succeed,
            RoundStatus::Fail => RoundResult::Fail,
            _ => RoundResult::Ongoing,
        },
        start: record.start_time_stamp.0,
        end: record.end_time_stamp.as_ref().map(|t| t.0),
        expected_nodes: record.expected_actor_number.unwrap_or(0).max(0) as u32,
        succeeded_nodes: record.succeed_agent_node_list.len() as u32,
        failed_nodes: record.failed_agent_node_list.len() as u32,
        not_reported: record.not_report_agent_node_list.clone(),
        failure_reason: record.failure_reason.clone(),
    }
}

fn sooner(a: Option<Duration>, b: Duration) -> Option<Duration> {
    Some(a.map_or(b, |a| a.min(b)))
}

fn wait_until(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(then.duration_since(now))
        .unwrap_or(Duration::ZERO)
        .max(Duration::from_secs(1))
}

fn since(now: Timestamp, then: Timestamp) -> Option<Duration> {
    Duration::try_from(now.duration_since(then)).ok()
}

/// The agents of the ongoing round whose node has no report stored yet, from when the first
/// can have written its report (`duration` after the round's start); until the round's
/// probing (`probing`) is over, each agent is asked to answer once it has written it.
fn pending(
    status: &TaskStatus,
    stored: &[ReportMeta],
    agents: &[AgentPod],
    (duration, probing): (Duration, Duration),
) -> HarvestWish {
    let Some(round) = rounds::ongoing(status) else {
        return HarvestWish::Keep;
    };
    let have: BTreeSet<&str> = stored.iter().map(|r| r.node.as_str()).collect();
    let pending: Vec<AgentPod> = agents
        .iter()
        .filter(|a| !have.contains(a.node.as_str()))
        .cloned()
        .collect();
    if pending.is_empty() {
        return HarvestWish::Forget;
    }
    // An agent starts probing once it sees the round's start written, so no report is there
    // before the start plus its duration by the controller's own clock. A pass that asked
    // every agent then and took its "nothing yet" found next to none (at 2,500 agents such a
    // pass cost 4 s and stored 7 reports) while the next pass waited for it; one that waited
    // for every agent's last request to time out came a whole perRequestTimeoutInMS after
    // most reports. Held answers read each report the moment it is written.
    let start = round.start_time_stamp.0;
    let after = |d: Duration| {
        SignedDuration::try_from(d)
            .ok()
            .and_then(|d| start.checked_add(d).ok())
            .unwrap_or(start)
    };
    HarvestWish::Want {
        agents: pending,
        not_before: after(duration),
        awaited: Some(AwaitedRound {
            round: u64::try_from(round.round_number).unwrap_or(0),
            until: after(probing),
        }),
    }
}

/// What becomes of a finished task's own carrier.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Retirement {
    /// Its grace period runs: look again then.
    Wait(Duration),
    /// One more harvest of every agent first (none since the grace period ended, or the last
    /// one missed agents and there is still time).
    HarvestAgain(Duration),
    /// Delete it; the number of agents its last harvest missed.
    Delete(usize),
}

fn retirement(
    finished: Timestamp,
    grace_minutes: i64,
    last_pass: Option<&Pass>,
    now: Timestamp,
    poll: Duration,
) -> Retirement {
    let due = finished + SignedDuration::from_mins(grace_minutes.max(0));
    // Only a pass that started after the grace period saw every report the agents will write.
    match last_pass.filter(|p| p.started >= due) {
        None if now < due => Retirement::Wait(wait_until(now, due)),
        None => Retirement::HarvestAgain(poll),
        Some(pass) if !pass.failures.is_empty() && now < due + HARVEST_BEFORE_DELETE => {
            Retirement::HarvestAgain(RETRY_LAST_HARVEST)
        }
        Some(pass) => Retirement::Delete(pass.failures.len()),
    }
}

fn started_note(status: &TaskStatus, n: i64) -> Note {
    let nodes = status
        .history
        .as_ref()
        .and_then(|h| h.iter().find(|r| r.round_number == n))
        .map(|r| round_expected_nodes(r).len())
        .unwrap_or(0);
    Note::normal(
        "RoundStarted",
        format!("round {n} started; {nodes} nodes are expected to report"),
    )
}

fn finished_note(summary: &RoundSummary) -> Note {
    let why = summary
        .failure_reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    let message = format!(
        "round {} {}{why} ({} succeeded, {} failed, {} not reported)",
        summary.round,
        summary.result.as_str(),
        summary.succeeded_nodes,
        summary.failed_nodes,
        summary.not_reported.len()
    );
    match summary.result {
        RoundResult::Succeed => Note::normal("RoundSucceeded", message),
        _ => Note::warning("RoundFailed", message),
    }
}

/// Decides one reconcile of an admitted task.
pub fn advance(observed: &Observed<'_>) -> Decision {
    let now = observed.now;
    let carrier = observed.carrier;
    let mut conds = observed.conditions.clone();
    let mut resource = carrier.resource.clone();
    let mut before = Vec::new();
    if carrier.applied && observed.own_carrier.is_some() && observed.status.resource.is_none() {
        before.push(Note::normal(
            "CarrierCreated",
            format!(
                "{} {}/{} created",
                resource.runtime_type, observed.namespace, resource.runtime_name
            ),
        ));
    }
    if resource.runtime_status != RuntimeStatus::Deleted {
        set_carrier_ready(observed, &mut conds);
    }

    // The ongoing round: its reports as stored; the loop harvests the nodes still missing.
    let mut harvest = pending(
        observed.status,
        observed.stored,
        &carrier.agents,
        (observed.duration, observed.probing),
    );
    let reports: BTreeMap<String, bool> = observed
        .stored
        .iter()
        .map(|r| (r.node.clone(), r.result == RoundResult::Succeed))
        .collect();
    let last_stored = observed.stored.iter().map(|r| r.stored_at).max();

    let expected = crate::readiness::ready_nodes(&carrier.agents);
    let outcome = rounds::step(
        observed.status,
        &Inputs {
            now,
            plan: observed.plan,
            schedule: observed.schedule,
            carrier_ready: carrier.ready,
            expected_nodes: &expected,
            reports: &reports,
            max_history: observed.max_history,
            poll: observed.poll,
        },
    );
    let mut next = outcome.status;
    let mut requeue = outcome.requeue_after;
    if !carrier.ready && resource.runtime_status != RuntimeStatus::Deleted && !next.finish {
        requeue = sooner(requeue, observed.poll);
    }

    // A finished task's own carrier goes after its grace period, once harvested.
    let mut retire = None;
    if let (true, Some(own)) = (next.finish, observed.own_carrier)
        && resource.runtime_status != RuntimeStatus::Deleted
    {
        let step = retire_step(observed, own, &next, &mut resource);
        if let Some(wish) = step.harvest {
            harvest = wish;
        }
        if let Some(wait) = step.wait {
            requeue = sooner(requeue, wait);
        }
        before.extend(step.notes);
        retire = step.retire;
    }
    // Nothing left to harvest: no ongoing round, no last harvest before a carrier goes.
    let last_harvest_due = next.finish
        && observed.own_carrier.is_some()
        && resource.runtime_status != RuntimeStatus::Deleted;
    if rounds::ongoing(&next).is_none() && !last_harvest_due {
        harvest = HarvestWish::Drop;
    }

    next.resource = Some(resource);
    next.conditions = Some(conds);
    let after = happenings(&outcome.events, &next, last_stored, now);
    Decision {
        status: next,
        requeue,
        harvest,
        retire,
        before,
        after,
    }
}

/// Sets `CarrierReady` from the carrier as observed.
fn set_carrier_ready(observed: &Observed<'_>, conds: &mut Vec<Condition>) {
    let carrier = observed.carrier;
    conditions::set(
        conds,
        Wanted {
            type_: CARRIER_READY,
            ok: carrier.ready,
            reason: if carrier.ready {
                "AgentsReady"
            } else {
                "AgentsNotReady"
            },
            message: carrier
                .not_ready_reason
                .clone()
                .unwrap_or_else(|| format!("{} agents ready", carrier.agents.len())),
        },
        observed.generation,
        observed.now,
    );
}

/// What one reconcile does toward retiring a finished task's own carrier.
struct RetireStep {
    /// The harvest wish instead of the round's.
    harvest: Option<HarvestWish>,
    /// Look again after this at the latest.
    wait: Option<Duration>,
    /// Events before the status is written.
    notes: Vec<Note>,
    /// Delete the carrier now; the agents its last harvest missed.
    retire: Option<usize>,
}

/// The retirement of a finished task's own carrier: wait out the grace period, harvest once
/// more, then delete it (`resource` then says so).
fn retire_step(
    observed: &Observed<'_>,
    own: OwnCarrier,
    next: &TaskStatus,
    resource: &mut TaskResource,
) -> RetireStep {
    let now = observed.now;
    let finished = next.finish_time.as_ref().map(|t| t.0).unwrap_or(now);
    let mut step = RetireStep {
        harvest: None,
        wait: None,
        notes: Vec::new(),
        retire: None,
    };
    match retirement(
        finished,
        own.grace_minutes,
        observed.last_pass,
        now,
        observed.poll,
    ) {
        Retirement::Wait(wait) => {
            step.harvest = Some(HarvestWish::Forget);
            step.wait = Some(wait);
        }
        Retirement::HarvestAgain(wait) => {
            step.harvest = Some(HarvestWish::Want {
                agents: observed.carrier.agents.clone(),
                not_before: now,
                awaited: None,
            });
            step.wait = Some(wait);
        }
        Retirement::Delete(unharvested) => {
            if unharvested > 0 {
                step.notes.push(Note::warning(
                    "HarvestIncomplete",
                    format!(
                        "deleting the carrier although {unharvested} agents could not be \
                         harvested; their nodes stay 'not reported' in the round summaries"
                    ),
                ));
            }
            step.notes.push(Note::normal(
                "CarrierDeleted",
                format!(
                    "{} {}/{} deleted {} minutes after the task finished",
                    resource.runtime_type,
                    observed.namespace,
                    resource.runtime_name,
                    own.grace_minutes.max(0)
                ),
            ));
            resource.runtime_status = RuntimeStatus::Deleted;
            step.retire = Some(unharvested);
        }
    }
    step
}

/// The rounds started and finished by this reconcile, with their Events and summaries.
fn happenings(
    events: &[RoundEvent],
    next: &TaskStatus,
    last_stored: Option<Timestamp>,
    now: Timestamp,
) -> Vec<Happening> {
    events
        .iter()
        .map(|event| match event {
            RoundEvent::Started(n) => Happening {
                note: started_note(next, *n),
                finished: None,
            },
            RoundEvent::Finished(record) => {
                let summary = summary(record);
                let finalise_lag = last_stored
                    .filter(|_| summary.not_reported.is_empty())
                    .and_then(|at| since(now, at));
                Happening {
                    note: finished_note(&summary),
                    finished: Some(FinishedRound {
                        duration: since(now, summary.start),
                        finalise_lag,
                        summary,
                    }),
                }
            }
        })
        .collect()
}
