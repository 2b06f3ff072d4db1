//! Pods from workload templates: owner references, template hashes, readiness checks shared
//! by the DaemonSet, ReplicaSet and Deployment controllers.

use serde_json::{Value, json};

use crate::cluster::{Cluster, WriteOptions};
use crate::error::ApiResult;

/// A controller ownerReference to `owner`.
pub fn controller_ref(owner: &Value) -> Value {
    json!({
        "apiVersion": owner.get("apiVersion").cloned().unwrap_or(json!("apps/v1")),
        "kind": owner.get("kind").cloned().unwrap_or(Value::Null),
        "name": owner.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
        "uid": owner.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Whether `obj` is controlled by the object with `owner_uid`.
pub fn controlled_by(obj: &Value, owner_uid: &str) -> bool {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter().any(|r| {
                r.get("uid").and_then(Value::as_str) == Some(owner_uid)
                    && r.get("controller").and_then(Value::as_bool) == Some(true)
            })
        })
}

/// A short stable hash of a pod template (FNV-1a of its JSON), like pod-template-hash.
pub fn template_hash(template: &Value) -> String {
    let bytes = serde_json::to_vec(template).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..10)
        .map(|i| ALPHABET[((h >> (i * 6)) % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

/// Whether a pod is Ready (condition Ready True) and not terminating.
pub fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/metadata/deletionTimestamp").is_none()
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

/// Whether a pod is neither terminating nor finished.
pub fn pod_active(pod: &Value) -> bool {
    pod.pointer("/metadata/deletionTimestamp").is_none()
        && !matches!(
            pod.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        )
}

/// Creates a pod from `owner`'s template, named `<prefix>-xxxxx`, with extra labels and an
/// optional node.
pub fn create_pod(
    c: &Cluster,
    owner: &Value,
    prefix: &str,
    labels: &[(&str, String)],
    node: Option<&str>,
    manager: &str,
) -> ApiResult<Value> {
    let ns = owner
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let template = owner
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(json!({}));
    let mut meta = template.get("metadata").cloned().unwrap_or(json!({}));
    if !meta.get("labels").is_some_and(Value::is_object) {
        meta["labels"] = json!({});
    }
    for (k, v) in labels {
        meta["labels"][*k] = json!(v);
    }
    meta["generateName"] = json!(format!("{prefix}-"));
    meta["ownerReferences"] = json!([controller_ref(owner)]);
    if let Some(m) = meta.as_object_mut() {
        m.remove("name");
        m.remove("namespace");
    }
    let mut spec = template.get("spec").cloned().unwrap_or(json!({}));
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec});
    let info = c.builtin("", "Pod")?;
    c.create(&info, ns, pod, &WriteOptions::manager(manager))
}
