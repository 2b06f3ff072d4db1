//! Volumes for PersistentVolumeClaims, as local-path-provisioner gives them on small clusters:
//! a claim that asks for no StorageClass (or for `kube-sim`) gets a PersistentVolume of its
//! own, a world-writable directory on this machine (a non-root pod can write it, as
//! local-path-provisioner's are), pre-bound to the claim; kube-controller-manager's volume
//! binder completes the binding. When the claim is gone, the volume and its directory go too.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

/// The StorageClass name kube-sim answers besides "no class".
pub const CLASS: &str = "kube-sim";

fn wanted(claim: &PersistentVolumeClaim) -> bool {
    let spec = claim.spec.clone().unwrap_or_default();
    let class_ok = matches!(
        spec.storage_class_name.as_deref(),
        None | Some("") | Some(CLASS)
    );
    class_ok
        && spec.volume_name.as_deref().unwrap_or("").is_empty()
        && claim.metadata.deletion_timestamp.is_none()
}

/// The volume of a claim (its name is `pvc-<claim uid>`, as provisioners name them).
pub fn volume_for(claim: &PersistentVolumeClaim, dir: &Path) -> serde_json::Value {
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let spec = claim.spec.clone().unwrap_or_default();
    let size = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_else(|| "1Gi".into());
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": format!("pvc-{uid}"),
                     "labels": {"kube-sim.kdoctor.io/provisioned": "true"},
                     "annotations": {"pv.kubernetes.io/provisioned-by": "kube-sim.kdoctor.io"}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": spec.access_modes.unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": spec.storage_class_name.unwrap_or_default(),
            "volumeMode": spec.volume_mode.unwrap_or_else(|| "Filesystem".into()),
            "hostPath": {"path": dir.join(format!("pvc-{uid}")).display().to_string(), "type": "DirectoryOrCreate"},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "namespace": claim.metadata.namespace, "name": claim.metadata.name, "uid": uid},
        },
    })
}

/// Whether `claim` was just bound.
fn bound(claim: &PersistentVolumeClaim) -> bool {
    claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

/// Pending pods that use `claim` are marked (an annotation), which makes kube-scheduler look at
/// them again at once: a pod it found with its claim not yet bound would otherwise wait up to
/// five minutes for its next attempt (the scheduler does not always take the claim's binding
/// as a reason to retry).
async fn wake_pods_of(client: &Client, claim: &PersistentVolumeClaim) {
    let (Some(ns), Some(name)) = (&claim.metadata.namespace, &claim.metadata.name) else {
        return;
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let Ok(pending) = pods
        .list(&ListParams::default().fields("status.phase=Pending"))
        .await
    else {
        return;
    };
    for pod in pending.items {
        let uses = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|volumes| {
                volumes.iter().any(|v| {
                    v.persistent_volume_claim
                        .as_ref()
                        .is_some_and(|c| &c.claim_name == name)
                })
            });
        if !uses
            || pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some()
        {
            continue;
        }
        let Some(pod_name) = pod.metadata.name.as_deref() else {
            continue;
        };
        let patch = json!({"metadata": {"annotations": {"kube-sim.kdoctor.io/claim-bound": name}}});
        if let Err(e) = pods
            .patch(pod_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(pod = %pod_name, error = %e, "waking a pod whose claim is bound");
        }
    }
}

/// Provisions until shutdown; volumes live under `dir`.
pub async fn run(client: Client, dir: PathBuf, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let stream = watcher::watcher(claims, watcher::Config::default());
    futures::pin_mut!(stream);
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = super::stopped(&mut shutdown) => return,
        };
        match event {
            Some(Ok(Event::Apply(c) | Event::InitApply(c))) if wanted(&c) => {
                let pv = volume_for(&c, &dir);
                let path =
                    PathBuf::from(pv["spec"]["hostPath"]["path"].as_str().unwrap_or_default());
                if let Err(e) = std::fs::create_dir_all(&path).and_then(|()| {
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))
                }) {
                    tracing::warn!(path = %path.display(), error = %e, "creating a volume's directory");
                    continue;
                }
                let Ok(pv) = serde_json::from_value::<PersistentVolume>(pv) else {
                    continue;
                };
                match volumes.create(&PostParams::default(), &pv).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => tracing::warn!(error = %e, "creating a PersistentVolume"),
                }
            }
            Some(Ok(Event::Apply(c) | Event::InitApply(c))) if bound(&c) => {
                wake_pods_of(&client, &c).await
            }
            Some(Ok(Event::Delete(c))) => {
                let name = format!("pvc-{}", c.metadata.uid.clone().unwrap_or_default());
                match volumes.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {
                        let _ = std::fs::remove_dir_all(dir.join(&name));
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => {
                        tracing::warn!(volume = %name, error = %e, "deleting a PersistentVolume")
                    }
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tracing::warn!(error = %e, "watching PersistentVolumeClaims (retrying)");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classless_unbound_claims_get_a_prebound_volume() {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "kdoctor-reports", "namespace": "kdoctor", "uid": "u1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .expect("claim");
        assert!(wanted(&claim));
        let pv = volume_for(&claim, Path::new("/v"));
        assert_eq!(pv["metadata"]["name"], "pvc-u1");
        assert_eq!(pv["spec"]["claimRef"]["name"], "kdoctor-reports");
        assert_eq!(pv["spec"]["hostPath"]["path"], "/v/pvc-u1");
        assert_eq!(pv["spec"]["capacity"]["storage"], "1Gi");
        let classed: PersistentVolumeClaim =
            serde_json::from_value(json!({"spec": {"storageClassName": "fast"}})).expect("claim");
        assert!(!wanted(&classed));
    }
}
