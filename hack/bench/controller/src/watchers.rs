//! Concurrent watchers of the reports through kube-apiserver's aggregation layer, as
//! `kubectl get kdoctorreport -w` watches (a Table, from the list's resourceVersion), each on a
//! connection of its own with the admin's client certificate. Tasks are created and deleted
//! meanwhile (each recorded by the controller, then marked deleted: events of the reports'
//! watch); every watcher must see the same events, and every task's.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use kdoctor_api::task::NetReach;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde::{Deserialize, Serialize};

use crate::aggregated::{REPORTS, TABLE};
use crate::peaks::Peaks;
use crate::{Cluster, Controllers};

/// Tasks created, then deleted, while the watchers watch.
const TASKS: usize = 10;
/// How long every watcher may take to see every task's events.
const DELIVERY: Duration = Duration::from_secs(180);

/// What the watchers saw.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Watched {
    pub watchers: usize,
    /// Events each watcher saw (all the same).
    pub events: usize,
    /// From the first task created to the last watcher's last event.
    pub delivered_s: f64,
    pub apiserver_peak_mib: f64,
    pub replicas_peak_mib: f64,
}

impl Watched {
    pub fn print(&self) {
        println!(
            "\n- {} watchers of every report as a Table through the aggregation layer (a \
             connection each, the admin's client certificate): {TASKS} tasks created and deleted \
             meanwhile; **every watcher saw the same {} events**, each task's creation and \
             deletion among them, all delivered {:.1} s after the first creation; peak RSS \
             meanwhile kube-apiserver {:.0} MiB, largest replica {:.0} MiB.",
            self.watchers,
            self.events,
            self.delivered_s,
            self.apiserver_peak_mib,
            self.replicas_peak_mib
        );
    }
}

/// One event as a watcher saw it: type, report name, resourceVersion, whether its task is
/// marked deleted.
type Event = (String, String, String, bool);

/// Opens `watchers` watches, creates and deletes [`TASKS`] tasks, and checks that every
/// watcher saw the same events, each task's creation and deletion among them.
pub async fn measure(cluster: &Cluster, controllers: &Controllers, watchers: usize) -> Watched {
    let list =
        crate::nginx::get_as(&cluster.admin, &format!("{REPORTS}?limit=1"), None, None).await;
    let list: serde_json::Value = serde_json::from_slice(&list).expect("a list");
    let from = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("the list's resourceVersion")
        .to_string();
    let peaks = Peaks::start(cluster, controllers);
    let seen: Vec<Arc<Mutex<Vec<Event>>>> = (0..watchers).map(|_| Arc::default()).collect();
    let (opened_tx, mut opened_rx) = tokio::sync::mpsc::channel::<()>(watchers);
    let mut streams = tokio::task::JoinSet::new();
    for events in &seen {
        let (client, events, opened) = (cluster.admin.clone(), events.clone(), opened_tx.clone());
        // The row's object whole: its annotations say when its task was deleted.
        let path = format!("{REPORTS}?watch=1&resourceVersion={from}&includeObject=Object");
        streams.spawn(async move { watch(client, path, events, opened).await });
    }
    drop(opened_tx);
    for _ in 0..watchers {
        opened_rx.recv().await.expect("every watch opened");
    }
    let started = Instant::now();
    let names: Vec<String> = (0..TASKS).map(|i| format!("watched-{i}")).collect();
    let api = Api::<NetReach>::all(cluster.admin.clone());
    for name in &names {
        // Its first round long after the bench: only the controller's record of it.
        let task = serde_json::json!({
            "apiVersion": "kdoctor.io/v1beta1", "kind": "NetReach",
            "metadata": {"name": name},
            "spec": {"schedule": {"schedule": "100000 1", "roundTimeoutMinute": 1, "roundNumber": 1}},
        });
        api.patch(name, &PatchParams::apply("bench"), &Patch::Apply(&task))
            .await
            .expect("a watched task");
    }
    // Deleted once the controller recorded it (its report is listed).
    let reports: BTreeSet<String> = names.iter().map(|n| format!("netreach-{n}")).collect();
    let recorded = wait_for(|| {
        let events = seen[0].lock().expect("events");
        reports
            .iter()
            .all(|r| events.iter().any(|(_, name, _, _)| name == r))
    })
    .await;
    assert!(
        recorded,
        "the controller did not record the watched tasks within {DELIVERY:?}"
    );
    for name in &names {
        api.delete(name, &DeleteParams::default())
            .await
            .expect("a watched task deleted");
    }
    // Each report's task marked deleted.
    let complete = |events: &[Event]| {
        reports.iter().all(|r| {
            events
                .iter()
                .any(|(_, name, _, deleted)| name == r && *deleted)
        })
    };
    let delivered = wait_for(|| seen.iter().all(|e| complete(&e.lock().expect("events"))))
        .await
        .then(|| started.elapsed());
    // The store marks a deletion once; anything after it would be another event.
    tokio::time::sleep(Duration::from_secs(2)).await;
    streams.abort_all();
    let (apiserver_peak_mib, replicas_peak_mib) = peaks.stop().await;
    let first = seen[0].lock().expect("events").clone();
    let behind = seen
        .iter()
        .filter(|e| *e.lock().expect("events") != first)
        .count();
    let delivered = delivered.unwrap_or_else(|| {
        panic!(
            "not every watcher saw every task's creation and deletion within {DELIVERY:?} \
             (the first saw {first:?})"
        )
    });
    assert_eq!(
        behind, 0,
        "{behind} of {watchers} watchers saw other events than the first ({first:?})"
    );
    Watched {
        watchers,
        events: first.len(),
        delivered_s: delivered.as_secs_f64(),
        apiserver_peak_mib,
        replicas_peak_mib,
    }
}

/// Whether `done` came true within [`DELIVERY`] (checked every 100 ms).
async fn wait_for(done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + DELIVERY;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    true
}

/// One watcher: its events, as they arrive, until aborted.
async fn watch(
    client: kube::Client,
    path: String,
    events: Arc<Mutex<Vec<Event>>>,
    opened: tokio::sync::mpsc::Sender<()>,
) {
    let request = http::Request::get(&path)
        .header(http::header::ACCEPT, TABLE)
        .body(kube::client::Body::empty())
        .expect("a request");
    let response = client.send(request).await.expect("a watch");
    assert!(
        response.status().is_success(),
        "watch: {}",
        response.status()
    );
    let _ = opened.send(()).await;
    let mut body = response.into_body();
    let mut line = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.expect("the watch's stream").into_data() else {
            continue;
        };
        for byte in data {
            if byte != b'\n' {
                line.push(byte);
                continue;
            }
            let event: serde_json::Value = serde_json::from_slice(&line).expect("an event");
            line.clear();
            let kind = event["type"].as_str().unwrap_or_default().to_string();
            assert_ne!(kind, "ERROR", "a watcher was sent an error: {event}");
            let version = event["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            for row in event["object"]["rows"].as_array().into_iter().flatten() {
                let meta = &row["object"]["metadata"];
                events.lock().expect("events").push((
                    kind.clone(),
                    meta["name"].as_str().unwrap_or_default().to_string(),
                    version.clone(),
                    meta["annotations"]["kdoctor.io/task-deleted"].is_string(),
                ));
            }
        }
    }
}
