//! The cloud load-balancer stand-in: gives every LoadBalancer Service (one address per IP
//! family) and every Ingress (both families in a dual-stack cluster) a loopback address in
//! `status.loadBalancer.ingress`, and takes it back when no longer needed.

use serde_json::{Value, json};

use crate::cluster::{Cluster, WriteOptions};
use crate::controllers::Controller;
use crate::patch::PatchType;
use crate::store::{EventType, StoreEvent};

const MANAGER: &str = "service-controller";

/// The load-balancer controller.
#[derive(Default)]
pub struct LoadBalancerController;

fn set_status(c: &Cluster, group: &str, kind: &str, ns: &str, name: &str, ingress: Value) {
    let Ok(info) = c.builtin(group, kind) else {
        return;
    };
    let patch = json!({"status": {"loadBalancer": {"ingress": ingress}}});
    if let Err(e) = c.patch(
        &info,
        ns,
        name,
        PatchType::Merge,
        &serde_json::to_vec(&patch).unwrap_or_default(),
        &WriteOptions::manager(MANAGER).status(),
    ) {
        tracing::debug!(error = %e, name, "load balancer status write failed");
    }
}

fn process(c: &Cluster, e: &StoreEvent) {
    if e.kind == EventType::Deleted {
        return;
    }
    let (group, kind, wants) = match &*e.storage {
        "core/services" => (
            "",
            "Service",
            e.object.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer"),
        ),
        "networking.k8s.io/ingresses" => (
            "networking.k8s.io",
            "Ingress",
            e.object.pointer("/metadata/deletionTimestamp").is_none(),
        ),
        _ => return,
    };
    let have = crate::kinds::service::addresses(&e.object, "/status/loadBalancer/ingress");
    if wants && have.is_empty() {
        let Some(slot) = c.alloc().load_balancers.allocate() else {
            tracing::warn!("no LoadBalancer addresses left");
            return;
        };
        let families = if kind == "Service" {
            crate::kinds::service::families(&e.object)
        } else if c.alloc().ipv6 {
            vec!["IPv4", "IPv6"]
        } else {
            vec!["IPv4"]
        };
        let entries: Vec<Value> = families
            .into_iter()
            .map(|f| {
                let ip = crate::net::ipv6::in_family(slot, f);
                let mut entry = json!({"ip": ip.to_string()});
                if kind == "Service" {
                    entry["ipMode"] = json!("VIP");
                }
                entry
            })
            .collect();
        set_status(c, group, kind, &e.namespace, &e.name, json!(entries));
    } else if !wants && !have.is_empty() {
        {
            let mut alloc = c.alloc();
            for slot in &have {
                alloc.load_balancers.release(*slot);
            }
        }
        set_status(c, group, kind, &e.namespace, &e.name, Value::Null);
    }
}

impl Controller for LoadBalancerController {
    fn handle(&mut self, c: &Cluster, e: &StoreEvent) {
        process(c, e);
    }

    fn resync(&mut self, c: &Cluster) {
        for storage in ["core/services", "networking.k8s.io/ingresses"] {
            let (items, rv) = c.store.list(storage, None);
            for item in items {
                let e = StoreEvent {
                    rv,
                    storage: std::sync::Arc::from(storage),
                    namespace: item
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    name: item
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    kind: EventType::Modified,
                    object: item.clone(),
                    prev: None,
                    encoded: Default::default(),
                };
                process(c, &e);
            }
        }
    }
}
