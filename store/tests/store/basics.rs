//! Writing and reading tasks, rounds and reports; idempotence; chunking; incarnations; reopen;
//! the lock.

use jiff::Timestamp;
use kdoctor_api::fixtures::net_reach_report;
use kdoctor_api::task::TaskKind;
use kdoctor_store::{
    MAX_VALUE_BYTES, NewReport, Outcome, RoundResult, RoundSummary, Store, StoreConfig, StoreError,
};

use crate::support::{open, raw_db, task};

#[test]
fn a_report_reads_back_byte_identical_and_a_second_put_changes_nothing() {
    let (store, _dir) = open("roundtrip");
    let (id, outcome) = store.record_task(&task("t", "uid-1")).expect("recorded");
    assert_eq!(outcome, Outcome::Created);
    let report = net_reach_report("node-1", 1, 20, 7);
    assert_eq!(
        store.put_report(id, &report).expect("put"),
        Outcome::Created
    );
    let rv = store.resource_version();
    assert_eq!(
        store.put_report(id, &report).expect("put again"),
        Outcome::Unchanged
    );
    assert_eq!(
        store.resource_version(),
        rv,
        "an unchanged put is not an event"
    );
    assert!(
        store.report(id, 1, "node-1").expect("read") == Some(report.clone()),
        "reads back"
    );
    assert_eq!(
        store.report_json(id, 1, "node-1").expect("read"),
        Some(serde_json::to_vec(&report).expect("json"))
    );
    let summary = store.task(id).expect("summary");
    assert_eq!(
        (summary.rounds, summary.reports, summary.latest_round),
        (1, 1, Some(1))
    );

    let mut changed = report.clone();
    changed.round_result = "fail".into();
    assert_eq!(
        store.put_report(id, &changed).expect("put changed"),
        Outcome::Updated
    );
    assert_eq!(
        store.reports(id, 1).expect("list")[0].result,
        RoundResult::Fail
    );
    assert_eq!(store.task(id).expect("summary").reports, 1);
}

