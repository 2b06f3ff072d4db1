//! Reports of earlier tasks, stored before the replicas start: the store of the replica that
//! starts the cluster holds them (the one with the most data does, as when a single store is
//! upgraded to replicas), and the others receive them from it by Raft. Listing them all as a
//! Table through the aggregation layer is one of the bench's reads.

use std::path::Path;

use kdoctor_api::fixtures::net_reach_report;
use kdoctor_api::task::TaskKind;
use kdoctor_store::{NewReport, Store, StoreConfig, TaskRecord};

/// Stores `tasks` finished and deleted NetReach tasks with one report of 5 peers each in a
/// new store at `dir`.
pub fn seed(dir: &Path, tasks: u64) {
    let store = Store::open(StoreConfig::new(dir)).expect("the seeded replica's store");
    let created = jiff::Timestamp::now();
    let numbers: Vec<u64> = (0..tasks).collect();
    for chunk in numbers.chunks(500) {
        let mut reports = Vec::new();
        for t in chunk {
            let record = TaskRecord {
                kind: TaskKind::NetReach,
                name: format!("earlier{t:05}"),
                uid: format!("{t:08x}-5eed-0000-0000-000000000000"),
                created,
                spec: serde_json::json!({"request": {"qps": 10}}),
                status: Some(
                    serde_json::json!({"expectedRound": 1, "doneRound": 1, "finish": true}),
                ),
                // Deleted since, as most earlier tasks are: their reports stay listed, and the
                // controller has no deletion of its own to record at its start.
                deleted: Some(created),
            };
            let (id, _) = store.record_task(&record).expect("a seeded task");
            reports.push((id, net_reach_report("node-1", 1, 5, *t)));
        }
        let items: Vec<NewReport> = reports
            .iter()
            .map(|(id, report)| NewReport { task: *id, report })
            .collect();
        store.put_reports(&items).expect("seeded reports");
    }
}
