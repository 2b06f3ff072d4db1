//! A pod process's volumes: the first container's Secret and ConfigMap mounts are written
//! under the pod's work directory (emptyDir, hostPath and persistentVolumeClaim mounts are plain
//! directories there, kept across process restarts), and arguments and env values that name a path under a
//! mount path are rewritten to the written copy. Processes share the host's file system, so
//! `/etc/tls/ca.crt` cannot be given to each of them; `--tls-ca-cert=/etc/tls/ca.crt` becomes
//! `--tls-ca-cert=<work-dir>/<ns>_<pod>/volumes/tls/ca.crt` instead, which is what the manifests
//! mean.

use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::Value;

use crate::cluster::Cluster;

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

/// The files of a Secret or ConfigMap volume: `(path, bytes)`, honouring `items`.
fn files(c: &Cluster, ns: &str, volume: &Value) -> Vec<(String, Vec<u8>)> {
    let (data, items) = if let Some(secret) = volume.get("secret") {
        let Some(object) = c.store.get("core/secrets", ns, s(secret, "/secretName")) else {
            return Vec::new();
        };
        let mut data: Vec<(String, Vec<u8>)> = object
            .get("data")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v.as_str()?)
                    .ok()?;
                Some((k.clone(), bytes))
            })
            .collect();
        data.extend(
            object
                .get("stringData")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.as_bytes().to_vec()))),
        );
        (data, secret.get("items").cloned())
    } else if let Some(map) = volume.get("configMap") {
        let Some(object) = c.store.get("core/configmaps", ns, s(map, "/name")) else {
            return Vec::new();
        };
        let data = object
            .get("data")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.as_bytes().to_vec())))
            .collect();
        (data, map.get("items").cloned())
    } else {
        return Vec::new();
    };
    match items.as_ref().and_then(Value::as_array) {
        None => data,
        Some(items) => items
            .iter()
            .filter_map(|item| {
                let key = item.get("key")?.as_str()?;
                let path = item.get("path").and_then(Value::as_str).unwrap_or(key);
                let bytes = data.iter().find(|(k, _)| k == key)?.1.clone();
                Some((path.to_string(), bytes))
            })
            .collect(),
    }
}

/// The Secrets and ConfigMaps the pod mounts that do not exist (and are not `optional`): as
/// the kubelet does, the process does not start until they do.
pub fn missing_sources(c: &Cluster, pod: &Value) -> Vec<String> {
    let ns = s(pod, "/metadata/namespace");
    let volumes = pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut missing = Vec::new();
    for volume in &volumes {
        let (storage, kind, source, name_key) = if let Some(v) = volume.get("secret") {
            ("core/secrets", "Secret", v, "/secretName")
        } else if let Some(v) = volume.get("configMap") {
            ("core/configmaps", "ConfigMap", v, "/name")
        } else {
            continue;
        };
        let optional = source.get("optional").and_then(Value::as_bool) == Some(true);
        let name = s(source, name_key);
        if !optional && c.store.get(storage, ns, name).is_none() {
            missing.push(format!("{kind} {ns}/{name}"));
        }
    }
    missing
}

