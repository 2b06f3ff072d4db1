//! The change feed: ordered events with resourceVersions that survive restarts, a resumable
//! window, and a clear "too old" when the window has moved on.

use kdoctor_api::fixtures::net_reach_report;
use kdoctor_store::{EventType, Store, StoreConfig, WatchError};

use crate::support::{open, scratch, task};

#[test]
fn events_arrive_in_order_with_increasing_versions() {
    let (store, _dir) = open("feed-order");
    let mut sub = store.subscribe(None).expect("subscribes");
    let (id, _) = store.record_task(&task("t", "uid-f")).expect("recorded");
    store
        .put_report(id, &net_reach_report("n1", 1, 2, 1))
        .expect("put");
    store
        .put_report(id, &net_reach_report("n2", 1, 2, 2))
        .expect("put");
    store.purge_task(id).expect("purged");
    let mut seen = Vec::new();
    while let Ok(event) = sub.live.try_recv() {
        seen.push((event.resource_version, event.event_type, event.round));
    }
    assert_eq!(
        seen,
        [
            (1, EventType::Added, None),
            (2, EventType::Modified, Some(1)),
            (3, EventType::Modified, Some(1)),
            (4, EventType::Deleted, None)
        ]
    );
}

#[test]
fn a_watch_resumes_from_a_recent_version_even_after_a_restart() {
    let (store, dir) = open("feed-resume");
    let (id, _) = store.record_task(&task("t", "uid-r")).expect("recorded");
    for n in 0..5 {
        store
            .put_report(id, &net_reach_report(&format!("n{n}"), 1, 2, n))
            .expect("put");
    }
    drop(store);
    let store = Store::open(StoreConfig::new(&dir)).expect("reopens");
    let sub = store.subscribe(Some(3)).expect("resumes");
    let versions: Vec<u64> = sub.backlog.iter().map(|e| e.resource_version).collect();
    assert_eq!(versions, [4, 5, 6]);
    assert!(sub.backlog.iter().all(|e| e.task.id == id));
    let sub = store.subscribe(Some(6)).expect("up to date");
    assert!(sub.backlog.is_empty());
}

#[test]
fn a_version_outside_the_window_is_too_old() {
    let dir = scratch("feed-window");
    let config = StoreConfig {
        event_window: 3,
        ..StoreConfig::new(&dir)
    };
    let store = Store::open(config).expect("opens");
    let (id, _) = store.record_task(&task("t", "uid-w")).expect("recorded");
    for n in 0..6 {
        store
            .put_report(id, &net_reach_report(&format!("n{n}"), 1, 2, n))
            .expect("put");
    }
    // Versions 1..=7 were handed out; events 5, 6, 7 are kept: resume from 4 or later.
    assert_eq!(store.resource_version(), 7);
    assert_eq!(
        store.subscribe(Some(4)).expect("in window").backlog.len(),
        3
    );
    let err = store.subscribe(Some(3)).expect_err("too old");
    assert_eq!(
        err,
        WatchError::TooOld {
            requested: 3,
            oldest: 4
        }
    );
    assert!(
        err.to_string().contains("too old resource version: 3"),
        "{err}"
    );
    // A version from the future (e.g. writes lost in a crash) cannot be resumed either.
    assert!(matches!(
        store.subscribe(Some(99)),
        Err(WatchError::TooOld { .. })
    ));
    // The trimmed window is what survives a restart.
    drop(store);
    let store = Store::open(StoreConfig {
        event_window: 3,
        ..StoreConfig::new(&dir)
    })
    .expect("reopens");
    assert!(store.subscribe(Some(3)).is_err());
    assert_eq!(
        store.subscribe(Some(4)).expect("in window").backlog.len(),
        3
    );
}

#[test]
fn events_say_which_incarnation_is_the_newest_before_and_after() {
    let (store, _dir) = open("feed-newest");
    let (old, _) = store.record_task(&task("t", "uid-old")).expect("recorded");
    let mut sub = store.subscribe(None).expect("subscribes");
    let (new, _) = store.record_task(&task("t", "uid-new")).expect("recreated");
    let e1 = sub.live.try_recv().expect("the displaced one");
    assert_eq!(
        (e1.event_type, e1.task.id, e1.was_newest, e1.newest),
        (EventType::Modified, old, true, false)
    );
    assert_eq!(e1.previous.as_ref().map(|p| p.id), Some(old));
    let e2 = sub.live.try_recv().expect("the new one");
    assert_eq!(
        (e2.event_type, e2.task.id, e2.was_newest, e2.newest),
        (EventType::Added, new, false, true)
    );
    assert!(e2.previous.is_none());
    store.purge_task(new).expect("purged");
    let e3 = sub.live.try_recv().expect("deleted");
    assert_eq!(
        (e3.event_type, e3.task.id, e3.was_newest, e3.newest),
        (EventType::Deleted, new, true, false)
    );
    let e4 = sub.live.try_recv().expect("promoted");
    assert_eq!(
        (e4.event_type, e4.task.id, e4.was_newest, e4.newest),
        (EventType::Modified, old, false, true)
    );
    assert!(e1.resource_version < e2.resource_version && e3.resource_version < e4.resource_version);
}
