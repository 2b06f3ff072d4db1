//! Routes the API's pods to their workers: one watch of every pod (kube-sim is the kubelet of
//! many nodes at once), a worker per pod bound to one of its nodes, told of every change, and
//! told when the pod left the API.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use super::nodes::NodeSpec;
use super::pod::{self, Ctx};

struct Running {
    updates: watch::Sender<Option<Pod>>,
    task: tokio::task::JoinHandle<()>,
}

fn terminal(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    ) && p.metadata.deletion_timestamp.is_none()
}

/// Follows every pod until `shutdown`, then stops every worker (their pods' processes end and
/// their networks are released) before returning.
pub async fn run(ctx: Arc<Ctx>, nodes: Vec<NodeSpec>, mut shutdown: watch::Receiver<bool>) {
    let nodes: BTreeMap<String, NodeSpec> =
        nodes.into_iter().map(|n| (n.name.clone(), n)).collect();
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let stream = watcher::watcher(api, watcher::Config::default().any_semantic());
    futures::pin_mut!(stream);
    let mut workers: HashMap<String, Running> = HashMap::new();
    // Pods seen in the current (re)list: those missing at its end are gone.
    let mut relisted: Option<Vec<String>> = None;
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = super::stopped(&mut shutdown) => break,
        };
        let Some(event) = event else { break };
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "watching pods (retrying)");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        match event {
            Event::Init => relisted = Some(Vec::new()),
            Event::InitApply(p) | Event::Apply(p) => {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                if let Some(seen) = relisted.as_mut() {
                    seen.push(uid.clone());
                }
                let node = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                let Some(spec) = nodes.get(&node) else {
                    continue;
                };
                match workers.get(&uid) {
                    Some(w) => {
                        let _ = w.updates.send(Some(p));
                    }
                    None if !terminal(&p) => {
                        let (updates, rx) = watch::channel(Some(p));
                        let task = tokio::spawn(pod::run(ctx.clone(), spec.clone(), rx));
                        workers.insert(uid, Running { updates, task });
                    }
                    None => {}
                }
            }
            Event::Delete(p) => {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                if let Some(w) = workers.get(&uid) {
                    let _ = w.updates.send(None);
                }
            }
            Event::InitDone => {
                if let Some(seen) = relisted.take() {
                    for (uid, w) in &workers {
                        if !seen.contains(uid) {
                            let _ = w.updates.send(None);
                        }
                    }
                }
            }
        }
        workers.retain(|_, w| !w.task.is_finished());
    }
    tracing::info!(pods = workers.len(), "stopping the pods of this kubelet");
    for w in workers.values() {
        let _ = w.updates.send(None);
    }
    for (_, w) in workers {
        let _ = w.task.await;
    }
}
