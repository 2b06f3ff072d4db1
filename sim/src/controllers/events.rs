//! core/v1 Events recorded by the simulated components (scheduler, kubelet stages), so
//! `kubectl describe` shows what happened.

use serde_json::{Value, json};

use crate::cluster::{Cluster, WriteOptions};

/// Records an Event about `obj` (best effort: a failure is logged, never fatal).
pub fn record(c: &Cluster, obj: &Value, kind: &str, reason: &str, message: &str, component: &str) {
    let Ok(info) = c.builtin("", "Event") else {
        return;
    };
    let meta = obj.get("metadata").cloned().unwrap_or(json!({}));
    let ns = meta
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
        .to_string();
    let name = meta.get("name").and_then(Value::as_str).unwrap_or("object");
    let now = crate::clock::now();
    let event = json!({
        "metadata": {"generateName": format!("{name}.")},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": name,
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    if let Err(e) = c.create(&info, &ns, event, &WriteOptions::default()) {
        tracing::debug!(error = %e, "recording an event failed");
    }
}
