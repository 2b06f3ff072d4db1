//! The namespace controller: empties a terminating namespace, then releases its `kubernetes`
//! spec finalizer so the namespace goes away.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::cluster::{Cluster, DeleteOptions, WriteOptions};
use crate::controllers::{Controller, info_for};
use crate::patch::PatchType;
use crate::store::{EventType, StoreEvent};

/// The namespace controller.
#[derive(Default)]
pub struct NamespaceController;

fn process(c: &Cluster, ns: &str) {
    let Some(obj) = c.store.get("core/namespaces", "", ns) else {
        return;
    };
    if obj.pointer("/metadata/deletionTimestamp").is_none() {
        return;
    }
    let storages: BTreeSet<String> = c
        .catalogue
        .all()
        .iter()
        .filter(|r| r.namespaced && !r.virtual_kind)
        .map(|r| r.storage.clone())
        .collect();
    let mut remaining = 0;
    for storage in storages {
        let Some(info) = info_for(c, &storage) else {
            continue;
        };
        let (items, _) = c.store.list(&storage, Some(ns));
        remaining += items.len();
        for item in items {
            if item.pointer("/metadata/deletionTimestamp").is_some() {
                continue;
            }
            let name = item
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if let Err(e) = c.delete(&info, ns, name, &DeleteOptions::default())
                && e.code != 404
            {
                tracing::warn!(error = %e, namespace = ns, name, "namespace controller could not delete");
            }
        }
    }
    if remaining == 0
        && let Some(info) = info_for(c, "core/namespaces")
    {
        let body = serde_json::to_vec(&json!({"spec": {"finalizers": []}})).unwrap_or_default();
        let _ = c.patch(
            &info,
            "",
            ns,
            PatchType::Merge,
            &body,
            &WriteOptions::manager("namespace-controller"),
        );
    }
}

impl Controller for NamespaceController {
    fn handle(&mut self, c: &Cluster, e: &StoreEvent) {
        if &*e.storage == "core/namespaces" {
            if e.kind != EventType::Deleted {
                process(c, &e.name);
            }
        } else if e.kind == EventType::Deleted && !e.namespace.is_empty() {
            process(c, &e.namespace);
        }
    }

    fn resync(&mut self, c: &Cluster) {
        let (items, _) = c.store.list("core/namespaces", None);
        for item in items {
            if let Some(n) = item.pointer("/metadata/name").and_then(Value::as_str) {
                process(c, n);
            }
        }
    }
}
