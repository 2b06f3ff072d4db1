//! The replicated store (issue 31) in one process: three (or five) replicas, each on its own
//! sled database, under openraft, on a network a test can cut. Elections, log replication,
//! snapshot install, restarts, lost volumes, membership changes, the leader's lease, and that
//! every replica ends with the same data under the same resourceVersions.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use kdoctor_api::fixtures::net_reach_report;
use kdoctor_store::raft::{LogStore, Member, NodeId, Replica, StateMachine, TypeConfig, removal};
use kdoctor_store::{
    Applied, Command, IncarnationId, Outcome, ReportEntry, Store, StoreConfig, StoreError,
};
use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};

use crate::support::{content, scratch, task};
use kdoctor_store::raft::testing::{Cluster, applied_everywhere, leader_of, timing};

/// A fresh store for each of openraft's storage tests.
struct Stores;

/// Removes a test store's directory when the test is done with it.
struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

static SUITE_STORES: AtomicU64 = AtomicU64::new(0);

impl StoreBuilder<TypeConfig, LogStore, StateMachine, Dir> for Stores {
    async fn build(&self) -> Result<(Dir, LogStore, StateMachine), StorageError<NodeId>> {
        let n = SUITE_STORES.fetch_add(1, Ordering::SeqCst);
        let dir = scratch(&format!("raft-suite-{n}"));
        let store = Arc::new(Store::open(StoreConfig::new(&dir)).expect("store opens"));
        let log = LogStore::open(store.clone()).expect("log opens");
        let sm = StateMachine::open(store).expect("state machine opens");
        Ok((Dir(dir), log, sm))
    }
}

#[test]
fn the_sled_log_and_state_machine_pass_openraft_s_storage_suite() {
    Suite::test_all(Stores).expect("openraft's storage suite");
}

fn record(name: &str) -> Command {
    Command::RecordTask {
        record: task(name, &format!("uid-{name}")),
    }
}

fn reports(id: IncarnationId, round: i64, nodes: std::ops::Range<u64>) -> Command {
    Command::PutReports {
        reports: nodes
            .map(|n| {
                let report =
                    net_reach_report(&format!("node-{n}"), round, 5, n * 31 + round as u64);
                ReportEntry::of(id, &report).expect("report")
            })
            .collect(),
        at: Timestamp::now(),
        outbox: None,
    }
}

async fn task_id(leader: &Replica, name: &str) -> IncarnationId {
    match leader.write(record(name)).await.expect("task recorded") {
        Applied::Task(id, _) => id,
        other => panic!("recording a task answered {other:?}"),
    }
}

