//! A container's environment as the kubelet builds it: the image's variables, the Service
//! variables (`KUBERNETES_SERVICE_HOST`/`_PORT` and, with enableServiceLinks, one set per
//! Service of the pod's namespace), `envFrom`, then `env` in order — literal values with
//! `$(VAR)` expansion, the downward API (fieldRef, resourceFieldRef), ConfigMap and Secret keys.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

/// The ConfigMaps and Secrets of the pod's namespace that a container's environment reads,
/// already fetched, and the Services it links.
#[derive(Debug, Default, Clone)]
pub struct EnvSources {
    /// ConfigMap name → data.
    pub config_maps: BTreeMap<String, BTreeMap<String, String>>,
    /// Secret name → decoded data.
    pub secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    /// Services whose variables the container gets: the `kubernetes` Service of `default`
    /// first, then (with enableServiceLinks) those of the pod's namespace.
    pub services: Vec<Value>,
}

/// The ConfigMaps and Secrets a container's env and envFrom name: (config maps, secrets).
pub fn referenced(container: &Value) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut maps = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for e in container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(n) = e
            .pointer("/valueFrom/configMapKeyRef/name")
            .and_then(Value::as_str)
        {
            maps.insert(n.to_string());
        }
        if let Some(n) = e
            .pointer("/valueFrom/secretKeyRef/name")
            .and_then(Value::as_str)
        {
            secrets.insert(n.to_string());
        }
    }
    for e in container
        .get("envFrom")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(n) = e.pointer("/configMapRef/name").and_then(Value::as_str) {
            maps.insert(n.to_string());
        }
        if let Some(n) = e.pointer("/secretRef/name").and_then(Value::as_str) {
            secrets.insert(n.to_string());
        }
    }
    (maps, secrets)
}

/// `status.podIPs`-style lists joined by commas, as the downward API gives them.
fn ip_list(pod: &Value, p: &str) -> String {
    pod.pointer(p)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| e.get("ip").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join(",")
}

/// A downward-API field of the pod (`fieldRef.fieldPath`), or None for an unknown path.
pub fn field_ref(pod: &Value, path: &str) -> Option<String> {
    let plain = match path {
        "metadata.name" => "/metadata/name",
        "metadata.namespace" => "/metadata/namespace",
        "metadata.uid" => "/metadata/uid",
        "spec.nodeName" => "/spec/nodeName",
        "spec.serviceAccountName" => "/spec/serviceAccountName",
        "status.podIP" => "/status/podIP",
        "status.hostIP" => "/status/hostIP",
        "status.podIPs" => return Some(ip_list(pod, "/status/podIPs")),
        "status.hostIPs" => return Some(ip_list(pod, "/status/hostIPs")),
        other => {
            for (prefix, ptr) in [
                ("metadata.labels['", "/metadata/labels"),
                ("metadata.annotations['", "/metadata/annotations"),
            ] {
                if let Some(key) = other
                    .strip_prefix(prefix)
                    .and_then(|k| k.strip_suffix("']"))
                {
                    return Some(
                        pod.pointer(ptr)
                            .and_then(|m| m.get(key))
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .into(),
                    );
                }
            }
            return match other {
                "metadata.labels" | "metadata.annotations" => {
                    let map = pod.pointer(&format!("/{}", other.replace('.', "/")));
                    Some(
                        map.and_then(Value::as_object)
                            .into_iter()
                            .flatten()
                            .map(|(k, v)| format!("{k}=\"{}\"", v.as_str().unwrap_or("")))
                            .collect::<Vec<_>>()
                            .join("\n"),
                    )
                }
                _ => None,
            };
        }
    };
    Some(s(pod, plain).to_string())
}

/// A resource quantity in the unit of `divisor` (cpu in cores by default, rounded up as the
/// kubelet does; memory in bytes). None when it cannot be read.
pub fn resource_field(container: &Value, resource: &str, divisor: &str) -> Option<String> {
    let (section, name) = resource.split_once('.')?;
    let q = container
        .pointer(&format!("/resources/{section}/{name}"))
        .and_then(Value::as_str);
    let value = match q {
        Some(q) => quantity(q)?,
        // No limit: the node's allocatable (kube-sim's nodes have 4 cpu and 8Gi).
        None if section == "limits" && name == "cpu" => 4.0,
        None if section == "limits" && name == "memory" => 8.0 * 1024.0 * 1024.0 * 1024.0,
        None => 0.0,
    };
    let d = if divisor.is_empty() {
        1.0
    } else {
        quantity(divisor)?
    };
    Some(format!("{}", (value / d).ceil() as u64))
}

