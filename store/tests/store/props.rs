//! Property tests: framing round-trips any bytes at any size, puts are idempotent, and events
//! come in strictly increasing resourceVersion order whatever the sequence of writes.

use kdoctor_api::fixtures::net_reach_report;
use kdoctor_store::{Outcome, Store, StoreConfig};
use proptest::prelude::*;

use crate::support::{scratch, task};

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// Reports of any number of targets (some needing chunks) read back exactly, and a second
    /// put of the same report is a no-op.
    #[test]
    fn reports_round_trip_and_puts_are_idempotent(
        sizes in proptest::collection::vec((1usize..4000, any::<u64>()), 1..4),
    ) {
        let dir = scratch(&format!("prop-rt-{}", sizes.len() * 1000 + sizes[0].0));
        let store = Store::open(StoreConfig::new(&dir)).expect("opens");
        let (id, _) = store.record_task(&task("p", "uid-p")).expect("recorded");
        for (i, (targets, seed)) in sizes.iter().enumerate() {
            let mut report = net_reach_report(&format!("n{i}"), 1, *targets, *seed);
            // Make the body poorly compressible so large sizes really need chunks.
            for (j, d) in report.task_net_reach.as_mut().expect("task").round_task_detail.iter_mut().enumerate() {
                d.failure_reason = Some(format!("{:x}", seed.wrapping_mul(j as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
            }
            prop_assert_eq!(store.put_report(id, &report).expect("put"), Outcome::Created);
            prop_assert_eq!(store.put_report(id, &report).expect("again"), Outcome::Unchanged);
            let back = store.report(id, 1, &report.node_name).expect("read");
            prop_assert!(back.as_ref() == Some(&report), "report {} read back different", report.node_name);
        }
        prop_assert_eq!(store.task(id).expect("task").reports, sizes.len() as u64);
    }

    /// Whatever writes happen, subscribers see strictly increasing versions, one per change.
    #[test]
    fn events_are_strictly_ordered(ops in proptest::collection::vec(0u8..4, 1..30)) {
        let dir = scratch(&format!("prop-ev-{}", ops.len()));
        let store = Store::open(StoreConfig::new(&dir)).expect("opens");
        let mut sub = store.subscribe(None).expect("subscribes");
        let (id, _) = store.record_task(&task("e", "uid-e")).expect("recorded");
        let mut changes = 1u64;
        for (i, op) in ops.iter().enumerate() {
            let node = format!("n{}", op % 2);
            let changed = match op {
                0 | 1 => store.put_report(id, &net_reach_report(&node, 1 + (i % 3) as i64, 2, *op as u64)).expect("put") != Outcome::Unchanged,
                2 => store.purge_round(id, 1 + (i % 3) as u64).expect("purge") > 0,
                _ => {
                    let mut t = task("e", "uid-e");
                    t.status = Some(serde_json::json!({"doneRound": i}));
                    store.record_task(&t).expect("record").1 != Outcome::Unchanged
                }
            };
            changes += u64::from(changed);
        }
        let mut last = 0;
        let mut count = 0;
        while let Ok(event) = sub.live.try_recv() {
            prop_assert!(event.resource_version > last);
            last = event.resource_version;
            count += 1;
        }
        prop_assert_eq!(count, changes);
        prop_assert_eq!(last, store.resource_version());
    }
}
