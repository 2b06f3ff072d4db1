//! Watch: `ADDED`/`MODIFIED`/`DELETED` events from the store's change feed, newline-delimited
//! JSON, with resourceVersion resumption, bookmarks, `sendInitialEvents`, `timeoutSeconds`, and
//! a `410 Expired` ERROR event when the version is too old or the watcher fell behind.
//!
//! A store event is about one task incarnation, but incarnations of one name share object names
//! (the newest is `<kind>-<task>`, older ones get a tag), so each event is turned into the diff
//! of every object of that task name against what this watcher has already been told.

use std::collections::HashMap;
use std::time::Duration;

use axum::response::Response;
use bytes::Bytes;
use kdoctor_api::report::{API_VERSION, KIND};
use kdoctor_api::task::TaskKind;
use kdoctor_store::{Event, IncarnationId, Store, WatchError};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::names::{Target, listed, object_name, resolve};
use super::sink::{Sink, body_from};
use super::table::{self, Include};
use super::{Filter, object};
use crate::negotiate::Wanted;
use crate::query::Query;
use crate::state::AppState;
use crate::status::ApiError;

/// Idle time after which a watcher that allows bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

/// What this watcher was told about one object.
#[derive(Clone)]
struct Known {
    kind: TaskKind,
    task: String,
    id: IncarnationId,
    rv: u64,
    target: Target,
}

struct Watcher {
    filter: Filter,
    wanted: Wanted,
    include: Include,
    known: HashMap<String, Known>,
    sent_columns: bool,
    /// A round object named by the field selector (`get NAME.round-3 -w`).
    round_name: Option<String>,
}

impl Watcher {
    fn encode(
        &mut self,
        store: &Store,
        event_type: &str,
        target: &Target,
    ) -> Result<Vec<u8>, ApiError> {
        let mut sink = Sink::buffer();
        sink.write(format!("{{\"type\":\"{event_type}\",\"object\":").as_bytes())?;
        match self.wanted {
            Wanted::Json => {
                if event_type == "DELETED" {
                    sink.write_json(&stub(target))?;
                } else {
                    object::write_object(store, target, &mut sink)?;
                }
            }
            Wanted::Table => {
                let row = table::row(store, target, self.include, jiff::Timestamp::now())?;
                let t = table::table(
                    vec![row],
                    target.task.resource_version,
                    None,
                    !self.sent_columns,
                );
                self.sent_columns = true;
                sink.write_json(&t)?;
            }
        }
        sink.write(b"}\n")?;
        Ok(sink.into_bytes())
    }

    /// The objects of one task name (and the watched round object, if it belongs to it).
    fn group(&self, store: &Store, kind: TaskKind, name: &str) -> Vec<Target> {
        let incarnations = store.find(kind, name);
        let newest = incarnations.last().map(|t| t.id);
        let mut targets: Vec<Target> = incarnations
            .iter()
            .map(|t| Target {
                name: object_name(t, Some(t.id) == newest),
                task: t.clone(),
                round: None,
            })
            .collect();
        if let Some(round_name) = &self.round_name
            && let Some(target) = resolve(store, round_name)
            && target.task.kind == kind
            && target.task.name == name
        {
            targets.push(target);
        }
        targets
    }

    fn selected(&self, target: &Target) -> bool {
        // Round objects are only watched when named.
        if target.round.is_some() && self.round_name.as_deref() != Some(target.name.as_str()) {
            return false;
        }
        self.filter
            .matches(&target.name, &target.task, target.task.latest_result)
    }

    /// Lines for the change of one task name.
    fn diff(&mut self, store: &Store, kind: TaskKind, name: &str) -> Result<Vec<u8>, ApiError> {
        let current: Vec<Target> = self
            .group(store, kind, name)
            .into_iter()
            .filter(|t| self.selected(t))
            .collect();
        let mut out = Vec::new();
        let gone: Vec<String> = self
            .known
            .iter()
            .filter(|(_, k)| k.kind == kind && k.task == name)
            .filter(|(object, k)| {
                !current
                    .iter()
                    .any(|t| &t.name == *object && t.task.id == k.id)
            })
            .map(|(object, _)| object.clone())
            .collect();
        for object in gone {
            if let Some(known) = self.known.remove(&object) {
                out.extend(self.encode(store, "DELETED", &known.target)?);
            }
        }
        for target in current {
            let event_type = match self.known.get(&target.name) {
                None => "ADDED",
                Some(k) if k.rv != target.task.resource_version => "MODIFIED",
                Some(_) => continue,
            };
            out.extend(self.encode(store, event_type, &target)?);
            self.remember(target);
        }
        Ok(out)
    }