/// A Kubernetes quantity as a number (`100m` = 0.1, `1Ki` = 1024, `1k` = 1000).
pub fn quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    let units: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    for (suffix, factor) in units {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<f64>().ok().map(|v| v * factor);
        }
    }
    q.parse().ok()
}

/// The variables of one Service, as the kubelet writes them (Docker-link style too).
fn service_vars(svc: &Value, out: &mut Vec<(String, String)>) {
    let ip = s(svc, "/spec/clusterIP");
    if ip.is_empty() || ip == "None" {
        return;
    }
    let name = s(svc, "/metadata/name").to_uppercase().replace('-', "_");
    let ports: Vec<&Value> = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let Some(first) = ports.first() else { return };
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    out.push((format!("{name}_SERVICE_HOST"), ip.to_string()));
    out.push((
        format!("{name}_SERVICE_PORT"),
        first.get("port").map(|p| p.to_string()).unwrap_or_default(),
    ));
    for p in &ports {
        if let Some(port_name) = p
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            out.push((
                format!(
                    "{name}_SERVICE_PORT_{}",
                    port_name.to_uppercase().replace('-', "_")
                ),
                p.get("port").map(|p| p.to_string()).unwrap_or_default(),
            ));
        }
    }
    let proto = |p: &Value| s(p, "/protocol").to_string();
    let proto_of = |p: &Value| {
        let x = proto(p);
        if x.is_empty() { "TCP".to_string() } else { x }
    };
    let port = |p: &Value| p.get("port").map(|p| p.to_string()).unwrap_or_default();
    out.push((
        format!("{name}_PORT"),
        format!(
            "{}://{host}:{}",
            proto_of(first).to_lowercase(),
            port(first)
        ),
    ));
    for p in &ports {
        let prefix = format!("{name}_PORT_{}_{}", port(p), proto_of(p));
        out.push((
            prefix.clone(),
            format!("{}://{host}:{}", proto_of(p).to_lowercase(), port(p)),
        ));
        out.push((format!("{prefix}_PROTO"), proto_of(p).to_lowercase()));
        out.push((format!("{prefix}_PORT"), port(p)));
        out.push((format!("{prefix}_ADDR"), ip.to_string()));
    }
}

