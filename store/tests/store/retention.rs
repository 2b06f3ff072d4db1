//! Retention: the age limit, the size limit, deleted tasks, and what a sweep removes.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kdoctor_api::fixtures::net_reach_report;
use kdoctor_store::{Retention, Store, StoreConfig};

use crate::support::{scratch, task};

fn store(test: &str, retention: Retention) -> (Store, std::path::PathBuf) {
    let dir = scratch(test);
    (
        Store::open(StoreConfig {
            retention,
            ..StoreConfig::new(&dir)
        })
        .expect("opens"),
        dir,
    )
}

#[test]
fn rounds_older_than_the_age_limit_go_and_then_deleted_tasks() {
    let (s, _dir) = store(
        "ret-age",
        Retention {
            max_age: Duration::from_secs(3600),
            ..Retention::default()
        },
    );
    let (live, _) = s.record_task(&task("live", "uid-live")).expect("recorded");
    let (gone, _) = s.record_task(&task("gone", "uid-gone")).expect("recorded");
    s.put_report(live, &net_reach_report("n", 1, 2, 1))
        .expect("put");
    s.put_report(gone, &net_reach_report("n", 1, 2, 2))
        .expect("put");
    s.mark_deleted(gone, Timestamp::now()).expect("deleted");

    // Nothing is old yet.
    let report = s.sweep(Timestamp::now()).expect("sweep");
    assert_eq!((report.rounds_by_age, report.tasks), (0, 0));

    // Two hours later: both rounds are old; the deleted task goes, the live one stays (empty).
    let later = Timestamp::now() + SignedDuration::from_hours(2);
    let report = s.sweep(later).expect("sweep");
    assert_eq!((report.rounds_by_age, report.tasks), (2, 1));
    assert!(report.bytes > 0);
    assert!(s.task(gone).is_none());
    let live_summary = s.task(live).expect("the live task stays");
    assert_eq!((live_summary.rounds, live_summary.reports), (0, 0));
    assert_eq!(s.report(live, 1, "n").expect("read"), None);
    let removed = s
        .metrics()
        .retention_rounds
        .with_label_values(&["age"])
        .get();
    assert_eq!(removed, 2);
}

#[test]
fn over_the_size_limit_the_oldest_rounds_go_first() {
    let (s, dir) = store(
        "ret-size",
        Retention {
            max_bytes: u64::MAX,
            ..Retention::default()
        },
    );
    let (id, _) = s.record_task(&task("t", "uid-size")).expect("recorded");
    for round in 1..=5 {
        s.put_report(id, &net_reach_report("n", round, 50, round as u64))
            .expect("put");
    }
    let total = s.task(id).expect("task").stored_bytes;
    let per_round = s.round(id, 1).expect("read").expect("round").stored_bytes;
    drop(s);
    // Reopen with a limit that holds about two rounds.
    let limit = total - 3 * per_round + per_round / 2;
    let s = Store::open(StoreConfig {
        retention: Retention {
            max_bytes: limit,
            ..Retention::default()
        },
        ..StoreConfig::new(&dir)
    })
    .expect("reopens");
    let report = s.sweep(Timestamp::now()).expect("sweep");
    assert_eq!(report.rounds_by_size, 3);
    let left: Vec<u64> = s
        .rounds(id)
        .expect("rounds")
        .iter()
        .map(|r| r.round)
        .collect();
    assert_eq!(left, [4, 5]);
    assert!(s.task(id).expect("task").stored_bytes <= limit);
    assert_eq!(
        s.metrics()
            .retention_rounds
            .with_label_values(&["size"])
            .get(),
        3
    );
}

#[test]
fn the_plan_is_pure_and_removes_nothing_within_limits() {
    let (s, _dir) = store("ret-plan", Retention::default());
    let (id, _) = s.record_task(&task("t", "uid-plan")).expect("recorded");
    s.put_report(id, &net_reach_report("n", 1, 2, 1))
        .expect("put");
    let report = s.sweep(Timestamp::now()).expect("sweep");
    assert_eq!(report, kdoctor_store::SweepReport::default());
    assert_eq!(s.task(id).expect("task").rounds, 1);
}