/// Writes the first container's mounted volumes under `root`; returns each mount path with
/// its host directory, longest mount path first (so the most specific one rewrites).
pub fn materialize(
    c: &Cluster,
    pod: &Value,
    root: &Path,
) -> std::io::Result<Vec<(String, PathBuf)>> {
    let ns = s(pod, "/metadata/namespace");
    let volumes = pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mounts = pod
        .pointer("/spec/containers/0/volumeMounts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for mount in &mounts {
        let name = s(mount, "/name");
        let mount_path = s(mount, "/mountPath");
        let Some(volume) = volumes.iter().find(|v| s(v, "/name") == name) else {
            continue;
        };
        if mount_path.is_empty() || name.contains('/') || name.contains("..") {
            continue;
        }
        let dir = root.join(name);
        std::fs::create_dir_all(&dir)?;
        for (path, bytes) in files(c, ns, volume) {
            if path.split('/').any(|part| part == ".." || part.is_empty()) {
                continue;
            }
            let file = dir.join(&path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(file, bytes)?;
        }
        out.push((mount_path.trim_end_matches('/').to_string(), dir));
    }
    out.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
    Ok(out)
}

fn rewrite_path(value: &str, mounts: &[(String, PathBuf)]) -> Option<String> {
    mounts.iter().find_map(|(mount, dir)| {
        let rest = value.strip_prefix(mount.as_str())?;
        (rest.is_empty() || rest.starts_with('/')).then(|| format!("{}{rest}", dir.display()))
    })
}

/// Rewrites a value naming a path under a mount (`/etc/tls/ca.crt`, or `--flag=/etc/tls/ca.crt`).
pub fn rewrite(value: &str, mounts: &[(String, PathBuf)]) -> String {
    if let Some(path) = rewrite_path(value, mounts) {
        return path;
    }
    if let Some((flag, path)) = value.split_once('=')
        && flag.starts_with('-')
        && let Some(path) = rewrite_path(path, mounts)
    {
        return format!("{flag}={path}");
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_and_config_map_volumes_are_written_and_paths_rewritten() {
        let c = Cluster::new(10, 1);
        let put = |kind: &str, object: Value| {
            let info = c.builtin("", kind).expect("kind");
            c.create(
                &info,
                "ns",
                object,
                &crate::cluster::WriteOptions::default(),
            )
            .expect("create");
        };
        let namespaces = c.builtin("", "Namespace").expect("kind");
        c.create(
            &namespaces,
            "",
            json!({"metadata": {"name": "ns"}}),
            &crate::cluster::WriteOptions::default(),
        )
        .expect("namespace");
        put(
            "Secret",
            json!({"metadata": {"name": "ca", "namespace": "ns"},
                "data": {"ca.crt": "Q0E=", "ca.key": "S0VZ"}}),
        );
        put(
            "ConfigMap",
            json!({"metadata": {"name": "conf", "namespace": "ns"},
                "data": {"conf.yml": "enableIPv6: false\n"}}),
        );
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {
        "volumes": [
            {"name": "tls", "secret": {"secretName": "ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"name": "config", "configMap": {"name": "conf"}},
            {"name": "reports", "emptyDir": {}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
        ],
        "containers": [{"name": "c", "volumeMounts": [
            {"name": "tls", "mountPath": "/etc/tls"},
            {"name": "config", "mountPath": "/tmp/config-map"},
            {"name": "reports", "mountPath": "/report"},
            {"name": "data", "mountPath": "/var/lib/data"}
        ]}]}});
        assert!(missing_sources(&c, &pod).is_empty());
        let waiting = json!({"metadata": {"name": "w", "namespace": "ns"}, "spec": {"volumes": [
            {"name": "a", "secret": {"secretName": "not-yet"}},
            {"name": "b", "configMap": {"name": "maybe", "optional": true}},
            {"name": "c", "configMap": {"name": "nor-this"}}
        ]}});
        assert_eq!(
            missing_sources(&c, &waiting),
            vec!["Secret ns/not-yet", "ConfigMap ns/nor-this"]
        );
        let root = std::env::temp_dir().join(format!("kube-sim-volumes-{}", std::process::id()));
        let mounts = materialize(&c, &pod, &root).expect("materialize");
        assert_eq!(std::fs::read(root.join("tls/ca.crt")).unwrap(), b"CA");
        assert!(!root.join("tls/ca.key").exists(), "only the listed items");
        assert_eq!(
            std::fs::read_to_string(root.join("config/conf.yml")).unwrap(),
            "enableIPv6: false\n"
        );
        assert!(root.join("reports").is_dir());
        assert!(
            root.join("data").is_dir(),
            "a claim is a directory of its own"
        );
        assert_eq!(
            rewrite("--tls-ca-cert=/etc/tls/ca.crt", &mounts),
            format!("--tls-ca-cert={}/tls/ca.crt", root.display())
        );
        assert_eq!(
            rewrite("/report", &mounts),
            root.join("reports").display().to_string()
        );
        assert_eq!(rewrite("/reports-elsewhere", &mounts), "/reports-elsewhere");
        assert_eq!(rewrite("--bind=$(POD_IP)", &mounts), "--bind=$(POD_IP)");
        let _ = std::fs::remove_dir_all(root);
    }
}
