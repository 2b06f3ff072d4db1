//! A pod process's environment: the downward-API fields a kubelet would offer, the first
//! container's env (literal values, fieldRef, ConfigMap and Secret keys), and `$(VAR)`
//! expansion of arguments as Kubernetes does it.

use base64::Engine;
use serde_json::Value;

use crate::cluster::Cluster;

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

/// A list of `{ip: ...}` joined by commas, as the downward API gives `status.podIPs`.
fn ips(v: &Value, p: &str) -> String {
    v.pointer(p)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| e.get("ip").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join(",")
}

fn field_ref(pod: &Value, path: &str) -> String {
    match path {
        "metadata.name" => s(pod, "/metadata/name").into(),
        "metadata.namespace" => s(pod, "/metadata/namespace").into(),
        "metadata.uid" => s(pod, "/metadata/uid").into(),
        "spec.nodeName" => s(pod, "/spec/nodeName").into(),
        "spec.serviceAccountName" => s(pod, "/spec/serviceAccountName").into(),
        "status.podIP" => s(pod, "/status/podIP").into(),
        "status.podIPs" => ips(pod, "/status/podIPs"),
        "status.hostIP" => s(pod, "/status/hostIP").into(),
        "status.hostIPs" => ips(pod, "/status/hostIPs"),
        other => {
            // metadata.labels['k'] and metadata.annotations['k']
            for (prefix, ptr) in [
                ("metadata.labels['", "/metadata/labels"),
                ("metadata.annotations['", "/metadata/annotations"),
            ] {
                if let Some(key) = other
                    .strip_prefix(prefix)
                    .and_then(|k| k.strip_suffix("']"))
                {
                    return pod
                        .pointer(ptr)
                        .and_then(|m| m.get(key))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .into();
                }
            }
            String::new()
        }
    }
}

/// The environment of the pod's first container, plus the standard variables.
pub fn pod_env(c: &Cluster, pod: &Value) -> Vec<(String, String)> {
    let ns = s(pod, "/metadata/namespace");
    let mut env = vec![
        ("POD_NAME".to_string(), s(pod, "/metadata/name").to_string()),
        ("POD_NAMESPACE".to_string(), ns.to_string()),
        ("POD_IP".to_string(), s(pod, "/status/podIP").to_string()),
        ("POD_IPS".to_string(), ips(pod, "/status/podIPs")),
        (
            "NODE_NAME".to_string(),
            s(pod, "/spec/nodeName").to_string(),
        ),
        ("HOST_IP".to_string(), s(pod, "/status/hostIP").to_string()),
    ];
    let container = pod
        .pointer("/spec/containers/0")
        .cloned()
        .unwrap_or(Value::Null);
    for e in container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = s(e, "/name").to_string();
        let value = if let Some(v) = e.get("value").and_then(Value::as_str) {
            expand(v, &env)
        } else if let Some(path) = e
            .pointer("/valueFrom/fieldRef/fieldPath")
            .and_then(Value::as_str)
        {
            field_ref(pod, path)
        } else if let Some(r) = e.pointer("/valueFrom/configMapKeyRef") {
            c.store
                .get("core/configmaps", ns, s(r, "/name"))
                .and_then(|cm| {
                    cm.pointer(&format!("/data/{}", s(r, "/key")))
                        .and_then(Value::as_str)
                        .map(String::from)
                })
                .unwrap_or_default()
        } else if let Some(r) = e.pointer("/valueFrom/secretKeyRef") {
            c.store
                .get("core/secrets", ns, s(r, "/name"))
                .and_then(|sec| {
                    let key = s(r, "/key");
                    sec.pointer(&format!("/stringData/{key}"))
                        .and_then(Value::as_str)
                        .map(String::from)
                        .or_else(|| {
                            sec.pointer(&format!("/data/{key}"))
                                .and_then(Value::as_str)
                                .and_then(|b| {
                                    base64::engine::general_purpose::STANDARD.decode(b).ok()
                                })
                                .map(|b| String::from_utf8_lossy(&b).into_owned())
                        })
                })
                .unwrap_or_default()
        } else {
            String::new()
        };
        env.retain(|(k, _)| *k != name);
        env.push((name, value));
    }
    env
}

/// Expands `$(VAR)` from `env`; `$$(VAR)` stays literal `$(VAR)`; unknown variables stay as
/// written (Kubernetes' rules).
pub fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("$$") {
            out.push('$');
            rest = t;
        } else if let Some(inner) = tail.strip_prefix("$(")
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => out.push_str(&tail[..end + 3]),
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn env_and_expansion() {
        let c = Cluster::new(10, 1);
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "env": [
                {"name": "A", "value": "x-$(POD_NAME)"},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}}
            ]}]},
            "status": {"podIP": "127.20.0.9", "podIPs": [{"ip": "127.20.0.9"}, {"ip": "fd00:10::7f14:9"}]}});
        let env = pod_env(&c, &pod);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("A"), Some("x-p"));
        assert_eq!(get("APP"), Some("a"));
        assert_eq!(get("IP"), Some("127.20.0.9"));
        assert_eq!(get("IPS"), Some("127.20.0.9,fd00:10::7f14:9"));
        assert_eq!(get("POD_IPS"), Some("127.20.0.9,fd00:10::7f14:9"));
        assert_eq!(
            expand("--listen=$(POD_IP):80 $$(KEEP) $(NOPE)", &env),
            "--listen=127.20.0.9:80 $(KEEP) $(NOPE)"
        );
    }
}