/// The container's environment, or why it cannot start (the kubelet's
/// CreateContainerConfigError message).
pub fn container_env(
    pod: &Value,
    container: &Value,
    image_env: &[(String, String)],
    src: &EnvSources,
) -> Result<Vec<(String, String)>, String> {
    let ns = s(pod, "/metadata/namespace");
    let mut env: Vec<(String, String)> = image_env.to_vec();
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
        env.retain(|(n, _)| *n != k);
        env.push((k, v));
    };
    let hostname = match s(pod, "/spec/hostname") {
        "" => s(pod, "/metadata/name"),
        h => h,
    };
    set(&mut env, "HOSTNAME".into(), hostname.into());
    let mut services = Vec::new();
    for svc in &src.services {
        service_vars(svc, &mut services);
    }
    for (k, v) in services {
        set(&mut env, k, v);
    }
    for e in container
        .get("envFrom")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let prefix = s(e, "/prefix");
        let optional = |p: &str| e.pointer(p).and_then(Value::as_bool).unwrap_or(false);
        if let Some(name) = e.pointer("/configMapRef/name").and_then(Value::as_str) {
            match src.config_maps.get(name) {
                Some(data) => {
                    for (k, v) in data {
                        set(&mut env, format!("{prefix}{k}"), v.clone());
                    }
                }
                None if optional("/configMapRef/optional") => {}
                None => return Err(format!("configmap \"{name}\" not found")),
            }
        }
        if let Some(name) = e.pointer("/secretRef/name").and_then(Value::as_str) {
            match src.secrets.get(name) {
                Some(data) => {
                    for (k, v) in data {
                        set(
                            &mut env,
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(v).into(),
                        );
                    }
                }
                None if optional("/secretRef/optional") => {}
                None => return Err(format!("secret \"{name}\" not found")),
            }
        }
    }
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
            field_ref(pod, path).ok_or_else(|| format!("unsupported fieldPath: {path}"))?
        } else if let Some(r) = e.pointer("/valueFrom/resourceFieldRef") {
            let resource = s(r, "/resource");
            resource_field(container, resource, s(r, "/divisor"))
                .ok_or_else(|| format!("unsupported resourceFieldRef: {resource}"))?
        } else if let Some(r) = e.pointer("/valueFrom/configMapKeyRef") {
            let (map, key) = (s(r, "/name"), s(r, "/key"));
            let optional = r.get("optional").and_then(Value::as_bool).unwrap_or(false);
            match src.config_maps.get(map).map(|d| d.get(key)) {
                Some(Some(v)) => v.clone(),
                _ if optional => continue,
                None => return Err(format!("configmap \"{map}\" not found")),
                Some(None) => {
                    return Err(format!("couldn't find key {key} in ConfigMap {ns}/{map}"));
                }
            }
        } else if let Some(r) = e.pointer("/valueFrom/secretKeyRef") {
            let (secret, key) = (s(r, "/name"), s(r, "/key"));
            let optional = r.get("optional").and_then(Value::as_bool).unwrap_or(false);
            match src.secrets.get(secret).map(|d| d.get(key)) {
                Some(Some(v)) => String::from_utf8_lossy(v).into_owned(),
                _ if optional => continue,
                None => return Err(format!("secret \"{secret}\" not found")),
                Some(None) => {
                    return Err(format!("couldn't find key {key} in Secret {ns}/{secret}"));
                }
            }
        } else {
            String::new()
        };
        set(&mut env, name, value);
    }
    Ok(env)
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

    fn pod() -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "a"}},
            "spec": {"nodeName": "node-1", "serviceAccountName": "sa", "containers": []},
            "status": {"podIP": "198.19.0.2", "hostIP": "198.18.0.11",
                       "podIPs": [{"ip": "198.19.0.2"}, {"ip": "fd6b:6474:0:1000::2"}]}})
    }

    #[test]
    fn env_follows_the_kubelets_order_and_expansion() {
        let container = json!({"name": "c",
        "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}},
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "A", "value": "x-$(HOSTNAME)-$(CM_k)"},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "k"}}},
            {"name": "GONE", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": true}}}
        ]});
        let src = EnvSources {
            config_maps: BTreeMap::from([(
                "cm".into(),
                BTreeMap::from([("k".into(), "v".into())]),
            )]),
            secrets: BTreeMap::from([(
                "sec".into(),
                BTreeMap::from([("k".into(), b"secret".to_vec())]),
            )]),
            services: vec![json!({"metadata": {"name": "kubernetes"},
                "spec": {"clusterIP": "198.18.32.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}})],
        };
        let env = container_env(
            &pod(),
            &container,
            &[("PATH".into(), "/usr/bin".into())],
            &src,
        )
        .expect("env");
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("PATH"), Some("/usr/bin"));
        assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("198.18.32.1"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT"), Some("443"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT_HTTPS"), Some("443"));
        assert_eq!(
            get("KUBERNETES_PORT_443_TCP"),
            Some("tcp://198.18.32.1:443")
        );
        assert_eq!(get("A"), Some("x-p-v"));
        assert_eq!(get("NODE"), Some("node-1"));
        assert_eq!(get("APP"), Some("a"));
        assert_eq!(get("IPS"), Some("198.19.0.2,fd6b:6474:0:1000::2"));
        assert_eq!(get("CPU"), Some("1"));
        assert_eq!(get("MEM"), Some("1024"));
        assert_eq!(get("S"), Some("secret"));
        assert_eq!(get("GONE"), None);
    }

    #[test]
    fn missing_sources_say_what_is_missing() {
        let c = json!({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]});
        assert_eq!(
            container_env(&pod(), &c, &[], &EnvSources::default()),
            Err("configmap \"cm\" not found".into())
        );
        let src = EnvSources {
            config_maps: BTreeMap::from([("cm".into(), BTreeMap::new())]),
            ..Default::default()
        };
        assert_eq!(
            container_env(&pod(), &c, &[], &src),
            Err("couldn't find key k in ConfigMap ns/cm".into())
        );
        assert_eq!(referenced(&c).0, BTreeSet::from(["cm".to_string()]));
    }

    #[test]
    fn expansion_keeps_escapes_and_unknowns() {
        let env = vec![("POD_IP".to_string(), "198.19.0.2".to_string())];
        assert_eq!(
            expand("--listen=$(POD_IP):80 $$(KEEP) $(NOPE) $", &env),
            "--listen=198.19.0.2:80 $(KEEP) $(NOPE) $"
        );
    }

    #[test]
    fn quantities() {
        assert_eq!(quantity("100m"), Some(0.1));
        assert_eq!(quantity("1Ki"), Some(1024.0));
        assert_eq!(quantity("2"), Some(2.0));
        assert_eq!(quantity("x"), None);
    }
}