    fn remember(&mut self, target: Target) {
        self.known.insert(
            target.name.clone(),
            Known {
                kind: target.task.kind,
                task: target.task.name.clone(),
                id: target.task.id,
                rv: target.task.resource_version,
                target,
            },
        );
    }

    /// A watch resumed from `from`: the current state of everything that changed after it
    /// (ADDED or MODIFIED), DELETED for what was purged since, and `known` seeded with the rest.
    /// Intermediate states are coalesced, as watch semantics allow.
    fn resume(
        &mut self,
        store: &Store,
        from: u64,
        backlog: &[Event],
    ) -> Result<(Vec<u8>, u64), ApiError> {
        let (tasks, rv) = store.tasks_at();
        let mut out = Vec::new();
        let current: Vec<Target> = listed(tasks)
            .into_iter()
            .map(|(name, task)| Target {
                name,
                task,
                round: None,
            })
            .collect();
        for event in backlog
            .iter()
            .filter(|e| e.event_type == kdoctor_store::EventType::Deleted)
        {
            // It had the bare name unless a newer incarnation of its task name exists.
            let newest = !current.iter().any(|t| {
                t.task.kind == event.task.kind
                    && t.task.name == event.task.name
                    && t.task.id > event.task.id
            });
            let gone = Target {
                name: object_name(&event.task, newest),
                task: event.task.clone(),
                round: None,
            };
            if !current.iter().any(|t| t.task.id == gone.task.id) && self.selected(&gone) {
                out.extend(self.encode(store, "DELETED", &gone)?);
            }
        }
        let selected: Vec<Target> = current.into_iter().filter(|t| self.selected(t)).collect();
        for target in selected {
            if target.task.resource_version > from {
                let event_type = if target.task.added_resource_version > from {
                    "ADDED"
                } else {
                    "MODIFIED"
                };
                out.extend(self.encode(store, event_type, &target)?);
            }
            self.remember(target);
        }
        Ok((out, rv))
    }

    /// ADDED for every selected object (a watch from "now", or `sendInitialEvents`).
    fn initial(&mut self, store: &Store) -> Result<(Vec<u8>, u64), ApiError> {
        let (tasks, rv) = store.tasks_at();
        let mut out = Vec::new();
        let mut targets: Vec<Target> = listed(tasks)
            .into_iter()
            .map(|(name, task)| Target {
                name,
                task,
                round: None,
            })
            .collect();
        if let Some(round_name) = &self.round_name
            && let Some(target) = resolve(store, round_name)
        {
            targets.push(target);
        }
        let selected: Vec<Target> = targets.into_iter().filter(|t| self.selected(t)).collect();
        for target in selected {
            out.extend(self.encode(store, "ADDED", &target)?);
            self.remember(target);
        }
        Ok((out, rv))
    }
}

/// A minimal object for DELETED events.
fn stub(target: &Target) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": target.name,
            "uid": target.task.uid,
            "resourceVersion": target.task.resource_version.to_string(),
            "labels": object::labels_of(&target.task, target.task.latest_result),
        },
    })
}

fn bookmark(rv: u64, initial_events_end: bool) -> Vec<u8> {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let line = json!({"type": "BOOKMARK", "object": {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata}});
    let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

fn expired(message: String) -> Vec<u8> {
    let status = ApiError::expired(message).to_status();
    let mut bytes =
        serde_json::to_vec(&json!({"type": "ERROR", "object": status})).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// A watch timeout between 30 and 60 minutes, as the Go server picks when none is asked.
fn default_timeout() -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    Duration::from_secs(1800 + u64::from(nanos) % 1800)
}

/// Runs `f` on the watcher on a blocking thread (it reads the store) and hands it back.
async fn blocking<T: Send + 'static>(
    watcher: Watcher,
    f: impl FnOnce(&mut Watcher) -> T + Send + 'static,
) -> Option<(Watcher, T)> {
    tokio::task::spawn_blocking(move || {
        let mut watcher = watcher;
        let result = f(&mut watcher);
        (watcher, result)
    })
    .await
    .ok()
}

