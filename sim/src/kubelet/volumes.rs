//! A pod's volumes on the node, as the kubelet keeps them: emptyDir (a directory of the pod's,
//! world-writable), configMap, secret, downwardAPI and projected volumes (written atomically —
//! files are links through `..data`, which is swapped in one rename — and rewritten when their
//! sources change; the ServiceAccount token of a projected volume is requested with
//! TokenRequest, bound to the pod, and renewed at 80% of its life), persistentVolumeClaim (the
//! bound PersistentVolume's hostPath or local path) and hostPath.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolume, PersistentVolumeClaim, Secret, ServiceAccount,
};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

/// One file of a volume: its path in the volume, bytes and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeFile {
    /// Relative path.
    pub path: String,
    /// Contents.
    pub bytes: Vec<u8>,
    /// Permission bits.
    pub mode: u32,
}

/// The data of the ConfigMaps, Secrets and tokens a pod's volumes read, already fetched.
#[derive(Debug, Default, Clone)]
pub struct VolumeSources {
    /// ConfigMap name → (key → bytes), data and binaryData.
    pub config_maps: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    /// Secret name → decoded data.
    pub secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    /// Token by (audience, expirationSeconds).
    pub tokens: BTreeMap<(String, i64), String>,
}

/// Why a volume cannot be set up (the kubelet's FailedMount message).
pub type MountError = String;

fn mode_of(v: &Value, default: u32) -> u32 {
    v.get("mode")
        .and_then(Value::as_u64)
        .and_then(|m| u32::try_from(m).ok())
        .unwrap_or(default)
}

/// Keys of `data` selected by `items` (all keys when absent), with their paths and modes.
fn select(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&Value>,
    default_mode: u32,
    what: &str,
) -> Result<Vec<VolumeFile>, MountError> {
    match items.and_then(Value::as_array) {
        None => Ok(data
            .iter()
            .map(|(k, v)| VolumeFile {
                path: k.clone(),
                bytes: v.clone(),
                mode: default_mode,
            })
            .collect()),
        Some(items) => items
            .iter()
            .map(|item| {
                let key = s(item, "/key");
                let bytes = data.get(key).ok_or_else(|| {
                    format!("configmap references non-existent config key: {key} ({what})")
                })?;
                Ok(VolumeFile {
                    path: match s(item, "/path") {
                        "" => key.to_string(),
                        p => p.to_string(),
                    },
                    bytes: bytes.clone(),
                    mode: mode_of(item, default_mode),
                })
            })
            .collect(),
    }
}

fn downward_items(
    pod: &Value,
    items: &Value,
    default_mode: u32,
) -> Result<Vec<VolumeFile>, MountError> {
    let mut out = Vec::new();
    for item in items.as_array().into_iter().flatten() {
        let text = if let Some(path) = item.pointer("/fieldRef/fieldPath").and_then(Value::as_str) {
            super::env::field_ref(pod, path)
                .ok_or_else(|| format!("unsupported fieldPath {path}"))?
        } else if let Some(r) = item.get("resourceFieldRef") {
            let container = pod
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c["name"] == r["containerName"]))
                .cloned()
                .unwrap_or(Value::Null);
            super::env::resource_field(&container, s(r, "/resource"), s(r, "/divisor"))
                .ok_or_else(|| format!("unsupported resourceFieldRef {}", s(r, "/resource")))?
        } else {
            continue;
        };
        out.push(VolumeFile {
            path: s(item, "/path").to_string(),
            bytes: text.into_bytes(),
            mode: mode_of(item, default_mode),
        });
    }
    Ok(out)
}

