//! The DaemonSet controller: one pod per eligible node (bound directly, as the real controller
//! does through node affinity), replacement of pods from an old template, and status counts.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::cluster::{Cluster, DeleteOptions, WriteOptions};
use crate::controllers::eligibility::{fits, node_ready};
use crate::controllers::podtemplate::{create_pod, pod_active, pod_ready, template_hash};
use crate::controllers::{Controller, uid};
use crate::patch::PatchType;
use crate::store::StoreEvent;

const MANAGER: &str = "daemonset-controller";
const HASH_LABEL: &str = "controller-revision-hash";

/// The DaemonSet controller.
#[derive(Default)]
pub struct DaemonSetController {
    dirty: BTreeSet<(String, String)>,
    all: bool,
}

fn owner_of(pod: &Value) -> Option<String> {
    pod.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r["kind"] == "DaemonSet" && r["controller"] == json!(true))
        .and_then(|r| r.get("name").and_then(Value::as_str).map(String::from))
}

fn tolerations_for_daemons(spec: &mut Value) {
    // The real controller adds these so daemons run on not-ready and unreachable nodes.
    let mut t = spec
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/unschedulable",
    ] {
        if !t.iter().any(|x| x["key"] == key) {
            t.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute"}));
        }
    }
    spec["tolerations"] = json!(t);
}

/// Reconciles one DaemonSet: creates missing pods, deletes misplaced or outdated ones, writes status.
pub fn reconcile(c: &Cluster, ns: &str, name: &str) {
    let Some(ds) = c.store.get("apps/daemonsets", ns, name) else {
        return;
    };
    if ds.pointer("/metadata/deletionTimestamp").is_some() {
        return;
    }
    let mut ds = (*ds).clone();
    ds["apiVersion"] = json!("apps/v1");
    ds["kind"] = json!("DaemonSet");
    let hash = template_hash(ds.pointer("/spec/template").unwrap_or(&Value::Null));
    let mut spec = ds
        .pointer("/spec/template/spec")
        .cloned()
        .unwrap_or(json!({}));
    tolerations_for_daemons(&mut spec);
    ds["spec"]["template"]["spec"] = spec.clone();
    let (nodes, _) = c.store.list("core/nodes", None);
    let eligible: BTreeSet<String> = nodes
        .iter()
        .filter(|n| fits(&spec, n))
        .filter_map(|n| {
            n.pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(String::from)
        })
        .collect();
    let mut by_node: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for r in c.store.dependents(uid(&ds)) {
        if r.storage != "core/pods" {
            continue;
        }
        if let Some(p) = c.store.get(&r.storage, &r.namespace, &r.name)
            && owner_of(&p).as_deref() == Some(name)
        {
            let node = p
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            by_node.entry(node).or_default().push((*p).clone());
        }
    }
    let Ok(pod_info) = c.builtin("", "Pod") else {
        return;
    };
    let generation = ds
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let delete = |p: &Value| {
        let pname = p
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let _ = c.delete(&pod_info, ns, pname, &DeleteOptions::default());
    };
    for (node, pods) in &by_node {
        let active: Vec<&Value> = pods.iter().filter(|p| pod_active(p)).collect();
        if !eligible.contains(node) {
            active.iter().for_each(|p| delete(p));
            continue;
        }
        for (i, p) in active.iter().enumerate() {
            let outdated = p
                .pointer(&format!("/metadata/labels/{HASH_LABEL}"))
                .and_then(Value::as_str)
                != Some(hash.as_str());
            if i > 0 || outdated {
                delete(p);
            }
        }
    }
    for node in &eligible {
        let has = by_node.get(node).is_some_and(|ps| {
            ps.iter()
                .any(|p| p.pointer("/metadata/deletionTimestamp").is_none())
        });
        if !has
            && let Err(e) = create_pod(
                c,
                &ds,
                name,
                &[
                    (HASH_LABEL, hash.clone()),
                    ("pod-template-generation", generation.to_string()),
                ],
                Some(node),
                MANAGER,
            )
        {
            tracing::warn!(error = %e, daemonset = name, node, "creating a daemon pod failed");
        }
    }
    write_status(c, ns, name, &eligible, &hash, generation);
}

fn write_status(
    c: &Cluster,
    ns: &str,
    name: &str,
    eligible: &BTreeSet<String>,
    hash: &str,
    generation: i64,
) {
    let Some(ds) = c.store.get("apps/daemonsets", ns, name) else {
        return;
    };
    let mut current = 0;
    let mut ready = 0;
    let mut updated = 0;
    let mut misscheduled = 0;
    for r in c.store.dependents(uid(&ds)) {
        let Some(p) = c.store.get(&r.storage, &r.namespace, &r.name) else {
            continue;
        };
        if r.storage != "core/pods" || !pod_active(&p) {
            continue;
        }
        let node = p
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !eligible.contains(node) {
            misscheduled += 1;
            continue;
        }
        current += 1;
        if pod_ready(&p) {
            ready += 1;
        }
        if p.pointer(&format!("/metadata/labels/{HASH_LABEL}"))
            .and_then(Value::as_str)
            == Some(hash)
        {
            updated += 1;
        }
    }
    let desired = eligible.len() as i64;
    let status = json!({"status": {
        "desiredNumberScheduled": desired,
        "currentNumberScheduled": current,
        "numberReady": ready,
        "numberAvailable": ready,
        "numberUnavailable": desired - ready,
        "updatedNumberScheduled": updated,
        "numberMisscheduled": misscheduled,
        "observedGeneration": generation,
    }});
    if let Ok(info) = c.builtin("apps", "DaemonSet") {
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

/// Whether a node change can change which pods DaemonSets want.
fn node_changed(e: &StoreEvent) -> bool {
    let Some(prev) = &e.prev else {
        return true;
    };
    let key = |v: &Value| {
        (
            v.pointer("/metadata/labels").cloned(),
            v.pointer("/spec").cloned(),
            node_ready(v),
        )
    };
    key(prev) != key(&e.object) || e.kind == crate::store::EventType::Deleted
}

impl Controller for DaemonSetController {
    fn handle(&mut self, _c: &Cluster, e: &StoreEvent) {
        match &*e.storage {
            "apps/daemonsets" => {
                self.dirty.insert((e.namespace.clone(), e.name.clone()));
            }
            "core/pods" => {
                if let Some(owner) = owner_of(&e.object) {
                    self.dirty.insert((e.namespace.clone(), owner));
                }
            }
            "core/nodes" if node_changed(e) => self.all = true,
            _ => {}
        }
    }

    fn resync(&mut self, _c: &Cluster) {
        self.all = true;
    }

    fn flush(&mut self, c: &Cluster) {
        if self.all {
            self.all = false;
            let (all, _) = c.store.list("apps/daemonsets", None);
            for ds in all {
                let ns = ds
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let name = ds
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                self.dirty.insert((ns.to_string(), name.to_string()));
            }
        }
        for (ns, name) in std::mem::take(&mut self.dirty) {
            reconcile(c, &ns, &name);
        }
    }
}
