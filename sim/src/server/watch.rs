//! Watch streams: newline-delimited JSON events, initial ADDED events for RV 0/unset,
//! selector transitions as ADDED/DELETED, periodic BOOKMARKs when asked, the closing bookmark
//! of `sendInitialEvents`, 410 Expired for resourceVersions older than the history, timeouts.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::SinkExt;
use futures::channel::mpsc;
use serde_json::{Value, json};

use crate::cluster::Cluster;
use crate::convert::to_external;
use crate::error::ApiError;
use crate::resources::ResourceInfo;
use crate::selector::{FieldSelector, LabelSelector};
use crate::server::table;
use crate::store::{EventType, StoreEvent};

/// What a watch request asked for.
pub struct WatchRequest {
    /// The resource (and version) watched.
    pub info: Arc<ResourceInfo>,
    /// One namespace, or all.
    pub namespace: Option<String>,
    /// labelSelector.
    pub labels: LabelSelector,
    /// fieldSelector.
    pub fields: FieldSelector,
    /// resourceVersion (None, "" and "0" start with the current state).
    pub resource_version: Option<String>,
    /// allowWatchBookmarks.
    pub bookmarks: bool,
    /// sendInitialEvents.
    pub send_initial: bool,
    /// timeoutSeconds (or the server's default).
    pub timeout: Duration,
    /// Table output with this includeObject policy.
    pub table: Option<String>,
    /// How often bookmarks are sent.
    pub bookmark_interval: Duration,
}

type Tx = mpsc::Sender<Result<Bytes, std::io::Error>>;

struct Emitter {
    tx: Tx,
    info: Arc<ResourceInfo>,
    table: Option<String>,
    headers_sent: bool,
}

impl Emitter {
    async fn send_raw(&mut self, v: Value) -> bool {
        let mut line = serde_json::to_vec(&v).unwrap_or_default();
        line.push(b'\n');
        self.tx.send(Ok(Bytes::from(line))).await.is_ok()
    }

    async fn object(&mut self, kind: &str, stored: &Value) -> bool {
        let obj = to_external(&self.info, stored);
        let obj = match &self.table {
            Some(include) => {
                let t = table::table(&self.info, &[obj], None, !self.headers_sent, include);
                self.headers_sent = true;
                t
            }
            None => obj,
        };
        self.send_raw(json!({"type": kind, "object": obj})).await
    }

    async fn event(&mut self, kind: &str, e: &StoreEvent) -> bool {
        if self.table.is_some() {
            return self.object(kind, &e.object).await;
        }
        let info = self.info.clone();
        let key = format!("{}/{}", info.group, info.version);
        let obj = e.encoded(&key, |v| {
            serde_json::to_vec(&to_external(&info, v)).unwrap_or_default()
        });
        let mut line = Vec::with_capacity(obj.len() + 40);
        line.extend_from_slice(b"{\"type\":\"");
        line.extend_from_slice(kind.as_bytes());
        line.extend_from_slice(b"\",\"object\":");
        line.extend_from_slice(&obj);
        line.extend_from_slice(b"}\n");
        self.tx.send(Ok(Bytes::from(line))).await.is_ok()
    }

    async fn bookmark(&mut self, rv: u64, initial_end: bool) -> bool {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({
            "kind": self.info.kind,
            "apiVersion": self.info.api_version(),
            "metadata": meta,
        });
        self.send_raw(json!({"type": "BOOKMARK", "object": obj}))
            .await
    }

    async fn expired(&mut self, asked: u64, oldest: u64) -> bool {
        let status =
            ApiError::expired(format!("too old resource version: {asked} ({oldest})")).to_status();
        self.send_raw(json!({"type": "ERROR", "object": status}))
            .await
    }
}

/// Starts the watch and returns the body stream; the task ends when the client goes away,
/// the timeout passes or the server shuts down.
pub fn start(
    cluster: Arc<Cluster>,
    req: WatchRequest,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> mpsc::Receiver<Result<Bytes, std::io::Error>> {
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        let mut em = Emitter {
            tx,
            info: req.info.clone(),
            table: req.table.clone(),
            headers_sent: false,
        };
        let deadline = tokio::time::Instant::now() + req.timeout;
        let mut notify = cluster.store.subscribe();
        let matches = |ns: &str, v: &Value| {
            req.namespace.as_deref().is_none_or(|n| n == ns)
                && req.labels.matches(v)
                && req.fields.matches(v)
        };
        let requested: Option<u64> = match req.resource_version.as_deref() {
            None | Some("") | Some("0") => None,
            Some(x) => x.parse().ok(),
        };
        let mut cursor = match requested {
            Some(rv) if !req.send_initial => rv,
            _ => {
                let (items, rv) = cluster
                    .store
                    .list(&req.info.storage, req.namespace.as_deref());
                for item in items {
                    let ns = item
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    if matches(ns, &item) && !em.object("ADDED", &item).await {
                        return;
                    }
                }
                if req.send_initial && !em.bookmark(rv, true).await {
                    return;
                }
                rv
            }
        };
        let mut tick = tokio::time::interval(req.bookmark_interval);
        tick.tick().await;
        loop {
            let events = match cluster.store.events_since(cursor) {
                Ok(e) => e,
                Err(too_old) => {
                    em.expired(cursor, too_old.oldest + 1).await;
                    return;
                }
            };
            for e in events {
                cursor = e.rv;
                if *e.storage != *req.info.storage {
                    continue;
                }
                let now = matches(&e.namespace, &e.object);
                let before = e.prev.as_ref().is_some_and(|p| matches(&e.namespace, p));
                let kind = match (e.kind, before, now) {
                    (EventType::Added, _, true) => "ADDED",
                    (EventType::Deleted, true, _) | (EventType::Deleted, _, true) => "DELETED",
                    (EventType::Modified, true, true) => "MODIFIED",
                    (EventType::Modified, false, true) => "ADDED",
                    (EventType::Modified, true, false) => "DELETED",
                    _ => continue,
                };
                if !em.event(kind, &e).await {
                    return;
                }
            }
            tokio::select! {
                changed = notify.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = tick.tick() => {
                    if em.tx.is_closed() {
                        return;
                    }
                    if req.bookmarks {
                        let rv = cluster.store.rv();
                        // Events up to rv are sent first, so the bookmark never runs ahead of them.
                        let pending = cluster.store.events_since(cursor).map(|e| e.is_empty()).unwrap_or(false);
                        if pending && !em.bookmark(rv.max(cursor), false).await {
                            return;
                        }
                        if pending {
                            cursor = cursor.max(rv);
                        }
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return,
                _ = shutdown.changed() => return,
            }
        }
    });
    rx
}
