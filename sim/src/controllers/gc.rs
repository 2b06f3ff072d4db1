//! The garbage collector: deletes dependents whose owners are gone (background), deletes
//! dependents before their owner (foreground, `foregroundDeletion` finalizer), and orphans
//! dependents (`orphan` finalizer).

use serde_json::{Value, json};

use crate::cluster::{
    Cluster, DeleteOptions, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation, WriteOptions,
    finalizers,
};
use crate::controllers::{Controller, info_for, oref, uid};
use crate::patch::PatchType;
use crate::store::{EventType, ObjectRef, StoreEvent};

const MANAGER: &str = "generic-garbage-collector";

/// The garbage collector.
#[derive(Default)]
pub struct GarbageCollector;

fn owner_refs(v: &Value) -> Vec<Value> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn terminating(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp").is_some()
}

fn delete(c: &Cluster, r: &ObjectRef, propagation: Propagation) {
    if let Some(info) = info_for(c, &r.storage) {
        let opts = DeleteOptions {
            propagation: Some(propagation),
            ..Default::default()
        };
        if let Err(e) = c.delete(&info, &r.namespace, &r.name, &opts)
            && e.code != 404
        {
            tracing::warn!(error = %e, object = ?r, "garbage collector could not delete");
        }
    }
}

fn merge_patch(c: &Cluster, r: &ObjectRef, patch: &Value) {
    if let Some(info) = info_for(c, &r.storage) {
        let body = serde_json::to_vec(patch).unwrap_or_default();
        if let Err(e) = c.patch(
            &info,
            &r.namespace,
            &r.name,
            PatchType::Merge,
            &body,
            &WriteOptions::manager(MANAGER),
        ) && e.code != 404
        {
            tracing::warn!(error = %e, object = ?r, "garbage collector could not patch");
        }
    }
}

/// Whether an owner waits for its dependents (foreground deletion).
fn waiting_for_dependents(v: &Value) -> bool {
    terminating(v) && finalizers(v).iter().any(|f| f == FOREGROUND_FINALIZER)
}

fn process_dependent(c: &Cluster, r: &ObjectRef) {
    let Some(obj) = c.store.get(&r.storage, &r.namespace, &r.name) else {
        return;
    };
    let refs = owner_refs(&obj);
    if refs.is_empty() || terminating(&obj) {
        return;
    }
    let mut dangling = Vec::new();
    let mut waiting = 0;
    for o in &refs {
        let ouid = o.get("uid").and_then(Value::as_str).unwrap_or("");
        match c.store.by_uid(ouid) {
            None => dangling.push(ouid.to_string()),
            Some(or) => {
                if c.store
                    .get(&or.storage, &or.namespace, &or.name)
                    .is_some_and(|v| waiting_for_dependents(&v))
                {
                    waiting += 1;
                }
            }
        }
    }
    let solid = refs.len() - dangling.len() - waiting;
    if solid == 0 {
        let propagation = if waiting > 0 {
            Propagation::Foreground
        } else {
            Propagation::Background
        };
        delete(c, r, propagation);
    } else if !dangling.is_empty() {
        let kept: Vec<Value> = refs
            .into_iter()
            .filter(|o| {
                !dangling
                    .iter()
                    .any(|d| Some(d.as_str()) == o.get("uid").and_then(Value::as_str))
            })
            .collect();
        merge_patch(c, r, &json!({"metadata": {"ownerReferences": kept}}));
    }
}

fn remove_finalizer(c: &Cluster, r: &ObjectRef, obj: &Value, finalizer: &str) {
    let rest: Vec<String> = finalizers(obj)
        .into_iter()
        .filter(|f| f != finalizer)
        .collect();
    merge_patch(c, r, &json!({"metadata": {"finalizers": rest}}));
}

fn process_owner(c: &Cluster, r: &ObjectRef) {
    let Some(obj) = c.store.get(&r.storage, &r.namespace, &r.name) else {
        return;
    };
    if !terminating(&obj) {
        return;
    }
    let fins = finalizers(&obj);
    let owner_uid = uid(&obj).to_string();
    if fins.iter().any(|f| f == ORPHAN_FINALIZER) {
        for dep in c.store.dependents(&owner_uid) {
            if let Some(d) = c.store.get(&dep.storage, &dep.namespace, &dep.name) {
                let kept: Vec<Value> = owner_refs(&d)
                    .into_iter()
                    .filter(|o| o.get("uid").and_then(Value::as_str) != Some(owner_uid.as_str()))
                    .collect();
                merge_patch(c, &dep, &json!({"metadata": {"ownerReferences": kept}}));
            }
        }
        remove_finalizer(c, r, &obj, ORPHAN_FINALIZER);
        return;
    }
    if fins.iter().any(|f| f == FOREGROUND_FINALIZER) {
        let deps = c.store.dependents(&owner_uid);
        if deps.is_empty() {
            remove_finalizer(c, r, &obj, FOREGROUND_FINALIZER);
            return;
        }
        for dep in deps {
            if c.store
                .get(&dep.storage, &dep.namespace, &dep.name)
                .is_some_and(|d| !terminating(&d))
            {
                process_dependent(c, &dep);
            }
        }
    }
}

impl Controller for GarbageCollector {
    fn handle(&mut self, c: &Cluster, e: &StoreEvent) {
        let me = oref(&e.storage, &e.object);
        match e.kind {
            EventType::Deleted => {
                for dep in c.store.dependents(uid(&e.object)) {
                    process_dependent(c, &dep);
                }
                for o in owner_refs(&e.object) {
                    if let Some(owner) = o
                        .get("uid")
                        .and_then(Value::as_str)
                        .and_then(|u| c.store.by_uid(u))
                    {
                        process_owner(c, &owner);
                    }
                }
            }
            EventType::Added | EventType::Modified => {
                if terminating(&e.object) {
                    process_owner(c, &me);
                }
                let refs_changed = e
                    .prev
                    .as_ref()
                    .is_none_or(|p| owner_refs(p) != owner_refs(&e.object));
                if refs_changed && !owner_refs(&e.object).is_empty() {
                    process_dependent(c, &me);
                }
            }
        }
    }

    fn resync(&mut self, c: &Cluster) {
        for info in c.catalogue.all() {
            if info.virtual_kind {
                continue;
            }
            let (items, _) = c.store.list(&info.storage, None);
            for item in items {
                let r = oref(&info.storage, &item);
                if terminating(&item) {
                    process_owner(c, &r);
                }
                if !owner_refs(&item).is_empty() {
                    process_dependent(c, &r);
                }
            }
        }
    }
}
