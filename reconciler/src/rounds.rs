//! The round state machine, as a pure function of the task's status, the schedule, the clock,
//! the carrier and the harvested reports: what the status becomes and which rounds start or
//! end. Upstream's lifecycle (reference §7), with its flaws fixed:
//! - a round whose whole window passed while nobody could start it (controller down, carrier
//!   never ready) is finalised as failed, never looped on;
//! - a round that no agent took part in fails instead of succeeding vacuously;
//! - node lists come from harvested reports; the controller is the only status writer.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kdoctor_api::go_duration;
use kdoctor_api::schedule::{Schedule, deadline, has_more_rounds};
use kdoctor_api::task::status::{FAILURE_REASON_AGENTS_FAILED, FAILURE_REASON_AGENTS_NOT_REPORTED};
use kdoctor_api::task::{
    LastRoundStatus, RoundStatus, SchedulePlan, StatusHistoryRecord, TaskStatus,
};

/// Why a round failed when nobody took part in it.
pub const FAILURE_REASON_NO_AGENT: &str = "no agent took part in the round";
/// Why a round failed when its window passed before it could start.
pub const FAILURE_REASON_MISSED: &str = "the round's window passed before it could start";
/// Most missed rounds finalised in one pass (a guard against pathological schedules).
const MAX_CATCH_UP: usize = 10_000;

/// What the state machine looks at.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// Now.
    pub now: Timestamp,
    /// The task's (defaulted) schedule block.
    pub plan: &'a SchedulePlan,
    /// The parsed schedule.
    pub schedule: &'a Schedule,
    /// Whether the carrier is ready (a round starts only then).
    pub carrier_ready: bool,
    /// Nodes running a ready carrier pod now: the nodes a round that starts now expects.
    /// An ongoing round keeps the set it started with (in its record), so an agent that dies
    /// mid-round fails the round instead of silently leaving it.
    pub expected_nodes: &'a BTreeSet<String>,
    /// Harvested reports of the current round: node → whether the agent succeeded.
    pub reports: &'a BTreeMap<String, bool>,
    /// `crdMaxHistory`.
    pub max_history: usize,
    /// How soon to look again while a round is ongoing.
    pub poll: Duration,
}

/// Something that happened to a round.
#[derive(Clone, Debug, PartialEq)]
pub enum RoundEvent {
    /// Round `n` started.
    Started(i64),
    /// Round `n` ended; the record is final.
    Finished(StatusHistoryRecord),
}

/// The new status and what happened.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The status to write (the input status when nothing changed).
    pub status: TaskStatus,
    /// Rounds started and finished, in order.
    pub events: Vec<RoundEvent>,
    /// When to look again (`None`: the task is finished).
    pub requeue_after: Option<Duration>,
}

fn time(t: Timestamp) -> Time {
    Time(t)
}

fn planned(number: i64, start: Timestamp, timeout_minutes: i64) -> StatusHistoryRecord {
    StatusHistoryRecord {
        status: RoundStatus::Notstarted,
        failure_reason: None,
        round_number: number,
        start_time_stamp: time(start),
        end_time_stamp: None,
        duration: None,
        dead_line_time_stamp: time(deadline(start, timeout_minutes).unwrap_or(start)),
        expected_actor_number: None,
        failed_agent_node_list: vec![],
        succeed_agent_node_list: vec![],
        not_report_agent_node_list: vec![],
    }
}

fn until(now: Timestamp, then: Timestamp, floor: Duration) -> Duration {
    let wait = then.duration_since(now);
    if wait.is_negative() {
        floor
    } else {
        Duration::try_from(wait)
            .unwrap_or(floor)
            .max(Duration::from_millis(100))
    }
}

/// The task's round in progress, if one is.
pub fn ongoing(status: &TaskStatus) -> Option<&StatusHistoryRecord> {
    status
        .history
        .as_ref()
        .and_then(|h| h.first())
        .filter(|r| r.status == RoundStatus::Ongoing)
}

/// The nodes an ongoing round expects: fixed when it started (kept in its node lists, so a
/// restarted controller knows them).
pub fn round_expected_nodes(record: &StatusHistoryRecord) -> BTreeSet<String> {
    record
        .not_report_agent_node_list
        .iter()
        .chain(&record.succeed_agent_node_list)
        .chain(&record.failed_agent_node_list)
        .cloned()
        .collect()
}

/// Finalises `record` with the harvested reports.
fn finalise(
    record: &mut StatusHistoryRecord,
    expected: &BTreeSet<String>,
    inputs: &Inputs<'_>,
    reason_if_empty: &str,
) {
    let succeeded: Vec<String> = inputs
        .reports
        .iter()
        .filter(|(_, ok)| **ok)
        .map(|(n, _)| n.clone())
        .collect();
    let failed: Vec<String> = inputs
        .reports
        .iter()
        .filter(|(_, ok)| !**ok)
        .map(|(n, _)| n.clone())
        .collect();
    let not_reported: Vec<String> = expected
        .iter()
        .filter(|n| !inputs.reports.contains_key(*n))
        .cloned()
        .collect();
    let reason = if !failed.is_empty() {
        Some(FAILURE_REASON_AGENTS_FAILED)
    } else if !not_reported.is_empty() {
        Some(FAILURE_REASON_AGENTS_NOT_REPORTED)
    } else if succeeded.is_empty() {
        Some(reason_if_empty)
    } else {
        None
    };
    record.status = if reason.is_some() {
        RoundStatus::Fail
    } else {
        RoundStatus::Succeed
    };
    record.failure_reason = reason.map(str::to_string);
    record.end_time_stamp = Some(time(inputs.now));
    record.duration = Some(go_duration::format_signed(
        inputs.now.duration_since(record.start_time_stamp.0),
    ));
    record.expected_actor_number =
        Some((succeeded.len() + failed.len() + not_reported.len()) as i64);
    record.succeed_agent_node_list = succeeded;
    record.failed_agent_node_list = failed;
    record.not_report_agent_node_list = not_reported;
}

