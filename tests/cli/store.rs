//! `kdoctor store export|import|stats`, and migration from a Go kdoctor report directory.

use std::path::Path;

use jiff::Timestamp;
use kdoctor_api::fixtures::net_reach_report;
use kdoctor_api::task::TaskKind;
use kdoctor_store::{RoundResult, RoundSummary, Store, StoreConfig, TaskRecord};
use serde_json::json;

use crate::support::{kdoctor, scratch, stderr, stdout, write};

fn record(name: &str, uid: &str) -> TaskRecord {
    TaskRecord {
        kind: TaskKind::NetReach,
        name: name.to_string(),
        uid: uid.to_string(),
        created: "2026-11-01T00:00:00Z".parse().expect("time"),
        spec: json!({"request": {"qps": 10}}),
        status: Some(json!({"expectedRound": 2, "doneRound": 2, "finish": true})),
        deleted: None,
    }
}

/// A store with a deleted and a re-created incarnation of `task`, rounds and reports.
fn fill(dir: &Path) {
    let store = Store::open(StoreConfig::new(dir)).expect("opens");
    let (old, _) = store
        .record_task(&record("task", "uid-old"))
        .expect("recorded");
    store
        .put_report(old, &net_reach_report("n1", 1, 4, 1))
        .expect("put");
    store.mark_deleted(old, Timestamp::now()).expect("deleted");
    let (new, _) = store
        .record_task(&record("task", "uid-new"))
        .expect("recorded");
    for round in 1..=2 {
        for node in ["n1", "n2"] {
            store
                .put_report(new, &net_reach_report(node, round, 6, round as u64))
                .expect("put");
        }
        let summary = RoundSummary {
            round: round as u64,
            result: RoundResult::Succeed,
            start: "2026-11-01T00:00:00Z".parse().expect("time"),
            end: Some("2026-11-01T00:01:00Z".parse().expect("time")),
            expected_nodes: 2,
            succeeded_nodes: 2,
            failed_nodes: 0,
            not_reported: vec![],
            failure_reason: None,
        };
        store.put_round(new, &summary).expect("round");
    }
}

#[test]
fn export_then_import_reproduces_the_store_and_is_idempotent() {
    let dir = scratch("store-roundtrip");
    let (a, b) = (dir.join("a"), dir.join("b"));
    fill(&a);
    let a_arg = a.display().to_string();
    let b_arg = b.display().to_string();

    let export = kdoctor(&["store", "export", "--data", &a_arg]);
    assert!(export.status.success(), "{}", stderr(&export));
    assert_eq!(
        stderr(&export),
        format!("exported 2 tasks, 2 rounds, 5 reports from {a_arg}\n")
    );
    let lines = stdout(&export);
    assert_eq!(lines.lines().count(), 9);
    let file = write(&dir, "backup.jsonl", lines.as_bytes());

    let import = kdoctor(&["store", "import", "--data", &b_arg, &file]);
    assert!(import.status.success(), "{}", stderr(&import));
    assert_eq!(
        stderr(&import),
        "imported 9 new lines of 2 tasks, 2 rounds, 5 reports (0 already stored)\n"
    );
    let again = kdoctor(&["store", "import", "--data", &b_arg, &file]);
    assert_eq!(
        stderr(&again),
        "nothing new: 2 tasks, 2 rounds, 5 reports already stored\n"
    );

    let reexport = kdoctor(&["store", "export", "--data", &b_arg]);
    assert_eq!(stdout(&reexport), lines, "the copy exports the same lines");

    let stats = kdoctor(&["store", "stats", "--data", &b_arg, "-o", "json"]);
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).expect("JSON");
    assert_eq!(
        (stats["tasks"].as_u64(), stats["deletedTasks"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(
        (stats["rounds"].as_u64(), stats["reports"].as_u64()),
        (Some(3), Some(5))
    );
}

#[test]
fn a_bad_line_stops_the_import_there_with_its_number() {
    let dir = scratch("store-badline");
    let report = serde_json::to_string(&net_reach_report("n1", 1, 2, 1)).expect("json");
    let task = serde_json::to_string(&json!({
        "type": "task", "kind": "NetReach", "name": "t", "uid": "u1",
        "created": "2026-11-01T00:00:00Z", "spec": {}
    }))
    .expect("json");
    let content = format!(
        "{task}\n{{\"type\":\"report\",\"uid\":\"u1\",\"report\":{report}}}\n{{\"type\":\"nonsense\"}}\n{{\"type\":\"report\",\"uid\":\"u1\",\"report\":{}}}\n",
        serde_json::to_string(&net_reach_report("n2", 1, 2, 2)).expect("json")
    );
    let file = write(&dir, "in.jsonl", content.as_bytes());
    let data = dir.join("data").display().to_string();

    let output = kdoctor(&["store", "import", "--data", &data, &file]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "error: {file}: line 3: not a store record: unknown type \"nonsense\""
        )),
        "{err}"
    );
    let store = Store::open(StoreConfig::new(dir.join("data"))).expect("opens");
    let id = store.by_uid("u1").expect("line 1 imported").id;
    assert!(
        store.report(id, 1, "n1").expect("read").is_some(),
        "line 2 imported"
    );
    assert!(
        store.report(id, 1, "n2").expect("read").is_none(),
        "line 4 not imported"
    );
    drop(store);

    let output = kdoctor(&["store", "import", "--data", &data, "--skip-invalid", &file]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("skipped line 3: not a store record"), "{err}");
    let store = Store::open(StoreConfig::new(dir.join("data"))).expect("opens");
    assert!(
        store.report(id, 1, "n2").expect("read").is_some(),
        "line 4 imported this time"
    );
}

