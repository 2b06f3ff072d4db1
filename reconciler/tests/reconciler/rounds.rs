//! The round state machine: planning, starting only on a ready carrier, finishing early when
//! every node reported, failing at the deadline, missed windows, roundNumber -1, history cap.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kdoctor_api::schedule::Schedule;
use kdoctor_api::task::{LastRoundStatus, RoundStatus, SchedulePlan, TaskStatus};
use kdoctor_reconciler::rounds::{
    FAILURE_REASON_MISSED, FAILURE_REASON_NO_AGENT, Inputs, RoundEvent, step,
};

fn at(text: &str) -> Timestamp {
    text.parse().expect("time")
}

struct World {
    plan: SchedulePlan,
    schedule: Schedule,
    expected: BTreeSet<String>,
    reports: BTreeMap<String, bool>,
    ready: bool,
}

impl World {
    fn new(schedule: &str, timeout: i64, rounds: i64) -> World {
        World {
            plan: SchedulePlan {
                schedule: Some(schedule.into()),
                round_timeout_minute: timeout,
                round_number: rounds,
            },
            schedule: schedule.parse().expect("schedule"),
            expected: ["n1", "n2"].iter().map(|s| s.to_string()).collect(),
            reports: BTreeMap::new(),
            ready: true,
        }
    }

    fn step(&self, status: &TaskStatus, now: Timestamp) -> kdoctor_reconciler::rounds::Outcome {
        step(
            status,
            &Inputs {
                now,
                plan: &self.plan,
                schedule: &self.schedule,
                carrier_ready: self.ready,
                expected_nodes: &self.expected,
                reports: &self.reports,
                max_history: 10,
                poll: Duration::from_secs(5),
            },
        )
    }
}

fn top(status: &TaskStatus) -> &kdoctor_api::task::StatusHistoryRecord {
    &status.history.as_ref().expect("history")[0]
}

#[test]
fn a_round_is_planned_started_and_finished_when_every_node_reported() {
    let mut w = World::new("1 5", 2, 2);
    let t0 = at("2026-11-22T10:00:00Z");
    let planned = w.step(&TaskStatus::default(), t0);
    let s = planned.status;
    assert_eq!(
        (s.expected_round, s.done_round, s.finish),
        (Some(2), Some(0), false)
    );
    assert_eq!(top(&s).status, RoundStatus::Notstarted);
    assert_eq!(top(&s).start_time_stamp.0, at("2026-11-22T10:01:00Z"));
    assert_eq!(top(&s).dead_line_time_stamp.0, at("2026-11-22T10:03:00Z"));
    assert_eq!(planned.requeue_after, Some(Duration::from_secs(60)));

    // Before its start nothing happens.
    let early = w.step(&s, at("2026-11-22T10:00:30Z"));
    assert_eq!(early.status, s);
    assert!(early.events.is_empty());

    let started = w.step(&s, at("2026-11-22T10:01:01Z"));
    assert_eq!(started.events, [RoundEvent::Started(1)]);
    let s = started.status;
    assert_eq!(top(&s).status, RoundStatus::Ongoing);

    // One node reported: still ongoing.
    w.reports.insert("n1".into(), true);
    let partial = w.step(&s, at("2026-11-22T10:01:20Z"));
    assert!(partial.events.is_empty());
    // Both reported: finished early, round 2 planned 5 minutes after round 1's planned start.
    w.reports.insert("n2".into(), true);
    let done = w.step(&s, at("2026-11-22T10:01:30Z"));
    let s = done.status;
    let [RoundEvent::Finished(record)] = done.events.as_slice() else {
        panic!("{:?}", done.events)
    };
    assert_eq!(record.status, RoundStatus::Succeed);
    assert_eq!(record.succeed_agent_node_list, ["n1", "n2"]);
    assert_eq!(record.expected_actor_number, Some(2));
    assert_eq!(record.duration.as_deref(), Some("30s"));
    assert_eq!(
        (s.done_round, s.last_round_status),
        (Some(1), Some(LastRoundStatus::Succeed))
    );
    assert_eq!(top(&s).round_number, 2);
    assert_eq!(top(&s).start_time_stamp.0, at("2026-11-22T10:06:00Z"));
    assert_eq!(s.history.as_ref().map(Vec::len), Some(2));
}

