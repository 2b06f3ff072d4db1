//! Pods: the defaults the real API server fills in, Pending status on create, graceful deletion
//! of bound pods, and the pod address returned on removal.

use serde_json::{Value, json};

use crate::cluster::Cluster;
use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceInfo;

fn set_default(obj: &mut Value, key: &str, v: Value) {
    if let Some(m) = obj.as_object_mut() {
        m.entry(key.to_string()).or_insert(v);
    }
}

/// Fills a pod spec's defaults (also used for workload templates).
pub fn default_spec(spec: &mut Value) {
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "enableServiceLinks", json!(true));
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                let image = c
                    .get("image")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let tagless = !image.rsplit('/').next().unwrap_or("").contains(':');
                let policy = if tagless || image.ends_with(":latest") {
                    "Always"
                } else {
                    "IfNotPresent"
                };
                set_default(c, "imagePullPolicy", json!(policy));
                set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
                set_default(c, "terminationMessagePolicy", json!("File"));
                set_default(c, "resources", json!({}));
                if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports {
                        set_default(p, "protocol", json!("TCP"));
                    }
                }
            }
        }
    }
}

/// Validates and defaults a new pod; its status starts Pending.
pub fn prepare_create(info: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let has_containers = obj
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if !has_containers {
        return Err(ApiError::invalid(
            info,
            &name,
            "spec.containers",
            "Required value",
        ));
    }
    if let Some(spec) = obj.get_mut("spec") {
        default_spec(spec);
    }
    obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
    Ok(())
}

/// The grace period of a pod delete: 0 for a pod no kubelet runs, else requested or the spec's.
pub fn grace_period(obj: &Value, requested: Option<i64>) -> i64 {
    let bound = obj
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = obj.pointer("/status/phase").and_then(Value::as_str);
    if !bound || matches!(phase, Some("Succeeded" | "Failed")) {
        return 0;
    }
    requested.unwrap_or_else(|| {
        obj.pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(30)
    })
}

/// Returns the pod's address to the pool (its IPv6 twin goes with it).
pub fn release(c: &Cluster, obj: &Value) {
    let host_network = obj
        .pointer("/spec/hostNetwork")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if host_network {
        return;
    }
    if let Some(slot) = obj
        .pointer("/status/podIP")
        .and_then(Value::as_str)
        .and_then(|s| crate::net::ipv6::slot(s.parse().ok()?))
    {
        c.alloc().pods.release(slot);
    }
}

/// Returns a node's InternalIP addresses to the pool.
pub fn release_node(c: &Cluster, obj: &Value) {
    if let Some(addrs) = obj.pointer("/status/addresses").and_then(Value::as_array) {
        for a in addrs {
            if a.get("type").and_then(Value::as_str) == Some("InternalIP")
                && let Some(slot) = a
                    .get("address")
                    .and_then(Value::as_str)
                    .and_then(|s| crate::net::ipv6::slot(s.parse().ok()?))
            {
                c.alloc().nodes.release(slot);
            }
        }
    }
}