/// Advances a task's rounds.
pub fn step(status: &TaskStatus, inputs: &Inputs<'_>) -> Outcome {
    let mut status = status.clone();
    let mut events = Vec::new();
    let timeout = inputs.plan.round_timeout_minute;
    let history = status.history.get_or_insert_with(Vec::new);

    // First sight: plan round 1.
    if status.expected_round.is_none() || history.is_empty() {
        let start = inputs
            .schedule
            .first_start(inputs.now)
            .unwrap_or(inputs.now);
        status.expected_round = Some(inputs.plan.round_number);
        status.done_round = Some(0);
        status.finish = false;
        status.finish_time = None;
        status.history = Some(vec![planned(1, start, timeout)]);
        return Outcome {
            requeue_after: Some(until(inputs.now, start, inputs.poll)),
            status,
            events,
        };
    }
    if status.finish {
        return Outcome {
            status,
            events,
            requeue_after: None,
        };
    }

    let expected = status.expected_round.unwrap_or(inputs.plan.round_number);
    let mut requeue = inputs.poll;
    for _ in 0..MAX_CATCH_UP {
        let history = status.history.get_or_insert_with(Vec::new);
        let Some(current) = history.first_mut() else {
            break;
        };
        let finished_now = move_round(current, inputs, &mut events, &mut requeue);
        if !finished_now {
            break;
        }
        let record = current.clone();
        if !events
            .iter()
            .any(|e| matches!(e, RoundEvent::Finished(r) if r.round_number == record.round_number))
        {
            status.done_round = Some(status.done_round.unwrap_or(0).max(record.round_number));
            status.last_round_status = Some(match record.status {
                RoundStatus::Succeed => LastRoundStatus::Succeed,
                _ => LastRoundStatus::Fail,
            });
            events.push(RoundEvent::Finished(record.clone()));
        }
        let done = status.done_round.unwrap_or(0);
        if !has_more_rounds(done, expected) {
            status.finish = true;
            status.finish_time = Some(time(inputs.now));
            return Outcome {
                status,
                events,
                requeue_after: None,
            };
        }
        let next = inputs
            .schedule
            .next_start(record.start_time_stamp.0)
            .unwrap_or(inputs.now);
        let history = status.history.get_or_insert_with(Vec::new);
        history.insert(0, planned(record.round_number + 1, next, timeout));
        history.truncate(inputs.max_history.max(1));
        requeue = until(inputs.now, next, inputs.poll);
    }
    Outcome {
        status,
        events,
        requeue_after: Some(requeue),
    }
}

/// Moves the newest round on by what `inputs` show: starts it, finalises it, or says when to
/// look again (`requeue`). Returns whether it is finished.
fn move_round(
    current: &mut StatusHistoryRecord,
    inputs: &Inputs<'_>,
    events: &mut Vec<RoundEvent>,
    requeue: &mut Duration,
) -> bool {
    match current.status {
        RoundStatus::Notstarted if inputs.now >= current.dead_line_time_stamp.0 => {
            // Nobody could start it in its window: a failed round, then move on.
            let empty = BTreeMap::new();
            let missed = Inputs {
                reports: &empty,
                ..inputs.clone()
            };
            finalise(current, &BTreeSet::new(), &missed, FAILURE_REASON_MISSED);
            true
        }
        RoundStatus::Notstarted if inputs.now < current.start_time_stamp.0 => {
            *requeue = until(inputs.now, current.start_time_stamp.0, inputs.poll);
            false
        }
        RoundStatus::Notstarted if !inputs.carrier_ready => {
            *requeue = inputs.poll;
            false
        }
        RoundStatus::Notstarted => {
            current.status = RoundStatus::Ongoing;
            // Until they report, every expected node is "not reported"; the lists are
            // written again only when the round ends (O(1) status writes per round).
            current.not_report_agent_node_list = inputs.expected_nodes.iter().cloned().collect();
            current.expected_actor_number = Some(inputs.expected_nodes.len() as i64);
            events.push(RoundEvent::Started(current.round_number));
            *requeue = inputs.poll.min(until(
                inputs.now,
                current.dead_line_time_stamp.0,
                inputs.poll,
            ));
            false
        }
        RoundStatus::Ongoing => {
            let expected = round_expected_nodes(current);
            let everyone =
                !expected.is_empty() && expected.iter().all(|n| inputs.reports.contains_key(n));
            if everyone || inputs.now >= current.dead_line_time_stamp.0 {
                finalise(current, &expected, inputs, FAILURE_REASON_NO_AGENT);
                true
            } else {
                *requeue = inputs.poll.min(until(
                    inputs.now,
                    current.dead_line_time_stamp.0,
                    inputs.poll,
                ));
                false
            }
        }
        // A finalised round on top means the next one was never planned (an interrupted
        // write): plan it now.
        RoundStatus::Succeed | RoundStatus::Fail => true,
    }
}