/// The files of a configMap, secret, downwardAPI or projected volume; None for other kinds.
pub fn volume_files(
    pod: &Value,
    volume: &Value,
    src: &VolumeSources,
) -> Option<Result<Vec<VolumeFile>, MountError>> {
    let default_mode = |v: &Value| {
        v.get("defaultMode")
            .and_then(Value::as_u64)
            .and_then(|m| u32::try_from(m).ok())
            .unwrap_or(0o644)
    };
    if let Some(cm) = volume.get("configMap") {
        let name = s(cm, "/name");
        return Some(match src.config_maps.get(name) {
            Some(data) => select(data, cm.get("items"), default_mode(cm), name),
            None if cm.get("optional").and_then(Value::as_bool) == Some(true) => Ok(Vec::new()),
            None => Err(format!("configmap \"{name}\" not found")),
        });
    }
    if let Some(sec) = volume.get("secret") {
        let name = s(sec, "/secretName");
        return Some(match src.secrets.get(name) {
            Some(data) => select(data, sec.get("items"), default_mode(sec), name),
            None if sec.get("optional").and_then(Value::as_bool) == Some(true) => Ok(Vec::new()),
            None => Err(format!("secret \"{name}\" not found")),
        });
    }
    if let Some(d) = volume.get("downwardAPI") {
        return Some(downward_items(
            pod,
            d.get("items").unwrap_or(&Value::Null),
            default_mode(d),
        ));
    }
    let projected = volume.get("projected")?;
    let mode = default_mode(projected);
    let mut files = Vec::new();
    for source in projected
        .get("sources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let part = if let Some(t) = source.get("serviceAccountToken") {
            let key = (s(t, "/audience").to_string(), expiration(t));
            match src.tokens.get(&key) {
                Some(token) => Ok(vec![VolumeFile {
                    path: s(t, "/path").to_string(),
                    bytes: token.as_bytes().to_vec(),
                    mode,
                }]),
                None => Err("the ServiceAccount token is not issued yet".to_string()),
            }
        } else if let Some(cm) = source.get("configMap") {
            let name = s(cm, "/name");
            match src.config_maps.get(name) {
                Some(data) => select(data, cm.get("items"), mode, name),
                None if cm.get("optional").and_then(Value::as_bool) == Some(true) => Ok(Vec::new()),
                None => Err(format!("configmap \"{name}\" not found")),
            }
        } else if let Some(sec) = source.get("secret") {
            let name = s(sec, "/name");
            match src.secrets.get(name) {
                Some(data) => select(data, sec.get("items"), mode, name),
                None if sec.get("optional").and_then(Value::as_bool) == Some(true) => {
                    Ok(Vec::new())
                }
                None => Err(format!("secret \"{name}\" not found")),
            }
        } else if let Some(d) = source.get("downwardAPI") {
            downward_items(pod, d.get("items").unwrap_or(&Value::Null), mode)
        } else {
            Ok(Vec::new())
        };
        match part {
            Ok(f) => files.extend(f),
            Err(e) => return Some(Err(e)),
        }
    }
    Some(Ok(files))
}

