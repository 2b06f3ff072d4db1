//! A replica that dies at any point of installing a snapshot (issue 31) recovers on restart:
//! its store opens, holds either what it had or the whole snapshot — never a mix — and, with
//! the leader back, ends with the leader's data.
//!
//! The replicas run in child processes of this same test binary
//! ([`snapshot_install_child`], with `KDOCTOR_RAFT_CRASH_CHILD` set): one sets up a leader whose
//! log is cut behind a snapshot, one has a new replica join (so the leader sends it the
//! snapshot) and dies where `KDOCTOR_STORE_FAILPOINT` says (an abort: nothing more is flushed,
//! as a SIGKILL at that instant would leave it), one starts both again.

use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::time::Duration;

use jiff::Timestamp;
use kdoctor_api::fixtures::net_reach_report;
use kdoctor_store::raft::Member;
use kdoctor_store::raft::testing::{Cluster, leader_of};
use kdoctor_store::{Applied, Command, ReportEntry, Store, StoreConfig};

use crate::support::{content, scratch, task};

const CHILD: &str = "KDOCTOR_RAFT_CRASH_CHILD";
const BASE: &str = "KDOCTOR_RAFT_CRASH_DIR";

/// Every point of an install where the process may die.
const POINTS: [&str; 5] = [
    "snapshot-loading",
    "content-filled",
    "content-mark-reset",
    "content-switched",
    "snapshot-installed",
];

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The leader alone: a task, 600 reports, its log cut behind a snapshot.
async fn setup(base: &Path) {
    let cluster = Cluster::new(base, 2);
    let leader = cluster.start(0).await;
    leader
        .form(|| vec![Member::new("c-0")])
        .await
        .expect("formed");
    let leader = leader_of(std::slice::from_ref(&leader)).await;
    let id = match leader
        .write(Command::RecordTask {
            record: task("crash", "uid-crash"),
        })
        .await
        .expect("task")
    {
        Applied::Task(id, _) => id,
        other => panic!("{other:?}"),
    };
    for batch in 0..12u64 {
        let reports = (0..50u64)
            .map(|k| {
                let n = batch * 50 + k;
                ReportEntry::of(id, &net_reach_report(&format!("node-{n}"), 1, 2, n))
                    .expect("report")
            })
            .collect();
        leader
            .write(Command::PutReports {
                reports,
                at: Timestamp::now(),
                outbox: None,
            })
            .await
            .expect("stored");
    }
    leader.raft().trigger().snapshot().await.expect("snapshot");
    let applied = leader
        .raft()
        .metrics()
        .borrow()
        .last_applied
        .expect("applied");
    leader
        .raft()
        .wait(Some(Duration::from_secs(60)))
        .metrics(
            |m| m.snapshot.is_some_and(|s| s.index >= applied.index),
            "snapshot",
        )
        .await
        .expect("snapshot taken");
    leader
        .raft()
        .trigger()
        .purge_log(applied.index)
        .await
        .expect("purge");
    leader
        .raft()
        .wait(Some(Duration::from_secs(60)))
        .metrics(
            |m| m.purged.is_some_and(|p| p.index >= applied.index),
            "purged",
        )
        .await
        .expect("log cut");
    println!("READY {}", leader.store().resource_version());
    cluster.stop(leader).await;
}

/// The leader and a new replica that joins: it takes the snapshot (and, with a failpoint set,
/// dies installing it).
async fn join(base: &Path) {
    let cluster = Cluster::new_keeping(base, 2);
    // Kept running while the other joins (it sends the snapshot).
    let _leader = cluster.start(0).await;
    let joining = cluster.start(1).await;
    let expected = cluster.members();
    joining.form(|| expected.clone()).await.expect("joined");
    println!("JOINED");
}

/// Both replicas again: the one that died catches up with the leader.
async fn recover(base: &Path) {
    let cluster = Cluster::new_keeping(base, 2);
    let leader = cluster.start(0).await;
    let back = cluster.start(1).await;
    let want = leader.applied_index();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while back.applied_index() < want {
        if tokio::time::Instant::now() > deadline {
            println!("BEHIND {} < {want}", back.applied_index());
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if content(leader.store()) == content(back.store()) {
        println!("SAME {}", back.store().resource_version());
    } else {
        println!("DIFFERENT");
    }
}

/// The child's part (see the module): does nothing when run as a test of its own.
#[test]
fn snapshot_install_child() {
    let (Ok(mode), Ok(base)) = (std::env::var(CHILD), std::env::var(BASE)) else {
        return;
    };
    let base = PathBuf::from(base);
    runtime().block_on(async {
        match mode.as_str() {
            "setup" => setup(&base).await,
            "join" => join(&base).await,
            "recover" => recover(&base).await,
            other => panic!("unknown child mode {other}"),
        }
    });
}

/// Runs this binary's child test in `mode`; its exit status and output.
fn child(mode: &str, base: &Path, point: Option<&str>) -> (bool, String, String) {
    let mut process = Process::new(std::env::current_exe().expect("test binary"));
    process
        .args([
            "--exact",
            "raft_crash::snapshot_install_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, mode)
        .env(BASE, base);
    match point {
        Some(point) => process.env("KDOCTOR_STORE_FAILPOINT", point),
        None => process.env_remove("KDOCTOR_STORE_FAILPOINT"),
    };
    let out = process.output().expect("child runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn dir_of(base: &Path, i: usize) -> PathBuf {
    let mut dir = base.as_os_str().to_owned();
    dir.push(format!("-{i}"));
    PathBuf::from(dir)
}

#[test]
fn a_crash_at_any_point_of_a_snapshot_install_recovers_on_restart() {
    for point in POINTS {
        let base = scratch(&format!("raft-crash-{point}"));
        let (ok, out, err) = child("setup", &base, None);
        assert!(ok && out.contains("READY"), "setup: {out}\n{err}");

        let (ok, out, err) = child("join", &base, Some(point));
        assert!(
            !ok && err.contains(&format!("failpoint {point}")),
            "the replica was to die at {point}: {out}\n{err}"
        );

        // What the dead replica left opens, and is the old content or the snapshot, whole.
        let leader = content(&Store::open(StoreConfig::new(dir_of(&base, 0))).expect("leader"));
        let opened = Store::open(StoreConfig::new(dir_of(&base, 1)))
            .unwrap_or_else(|e| panic!("{point}: the store does not open after the crash: {e}"));
        let left = content(&opened);
        drop(opened);
        assert!(
            left == leader || (left.0 == 0 && left.1.is_empty()),
            "{point}: the crash left neither the old content nor the snapshot ({} entries, resourceVersion {})",
            left.1.len(),
            left.0
        );

        let (ok, out, err) = child("recover", &base, None);
        assert!(
            ok && out.contains(&format!("SAME {}", leader.0)),
            "{point}: the replica did not recover the leader's data: {out}\n{err}"
        );
        let _ = std::fs::remove_dir_all(dir_of(&base, 0));
        let _ = std::fs::remove_dir_all(dir_of(&base, 1));
    }
}
