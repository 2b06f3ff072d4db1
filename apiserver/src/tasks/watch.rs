//! Watches of task objects: the current objects as ADDED (or the kept changes after a
//! resourceVersion), then every change, as JSON or as Table rows, until the timeout, the client
//! goes, or the server stops.

use std::time::Duration;

use axum::body::Bytes;
use axum::response::Response;
use kdoctor_api::task::TaskKind;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use super::objects::{Change, TaskObjects};
use super::{Selection, table};
use crate::kube::negotiate::Wanted;
use crate::kube::status::ApiError;
use crate::kube::table::Include;
use crate::kube::watch::{default_timeout, expired, watch_response};
use crate::state::AppState;

/// How one watcher renders its events.
struct Watcher {
    kind: TaskKind,
    selection: Selection,
    wanted: Wanted,
    include: Include,
    sent_columns: bool,
}

impl Watcher {
    /// The event line of a change, if this watcher sees it.
    fn line(&mut self, change: &Change) -> Option<Vec<u8>> {
        if change.kind != self.kind || !self.selection.matches(&change.object) {
            return None;
        }
        let object = match self.wanted {
            Wanted::Json => (*change.object).clone(),
            Wanted::Metadata(version) => super::partial_of(version, &change.object),
            Wanted::Table => {
                let t = table(
                    &[&change.object],
                    change.version,
                    self.include,
                    !self.sent_columns,
                    jiff::Timestamp::now(),
                );
                self.sent_columns = true;
                t
            }
        };
        let mut line =
            serde_json::to_vec(&json!({"type": change.change.as_str(), "object": object}))
                .unwrap_or_default();
        line.push(b'\n');
        Some(line)
    }
}

/// Starts a watch of `kind`.
#[allow(clippy::too_many_arguments)]
pub fn serve(
    state: &AppState,
    objects: &TaskObjects,
    kind: TaskKind,
    from: Option<u64>,
    timeout: Option<u64>,
    selection: Selection,
    wanted: Wanted,
    include: Include,
) -> Result<Response, ApiError> {
    let start = objects.watch(kind, from)?;
    let timeout = timeout.map_or_else(default_timeout, Duration::from_secs);
    let watcher = Watcher {
        kind,
        selection,
        wanted,
        include,
        sent_columns: false,
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let mut shutdown = state.shutdown.clone();
    let metrics = state.metrics.clone();
    metrics.watches.inc();
    tokio::spawn(async move {
        run(watcher, start, timeout, &tx, &mut shutdown).await;
        metrics.watches.dec();
    });
    Ok(watch_response(rx))
}

async fn run(
    mut watcher: Watcher,
    start: super::objects::WatchStart,
    timeout: Duration,
    tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) {
    let send = |bytes: Vec<u8>| async move { tx.send(Ok(Bytes::from(bytes))).await.is_ok() };
    let mut last = 0;
    for change in &start.backlog {
        last = last.max(change.version);
        if let Some(line) = watcher.line(change)
            && !send(line).await
        {
            return;
        }
    }
    let mut live = start.live;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            change = live.recv() => match change {
                // Already sent from the backlog.
                Ok(change) if change.version <= last => {}
                Ok(change) => {
                    last = change.version;
                    if let Some(line) = watcher.line(&change)
                        && !send(line).await
                    {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    let _ = send(expired(format!(
                        "too old resource version: {last}: the watcher fell {missed} events behind"
                    ))).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = &mut deadline => return,
            _ = shutdown.changed() => return,
            _ = tx.closed() => return,
        }
    }
}