/// A projected token's lifetime (the API's default is an hour).
fn expiration(t: &Value) -> i64 {
    t.get("expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600)
}

/// Writes `files` into `dir` atomically as the kubelet's atomic writer does: a new timestamped
/// directory, `..data` pointing at it (replaced by rename), each file a link through `..data`.
/// Unchanged contents are left alone. Returns whether anything changed.
pub fn write_atomically(
    dir: &Path,
    files: &[VolumeFile],
    group: Option<u32>,
) -> std::io::Result<bool> {
    std::fs::create_dir_all(dir)?;
    let data = dir.join("..data");
    let current: Vec<VolumeFile> = files
        .iter()
        .filter_map(|f| {
            let bytes = std::fs::read(data.join(&f.path)).ok()?;
            let mode = std::fs::metadata(data.join(&f.path))
                .ok()?
                .permissions()
                .mode()
                & 0o7777;
            Some(VolumeFile {
                path: f.path.clone(),
                bytes,
                mode,
            })
        })
        .collect();
    let listed = std::fs::read_dir(&data)
        .map(|d| d.count())
        .unwrap_or(usize::MAX);
    if current.as_slice() == files && listed == top_level(files).len() {
        return Ok(false);
    }
    let stamp = format!(
        "..{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let fresh = dir.join(&stamp);
    std::fs::create_dir_all(&fresh)?;
    for f in files {
        let path = fresh.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, &f.bytes)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode))?;
        if let Some(gid) = group {
            std::os::unix::fs::chown(&path, None, Some(gid))?;
        }
    }
    std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o755))?;
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&stamp, &tmp)?;
    let old = std::fs::read_link(&data).ok();
    std::fs::rename(&tmp, &data)?;
    for name in top_level(files) {
        let link = dir.join(&name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(&name), &link)?;
        }
    }
    // Links of keys that are gone, then the previous generation.
    for entry in std::fs::read_dir(dir)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !top_level(files).contains(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = old
        && old != Path::new(&stamp)
    {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(true)
}

fn top_level(files: &[VolumeFile]) -> std::collections::BTreeSet<String> {
    files
        .iter()
        .filter_map(|f| f.path.split('/').next().map(String::from))
        .collect()
}

/// A pod's volumes on the node: where each lives, and what keeps them current.
pub struct PodVolumes {
    client: Client,
    pod: Value,
    dir: PathBuf,
    /// Volume name → host path.
    pub paths: BTreeMap<String, PathBuf>,
    tokens: BTreeMap<(String, i64), (String, Instant, Duration)>,
    fs_group: Option<u32>,
}

impl PodVolumes {
    /// The volumes of `pod`, under `dir` (nothing is written yet).
    pub fn new(client: Client, pod: &Value, dir: &Path) -> Self {
        let fs_group = pod
            .pointer("/spec/securityContext/fsGroup")
            .and_then(Value::as_u64)
            .and_then(|g| u32::try_from(g).ok());
        PodVolumes {
            client,
            pod: pod.clone(),
            dir: dir.to_path_buf(),
            paths: BTreeMap::new(),
            tokens: BTreeMap::new(),
            fs_group,
        }
    }

    fn volumes(&self) -> Vec<Value> {
        self.pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    /// Sets up every volume (first call) or refreshes the ones with sources (later calls).
    /// An error names the volume and what is missing; nothing is mounted until all succeed.
    pub async fn sync(&mut self, pod: &Value) -> Result<(), MountError> {
        self.pod = pod.clone();
        let src = self.fetch().await?;
        for v in self.volumes() {
            let name = s(&v, "/name").to_string();
            let path = match self.path_of(&v, &src).await {
                Ok(p) => p,
                Err(e) => {
                    return Err(format!(
                        "MountVolume.SetUp failed for volume \"{name}\": {e}"
                    ));
                }
            };
            self.paths.insert(name, path);
        }
        Ok(())
    }

    async fn path_of(&self, v: &Value, src: &VolumeSources) -> Result<PathBuf, MountError> {
        let name = s(v, "/name");
        if v.get("emptyDir").is_some() {
            let dir = self.dir.join("empty-dir").join(name);
            if !dir.exists() {
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                let mode = if self.fs_group.is_some() {
                    0o2777
                } else {
                    0o777
                };
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
                    .map_err(|e| e.to_string())?;
                if let Some(gid) = self.fs_group {
                    std::os::unix::fs::chown(&dir, None, Some(gid)).map_err(|e| e.to_string())?;
                }
            }
            return Ok(dir);
        }
        if let Some(files) = volume_files(&self.pod, v, src) {
            let dir = self.dir.join("volumes").join(name);
            write_atomically(&dir, &files?, self.fs_group).map_err(|e| e.to_string())?;
            return Ok(dir);
        }
        if let Some(h) = v.get("hostPath") {
            let path = PathBuf::from(s(h, "/path"));
            match s(h, "/type") {
                "DirectoryOrCreate" => std::fs::create_dir_all(&path).map_err(|e| e.to_string())?,
                "Directory" | "File" | "Socket" if !path.exists() => {
                    return Err(format!(
                        "hostPath type check failed: {} does not exist",
                        path.display()
                    ));
                }
                _ => {}
            }
            return Ok(path);
        }
        if let Some(claim) = v
            .pointer("/persistentVolumeClaim/claimName")
            .and_then(Value::as_str)
        {
            return self.claim_path(claim).await;
        }
        Err("volume type not supported by kube-sim".into())
    }

    async fn claim_path(&self, claim: &str) -> Result<PathBuf, MountError> {
        let ns = s(&self.pod, "/metadata/namespace");
        let pvc = Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), ns)
            .get(claim)
            .await
            .map_err(|e| format!("persistentvolumeclaim \"{claim}\": {e}"))?;
        let volume = pvc
            .spec
            .and_then(|s| s.volume_name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("persistentvolumeclaim \"{claim}\" is not bound"))?;
        let pv = Api::<PersistentVolume>::all(self.client.clone())
            .get(&volume)
            .await
            .map_err(|e| format!("persistentvolume \"{volume}\": {e}"))?;
        let spec = pv.spec.unwrap_or_default();
        spec.host_path
            .map(|h| h.path)
            .or(spec.local.map(|l| l.path))
            .map(PathBuf::from)
            .ok_or_else(|| format!("persistentvolume \"{volume}\": only hostPath and local volumes can be mounted by kube-sim"))
    }

    /// Fetches every ConfigMap and Secret the volumes read, and (re)issues the tokens due.
    async fn fetch(&mut self) -> Result<VolumeSources, MountError> {
        let ns = s(&self.pod, "/metadata/namespace").to_string();
        let mut src = VolumeSources::default();
        let volumes = self.volumes();
        let mut maps = Vec::new();
        let mut secrets = Vec::new();
        let mut tokens = Vec::new();
        for v in &volumes {
            if let Some(n) = v.pointer("/configMap/name").and_then(Value::as_str) {
                maps.push(n.to_string());
            }
            if let Some(n) = v.pointer("/secret/secretName").and_then(Value::as_str) {
                secrets.push(n.to_string());
            }
            for source in v
                .pointer("/projected/sources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(n) = source.pointer("/configMap/name").and_then(Value::as_str) {
                    maps.push(n.to_string());
                }
                if let Some(n) = source.pointer("/secret/name").and_then(Value::as_str) {
                    secrets.push(n.to_string());
                }
                if let Some(t) = source.get("serviceAccountToken") {
                    tokens.push((s(t, "/audience").to_string(), expiration(t)));
                }
            }
        }
        for name in maps {
            if let Some(data) = fetch_config_map(&self.client, &ns, &name).await? {
                src.config_maps.insert(name, data);
            }
        }
        for name in secrets {
            if let Some(data) = fetch_secret(&self.client, &ns, &name).await? {
                src.secrets.insert(name, data);
            }
        }
        for key in tokens {
            let due = self
                .tokens
                .get(&key)
                .is_none_or(|(_, issued, life)| issued.elapsed() > life.mul_f64(0.8));
            if due {
                let (token, life) = self.request_token(&key.0, key.1).await?;
                self.tokens
                    .insert(key.clone(), (token, Instant::now(), life));
            }
            if let Some((token, _, _)) = self.tokens.get(&key) {
                src.tokens.insert(key, token.clone());
            }
        }
        Ok(src)
    }

    async fn request_token(
        &self,
        audience: &str,
        seconds: i64,
    ) -> Result<(String, Duration), MountError> {
        let ns = s(&self.pod, "/metadata/namespace");
        let sa = match s(&self.pod, "/spec/serviceAccountName") {
            "" => "default",
            n => n,
        };
        let request: TokenRequest = serde_json::from_value(json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": if audience.is_empty() { json!(null) } else { json!([audience]) },
                "expirationSeconds": seconds,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                    "name": s(&self.pod, "/metadata/name"), "uid": s(&self.pod, "/metadata/uid")},
            },
        }))
        .map_err(|e| e.to_string())?;
        let issued = Api::<ServiceAccount>::namespaced(self.client.clone(), ns)
            .create_token_request(sa, &PostParams::default(), &request)
            .await
            .map_err(|e| format!("requesting a token for ServiceAccount {ns}/{sa}: {e}"))?;
        let status = issued.status.ok_or("the token request has no status")?;
        let life = Duration::from_secs(u64::try_from(seconds).unwrap_or(3600));
        Ok((status.token, life))
    }
}

