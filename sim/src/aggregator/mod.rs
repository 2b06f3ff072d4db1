//! The aggregation layer: APIServices whose `spec.service` names a Service with a Ready endpoint
//! are checked like kube-aggregator's availability controller does (GET `/apis/<g>/<v>` as
//! `system:kube-aggregator`, group `system:masters`, with the front-proxy client certificate),
//! get an `Available` condition, join discovery, and every request under `/apis/<g>/<v>` is
//! proxied to them.

pub mod proxy;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::http::{HeaderMap, Method};
use base64::Engine;
use serde_json::{Value, json};

use crate::certs::CertPair;
use crate::cluster::{Cluster, WriteOptions};
use crate::net::ready_endpoints;
use crate::patch::PatchType;
use crate::reviews::UserInfo;

/// One aggregated group-version.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The APIService's name (`v1beta1.system.kdoctor.io`).
    pub apiservice: String,
    /// How to reach the extension server.
    pub target: proxy::Target,
    /// The last discovery document (`APIResourceList`) it served.
    pub resources: Value,
}

/// The registry of aggregated group-versions.
pub struct Aggregator {
    /// The client certificate kube-aggregator presents (CN front-proxy-client).
    pub front_proxy: CertPair,
    remotes: RwLock<BTreeMap<(String, String), Remote>>,
}

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

impl Aggregator {
    /// An aggregator presenting `front_proxy`.
    pub fn new(front_proxy: CertPair) -> Self {
        Aggregator {
            front_proxy,
            remotes: RwLock::new(BTreeMap::new()),
        }
    }

    /// The available remote serving group/version.
    pub fn lookup(&self, group: &str, version: &str) -> Option<Remote> {
        self.remotes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(group.to_string(), version.to_string()))
            .cloned()
    }

    /// Every available remote group-version.
    pub fn all(&self) -> Vec<((String, String), Remote)> {
        self.remotes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn set(&self, key: (String, String), remote: Option<Remote>) {
        let mut m = self.remotes.write().unwrap_or_else(|e| e.into_inner());
        match remote {
            Some(r) => {
                m.insert(key, r);
            }
            None => {
                m.remove(&key);
            }
        }
    }
}

fn target_of(c: &Cluster, svc: &Value) -> Result<proxy::Target, String> {
    let spec = svc.get("spec").cloned().unwrap_or(Value::Null);
    let ns = s(&spec, "/service/namespace").to_string();
    let name = s(&spec, "/service/name").to_string();
    let port = spec
        .pointer("/service/port")
        .and_then(Value::as_i64)
        .unwrap_or(443);
    let service = c
        .store
        .get("core/services", &ns, &name)
        .ok_or_else(|| format!("service/{name} in \"{ns}\" is not present"))?;
    let port_name = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .and_then(|ps| {
            ps.iter()
                .find(|p| p.get("port").and_then(Value::as_i64) == Some(port))
        })
        .map(|p| {
            p.get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        })
        .ok_or_else(|| format!("service/{name} in \"{ns}\" is not listening on port {port}"))?;
    let addr = ready_endpoints(c, &ns, &name, &port_name, false)
        .into_iter()
        .chain(ready_endpoints(c, &ns, &name, &port_name, true))
        .next()
        .ok_or_else(|| format!("service/{name} in \"{ns}\" has no endpoints"))?;
    let insecure = spec
        .get("insecureSkipTLSVerify")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let ca_pem = if insecure {
        None
    } else {
        let b = spec.get("caBundle").and_then(Value::as_str).unwrap_or("");
        let pem = base64::engine::general_purpose::STANDARD
            .decode(b)
            .map_err(|e| format!("caBundle: {e}"))?;
        Some(String::from_utf8_lossy(&pem).into_owned())
    };
    Ok(proxy::Target {
        addr,
        server_name: format!("{name}.{ns}.svc"),
        ca_pem,
    })
}

async fn check(
    agg: &Aggregator,
    target: &proxy::Target,
    group: &str,
    version: &str,
) -> Result<Value, String> {
    let user = UserInfo::new("system:kube-aggregator", &["system:masters"]);
    let path = format!("/apis/{group}/{version}");
    let mut headers = HeaderMap::new();
    headers.insert(
        "accept",
        axum::http::HeaderValue::from_static("application/json"),
    );
    let resp = tokio::time::timeout(
        Duration::from_secs(5),
        proxy::forward(
            target,
            &agg.front_proxy,
            &user,
            &Method::GET,
            &path,
            &headers,
            bytes::Bytes::new(),
        ),
    )
    .await
    .map_err(|_| {
        format!(
            "failing or missing response from https://{}{path}: timeout",
            target.addr
        )
    })?
    .map_err(|e| {
        format!(
            "failing or missing response from https://{}{path}: {e}",
            target.addr
        )
    })?;
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 16 << 20)
        .await
        .map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!(
            "failing or missing response from https://{}{path}: bad status from https://{}{path}: {}",
            target.addr,
            target.addr,
            status.as_u16()
        ));
    }
    serde_json::from_slice(&body)
        .map_err(|e| format!("discovery document of https://{}{path}: {e}", target.addr))
}