#[test]
fn a_go_kdoctor_report_directory_migrates() {
    let dir = scratch("store-migrate");
    let go = dir.join("report");
    std::fs::create_dir_all(&go).expect("dir");
    // v0.2.2 agent report (tab-indented, as upstream writes it).
    let current =
        serde_json::to_string_pretty(&net_reach_report("kdoctor-worker", 1, 3, 5)).expect("json");
    write(
        &go,
        "NetReach_task_round1_kdoctor-worker_2023-08-01T08:43:07Z",
        current.as_bytes(),
    );
    // v0.2.1 agent report (Go field names).
    let legacy = json!({
        "TaskName": "netreach.task", "TaskType": "NetReach", "RoundNumber": 1, "RoundResult": "succeed",
        "NodeName": "kdoctor-control-plane", "PodName": "kdoctor-agent-x",
        "StartTimeStamp": "2023-08-01T08:36:56Z", "EndTimeStamp": "2023-08-01T08:37:07Z",
        "RoundDuration": "11s", "ReportType": "agent test report",
        "NetReachTask": {"TargetType": "NetReach", "TargetNumber": 0, "Succeed": true,
            "SystemResource": {"MaxCPU": "1%", "MeanCPU": "1%", "MaxMemory": "1MB"},
            "TotalRunningLoad": {"AppHttpHealthyQPS": 0, "NetReachQPS": 10, "NetDnsQPS": 0}, "Detail": []}
    });
    write(
        &go,
        "NetReach_task_round1_kdoctor-control-plane_2023-08-01T08:43:07Z",
        legacy.to_string().as_bytes(),
    );
    // The controller's summary of the round.
    let summary = json!({
        "TaskName": "netreach.task", "TaskSpec": "", "RoundNumber": 1, "RoundResult": "succeed",
        "NodeName": "", "PodName": "kdoctor-controller-0", "FailedReason": "",
        "StartTimeStamp": "2023-08-01T08:36:56Z", "EndTimeStamp": "2023-08-01T08:37:08Z",
        "RoundDuraiton": "12s", "ReportType": "round summray report",
        "Detail": {"status": "succeed", "roundNumber": 1, "startTimeStamp": "2023-08-01T08:36:56Z",
            "endTimeStamp": "2023-08-01T08:37:08Z", "deadLineTimeStamp": "2023-08-01T08:37:56Z",
            "expectedActorNumber": 2, "failedAgentNodeList": [],
            "succeedAgentNodeList": ["kdoctor-worker", "kdoctor-control-plane"], "notReportAgentNodeList": []}
    });
    write(
        &go,
        "NetReach_task_round1_summary_2023-08-31T08:36:56Z",
        summary.to_string().as_bytes(),
    );
    write(&go, "notes.txt", b"not a report");
    write(
        &go,
        "Netdns_dns_round1_node1_2023-08-01T08:43:07Z",
        b"{broken",
    );

    let data = dir.join("data").display().to_string();
    let output = kdoctor(&[
        "store",
        "import",
        "--data",
        &data,
        "--from-kdoctor-dir",
        &go.display().to_string(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(err.contains("skipped notes.txt: "), "{err}");
    assert!(
        err.contains(
            "skipped Netdns_dns_round1_node1_2023-08-01T08:43:07Z: not a kdoctor agent report"
        ),
        "{err}"
    );
    assert!(
        err.contains("migrated 1 tasks, 1 round summaries, 2 reports"),
        "{err}"
    );

    let store = Store::open(StoreConfig::new(dir.join("data"))).expect("opens");
    let task = store
        .by_uid("migrated:NetReach/task")
        .expect("migrated task");
    let round = store.round(task.id, 1).expect("read").expect("round 1");
    let summary = round.summary.expect("summary");
    assert_eq!(
        (
            summary.expected_nodes,
            summary.succeeded_nodes,
            summary.result
        ),
        (2, 2, RoundResult::Succeed)
    );
    assert_eq!(round.reports, 2);
    let legacy = store
        .report(task.id, 1, "kdoctor-control-plane")
        .expect("read")
        .expect("legacy report");
    assert_eq!(
        legacy
            .task_net_reach
            .expect("task")
            .running_load_total
            .net_reach_qps,
        10
    );
}

#[test]
fn a_store_in_use_is_refused_with_its_holder() {
    let dir = scratch("store-locked");
    let store = Store::open(StoreConfig::new(&dir)).expect("opens");
    let output = kdoctor(&["store", "stats", "--data", &dir.display().to_string()]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.contains(&format!("is in use by pid {}", std::process::id())),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    drop(store);
    assert!(
        kdoctor(&["store", "stats", "--data", &dir.display().to_string()])
            .status
            .success()
    );
}

/// Commands that only read never create a store at a mistyped path, and a missing migration
/// source is named as such, not blamed on the store (issue 19).
#[test]
fn reading_commands_and_a_missing_migration_source_say_what_is_missing() {
    let dir = scratch("store-missing");
    let typo = dir.join("typo");
    for command in ["stats", "export", "repair"] {
        let output = kdoctor(&["store", command, "--data", &typo.display().to_string()]);
        assert_eq!(output.status.code(), Some(2), "store {command}");
        let err = stderr(&output);
        assert_eq!(
            err.trim(),
            format!(
                "error: no store at {}: --data must name a store directory (the controller's --data)",
                typo.display()
            ),
            "store {command}"
        );
        assert!(!typo.exists(), "store {command} created {}", typo.display());
    }
    let data = dir.join("data");
    let output = kdoctor(&[
        "store",
        "import",
        "--data",
        &data.display().to_string(),
        "--from-kdoctor-dir",
        "/nonexistent/kdoctor/reports",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output).trim(),
        "error: --from-kdoctor-dir /nonexistent/kdoctor/reports: no such directory (the Go kdoctor controller's report directory)"
    );
    assert!(!data.exists(), "a store was created for a failed import");
}

/// `kdoctor store repair` on a store that lost acknowledged writes (issue 20 M6): the store
/// refuses to open, repair says what was lost, and the store opens again.
#[test]
fn repair_accepts_a_store_that_lost_acknowledged_writes() {
    let dir = scratch("store-repair");
    fill(&dir);
    // A mark ahead of the data: as if the last writes were lost by the disk.
    let mark = dir.join("durable-rv");
    let rv = 1_000_000u64;
    let mut bytes = rv.to_be_bytes().to_vec();
    bytes.extend(crc32fast::hash(&rv.to_be_bytes()).to_be_bytes());
    bytes.extend([0u8; 4]);
    std::fs::write(&mark, bytes).expect("mark");
    let data = dir.display().to_string();
    let refused = kdoctor(&["store", "stats", "--data", &data]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr(&refused).contains("acknowledged writes up to resourceVersion 1000000"),
        "{}",
        stderr(&refused)
    );
    let repaired = kdoctor(&["store", "repair", "--data", &data]);
    assert!(repaired.status.success(), "{}", stderr(&repaired));
    assert!(
        stderr(&repaired).contains("resourceVersions continue from 1000000"),
        "{}",
        stderr(&repaired)
    );
    let stats = kdoctor(&["store", "stats", "--data", &data, "-o", "json"]);
    assert!(stats.status.success(), "{}", stderr(&stats));
    assert!(
        stdout(&stats).contains("\"resourceVersion\": 1000000"),
        "{}",
        stdout(&stats)
    );
}
