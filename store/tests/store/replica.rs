//! Replication between two stores in one process: a follower that starts empty loads the
//! leader's snapshot and then its records, and ends with the same tasks, reports, change events
//! and resourceVersions; a follower refuses writes of its own; after a failover the old leader's
//! extra history is detected and replaced.

use kdoctor_api::fixtures::net_reach_report;
use kdoctor_store::replica::{Frame, NeedSnapshot, Position, decode};
use kdoctor_store::{RoundResult, RoundSummary, Store, StoreError};

use crate::support::{open, put_all, task};

/// Loads the leader's snapshot into the follower, through the wire format.
fn snapshot(leader: &Store, follower: &Store) -> Position {
    let mut bytes = Vec::new();
    leader.write_snapshot(&mut bytes).expect("snapshot");
    let mut at = 0;
    let mut loader = None;
    loop {
        let (frame, used) = decode(&bytes[at..]).expect("valid").expect("complete");
        at += used;
        match frame {
            Frame::SnapshotStart(position) => {
                loader = Some(follower.load_snapshot(position).expect("loads"));
            }
            Frame::Pair(key, value) => loader
                .as_mut()
                .expect("started")
                .pair(&key, &value)
                .expect("pair"),
            Frame::SnapshotEnd(pairs) => {
                return loader
                    .take()
                    .expect("started")
                    .finish(pairs)
                    .expect("finish");
            }
            Frame::Record(_) => panic!("no record in a snapshot"),
        }
    }
}

/// Brings the follower up to the leader; returns how many snapshots that took.
fn catch_up(leader: &Store, follower: &Store) -> usize {
    let mut snapshots = 0;
    loop {
        match leader.records_after("follower", follower.position(), 1 << 20) {
            Ok(records) if records.is_empty() => return snapshots,
            Ok(records) => {
                for record in records {
                    // Through the wire as well.
                    let mut bytes = Vec::new();
                    kdoctor_store::replica::encode_record(&mut bytes, &record);
                    let Some((Frame::Record(decoded), _)) = decode(&bytes).expect("valid") else {
                        panic!("not a record");
                    };
                    follower.apply_record(&decoded).expect("applies");
                }
            }
            Err(NeedSnapshot { .. }) => {
                snapshots += 1;
                assert!(snapshots < 3, "snapshots do not converge");
                snapshot(leader, follower);
            }
        }
    }
}

fn summary(round: u64) -> RoundSummary {
    RoundSummary {
        round,
        result: RoundResult::Succeed,
        start: "2026-11-22T00:00:00Z".parse().expect("time"),
        end: Some("2026-11-22T00:01:00Z".parse().expect("time")),
        expected_nodes: 2,
        succeeded_nodes: 2,
        failed_nodes: 0,
        not_reported: vec![],
        failure_reason: None,
    }
}

fn write_round(store: &Store, uid: &str, round: u64) {
    let (id, _) = store.record_task(&task("t", uid)).expect("task");
    let reports: Vec<_> = ["node-1", "node-2"]
        .iter()
        .map(|n| net_reach_report(n, round as i64, 10, 1))
        .collect();
    put_all(store, id, &reports);
    store.put_round(id, &summary(round)).expect("summary");
}

fn assert_same(leader: &Store, follower: &Store) {
    assert_eq!(follower.resource_version(), leader.resource_version());
    assert_eq!(follower.position(), leader.position());
    assert_eq!(follower.tasks(), leader.tasks());
    for task in leader.tasks() {
        for round in leader.round_numbers(task.id) {
            assert_eq!(
                follower.rounds(task.id).expect("rounds"),
                leader.rounds(task.id).expect("rounds")
            );
            for meta in leader.reports(task.id, round).expect("reports") {
                assert_eq!(
                    follower
                        .report_json(task.id, round, &meta.node)
                        .expect("read"),
                    leader
                        .report_json(task.id, round, &meta.node)
                        .expect("read"),
                );
            }
        }
    }
    let events = |s: &Store| s.subscribe(Some(1)).map(|sub| sub.backlog);
    assert_eq!(events(follower), events(leader));
    assert_eq!(follower.outbox(None, 1000), leader.outbox(None, 1000));
}

#[test]
fn an_empty_follower_catches_up_and_follows_with_the_leaders_versions() {
    let (leader, _a) = open("replica-leader");
    let (follower, _b) = open("replica-follower");
    // A store keeps its recent history for followers once it leads with replication.
    leader.lead();
    follower.follow();
    leader.enable_outbox(100);
    write_round(&leader, "uid-1", 1);
    // The leader's window starts where it opened: an empty follower is older than that only
    // once the window has moved; here it resumes from the start without a snapshot.
    assert_eq!(catch_up(&leader, &follower), 0);
    assert_same(&leader, &follower);

    // Live: a watch on the follower sees the leader's changes, with the leader's versions.
    let mut watch = follower
        .subscribe(Some(follower.resource_version()))
        .expect("watch");
    let before = leader.resource_version();
    write_round(&leader, "uid-1", 2);
    // A delivered export entry's removal rides with the next write.
    let first = leader.outbox(None, 1)[0].seq;
    leader.outbox_done(first).expect("delivered");
    write_round(&leader, "uid-2", 1);
    catch_up(&leader, &follower);
    assert_same(&leader, &follower);
    let event = watch.live.try_recv().expect("a live event");
    assert_eq!(event.resource_version, before + 1);

    // The follower refuses writes of its own, and stays as it was.
    let refused = follower
        .record_task(&task("t", "uid-3"))
        .expect_err("a follower");
    assert!(matches!(refused, StoreError::Follower), "{refused}");
    assert_same(&leader, &follower);
}

#[test]
fn a_follower_behind_the_window_or_from_another_history_reloads_a_snapshot() {
    let (leader, dir) = open("replica-window-leader");
    let (follower, _b) = open("replica-window-follower");
    write_round(&leader, "uid-1", 1);
    // The leader wrote before the follower existed and then reopened: its window starts
    // after those writes, so the empty follower needs a snapshot.
    drop(leader);
    let leader = Store::open(kdoctor_store::StoreConfig::new(&dir)).expect("reopens");
    leader.lead();
    write_round(&leader, "uid-1", 2);
    follower.follow();
    assert_eq!(catch_up(&leader, &follower), 1);
    assert_same(&leader, &follower);

    // Failover: the follower leads; the old leader wrote one more batch that never reached
    // it (its term is unknown to the new leader).
    follower.lead();
    write_round(&leader, "uid-1", 3);
    let old = leader;
    let new = follower;
    write_round(&new, "uid-1", 4);
    assert!(new.resource_version() >= old.resource_version());
    old.follow();
    assert_eq!(catch_up(&new, &old), 1, "the lost history is replaced");
    assert_same(&new, &old);
    assert!(old.round_numbers(old.tasks()[0].id).contains(&4));
    assert!(!old.round_numbers(old.tasks()[0].id).contains(&3));
}
