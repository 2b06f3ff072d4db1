//! The export outbox: an entry per stored report, written with it, kept across a reopen,
//! removed when delivered, bounded with the oldest dropped and counted.

use kdoctor_api::fixtures::net_reach_report;
use kdoctor_store::{Store, StoreConfig};

use crate::support::{open, put_all, task};

fn nodes(store: &Store) -> Vec<(u64, String)> {
    store
        .outbox(None, 100)
        .into_iter()
        .map(|p| (p.round, p.node))
        .collect()
}

#[test]
fn stored_reports_wait_in_the_outbox_across_a_reopen_until_delivered() {
    let (store, dir) = open("outbox");
    let (id, _) = store.record_task(&task("t", "uid-o")).expect("recorded");
    // Nothing is kept while export is off.
    store
        .put_report(id, &net_reach_report("before", 1, 10, 1))
        .expect("put");
    assert!(store.outbox(None, 100).is_empty());

    store.enable_outbox(100);
    let reports: Vec<_> = (0..3)
        .map(|n| net_reach_report(&format!("n{n}"), 1, 10, n))
        .collect();
    put_all(&store, id, &reports);
    // The same bytes again are not a new report; a changed one already waiting is not added.
    put_all(&store, id, &reports);
    let mut changed = reports[0].clone();
    changed.round_result = "fail".into();
    store.put_report(id, &changed).expect("changed");
    assert_eq!(
        nodes(&store),
        [(1, "n0".into()), (1, "n1".into()), (1, "n2".into())]
    );
    let first = store.outbox(None, 1)[0].seq;
    store.outbox_done(first).expect("delivered");
    assert_eq!(store.outbox(Some(first), 100).len(), 2);
    drop(store);

    let store = Store::open(StoreConfig::new(&dir)).expect("reopens");
    assert_eq!(nodes(&store), [(1, "n1".into()), (1, "n2".into())]);
    let after = store.outbox(None, 100);
    // New entries continue the sequence.
    store.enable_outbox(100);
    store
        .put_report(id, &net_reach_report("n3", 2, 10, 1))
        .expect("put");
    let all = store.outbox(None, 100);
    assert_eq!(all.len(), 3);
    assert!(all[2].seq > after[1].seq, "{all:?}");
    for p in &all {
        store.outbox_done(p.seq).expect("delivered");
    }
    assert!(store.outbox(None, 100).is_empty());
}

#[test]
fn a_full_outbox_drops_the_oldest_and_counts_them() {
    let (store, _dir) = open("outbox-full");
    let (id, _) = store.record_task(&task("t", "uid-f")).expect("recorded");
    store.enable_outbox(2);
    for n in 0..5 {
        store
            .put_report(id, &net_reach_report(&format!("n{n}"), 1, 10, n))
            .expect("put");
    }
    assert_eq!(nodes(&store), [(1, "n3".into()), (1, "n4".into())]);
    assert_eq!(store.metrics().outbox_dropped.get(), 3);
    assert_eq!(store.metrics().outbox_length.get(), 2);
}
