//! The Deployment controller: one ReplicaSet per pod template (`<name>-<hash>`), the current
//! one scaled to `spec.replicas` and older ones to zero (a recreate-style rollout), and the
//! Deployment's status and conditions from its ReplicaSets.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::cluster::{Cluster, WriteOptions};
use crate::controllers::podtemplate::{controller_ref, template_hash};
use crate::controllers::replicaset::controlling_owner;
use crate::controllers::{Controller, uid};
use crate::patch::PatchType;
use crate::store::StoreEvent;

const MANAGER: &str = "deployment-controller";

/// The Deployment controller.
#[derive(Default)]
pub struct DeploymentController {
    dirty: BTreeSet<(String, String)>,
}

fn merge(c: &Cluster, kind: &str, ns: &str, name: &str, patch: &Value, status: bool) {
    if let Ok(info) = c.builtin("apps", kind) {
        let opts = if status {
            WriteOptions::manager(MANAGER).status()
        } else {
            WriteOptions::manager(MANAGER)
        };
        if let Err(e) = c.patch(
            &info,
            ns,
            name,
            PatchType::Merge,
            &serde_json::to_vec(patch).unwrap_or_default(),
            &opts,
        ) {
            tracing::debug!(error = %e, kind, name, "deployment controller write failed");
        }
    }
}

/// Reconciles one Deployment.
pub fn reconcile(c: &Cluster, ns: &str, name: &str) {
    let Some(d) = c.store.get("apps/deployments", ns, name) else {
        return;
    };
    if d.pointer("/metadata/deletionTimestamp").is_some() {
        return;
    }
    let mut d = (*d).clone();
    d["apiVersion"] = json!("apps/v1");
    d["kind"] = json!("Deployment");
    let template = d.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let hash = template_hash(&template);
    let rs_name = format!("{name}-{hash}");
    let want = d
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let owned: Vec<Value> = c
        .store
        .dependents(uid(&d))
        .into_iter()
        .filter(|r| r.storage == "apps/replicasets")
        .filter_map(|r| c.store.get(&r.storage, &r.namespace, &r.name))
        .map(|v| (*v).clone())
        .collect();
    let Ok(rs_info) = c.builtin("apps", "ReplicaSet") else {
        return;
    };
    if !owned
        .iter()
        .any(|r| r.pointer("/metadata/name").and_then(Value::as_str) == Some(&rs_name))
    {
        let mut tmpl = template.clone();
        tmpl["metadata"]["labels"]["pod-template-hash"] = json!(hash);
        let mut selector = d.pointer("/spec/selector").cloned().unwrap_or(json!({}));
        selector["matchLabels"]["pod-template-hash"] = json!(hash);
        let mut labels = template
            .pointer("/metadata/labels")
            .cloned()
            .unwrap_or(json!({}));
        labels["pod-template-hash"] = json!(hash);
        let rs = json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": rs_name, "labels": labels, "ownerReferences": [controller_ref(&d)]},
            "spec": {"replicas": want, "selector": selector, "template": tmpl},
        });
        if let Err(e) = c.create(&rs_info, ns, rs, &WriteOptions::manager(MANAGER))
            && e.code != 409
        {
            tracing::warn!(error = %e, deployment = name, "creating a ReplicaSet failed");
        }
    }
    let mut ready = 0;
    let mut replicas = 0;
    let mut updated = 0;
    for rs in &owned {
        let rname = rs
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let target = if rname == rs_name { want } else { 0 };
        if rs.pointer("/spec/replicas").and_then(Value::as_i64) != Some(target) {
            merge(
                c,
                "ReplicaSet",
                ns,
                rname,
                &json!({"spec": {"replicas": target}}),
                false,
            );
        }
        let r = rs
            .pointer("/status/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        replicas += r;
        ready += rs
            .pointer("/status/readyReplicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if rname == rs_name {
            updated = r;
        }
    }
    let available = ready >= want;
    let now = crate::clock::now();
    let condition = |t: &str, ok: bool, reason: &str, msg: String| {
        json!({"type": t, "status": if ok { "True" } else { "False" }, "reason": reason, "message": msg,
            "lastUpdateTime": now, "lastTransitionTime": now})
    };
    let mut conditions = vec![condition(
        "Available",
        available,
        if available {
            "MinimumReplicasAvailable"
        } else {
            "MinimumReplicasUnavailable"
        },
        if available {
            "Deployment has minimum availability.".into()
        } else {
            "Deployment does not have minimum availability.".into()
        },
    )];
    conditions.push(condition(
        "Progressing",
        true,
        if updated == want && ready >= want {
            "NewReplicaSetAvailable"
        } else {
            "ReplicaSetUpdated"
        },
        format!("ReplicaSet \"{rs_name}\" is progressing."),
    ));
    // Keep transition times of unchanged conditions, so a steady state writes nothing.
    if let Some(old) = d.pointer("/status/conditions").and_then(Value::as_array) {
        for cnd in &mut conditions {
            if let Some(o) = old.iter().find(|o| {
                o["type"] == cnd["type"]
                    && o["status"] == cnd["status"]
                    && o["reason"] == cnd["reason"]
            }) {
                cnd["lastUpdateTime"] = o["lastUpdateTime"].clone();
                cnd["lastTransitionTime"] = o["lastTransitionTime"].clone();
            }
        }
    }
    let status = json!({"status": {
        "observedGeneration": d.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
        "replicas": replicas,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "unavailableReplicas": (want - ready).max(0),
        "conditions": conditions,
    }});
    merge(c, "Deployment", ns, name, &status, true);
}

impl Controller for DeploymentController {
    fn handle(&mut self, _c: &Cluster, e: &StoreEvent) {
        match &*e.storage {
            "apps/deployments" => {
                self.dirty.insert((e.namespace.clone(), e.name.clone()));
            }
            "apps/replicasets" => {
                if let Some(owner) = controlling_owner(&e.object, "Deployment") {
                    self.dirty.insert((e.namespace.clone(), owner));
                }
            }
            _ => {}
        }
    }

    fn resync(&mut self, c: &Cluster) {
        let (all, _) = c.store.list("apps/deployments", None);
        for d in all {
            let ns = d
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            let name = d
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
