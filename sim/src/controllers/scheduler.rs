//! The scheduler stand-in: binds pending pods without a node to a Ready node that fits,
//! spreading them round-robin, and marks the rest Unschedulable.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::cluster::{Cluster, WriteOptions};
use crate::controllers::eligibility::{fits, node_ready};
use crate::controllers::{Controller, events};
use crate::patch::PatchType;
use crate::store::{EventType, StoreEvent};

const MANAGER: &str = "default-scheduler";

/// The scheduler.
#[derive(Default)]
pub struct Scheduler {
    pending: BTreeSet<(String, String)>,
    // Pods no node fits; retried only when nodes change (else their status write loops).
    unschedulable: BTreeSet<(String, String)>,
    next: usize,
    nodes_changed: bool,
}

fn wants_scheduling(pod: &Value) -> bool {
    pod.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
        && pod.pointer("/metadata/deletionTimestamp").is_none()
        && pod
            .pointer("/spec/schedulerName")
            .and_then(Value::as_str)
            .is_none_or(|s| s == "default-scheduler")
}

impl Scheduler {
    fn schedule(&mut self, c: &Cluster, ns: &str, name: &str, nodes: &[std::sync::Arc<Value>]) {
        let Some(pod) = c.store.get("core/pods", ns, name) else {
            return;
        };
        if !wants_scheduling(&pod) {
            return;
        }
        let Ok(info) = c.builtin("", "Pod") else {
            return;
        };
        let spec = pod.get("spec").cloned().unwrap_or(json!({}));
        let candidates: Vec<&Value> = nodes
            .iter()
            .map(|n| n.as_ref())
            .filter(|n| node_ready(n) && fits(&spec, n))
            .collect();
        let key = (ns.to_string(), name.to_string());
        if candidates.is_empty() {
            self.pending.remove(&key);
            if !self.unschedulable.insert(key) {
                return;
            }
            let msg = format!(
                "0/{} nodes are available: no Ready node fits the pod.",
                nodes.len()
            );
            let patch = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg, "lastTransitionTime": crate::clock::now()}]}});
            let _ = c.patch(
                &info,
                ns,
                name,
                PatchType::Strategic,
                &serde_json::to_vec(&patch).unwrap_or_default(),
                &WriteOptions::manager(MANAGER).status(),
            );
            return;
        }
        let node = candidates[self.next % candidates.len()];
        self.next = self.next.wrapping_add(1);
        let node_name = node
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let bind = json!({"spec": {"nodeName": node_name}});
        if c.patch(
            &info,
            ns,
            name,
            PatchType::Merge,
            &serde_json::to_vec(&bind).unwrap_or_default(),
            &WriteOptions::manager(MANAGER),
        )
        .is_ok()
        {
            // Strategic merge (conditions keyed by type), as kube-scheduler patches: a merge
            // patch would replace the list and drop the Ready condition a stage may already
            // have set since the bind.
            let cond = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": crate::clock::now()}]}});
            let _ = c.patch(
                &info,
                ns,
                name,
                PatchType::Strategic,
                &serde_json::to_vec(&cond).unwrap_or_default(),
                &WriteOptions::manager(MANAGER).status(),
            );
            events::record(
                c,
                &pod,
                "Normal",
                "Scheduled",
                &format!("Successfully assigned {ns}/{name} to {node_name}"),
                MANAGER,
            );
            self.pending.remove(&key);
            self.unschedulable.remove(&key);
        }
    }
}

impl Controller for Scheduler {
    fn handle(&mut self, _c: &Cluster, e: &StoreEvent) {
        match &*e.storage {
            "core/pods" => {
                let key = (e.namespace.clone(), e.name.clone());
                if e.kind != EventType::Deleted && wants_scheduling(&e.object) {
                    if !self.unschedulable.contains(&key) {
                        self.pending.insert(key);
                    }
                } else {
                    self.pending.remove(&key);
                    self.unschedulable.remove(&key);
                }
            }
            "core/nodes" => self.nodes_changed = true,
            _ => {}
        }
    }

    fn resync(&mut self, c: &Cluster) {
        let (pods, _) = c.store.list("core/pods", None);
        for p in pods {
            if wants_scheduling(&p) {
                let ns = p
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let name = p
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                self.pending.insert((ns.to_string(), name.to_string()));
            }
        }
    }

    fn flush(&mut self, c: &Cluster) {
        if self.nodes_changed {
            let retry: Vec<_> = std::mem::take(&mut self.unschedulable)
                .into_iter()
                .collect();
            self.pending.extend(retry);
        }
        if self.pending.is_empty() {
            self.nodes_changed = false;
            return;
        }
        let (nodes, _) = c.store.list("core/nodes", None);
        let pending: Vec<_> = self.pending.iter().cloned().collect();
        for (ns, name) in pending {
            self.schedule(c, &ns, &name, &nodes);
        }
        self.nodes_changed = false;
    }
}
