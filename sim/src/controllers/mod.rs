//! In-process controllers: each reads the store's event history in order and reacts, like the
//! kube-controller-manager loops it stands in for.

pub mod daemonset;
pub mod deployment;
pub mod eligibility;
pub mod endpoints;
pub mod events;
pub mod gc;
pub mod loadbalancer;
pub mod namespace;
pub mod podtemplate;
pub mod replicaset;
pub mod scheduler;

use std::sync::Arc;

use serde_json::Value;

use crate::cluster::Cluster;
use crate::resources::ResourceInfo;
use crate::store::{ObjectRef, StoreEvent};

/// A controller: handles each store event; `resync` runs at start and whenever it fell behind
/// the retained history.
pub trait Controller: Send + 'static {
    /// Reacts to one change.
    fn handle(&mut self, c: &Cluster, e: &StoreEvent);
    /// Re-examines the whole state.
    fn resync(&mut self, c: &Cluster);
    /// Runs after each batch of events (controllers that coalesce work do it here).
    fn flush(&mut self, _c: &Cluster) {}
}

/// Runs a controller until `shutdown` turns true.
pub fn spawn(
    cluster: Arc<Cluster>,
    mut ctl: impl Controller,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut notify = cluster.store.subscribe();
        let mut cursor = cluster.store.rv();
        ctl.resync(&cluster);
        loop {
            match cluster.store.events_since(cursor) {
                Ok(events) => {
                    for e in events {
                        cursor = e.rv;
                        ctl.handle(&cluster, &e);
                    }
                }
                Err(_) => {
                    cursor = cluster.store.rv();
                    ctl.resync(&cluster);
                }
            }
            ctl.flush(&cluster);
            // Yield between batches so a busy controller does not starve the server.
            tokio::task::yield_now().await;
            tokio::select! {
                changed = notify.changed() => if changed.is_err() { return },
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    })
}

/// The preferred served version of what is stored under `storage`.
pub fn info_for(c: &Cluster, storage: &str) -> Option<Arc<ResourceInfo>> {
    let mut all = c.catalogue.by_storage(storage);
    all.sort_by(|a, b| {
        // core/v1 Events before events.k8s.io; otherwise the preferred version.
        a.group
            .len()
            .cmp(&b.group.len())
            .then(crate::resources::compare_versions(&a.version, &b.version))
    });
    all.into_iter().next()
}

/// Creates the object or replaces the stored one (keeping its resourceVersion), as
/// controllers that own an object outright do.
pub fn upsert(c: &Cluster, info: &ResourceInfo, ns: &str, obj: Value, manager: &str) {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let opts = crate::cluster::WriteOptions::manager(manager);
    let res = match c.store.get(&info.storage, ns, &name) {
        None => c.create(info, ns, obj, &opts),
        Some(_) => c.update(info, ns, &name, obj, &opts),
    };
    if let Err(e) = res {
        tracing::debug!(error = %e, name, "controller upsert failed");
    }
}

/// The uid of an object.
pub fn uid(v: &Value) -> &str {
    v.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The address of a stored object.
pub fn oref(storage: &str, v: &Value) -> ObjectRef {
    ObjectRef {
        storage: storage.to_string(),
        namespace: v
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        name: v
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
    }
}