fn assert_same(replicas: &[Replica]) {
    let first = content(replicas[0].store());
    assert!(first.0 > 0, "the store holds writes");
    for other in &replicas[1..] {
        assert_eq!(
            content(other.store()),
            first,
            "{} holds what {} holds",
            other.member(),
            replicas[0].member()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_hold_the_same_reports_under_the_same_resource_versions() {
    let cluster = Cluster::new(&scratch("raft-same"), 3);
    let replicas = cluster.start_all(3).await;
    let leader = leader_of(&replicas).await;
    assert_eq!(leader.voters().len(), 3, "every replica votes");
    let id = task_id(&leader, "same").await;
    for round in 1..=3 {
        leader
            .write(reports(id, round, 0..4))
            .await
            .expect("stored");
    }
    // Written only on the leader's replica, as a store of one would.
    let written = leader
        .write(reports(id, 3, 0..4))
        .await
        .expect("stored again");
    assert_eq!(written, Applied::Outcomes(vec![Outcome::Unchanged; 4]));
    // A follower refuses to write, and a store under the log refuses direct writes.
    let follower = replicas
        .iter()
        .find(|r| r.id() != leader.id())
        .expect("a follower");
    assert!(matches!(
        follower.write(record("elsewhere")).await,
        Err(StoreError::NotLeader { leader: Some(_) })
    ));
    assert!(
        follower
            .store()
            .record_task(&task("direct", "uid-direct"))
            .is_err()
    );
    applied_everywhere(&replicas, leader.applied_index()).await;
    assert_same(&replicas);
    // A write a follower's client sends goes through the leader and is applied here before
    // the answer.
    let purged = follower
        .write_via_leader(Command::PurgeRound { task: id, round: 1 })
        .await
        .expect("purged through the leader");
    assert!(matches!(purged, Applied::RoundPurged(bytes) if bytes > 0));
    assert_eq!(follower.store().round_numbers(id), vec![2, 3]);
    applied_everywhere(&replicas, leader.applied_index()).await;
    assert_same(&replicas);
    for r in replicas {
        cluster.stop(r).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_loses_its_lease_before_another_leads_and_its_writes_are_not_acknowledged()
{
    let cluster = Cluster::new(&scratch("raft-cut"), 3);
    let replicas = cluster.start_all(3).await;
    let old = leader_of(&replicas).await;
    let id = task_id(&old, "cut").await;
    old.write(reports(id, 1, 0..3)).await.expect("stored");
    let acknowledged = content(old.store());

    // When does the old leader stop being allowed to act, and a new one start? Watched from
    // before the cut: the end of the old lease is the last proof's end (or its revocation).
    let old_lease_end = Arc::new(std::sync::Mutex::new(None));
    let mut fence = old.fence().watch();
    let end = old_lease_end.clone();
    let tracker = tokio::spawn(async move {
        loop {
            let value = *fence.borrow_and_update();
            let now = tokio::time::Instant::now();
            *end.lock().expect("lock") = Some(value.unwrap_or(now));
            if value.is_none() || fence.changed().await.is_err() {
                return;
            }
        }
    });
    let others: Vec<Replica> = replicas
        .iter()
        .filter(|r| r.id() != old.id())
        .cloned()
        .collect();
    let first_led = Arc::new(std::sync::Mutex::new(None));
    for other in &others {
        let mut leading = other.leading();
        let first = first_led.clone();
        tokio::spawn(async move {
            if leading.wait_for(|l| *l).await.is_ok() {
                first
                    .lock()
                    .expect("lock")
                    .get_or_insert(tokio::time::Instant::now());
            }
        });
    }
    let cut_at = tokio::time::Instant::now();
    cluster.isolate(&old.member().pod);
    // The old leader cannot commit: its write is not acknowledged.
    let lost = old.write(reports(id, 2, 0..3)).await;
    assert!(lost.is_err(), "a write of a cut-off leader: {lost:?}");
    let new = leader_of(&others).await;
    tracker.abort();
    let old_lease_ended = old_lease_end
        .lock()
        .expect("lock")
        .expect("the old lease was seen");
    let new_leads_at = first_led.lock().expect("lock").expect("a new leader led");
    assert!(
        old_lease_ended <= new_leads_at,
        "the old lease ended {:?} after the cut, the new leader led {:?} after it",
        old_lease_ended - cut_at,
        new_leads_at - cut_at
    );
    assert!(!old.fence().valid(), "the old leader's lease is gone");
    // The new leader has every acknowledged write, and takes new ones.
    assert_eq!(content(new.store()).1, acknowledged.1);
    new.write(reports(id, 3, 0..3))
        .await
        .expect("stored by the new leader");

    cluster.heal();
    // The old leader follows again; its unacknowledged entry is gone everywhere.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while *old.leading().borrow() || old.leader().map(|(id, _)| id) != Some(new.id()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the old leader follows in time"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    applied_everywhere(&replicas, new.applied_index()).await;
    assert_same(&replicas);
    assert_eq!(old.store().round_numbers(id), vec![1, 3]);
    for r in replicas {
        cluster.stop(r).await;
    }
}

/// Waits until `leader` says exactly `pods` answer it.
async fn answering_becomes(leader: &Replica, pods: &[&str]) -> Duration {
    let want: std::collections::BTreeSet<String> = pods.iter().map(|p| p.to_string()).collect();
    let start = tokio::time::Instant::now();
    while leader.answering() != want {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the leader hears {:?}, not {want:?}",
            leader.answering()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_stops_hearing_a_cut_off_replica_within_its_lease_and_hears_it_again() {
    let cluster = Cluster::new(&scratch("raft-answering"), 3);
    let replicas = cluster.start_all(3).await;
    let leader = leader_of(&replicas).await;
    let pods: Vec<String> = cluster.members().into_iter().map(|m| m.pod).collect();
    let all: Vec<&str> = pods.iter().map(String::as_str).collect();
    answering_becomes(&leader, &all).await;
    let cut = replicas
        .iter()
        .find(|r| r.id() != leader.id())
        .expect("a follower")
        .member()
        .pod
        .clone();
    cluster.isolate(&cut);
    let rest: Vec<&str> = all.iter().copied().filter(|p| *p != cut).collect();
    let took = answering_becomes(&leader, &rest).await;
    // Gone once the lease passed without an answer, not before, and not much later.
    let lease = timing().election_min;
    assert!(
        took <= lease * 3,
        "noticed after {took:?} (lease {lease:?})"
    );
    cluster.heal();
    answering_becomes(&leader, &all).await;
    for r in replicas {
        cluster.stop(r).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_replica_and_one_far_behind_catch_up_by_log_and_by_snapshot() {
    let mut cluster = Cluster::new(&scratch("raft-catchup"), 3);
    // Cut the log right after each snapshot: a replica behind it needs the snapshot.
    cluster.options = Box::new(|me| {
        let mut options = kdoctor_store::raft::Options::new(me);
        options.timing = timing();
        options.keep_log_entries = 0;
        options
    });
    let mut replicas = cluster.start_all(3).await;
    let leader = leader_of(&replicas).await;
    let id = task_id(&leader, "behind").await;
    leader.write(reports(id, 1, 0..3)).await.expect("stored");
    // A follower restarts while one write is made: the log brings it back.
    let i = replicas
        .iter()
        .position(|r| r.id() != leader.id())
        .expect("follower");
    let stopped = replicas.remove(i);
    let pod = stopped.member().pod.clone();
    cluster.stop(stopped).await;
    leader
        .write(reports(id, 2, 0..3))
        .await
        .expect("stored with a replica down");
    let n: usize = pod.trim_start_matches("c-").parse().expect("ordinal");
    replicas.insert(i, cluster.start(n).await);
    applied_everywhere(&replicas, leader.applied_index()).await;
    assert_same(&replicas);

    // Down again while many writes are made and the log is cut: a snapshot brings it back.
    let stopped = replicas.remove(i);
    cluster.stop(stopped).await;
    for round in 3..=12 {
        leader
            .write(reports(id, round, 0..3))
            .await
            .expect("stored");
    }
    leader
        .raft()
        .trigger()
        .snapshot()
        .await
        .expect("snapshot asked");
    let applied = leader
        .raft()
        .metrics()
        .borrow()
        .last_applied
        .expect("applied");
    leader
        .raft()
        .wait(Some(Duration::from_secs(30)))
        .metrics(
            |m| m.snapshot.is_some_and(|s| s.index >= applied.index),
            "snapshot",
        )
        .await
        .expect("snapshot taken");
    leader
        .raft()
        .wait(Some(Duration::from_secs(30)))
        .metrics(
            |m| m.purged.is_some_and(|p| p.index >= applied.index),
            "log cut",
        )
        .await
        .expect("log cut");
    replicas.insert(i, cluster.start(n).await);
    applied_everywhere(&replicas, leader.applied_index()).await;
    assert_same(&replicas);
    let snapshot = replicas[i].raft().metrics().borrow().snapshot;
    assert!(
        snapshot.is_some_and(|s| s.index >= applied.index),
        "the restarted replica caught up by the snapshot ({snapshot:?})"
    );
    for r in replicas {
        cluster.stop(r).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_volume_is_lost_rejoins_as_a_new_node_with_everything() {
    let mut cluster = Cluster::new(&scratch("raft-lost"), 3);
    let mut replicas = cluster.start_all(3).await;
    let leader = leader_of(&replicas).await;
    let id = task_id(&leader, "lost").await;
    leader.write(reports(id, 1, 0..5)).await.expect("stored");
    let i = replicas
        .iter()
        .position(|r| r.id() != leader.id())
        .expect("follower");
    let gone = replicas.remove(i);
    let old_id = gone.id();
    let pod = gone.member().pod.clone();
    cluster.stop(gone).await;
    let n: usize = pod.trim_start_matches("c-").parse().expect("ordinal");
    cluster.lose_volume(n);
    leader
        .write(reports(id, 2, 0..5))
        .await
        .expect("stored with a replica gone");

    let back = cluster.start_joined(n).await;
    assert_ne!(back.id(), old_id, "a lost volume is a new node");
    replicas.insert(i, back.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let voters = leader.voters();
        if voters.contains_key(&back.id()) && !voters.contains_key(&old_id) {
            assert_eq!(voters.len(), 3);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "voters {voters:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    applied_everywhere(&replicas, leader.applied_index()).await;
    assert_same(&replicas);
    for r in replicas {
        cluster.stop(r).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_three_to_five_to_three_keeps_every_report() {
    let cluster = Cluster::new(&scratch("raft-scale"), 5);
    let mut replicas = cluster.start_all(3).await;
    let leader = leader_of(&replicas).await;
    let id = task_id(&leader, "scale").await;
    leader.write(reports(id, 1, 0..3)).await.expect("stored");
    // Two more replicas come: they join.
    for n in 3..5 {
        replicas.push(cluster.start_joined(n).await);
    }
    assert_eq!(leader.voters().len(), 5);
    leader
        .write(reports(id, 2, 0..3))
        .await
        .expect("stored by five");
    // Scaled back: the leader removes the two, which then stop.
    assert!(
        leader
            .retain_voters(|m| m.pod != "c-3" && m.pod != "c-4")
            .await
            .expect("membership changed")
    );
    assert_eq!(
        leader.voters().values().cloned().collect::<Vec<_>>(),
        vec![Member::new("c-0"), Member::new("c-1"), Member::new("c-2")]
    );
    for r in replicas.split_off(3) {
        cluster.stop(r).await;
    }
    leader
        .write(reports(id, 3, 0..3))
        .await
        .expect("stored by three");
    applied_everywhere(&replicas, leader.applied_index()).await;
    assert_same(&replicas);
    assert_eq!(leader.store().round_numbers(id), vec![1, 2, 3]);
    for r in replicas {
        cluster.stop(r).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_scaled_away_and_back_with_its_old_volume_rejoins_as_a_new_node() {
    let mut cluster = Cluster::new(&scratch("raft-return"), 4);
    let mut replicas = cluster.start_all(3).await;
    let leader = leader_of(&replicas).await;
    let id = task_id(&leader, "return").await;
    leader.write(reports(id, 1, 0..3)).await.expect("stored");
    let fourth = cluster.start_joined(3).await;
    let old_id = fourth.id();
    leader
        .write(reports(id, 2, 0..3))
        .await
        .expect("stored by four");
    // Scaled down: taken out, then stopped, its volume kept (the StatefulSet's default).
    assert!(
        leader
            .retain_voters(|m| m.pod != "c-3")
            .await
            .expect("membership changed")
    );
    cluster.stop(fourth).await;
    leader
        .write(reports(id, 3, 0..3))
        .await
        .expect("stored by three");
    // Scaled up again: back with the old volume, it learns that it was taken out...
    let back = cluster.start(3).await;
    let expected = cluster.members();
    let said = tokio::time::timeout(Duration::from_secs(60), back.removed(|| expected.clone()))
        .await
        .expect("it learns it was taken out");
    assert_eq!(&said, leader.member());
    // ...discards its store (as the controller does: mark, exit, discard at the next start)...
    removal::mark(cluster.dir(3), "taken out").expect("marked");
    cluster.stop(back).await;
    assert!(cluster.discard_if_marked(3).is_some());
    // ...and joins as a new node with every report.
    let again = cluster.start_joined(3).await;
    assert_ne!(again.id(), old_id);
    assert_eq!(leader.voters().len(), 4);
    replicas.push(again);
    leader
        .write(reports(id, 4, 0..3))
        .await
        .expect("stored by four");
    applied_everywhere(&replicas, leader.applied_index()).await;
    assert_same(&replicas);
    assert_eq!(replicas[3].store().round_numbers(id), vec![1, 2, 3, 4]);
    for r in replicas {
        cluster.stop(r).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_on_any_replica_see_every_acknowledged_write_and_watches_resume_anywhere() {
    let cluster = Cluster::new(&scratch("raft-reads"), 3);
    let replicas = cluster.start_all(3).await;
    let leader = leader_of(&replicas).await;
    let id = task_id(&leader, "reads").await;
    let start = leader.store().resource_version();
    for round in 1..=5 {
        leader
            .write(reports(id, round, 0..2))
            .await
            .expect("stored");
        // Right after the acknowledgement, a read on every replica sees it.
        for r in &replicas {
            r.read_barrier(Duration::from_secs(5))
                .await
                .expect("barrier");
            assert!(
                r.store().round_numbers(id).contains(&(round as u64)),
                "{} sees round {round} once the write was acknowledged",
                r.member()
            );
        }
    }
    // The same events after the same resourceVersion on every replica.
    let events = |store: &Store| -> Vec<(u64, Option<u64>)> {
        store
            .subscribe(Some(start))
            .expect("resumes")
            .backlog
            .iter()
            .map(|e| (e.resource_version, e.round))
            .collect()
    };
    let first = events(replicas[0].store());
    assert_eq!(first.len(), 10, "one event per report");
    for r in &replicas[1..] {
        assert_eq!(events(r.store()), first);
    }
    for r in replicas {
        cluster.stop(r).await;
    }
}