#[test]
fn large_reports_are_chunked_below_64_kib_and_stream_back() {
    let (store, dir) = open("chunked");
    let (id, _) = store
        .record_task(&task("big", "uid-big"))
        .expect("recorded");
    // ~2 MB of JSON that compresses poorly enough to need many chunks.
    let mut report = net_reach_report("node-big", 1, 8000, 99);
    for (i, d) in report
        .task_net_reach
        .as_mut()
        .expect("task")
        .round_task_detail
        .iter_mut()
        .enumerate()
    {
        d.failure_reason = Some(format!(
            "{:x}",
            (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ));
    }
    let json = serde_json::to_vec(&report).expect("json");
    assert!(json.len() > 1_000_000, "{}", json.len());
    store.put_report(id, &report).expect("put");
    let meta = &store.reports(id, 1).expect("list")[0];
    assert!(
        meta.stored_bytes > MAX_VALUE_BYTES as u64,
        "the test needs a chunked value"
    );

    let mut streamed = Vec::new();
    std::io::Read::read_to_end(
        &mut store
            .report_reader(id, 1, "node-big")
            .expect("ok")
            .expect("exists"),
        &mut streamed,
    )
    .expect("streams");
    assert_eq!(streamed, json);
    drop(store);

    // No sled value is larger than the limit.
    let db = raw_db(&dir);
    let largest = db
        .iter()
        .map(|kv| kv.expect("readable").1.len())
        .max()
        .unwrap_or(0);
    assert!(largest <= MAX_VALUE_BYTES, "largest value {largest}");
}

#[test]
fn overwriting_a_chunked_report_with_a_small_one_leaves_no_chunks() {
    let (store, dir) = open("shrink");
    let (id, _) = store.record_task(&task("t", "uid-s")).expect("recorded");
    let mut big = net_reach_report("n", 1, 8000, 3);
    for (i, d) in big
        .task_net_reach
        .as_mut()
        .expect("task")
        .round_task_detail
        .iter_mut()
        .enumerate()
    {
        d.failure_reason = Some(format!(
            "{:x}",
            (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ));
    }
    store.put_report(id, &big).expect("big");
    store
        .put_report(id, &net_reach_report("n", 1, 2, 3))
        .expect("small");
    store.purge_round(id, 1).expect("purged");
    drop(store);
    let db = raw_db(&dir);
    let leftovers: Vec<_> = db
        .iter()
        .map(|kv| kv.expect("readable").0)
        .filter(|k| matches!(k[0], b'x' | b'b' | b'h' | b'r' | b'o'))
        .collect();
    assert!(leftovers.is_empty(), "{} keys left", leftovers.len());
}

#[test]
fn a_rounds_probe_rows_are_what_its_reports_measured_without_reading_bodies() {
    let (store, _dir) = open("probes");
    let (id, _) = store.record_task(&task("t", "uid-p")).expect("recorded");
    let reports = [
        net_reach_report("n2", 1, 3000, 1),
        net_reach_report("n1", 1, 4, 2),
    ];
    for r in &reports {
        store.put_report(id, r).expect("stored");
    }
    let mut rows = Vec::new();
    store
        .for_each_probe_row(id, 1, |row| rows.push(row))
        .expect("rows");
    let want: Vec<_> = [&reports[1], &reports[0]]
        .iter()
        .map(|r| kdoctor_api::matrix::ProbeRow::of(r).expect("NetReach"))
        .collect();
    assert_eq!(rows, want);
    assert_eq!(rows[1].probes.len(), 3000);
    let mut none = Vec::new();
    store
        .for_each_probe_row(id, 2, |row| none.push(row))
        .expect("none");
    assert!(none.is_empty());
}

#[test]
fn a_recreated_task_with_the_same_name_keeps_a_separate_history() {
    let (store, _dir) = open("incarnations");
    let (first, _) = store.record_task(&task("task", "uid-old")).expect("first");
    store
        .put_report(first, &net_reach_report("n1", 1, 3, 1))
        .expect("old round 1");
    store
        .put_report(first, &net_reach_report("n1", 2, 3, 2))
        .expect("old round 2");
    store
        .mark_deleted(first, Timestamp::now())
        .expect("deleted");

    let (second, outcome) = store.record_task(&task("task", "uid-new")).expect("second");
    assert_eq!(outcome, Outcome::Created);
    assert_ne!(first, second);
    store
        .put_report(second, &net_reach_report("n1", 1, 3, 9))
        .expect("new round 1");

    let both = store.find(TaskKind::NetReach, "task");
    assert_eq!(
        both.iter().map(|t| t.id).collect::<Vec<_>>(),
        [first, second]
    );
    assert!(both[0].deleted.is_some() && both[1].deleted.is_none());
    assert_eq!((both[0].rounds, both[1].rounds), (2, 1));
    assert!(store.report(second, 1, "n1").expect("read") == Some(net_reach_report("n1", 1, 3, 9)));
    assert!(store.report(first, 1, "n1").expect("read") == Some(net_reach_report("n1", 1, 3, 1)));
    assert!(store.report(second, 2, "n1").expect("read").is_none());
    assert_eq!(store.by_uid("uid-old").map(|t| t.id), Some(first));
}

#[test]
fn round_summaries_and_status_progress_are_kept() {
    let (store, _dir) = open("rounds");
    let (id, _) = store.record_task(&task("t", "uid-r")).expect("recorded");
    let summary = RoundSummary {
        round: 1,
        result: RoundResult::Fail,
        start: "2026-11-22T00:00:00Z".parse().expect("time"),
        end: Some("2026-11-22T00:01:00Z".parse().expect("time")),
        expected_nodes: 3,
        succeeded_nodes: 1,
        failed_nodes: 1,
        not_reported: vec!["node-3".into()],
        failure_reason: Some("some agents failed".into()),
    };
    assert_eq!(
        store.put_round(id, &summary).expect("put"),
        Outcome::Created
    );
    assert_eq!(
        store.put_round(id, &summary).expect("again"),
        Outcome::Unchanged
    );
    let rounds = store.rounds(id).expect("rounds");
    assert_eq!(rounds.len(), 1);
    assert_eq!(rounds[0].summary.as_ref(), Some(&summary));
    let t = store.task(id).expect("task");
    assert_eq!(t.latest_result, Some(RoundResult::Fail));
    assert_eq!(t.progress.expected_round, Some(3));

    let mut record = task("t", "uid-r");
    record.status = Some(serde_json::json!({"expectedRound": 3, "doneRound": 3, "finish": true}));
    assert_eq!(
        store.record_task(&record).expect("status").1,
        Outcome::Updated
    );
    assert!(store.task(id).expect("task").progress.finished);
    assert_eq!(store.task_record(id).expect("read"), Some(record));
}

#[test]
fn everything_survives_a_reopen() {
    let (store, dir) = open("reopen");
    let (id, _) = store.record_task(&task("t", "uid-p")).expect("recorded");
    let reports: Vec<_> = (0..5)
        .map(|n| net_reach_report(&format!("n{n}"), 1, 10, n))
        .collect();
    let batch: Vec<_> = reports
        .iter()
        .map(|r| NewReport {
            task: id,
            report: r,
        })
        .collect();
    store.put_reports(&batch).expect("batch");
    let before = (
        store.tasks(),
        store.resource_version(),
        store.stats().expect("stats"),
    );
    drop(store);
    let store = Store::open(StoreConfig::new(&dir)).expect("reopens");
    let after = (
        store.tasks(),
        store.resource_version(),
        store.stats().expect("stats"),
    );
    assert_eq!((before.0, before.1), (after.0, after.1));
    assert_eq!(before.2.reports, after.2.reports);
    for r in &reports {
        assert!(
            store.report(id, 1, &r.node_name).expect("read").as_ref() == Some(r),
            "{}",
            r.node_name
        );
    }
    // New writes continue the resourceVersion and the incarnation ids.
    let (next, _) = store.record_task(&task("u", "uid-q")).expect("recorded");
    assert!(next.0 > id.0);
    assert!(store.resource_version() > after.1);
}

#[test]
fn a_second_open_names_the_path_and_the_holder() {
    let (store, dir) = open("lock");
    let err = match Store::open(StoreConfig::new(&dir)) {
        Err(e) => e,
        Ok(_) => panic!("a second open must fail"),
    };
    assert!(matches!(err, StoreError::Locked { .. }));
    let text = err.to_string();
    assert!(text.contains(&dir.display().to_string()), "{text}");
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    drop(store);
    Store::open(StoreConfig::new(&dir)).expect("opens once released");
}

#[test]
fn a_corrupt_store_is_reported_and_left_alone() {
    let (store, dir) = open("corrupt");
    let (id, _) = store.record_task(&task("t", "uid-c")).expect("recorded");
    store
        .put_report(id, &net_reach_report("n", 1, 5, 1))
        .expect("put");
    drop(store);
    // Overwrite sled's config file with garbage.
    let conf = dir.join("db").join("conf");
    std::fs::write(&conf, b"this is not sled's configuration").expect("corrupted");
    let before = std::fs::read(&conf).expect("read");
    let err = match Store::open(StoreConfig::new(&dir)) {
        Err(e) => e,
        Ok(_) => panic!("a corrupt store must not open"),
    };
    let text = err.to_string();
    assert!(text.contains("Nothing was changed or deleted"), "{text}");
    assert!(text.contains("kdoctor store import"), "{text}");
    assert_eq!(
        std::fs::read(&conf).expect("still there"),
        before,
        "the store was not touched"
    );
    assert!(dir.join("db").join("db").exists() || dir.join("db").join("blobs").exists());
}

#[test]
fn reports_need_a_node_and_a_round() {
    let (store, _dir) = open("invalid");
    let (id, _) = store.record_task(&task("t", "uid-i")).expect("recorded");
    let mut report = net_reach_report("", 1, 1, 1);
    assert!(matches!(
        store.put_report(id, &report),
        Err(StoreError::Invalid(_))
    ));
    report.node_name = "n".into();
    report.round_number = 0;
    assert!(matches!(
        store.put_report(id, &report),
        Err(StoreError::Invalid(_))
    ));
    report.round_number = 1;
    assert!(matches!(
        store.put_report(kdoctor_store::IncarnationId(999), &report),
        Err(StoreError::UnknownTask(999))
    ));
}

#[test]
fn node_counts_come_from_reports_then_from_the_summary() {
    let (store, _dir) = open("node-counts");
    let (id, _) = store.record_task(&task("t", "uid-n")).expect("recorded");
    let mut failed = net_reach_report("n2", 1, 2, 2);
    failed.round_result = "fail".into();
    store
        .put_report(id, &net_reach_report("n1", 1, 2, 1))
        .expect("put");
    store.put_report(id, &failed).expect("put");
    let nodes = store.task(id).expect("task").latest_nodes.expect("counts");
    assert_eq!(
        (nodes.succeeded, nodes.failed, nodes.not_reported),
        (1, 1, 0)
    );
    // The failed node reports again, now successfully.
    store
        .put_report(id, &net_reach_report("n2", 1, 2, 3))
        .expect("put");
    let nodes = store.task(id).expect("task").latest_nodes.expect("counts");
    assert_eq!((nodes.succeeded, nodes.failed), (2, 0));
    let summary = RoundSummary {
        round: 1,
        result: RoundResult::Fail,
        start: "2026-11-22T00:00:00Z".parse().expect("time"),
        end: None,
        expected_nodes: 3,
        succeeded_nodes: 2,
        failed_nodes: 0,
        not_reported: vec!["n3".into()],
        failure_reason: Some("some agents did not report".into()),
    };
    store.put_round(id, &summary).expect("summary");
    let nodes = store.task(id).expect("task").latest_nodes.expect("counts");
    assert_eq!(
        (nodes.succeeded, nodes.failed, nodes.not_reported),
        (2, 0, 1)
    );
}
