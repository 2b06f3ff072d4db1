//! The endpoints controllers: Endpoints and EndpointSlices of every Service with a selector,
//! following its pods' addresses and readiness.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::cluster::{Cluster, DeleteOptions};
use crate::controllers::podtemplate::{controller_ref, pod_ready, template_hash};
use crate::controllers::{Controller, upsert};
use crate::selector::{labels_of, string_map};
use crate::store::{EventType, StoreEvent};

const MANAGER: &str = "endpoint-controller";

/// The Endpoints and EndpointSlice controller.
#[derive(Default)]
pub struct EndpointsController {
    dirty: BTreeSet<(String, String)>,
}

fn selects(svc: &Value, pod: &Value) -> bool {
    let sel = string_map(svc.pointer("/spec/selector"));
    if sel.is_empty() {
        return false;
    }
    let labels = labels_of(pod);
    sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn resolve_port(target: &Value, pods: &[&Value]) -> Option<i64> {
    match target {
        Value::Number(n) => n.as_i64(),
        Value::String(name) => pods.iter().find_map(|p| {
            p.pointer("/spec/containers")
                .and_then(Value::as_array)?
                .iter()
                .flat_map(|c| {
                    c.get("ports")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                })
                .find(|port| port.get("name").and_then(Value::as_str) == Some(name))
                .and_then(|port| port.get("containerPort").and_then(Value::as_i64))
        }),
        _ => None,
    }
}

/// The EndpointSlice name of a Service's slice of one address family (stable, so updates
/// replace it; the IPv4 slice keeps the name single-stack clusters always had).
pub fn slice_name(svc: &str, family: &str) -> String {
    let hash = template_hash(&json!(svc));
    match family {
        "IPv6" => format!("{svc}-v6-{}", &hash[..5]),
        _ => format!("{svc}-{}", &hash[..5]),
    }
}

/// A pod's address of one family ("IPv4" or "IPv6"), from `status.podIPs` (or `podIP`).
pub fn pod_ip(pod: &Value, family: &str) -> Option<String> {
    let want_v6 = family == "IPv6";
    let listed = pod
        .pointer("/status/podIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| e.get("ip").and_then(Value::as_str));
    listed
        .chain(pod.pointer("/status/podIP").and_then(Value::as_str))
        .find(|ip| {
            ip.parse::<std::net::IpAddr>()
                .is_ok_and(|a| a.is_ipv6() == want_v6)
        })
        .map(String::from)
}

/// Recomputes the Endpoints (the primary family) and the EndpointSlices (one per family) of
/// one Service.
pub fn reconcile(c: &Cluster, ns: &str, name: &str) {
    let Some(svc) = c.store.get("core/services", ns, name) else {
        if let Ok(info) = c.builtin("", "Endpoints") {
            let _ = c.delete(&info, ns, name, &DeleteOptions::default());
        }
        return;
    };
    if string_map(svc.pointer("/spec/selector")).is_empty() {
        return;
    }
    let mut svc = (*svc).clone();
    svc["apiVersion"] = json!("v1");
    svc["kind"] = json!("Service");
    let families = crate::kinds::service::families(&svc);
    let (pods, _) = c.store.list("core/pods", Some(ns));
    let members: Vec<&Value> = pods
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| selects(&svc, p))
        .filter(|p| {
            p.pointer("/status/podIP")
                .and_then(Value::as_str)
                .is_some_and(|ip| !ip.is_empty())
        })
        .filter(|p| {
            !matches!(
                p.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            )
        })
        .collect();
    let ports: Vec<Value> = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|p| {
            let target = p.get("targetPort").cloned().unwrap_or_else(|| p.get("port").cloned().unwrap_or(Value::Null));
            let port = resolve_port(&target, &members)?;
            let mut e = json!({"port": port, "protocol": p.get("protocol").cloned().unwrap_or(json!("TCP"))});
            if let Some(n) = p.get("name").filter(|n| n.as_str().is_some_and(|s| !s.is_empty())) {
                e["name"] = n.clone();
            }
            Some(e)
        })
        .collect();
    let target_ref = |p: &Value| json!({"kind": "Pod", "name": p.pointer("/metadata/name"), "namespace": ns, "uid": p.pointer("/metadata/uid")});
    // EndpointSlice ports always carry a name (kubectl describe dereferences it).
    let slice_ports: Vec<Value> = ports
        .iter()
        .map(|p| {
            let mut p = p.clone();
            if p.get("name").is_none() {
                p["name"] = json!("");
            }
            p
        })
        .collect();
    let primary = families.first().copied().unwrap_or("IPv4");
    let mut ready = Vec::new();
    let mut not_ready = Vec::new();
    for p in &members {
        let Some(ip) = pod_ip(p, primary) else {
            continue;
        };
        let node = p.pointer("/spec/nodeName").cloned().unwrap_or(Value::Null);
        let addr = json!({"ip": ip, "nodeName": node, "targetRef": target_ref(p)});
        if pod_ready(p) {
            ready.push(addr)
        } else {
            not_ready.push(addr)
        }
    }
    let mut subset = json!({"ports": ports});
    let listed = !ready.is_empty() || !not_ready.is_empty();
    if !ready.is_empty() {
        subset["addresses"] = json!(ready);
    }
    if !not_ready.is_empty() {
        subset["notReadyAddresses"] = json!(not_ready);
    }
    let subsets = if !listed || ports.is_empty() {
        json!([])
    } else {
        json!([subset])
    };
    let labels = svc
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or(json!({}));
    let endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "subsets": subsets,
    });
    if let Ok(info) = c.builtin("", "Endpoints") {
        upsert(c, &info, ns, endpoints, MANAGER);
    }
    let mut slice_labels = labels.clone();
    if !slice_labels.is_object() {
        slice_labels = json!({});
    }
    slice_labels["kubernetes.io/service-name"] = json!(name);
    slice_labels["endpointslice.kubernetes.io/managed-by"] =
        json!("endpointslice-controller.k8s.io");
    // A Service that went back to one family loses the other family's slice.
    if let Ok(info) = c.builtin("discovery.k8s.io", "EndpointSlice") {
        for gone in ["IPv4", "IPv6"]
            .into_iter()
            .filter(|f| !families.contains(f))
        {
            let slice = slice_name(name, gone);
            if c.store
                .get("discovery.k8s.io/endpointslices", ns, &slice)
                .is_some()
            {
                let _ = c.delete(&info, ns, &slice, &DeleteOptions::default());
            }
        }
    }
    for family in families {
        let slice_endpoints: Vec<Value> = members
            .iter()
            .filter_map(|p| {
                let ip = pod_ip(p, family)?;
                let is_ready = pod_ready(p);
                let terminating = p.pointer("/metadata/deletionTimestamp").is_some();
                Some(json!({
                    "addresses": [ip],
                    "conditions": {"ready": is_ready, "serving": is_ready || (terminating && pod_ready_ignoring_deletion(p)), "terminating": terminating},
                    "nodeName": p.pointer("/spec/nodeName").cloned().unwrap_or(Value::Null),
                    "targetRef": target_ref(p),
                }))
            })
            .collect();
        let slice = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": slice_name(name, family), "namespace": ns, "labels": slice_labels, "ownerReferences": [controller_ref(&svc)]},
            "addressType": family,
            "endpoints": slice_endpoints,
            "ports": slice_ports,
        });
        if let Ok(info) = c.builtin("discovery.k8s.io", "EndpointSlice") {
            upsert(c, &info, ns, slice, "endpointslice-controller");
        }
    }
}

