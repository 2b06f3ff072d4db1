//! Watch: `ADDED`/`MODIFIED`/`DELETED` events from the store's change feed, newline-delimited
//! JSON, with resourceVersion resumption, bookmarks, `sendInitialEvents`, `timeoutSeconds`, and
//! a `410 Expired` ERROR event when the version is too old or the watcher fell behind.
//!
//! A store event is about one task incarnation, but incarnations of one name share object names
//! (the newest is `<kind>-<task>`, older ones get a tag), so each event is turned into the diff
//! of every object of that task name against what this watcher has already been told.

use std::time::Duration;

use axum::response::Response;
use bytes::Bytes;
use kdoctor_api::report::{API_VERSION, KIND};
use kdoctor_store::{Event, EventType, Store, WatchError};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::names::{Target, listed, object_name, resolve};
use super::table;
use super::{Filter, object};
use crate::kube::negotiate::Wanted;
use crate::kube::partial::{self, PartialObject};
use crate::kube::query::Query;
use crate::kube::sink::Sink;
use crate::kube::status::ApiError;
use crate::kube::table::Include;
use crate::kube::watch::{default_timeout, expired, watch_response};
use crate::state::AppState;

/// Idle time after which a watcher that allows bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

struct Watcher {
    filter: Filter,
    wanted: Wanted,
    include: Include,
    sent_columns: bool,
    /// A round object named by the field selector (`get NAME.round-3 -w`), and whether the
    /// client has been told it exists. Nothing else is remembered per watcher: a store event
    /// carries the task before and after the change, which is all a translation needs.
    round: Option<(String, bool)>,
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
            Wanted::Metadata(version) => {
                if event_type == "DELETED" {
                    let gone = stub(target);
                    sink.write_json(&PartialObject::new(version, &gone["metadata"]))?;
                } else {
                    let mut text = object::MetadataText::default();
                    let metadata = object::metadata_of(store, target, &mut text)?;
                    sink.write_json(&PartialObject::new(version, metadata))?;
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

    fn selected(&self, target: &Target) -> bool {
        self.filter
            .matches(&target.name, &target.task, target.task.latest_result)
    }

    /// The watch events of one store event.
    fn translate(&mut self, store: &Store, event: &Event) -> Result<Vec<u8>, ApiError> {
        if self.round.is_some() {
            return self.translate_round(store, event);
        }
        let old = match event.event_type {
            EventType::Added => None,
            _ => event.previous.as_ref().map(|p| Target {
                name: object_name(p, event.was_newest),
                task: p.clone(),
                round: None,
            }),
        };
        let new = match event.event_type {
            EventType::Deleted => None,
            _ => Some(Target {
                name: object_name(&event.task, event.newest),
                task: event.task.clone(),
                round: None,
            }),
        };
        let old_match = old.as_ref().is_some_and(|t| self.selected(t));
        let new_match = new.as_ref().is_some_and(|t| self.selected(t));
        let mut out = Vec::new();
        match (&old, &new) {
            (Some(o), Some(n)) if o.name == n.name => match (old_match, new_match) {
                (true, true) => out.extend(self.encode(store, "MODIFIED", n)?),
                (false, true) => out.extend(self.encode(store, "ADDED", n)?),
                (true, false) => out.extend(self.encode(store, "DELETED", o)?),
                (false, false) => {}
            },
            // Appeared, disappeared, or renamed (a newer incarnation took the plain name).
            _ => {
                if let (Some(o), true) = (&old, old_match) {
                    out.extend(self.encode(store, "DELETED", o)?);
                }
                if let (Some(n), true) = (&new, new_match) {
                    out.extend(self.encode(store, "ADDED", n)?);
                }
            }
        }
        Ok(out)
    }

    /// Events of a watch on one round object.
    fn translate_round(&mut self, store: &Store, event: &Event) -> Result<Vec<u8>, ApiError> {
        let Some((name, announced)) = self.round.clone() else {
            return Ok(vec![]);
        };
        let ours = |task: &kdoctor_store::TaskSummary, newest: bool| {
            name.starts_with(&format!("{}.", object_name(task, newest)))
        };
        let concerned = ours(&event.task, event.newest)
            || event
                .previous
                .as_ref()
                .is_some_and(|p| ours(p, event.was_newest));
        if !concerned {
            return Ok(vec![]);
        }
        let mut out = Vec::new();
        match resolve(store, &name) {
            Some(target) => {
                let event_type = if announced { "MODIFIED" } else { "ADDED" };
                if self.filter.labels.is_empty() || self.selected(&target) {
                    out.extend(self.encode(store, event_type, &target)?);
                    self.round = Some((name, true));
                }
            }
            None if announced => {
                let gone = Target {
                    name: name.clone(),
                    task: event.task.clone(),
                    round: None,
                };
                out.extend(self.encode(store, "DELETED", &gone)?);
                self.round = Some((name, false));
            }
            None => {}
        }
        Ok(out)
    }

    /// ADDED for every selected object (a watch from "now", or `sendInitialEvents`).
    fn initial(&mut self, store: &Store) -> Result<(Vec<u8>, u64), ApiError> {
        let (tasks, rv) = store.tasks_at();
        let mut out = Vec::new();
        if let Some((name, _)) = self.round.clone() {
            if let Some(target) = resolve(store, &name) {
                out.extend(self.encode(store, "ADDED", &target)?);
                self.round = Some((name, true));
            }
            return Ok((out, rv));
        }
        for (name, task) in listed(tasks) {
            let target = Target {
                name,
                task,
                round: None,
            };
            if self.selected(&target) {
                out.extend(self.encode(store, "ADDED", &target)?);
            }
        }
        Ok((out, rv))
    }

    /// A watch resumed after a version: the kept events since, translated one by one.
    fn resume(&mut self, store: &Store, backlog: &[Event]) -> Result<(Vec<u8>, u64), ApiError> {
        let mut out = Vec::new();
        let mut last = 0;
        for event in backlog {
            out.extend(self.translate(store, event)?);
            last = event.resource_version;
        }
        Ok((out, last))
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

/// A BOOKMARK event: an object of the kind the watcher is sent (a `PartialObjectMetadata` to
/// a metadata watch) with only the version.
fn bookmark(wanted: Wanted, rv: u64, initial_events_end: bool) -> Vec<u8> {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let (api_version, kind) = match wanted {
        Wanted::Metadata(version) => (version.api_version(), partial::KIND),
        Wanted::Json | Wanted::Table => (API_VERSION, KIND),
    };
    let line = json!({"type": "BOOKMARK", "object": {"apiVersion": api_version, "kind": kind, "metadata": metadata}});
    let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
    bytes.push(b'\n');
    bytes
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
    let round = filter
        .fields
        .name()
        .filter(|n| n.contains(super::names::ROUND_SUFFIX))
        .map(|n| (n.to_string(), false));
    let watcher = Watcher {
        filter,
        wanted,
        include,
        sent_columns: false,
        round,
    };
    crate::consistency::await_version(&state, &store, &query).await?;
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
    Ok(watch_response(rx))
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
    let wanted = watcher.wanted;
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
            let (w, out, rv) = match blocking(watcher, move |w| w.resume(&st, &backlog)).await {
                Some((w, Ok((out, last)))) => (w, out, last.max(from)),
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
                out.extend(bookmark(wanted, rv, true));
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
                    let st = store.clone();
                    let Some((w, result)) = blocking(watcher, move |w| w.translate(&st, &event)).await else { return };
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
                if !send(bookmark(wanted, last_rv, false)).await {
                    return;
                }
            }
            _ = &mut deadline => return,
            _ = shutdown.changed() => return,
            _ = tx.closed() => return,
        }
    }
}