#[test]
fn the_deadline_fails_non_reporting_and_failed_nodes_with_upstreams_reasons() {
    let mut w = World::new("0 5", 1, 1);
    w.expected.insert("n3".into());
    let t0 = at("2026-11-22T10:00:00Z");
    let s = w
        .step(&w.step(&TaskStatus::default(), t0).status, t0)
        .status;
    assert_eq!(top(&s).status, RoundStatus::Ongoing);
    // Until they report, the expected nodes are listed as not reported.
    assert_eq!(top(&s).not_report_agent_node_list, ["n1", "n2", "n3"]);
    assert_eq!(top(&s).expected_actor_number, Some(3));
    w.reports.insert("n1".into(), true);
    let late = w.step(&s, at("2026-11-22T10:01:00Z"));
    let s2 = late.status;
    assert!(s2.finish);
    let record = &s2.history.as_ref().expect("history")[0];
    assert_eq!(record.status, RoundStatus::Fail);
    assert_eq!(
        record.failure_reason.as_deref(),
        Some("some agents did not report")
    );
    assert_eq!(record.not_report_agent_node_list, ["n2", "n3"]);
    // A failed node takes precedence over a missing one.
    w.reports.insert("n2".into(), false);
    let failed = w.step(&s, at("2026-11-22T10:01:00Z")).status;
    let record = &failed.history.as_ref().expect("history")[0];
    assert_eq!(record.failure_reason.as_deref(), Some("some agents failed"));
    assert_eq!(
        (
            record.failed_agent_node_list.clone(),
            record.not_report_agent_node_list.clone()
        ),
        (vec!["n2".to_string()], vec!["n3".to_string()])
    );
    assert_eq!(failed.last_round_status, Some(LastRoundStatus::Fail));
    assert!(failed.finish_time.is_some());
}

#[test]
fn a_round_nobody_took_part_in_fails() {
    let mut w = World::new("0 5", 1, 1);
    w.expected.clear();
    let t0 = at("2026-11-22T10:00:00Z");
    let s = w
        .step(&w.step(&TaskStatus::default(), t0).status, t0)
        .status;
    let end = w.step(&s, at("2026-11-22T10:01:00Z")).status;
    assert_eq!(
        top(&end).failure_reason.as_deref(),
        Some(FAILURE_REASON_NO_AGENT)
    );
}

#[test]
fn a_round_waits_for_its_carrier_and_a_missed_window_is_finalised_not_looped_on() {
    let mut w = World::new("0 5", 1, 3);
    w.ready = false;
    let t0 = at("2026-11-22T10:00:00Z");
    let s = w.step(&TaskStatus::default(), t0).status;
    let waiting = w.step(&s, at("2026-11-22T10:00:30Z"));
    assert!(waiting.events.is_empty());
    assert_eq!(top(&waiting.status).status, RoundStatus::Notstarted);
    // The controller was down for 10 minutes: rounds 1 (10:00–10:01) and 2 (10:05–10:06)
    // missed their windows; round 3 (10:10–10:11) can still run.
    w.ready = true;
    let back = w.step(&s, at("2026-11-22T10:10:30Z"));
    let finished: Vec<i64> = back
        .events
        .iter()
        .filter_map(|e| match e {
            RoundEvent::Finished(r) => Some(r.round_number),
            _ => None,
        })
        .collect();
    assert_eq!(finished, [1, 2]);
    let s = back.status;
    assert_eq!(s.done_round, Some(2));
    let history = s.history.as_ref().expect("history");
    assert_eq!(
        history[1].failure_reason.as_deref(),
        Some(FAILURE_REASON_MISSED)
    );
    assert_eq!(top(&s).round_number, 3);
    assert_eq!(top(&s).status, RoundStatus::Ongoing);
    assert!(back.events.contains(&RoundEvent::Started(3)));
}

#[test]
fn round_number_minus_one_runs_forever_and_history_is_capped() {
    let mut w = World::new("0 1", 1, -1);
    w.expected = ["n1".to_string()].into();
    w.reports.insert("n1".into(), true);
    let mut now = at("2026-11-22T10:00:00Z");
    let mut s = w.step(&TaskStatus::default(), now).status;
    for _ in 0..30 {
        s = w.step(&s, now).status; // start
        s = w.step(&s, now + SignedDuration::from_secs(10)).status; // finish, plan next
        now += SignedDuration::from_mins(1);
    }
    assert!(!s.finish);
    assert_eq!(s.expected_round, Some(-1));
    assert_eq!(s.done_round, Some(30));
    assert_eq!(s.history.as_ref().map(Vec::len), Some(10));
    assert_eq!(top(&s).round_number, 31);
}

#[test]
fn an_ongoing_round_keeps_the_nodes_it_started_with() {
    let mut w = World::new("0 5", 1, 1);
    let t0 = at("2026-11-22T10:00:00Z");
    let s = w
        .step(&w.step(&TaskStatus::default(), t0).status, t0)
        .status;
    // n2's agent dies mid-round: its pod is no longer ready, but the round still expects it.
    w.expected = ["n1".to_string()].into();
    w.reports.insert("n1".into(), true);
    let mid = w.step(&s, at("2026-11-22T10:00:30Z"));
    assert!(mid.events.is_empty(), "{:?}", mid.events);
    let end = w.step(&s, at("2026-11-22T10:01:00Z")).status;
    assert_eq!(top(&end).status, RoundStatus::Fail);
    assert_eq!(top(&end).not_report_agent_node_list, ["n2"]);
    assert_eq!(top(&end).succeed_agent_node_list, ["n1"]);
}