fn pod_ready_ignoring_deletion(p: &Value) -> bool {
    p.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

impl EndpointsController {
    fn mark_selecting(&mut self, c: &Cluster, ns: &str, pods: &[&Value]) {
        let (svcs, _) = c.store.list("core/services", Some(ns));
        for s in svcs {
            if pods.iter().any(|p| selects(&s, p)) {
                let name = s
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                self.dirty.insert((ns.to_string(), name.to_string()));
            }
        }
    }
}

impl Controller for EndpointsController {
    fn handle(&mut self, c: &Cluster, e: &StoreEvent) {
        match &*e.storage {
            "core/services" => {
                self.dirty.insert((e.namespace.clone(), e.name.clone()));
            }
            "core/pods" => {
                let mut pods = vec![e.object.as_ref()];
                if let Some(p) = &e.prev {
                    pods.push(p.as_ref());
                }
                // Only address, readiness, labels and termination matter to endpoints.
                let relevant = e.kind != EventType::Modified
                    || e.prev.as_ref().is_none_or(|p| {
                        p.pointer("/status/podIPs") != e.object.pointer("/status/podIPs")
                            || p.pointer("/status/podIP") != e.object.pointer("/status/podIP")
                            || pod_ready(p) != pod_ready(&e.object)
                            || p.pointer("/metadata/labels") != e.object.pointer("/metadata/labels")
                            || p.pointer("/metadata/deletionTimestamp")
                                != e.object.pointer("/metadata/deletionTimestamp")
                    });
                if relevant {
                    self.mark_selecting(c, &e.namespace, &pods);
                }
            }
            _ => {}
        }
    }

    fn resync(&mut self, c: &Cluster) {
        let (svcs, _) = c.store.list("core/services", None);
        for s in svcs {
            let ns = s
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            let name = s
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