fn set_condition(c: &Cluster, name: &str, ok: bool, reason: &str, message: &str) {
    let Some(current) = c.store.get("apiregistration.k8s.io/apiservices", "", name) else {
        return;
    };
    let old = current
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|x| x["type"] == "Available").cloned());
    let status = if ok { "True" } else { "False" };
    if old
        .as_ref()
        .is_some_and(|o| o["status"] == status && o["reason"] == reason && o["message"] == message)
    {
        return;
    }
    let Ok(info) = c.builtin("apiregistration.k8s.io", "APIService") else {
        return;
    };
    let patch = json!({"status": {"conditions": [{
        "type": "Available", "status": status, "reason": reason, "message": message,
        "lastTransitionTime": crate::clock::now()
    }]}});
    let _ = c.patch(
        &info,
        "",
        name,
        PatchType::Merge,
        &serde_json::to_vec(&patch).unwrap_or_default(),
        &WriteOptions::manager("kube-aggregator").status(),
    );
}

/// One pass of the availability controller over every APIService.
pub async fn sync(c: &Cluster, agg: &Aggregator) {
    let (apiservices, _) = c.store.list("apiregistration.k8s.io/apiservices", None);
    let mut seen = Vec::new();
    for a in apiservices {
        if a.pointer("/spec/service").is_none_or(Value::is_null) {
            continue;
        }
        let name = s(&a, "/metadata/name").to_string();
        let key = (
            s(&a, "/spec/group").to_string(),
            s(&a, "/spec/version").to_string(),
        );
        seen.push(key.clone());
        let result = match target_of(c, &a) {
            Ok(t) => check(agg, &t, &key.0, &key.1).await.map(|doc| (t, doc)),
            Err(e) => Err(e),
        };
        match result {
            Ok((target, resources)) => {
                agg.set(
                    key,
                    Some(Remote {
                        apiservice: name.clone(),
                        target,
                        resources,
                    }),
                );
                set_condition(c, &name, true, "Passed", "all checks passed");
            }
            Err(e) => {
                agg.set(key, None);
                let reason = if e.contains("is not present") {
                    "ServiceNotFound"
                } else if e.contains("no endpoints") {
                    "MissingEndpoints"
                } else {
                    "FailedDiscoveryCheck"
                };
                set_condition(c, &name, false, reason, &e);
            }
        }
    }
    for (k, _) in agg.all() {
        if !seen.contains(&k) {
            agg.set(k, None);
        }
    }
}

/// Runs the availability controller until shutdown: at once when APIServices, Services or
/// Endpoints change, else every 10 s (every second while one is unavailable), like
/// kube-aggregator's resync.
pub fn spawn(
    c: Arc<Cluster>,
    agg: Arc<Aggregator>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut notify = c.store.subscribe();
        let mut cursor = c.store.rv();
        let mut last = tokio::time::Instant::now();
        let mut due = true;
        loop {
            let services = c.store.count("apiregistration.k8s.io/apiservices");
            if due {
                if services > 0 {
                    sync(&c, &agg).await;
                }
                // Also with nothing to sync: otherwise the deadline stays in the past and the
                // loop spins (a cluster without APIServices burned a core).
                last = tokio::time::Instant::now();
            }
            let period = if agg.all().len() < services {
                Duration::from_secs(1)
            } else {
                Duration::from_secs(10)
            };
            tokio::select! {
                _ = tokio::time::sleep_until(last + period) => due = true,
                r = notify.changed() => {
                    if r.is_err() {
                        return;
                    }
                    due = match c.store.events_since(cursor) {
                        Ok(events) => events.iter().any(|e| matches!(
                            &*e.storage,
                            "apiregistration.k8s.io/apiservices" | "core/services" | "core/endpoints"
                        )),
                        Err(_) => true,
                    };
                    cursor = c.store.rv();
                }
                _ = async { let _ = shutdown.wait_for(|s| *s).await; } => return,
            }
        }
    })
}

/// The aggregated-discovery entry of a remote group-version, from its APIResourceList.
pub fn aggregated_version(version: &str, list: &Value) -> Value {
    let group_version = s(list, "/groupVersion");
    let group = group_version.split_once('/').map(|(g, _)| g).unwrap_or("");
    let entries = list
        .get("resources")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out: Vec<Value> = Vec::new();
    for r in entries.iter().filter(|r| !s(r, "/name").contains('/')) {
        let name = s(r, "/name");
        let kind = json!({"group": group, "version": version, "kind": s(r, "/kind")});
        let mut e = json!({
            "resource": name,
            "responseKind": kind,
            "scope": if r.get("namespaced").and_then(Value::as_bool) == Some(true) { "Namespaced" } else { "Cluster" },
            "singularResource": s(r, "/singularName"),
            "verbs": r.get("verbs").cloned().unwrap_or(json!([])),
        });
        for k in ["shortNames", "categories"] {
            if let Some(v) = r.get(k) {
                e[k] = v.clone();
            }
        }
        let subs: Vec<Value> = entries
            .iter()
            .filter_map(|x| {
                let (main, sub) = s(x, "/name").split_once('/')?;
                (main == name).then(|| json!({"subresource": sub, "responseKind": kind, "verbs": x.get("verbs").cloned().unwrap_or(json!([]))}))
            })
            .collect();
        if !subs.is_empty() {
            e["subresources"] = json!(subs);
        }
        out.push(e);
    }
    json!({"version": version, "resources": out, "freshness": "Current"})
}