/// Starts a watch.
pub async fn watch(
    state: AppState,
    query: Query,
    filter: Filter,
    wanted: Wanted,
    include: Include,
) -> Result<Response, ApiError> {
    let store = state.store()?;
    let bookmarks = query.flag("allowWatchBookmarks")?;
    let send_initial = query.flag("sendInitialEvents")?;
    let timeout = query
        .number("timeoutSeconds")?
        .map_or_else(default_timeout, Duration::from_secs);
    let from = match query
        .get("resourceVersion")
        .filter(|v| !v.is_empty() && *v != "0")
    {
        Some(text) => Some(text.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!(
                "invalid resourceVersion {text:?}: expected an integer"
            ))
        })?),
        None => None,
    };
    let round_name = filter
        .fields
        .name()
        .filter(|n| n.contains(super::names::ROUND_SUFFIX))
        .map(str::to_string);
    let watcher = Watcher {
        filter,
        wanted,
        include,
        known: HashMap::new(),
        sent_columns: false,
        round_name,
    };
    // Subscribe before reading any state, so that no change falls in between.
    let start = match (from, send_initial) {
        (Some(rv), false) => match store.subscribe(Some(rv)) {
            Ok(sub) => Start::Resume(rv, sub),
            Err(WatchError::TooOld { requested, oldest }) => Start::TooOld(requested, oldest),
        },
        _ => match store.subscribe(None) {
            Ok(sub) => Start::Fresh(sub),
            Err(WatchError::TooOld { requested, oldest }) => Start::TooOld(requested, oldest),
        },
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let shutdown = state.shutdown.clone();
    let metrics = state.metrics.clone();
    metrics.watches.inc();
    tokio::spawn(async move {
        run(
            store,
            watcher,
            start,
            send_initial,
            bookmarks,
            timeout,
            tx,
            shutdown,
        )
        .await;
        metrics.watches.dec();
    });
    let mut response = Response::new(body_from(rx));
    response.extensions_mut().insert(crate::Unbuffered);
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// Ends a watch whose start failed: logged, and told to the client as an ERROR event.
async fn fail<F, Fut>(result: Option<Result<(Vec<u8>, u64), ApiError>>, send: &F)
where
    F: Fn(Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let error = match result {
        Some(Err(e)) => e,
        _ => ApiError::internal("the watch could not start"),
    };
    tracing::error!(error = %error, "watch failed to start");
    let mut line = serde_json::to_vec(&json!({"type": "ERROR", "object": error.to_status()}))
        .unwrap_or_default();
    line.push(b'\n');
    let _ = send(line).await;
}

/// How a watch begins.
enum Start {
    /// From now (with the current objects as ADDED).
    Fresh(kdoctor_store::Subscription),
    /// After a resourceVersion.
    Resume(u64, kdoctor_store::Subscription),
    /// From a version the store no longer has.
    TooOld(u64, u64),
}

#[allow(clippy::too_many_arguments)]
async fn run(
    store: std::sync::Arc<Store>,
    watcher: Watcher,
    start: Start,
    send_initial: bool,
    bookmarks: bool,
    timeout: Duration,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let send = |bytes: Vec<u8>| {
        let tx = tx.clone();
        async move { bytes.is_empty() || tx.send(Ok(Bytes::from(bytes))).await.is_ok() }
    };
    let (mut watcher, mut live, mut last_rv) = match start {
        Start::TooOld(requested, oldest) => {
            let _ = send(expired(format!(
                "too old resource version: {requested} ({oldest})"
            )))
            .await;
            return;
        }
        Start::Resume(from, sub) => {
            let st = store.clone();
            let backlog = sub.backlog;
            let (w, out, rv) = match blocking(watcher, move |w| w.resume(&st, from, &backlog)).await
            {
                Some((w, Ok((out, rv)))) => (w, out, rv),
                failed => return fail(failed.map(|(_, r)| r), &send).await,
            };
            if !send(out).await {
                return;
            }
            (w, sub.live, rv)
        }
        Start::Fresh(sub) => {
            let st = store.clone();
            let (w, mut out, rv) = match blocking(watcher, move |w| w.initial(&st)).await {
                Some((w, Ok((out, rv)))) => (w, out, rv),
                failed => return fail(failed.map(|(_, r)| r), &send).await,
            };
            if send_initial {
                out.extend(bookmark(rv, true));
            }
            if !send(out).await {
                return;
            }
            (w, sub.live, rv)
        }
    };
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut idle = tokio::time::interval(BOOKMARK_EVERY);
    idle.tick().await;
    loop {
        tokio::select! {
            event = live.recv() => match event {
                Ok(event) if event.resource_version <= last_rv => {}
                Ok(event) => {
                    last_rv = event.resource_version;
                    let (st, kind, name) = (store.clone(), event.task.kind, event.task.name.clone());
                    let Some((w, result)) = blocking(watcher, move |w| w.diff(&st, kind, &name)).await else { return };
                    watcher = w;
                    match result {
                        Ok(bytes) => {
                            if !send(bytes).await {
                                return;
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "watch event dropped"),
                    }
                    idle.reset();
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    let _ = send(expired(format!(
                        "too old resource version: {last_rv} ({}): the watcher fell {missed} events behind",
                        last_rv + missed
                    ))).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = idle.tick(), if bookmarks => {
                if !send(bookmark(last_rv, false)).await {
                    return;
                }
            }
            _ = &mut deadline => return,
            _ = shutdown.changed() => return,
            _ = tx.closed() => return,
        }
    }
}
