//! Helpers: scratch stores and task records.

use std::path::PathBuf;

use jiff::Timestamp;
use kdoctor_api::report::Report;
use kdoctor_api::task::TaskKind;
use kdoctor_store::{IncarnationId, NewReport, Outcome, Store, StoreConfig, TaskRecord};

/// A fresh directory for one test.
pub fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kdoctor-store-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A store in a fresh directory.
pub fn open(test: &str) -> (Store, PathBuf) {
    let dir = scratch(test);
    (
        Store::open(StoreConfig::new(&dir)).expect("store opens"),
        dir,
    )
}

/// A NetReach task record.
pub fn task(name: &str, uid: &str) -> TaskRecord {
    TaskRecord {
        kind: TaskKind::NetReach,
        name: name.to_string(),
        uid: uid.to_string(),
        created: "2026-11-01T00:00:00Z".parse::<Timestamp>().expect("time"),
        spec: serde_json::json!({"schedule": {"schedule": "0 1", "roundTimeoutMinute": 1, "roundNumber": 3}}),
        status: Some(serde_json::json!({"expectedRound": 3, "doneRound": 0, "finish": false})),
        deleted: None,
    }
}

/// Stores `reports` of incarnation `id` in one batch.
pub fn put_all(store: &Store, id: IncarnationId, reports: &[Report]) -> Vec<Outcome> {
    let batch: Vec<NewReport> = reports
        .iter()
        .map(|report| NewReport { task: id, report })
        .collect();
    store.put_reports(&batch).expect("reports stored")
}

/// The store's sled database opened directly, once the store dropped before has let go of it:
/// sled's flusher thread holds the database's file lock until it exits, after the drop returns
/// (on a loaded machine, long enough for an immediate open to find it locked).
pub fn raw_db(dir: &std::path::Path) -> sled::Db {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match sled::open(dir.join("db")) {
            Ok(db) => return db,
            Err(e)
                if std::time::Instant::now() < deadline
                    && e.to_string().contains("could not acquire lock") =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("raw open of {}: {e}", dir.display()),
        }
    }
}

/// Everything a reader can see of a store: its resourceVersion, every task and, for each
/// round, every report's JSON.
pub fn content(store: &Store) -> (u64, Vec<String>) {
    let mut seen = Vec::new();
    for task in store.tasks() {
        seen.push(serde_json::to_string(&task).expect("json"));
        for round in store.round_numbers(task.id) {
            for meta in store.reports(task.id, round).expect("reports") {
                let json = store
                    .report_json(task.id, round, &meta.node)
                    .expect("read")
                    .expect("there");
                seen.push(String::from_utf8(json).expect("utf-8"));
            }
        }
    }
    (store.resource_version(), seen)
}
