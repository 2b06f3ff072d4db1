//! The ReplicaSet controller: keeps `spec.replicas` active pods (created unbound; the
//! scheduler places them) and writes the status counts.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::cluster::{Cluster, DeleteOptions, WriteOptions};
use crate::controllers::podtemplate::{create_pod, pod_active, pod_ready};
use crate::controllers::{Controller, uid};
use crate::patch::PatchType;
use crate::store::StoreEvent;

const MANAGER: &str = "replicaset-controller";

/// The ReplicaSet controller.
#[derive(Default)]
pub struct ReplicaSetController {
    dirty: BTreeSet<(String, String)>,
}

fn owner_of(pod: &Value, kind: &str) -> Option<String> {
    pod.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r["kind"] == kind && r["controller"] == json!(true))
        .and_then(|r| r.get("name").and_then(Value::as_str).map(String::from))
}

/// Reconciles one ReplicaSet.
pub fn reconcile(c: &Cluster, ns: &str, name: &str) {
    let Some(rs) = c.store.get("apps/replicasets", ns, name) else {
        return;
    };
    if rs.pointer("/metadata/deletionTimestamp").is_some() {
        return;
    }
    let mut rs = (*rs).clone();
    rs["apiVersion"] = json!("apps/v1");
    rs["kind"] = json!("ReplicaSet");
    let want = rs
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(0) as usize;
    let mut active: Vec<Value> = c
        .store
        .dependents(uid(&rs))
        .into_iter()
        .filter(|r| r.storage == "core/pods")
        .filter_map(|r| c.store.get(&r.storage, &r.namespace, &r.name))
        .filter(|p| pod_active(p))
        .map(|p| (*p).clone())
        .collect();
    let hash = rs
        .pointer("/metadata/labels/pod-template-hash")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    for _ in active.len()..want {
        let labels: Vec<(&str, String)> = if hash.is_empty() {
            Vec::new()
        } else {
            vec![("pod-template-hash", hash.clone())]
        };
        match create_pod(c, &rs, name, &labels, None, MANAGER) {
            Ok(p) => active.push(p),
            Err(e) => tracing::warn!(error = %e, replicaset = name, "creating a pod failed"),
        }
    }
    if active.len() > want
        && let Ok(info) = c.builtin("", "Pod")
    {
        // Delete the least useful first: not ready, then the newest.
        active.sort_by_key(|p| {
            (
                pod_ready(p),
                std::cmp::Reverse(
                    p.pointer("/metadata/creationTimestamp")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                ),
            )
        });
        for p in active.drain(..active.len() - want) {
            let pname = p
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            let _ = c.delete(&info, ns, pname, &DeleteOptions::default());
        }
    }
    let ready = active.iter().filter(|p| pod_ready(p)).count();
    let status = json!({"status": {
        "replicas": active.len(),
        "fullyLabeledReplicas": active.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": rs.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
    }});
    if let Ok(info) = c.builtin("apps", "ReplicaSet") {
        let _ = c.patch(
            &info,
            ns,
            name,
            PatchType::Merge,
            &serde_json::to_vec(&status).unwrap_or_default(),
            &WriteOptions::manager(MANAGER).status(),
        );
    }
}

impl Controller for ReplicaSetController {
    fn handle(&mut self, _c: &Cluster, e: &StoreEvent) {
        match &*e.storage {
            "apps/replicasets" => {
                self.dirty.insert((e.namespace.clone(), e.name.clone()));
            }
            "core/pods" => {
                if let Some(owner) = owner_of(&e.object, "ReplicaSet") {
                    self.dirty.insert((e.namespace.clone(), owner));
                }
            }
            _ => {}
        }
    }

    fn resync(&mut self, c: &Cluster) {
        let (all, _) = c.store.list("apps/replicasets", None);
        for rs in all {
            let ns = rs
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            let name = rs
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            self.dirty.insert((ns.to_string(), name.to_string()));
        }
    }

    fn flush(&mut self, c: &Cluster) {
        for (ns, name) in std::mem::take(&mut self.dirty) {
            reconcile(c, &ns, &name);
        }
    }
}

/// The controlling owner's name of a kind, for the Deployment controller.
pub fn controlling_owner(obj: &Value, kind: &str) -> Option<String> {
    owner_of(obj, kind)
}