/// A ConfigMap's data and binaryData; None when it does not exist.
pub async fn fetch_config_map(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, MountError> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("configmap \"{name}\": {e}"))?;
    Ok(cm.map(|cm| {
        let mut data: BTreeMap<String, Vec<u8>> = cm
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .collect();
        data.extend(
            cm.binary_data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0)),
        );
        data
    }))
}

/// A Secret's decoded data; None when it does not exist.
pub async fn fetch_secret(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, MountError> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("secret \"{name}\": {e}"))?;
    Ok(secret.map(|s| {
        let mut data: BTreeMap<String, Vec<u8>> = s
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        data.extend(
            s.string_data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes())),
        );
        data
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
               "spec": {"containers": [{"name": "c"}]}})
    }

    #[test]
    fn config_map_and_secret_items_select_keys() {
        let src = VolumeSources {
            config_maps: BTreeMap::from([(
                "kdoctor".into(),
                BTreeMap::from([("conf.yml".into(), b"a: 1".to_vec())]),
            )]),
            secrets: BTreeMap::from([(
                "ca".into(),
                BTreeMap::from([
                    ("ca.crt".into(), b"CERT".to_vec()),
                    ("ca.key".into(), b"KEY".to_vec()),
                ]),
            )]),
            ..Default::default()
        };
        let files = volume_files(
            &pod(),
            &json!({"name": "config", "configMap": {"name": "kdoctor"}}),
            &src,
        )
        .expect("a source volume")
        .expect("files");
        assert_eq!(
            files,
            vec![VolumeFile {
                path: "conf.yml".into(),
                bytes: b"a: 1".to_vec(),
                mode: 0o644
            }]
        );
        // Only the listed key: agents get ca.crt, never the CA's key.
        let files = volume_files(
            &pod(),
            &json!({"name": "tls", "secret": {"secretName": "ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}),
            &src,
        )
        .expect("a source volume")
        .expect("files");
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, "ca.crt");
        let missing = volume_files(
            &pod(),
            &json!({"name": "x", "secret": {"secretName": "nope"}}),
            &src,
        )
        .expect("a source volume");
        assert_eq!(missing, Err("secret \"nope\" not found".into()));
        assert!(volume_files(&pod(), &json!({"name": "e", "emptyDir": {}}), &src).is_none());
    }

    #[test]
    fn projected_service_account_volumes_hold_token_ca_and_namespace() {
        let volume = json!({"name": "kube-api-access-x", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
        ]}});
        let mut src = VolumeSources {
            config_maps: BTreeMap::from([(
                "kube-root-ca.crt".into(),
                BTreeMap::from([("ca.crt".into(), b"CA".to_vec())]),
            )]),
            ..Default::default()
        };
        assert!(
            volume_files(&pod(), &volume, &src)
                .expect("projected")
                .is_err()
        );
        src.tokens.insert((String::new(), 3607), "TOKEN".into());
        let files = volume_files(&pod(), &volume, &src)
            .expect("projected")
            .expect("files");
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["token", "ca.crt", "namespace"]);
        assert_eq!(files[2].bytes, b"ns");
        assert_eq!(files[0].mode, 0o644);
    }

    #[test]
    fn atomic_writes_swap_data_and_drop_old_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let v = dir.path().join("vol");
        let f = |path: &str, bytes: &[u8]| VolumeFile {
            path: path.into(),
            bytes: bytes.to_vec(),
            mode: 0o644,
        };
        assert!(write_atomically(&v, &[f("a", b"1"), f("b", b"2")], None).expect("write"));
        assert_eq!(std::fs::read(v.join("a")).expect("a"), b"1");
        assert!(!write_atomically(&v, &[f("a", b"1"), f("b", b"2")], None).expect("same"));
        assert!(write_atomically(&v, &[f("a", b"3")], None).expect("changed"));
        assert_eq!(std::fs::read(v.join("a")).expect("a"), b"3");
        assert!(!v.join("b").exists());
        // One generation remains.
        let generations = std::fs::read_dir(&v)
            .expect("dir")
            .flatten()
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with("..") && n != "..data"
            })
            .count();
        assert_eq!(generations, 1);
    }
}
