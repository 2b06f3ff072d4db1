//! A task's `spec.markerPolicy` applied to the Nodes: after each finished round, every node whose
//! run of failed (or good) rounds reached the policy's threshold gets the Node condition and the
//! labels and annotations of that state — written only when the state flips, so
//! `lastTransitionTime` means what it says. Each task writes with a field manager of its own by
//! server-side apply, so tasks never undo each other's marks, and a deleted task's marks are
//! removed by applying nothing under that manager (the finalizer holds the task until then).
//!
//! Markers that act, both opt-in: the policy's `taint` on an unhealthy node (the taint list is
//! one atomic field for server-side apply, so it is written by a merge patch conditional on the
//! node's resourceVersion, keeping every other taint), and with `markPods` the condition and
//! labels on the task's agent pod of each marked node (server-side apply under the same field
//! manager). Unlike the node's condition, both are declared on every finished round: a taint
//! or pod mark that was removed, or a new agent pod, is marked again.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kdoctor_api::task::{Marked, MarkerPolicy, MarkerTaint, StatusHistoryRecord, TaskKind};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::streaks::streaks;

/// Finalizer of tasks with a marker policy: their marks are removed before they go.
pub const FINALIZER: &str = "kdoctor.io/markers";

/// The field manager of one task's marks (at most 128 characters, as the API requires).
pub fn field_manager(kind: TaskKind, task: &str) -> String {
    let mut manager = format!("kdoctor-marker-{}-{task}", kind.lowercase());
    manager.truncate(128);
    manager
}

/// A node whose mark changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flip {
    /// The node.
    pub node: String,
    /// Its new state.
    pub state: Marked,
    /// Rounds in a row behind it.
    pub rounds: u32,
}

fn condition_status(state: Marked) -> &'static str {
    match state {
        Marked::Healthy => "True",
        Marked::Unhealthy => "False",
    }
}

fn is_marker_taint(t: &Taint, taint: &MarkerTaint) -> bool {
    t.key == taint.key && t.effect == taint.effect.as_str()
}

/// The node's taints with the marker `taint` present or not; `None` when they already are as
/// wanted (nothing to write). Every other taint is kept as it is.
pub fn taints_with(current: &[Taint], taint: &MarkerTaint, present: bool) -> Option<Vec<Taint>> {
    let has = current.iter().any(|t| is_marker_taint(t, taint));
    match (has, present) {
        (false, true) => {
            let mut taints = current.to_vec();
            taints.push(Taint {
                key: taint.key.clone(),
                value: taint.value.clone().filter(|v| !v.is_empty()),
                effect: taint.effect.as_str().to_string(),
                time_added: None,
            });
            Some(taints)
        }
        (true, false) => Some(
            current
                .iter()
                .filter(|t| !is_marker_taint(t, taint))
                .cloned()
                .collect(),
        ),
        _ => None,
    }
}

/// Writes `taints` on `node`, only if the node is still at the resourceVersion they were
/// computed from (a conflict is retried at the next round); other taints are kept by building
/// on the list read.
async fn write_taints(
    nodes: &Api<Node>,
    node: &Node,
    taints: Vec<Taint>,
    manager: &str,
) -> Result<(), kube::Error> {
    let patch = json!({
        "metadata": {"resourceVersion": node.metadata.resource_version},
        "spec": {"taints": taints},
    });
    let params = PatchParams {
        field_manager: Some(manager.to_string()),
        ..PatchParams::default()
    };
    nodes
        .patch(&node.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Puts the condition and labels of `state` on `pod`, unless its condition already says so.
async fn mark_pod(
    client: &Client,
    pod: &Pod,
    policy: &MarkerPolicy,
    state: Marked,
    message: &str,
    params: &PatchParams,
) -> Result<(), kube::Error> {
    let status = condition_status(state);
    let current = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == policy.condition_type));
    if current.is_some_and(|c| c.status == status) {
        return Ok(());
    }
    let namespace = pod.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let name = pod.name_any();
    let now = jiff::Timestamp::now().to_string();
    let condition = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "status": {"conditions": [{
            "type": policy.condition_type, "status": status,
            "reason": reason(state), "message": message, "lastTransitionTime": now,
        }]},
    });
    pods.patch_status(&name, params, &Patch::Apply(&condition))
        .await?;
    let labels = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": policy.set(state).labels.unwrap_or_default()},
    });
    pods.patch(&name, params, &Patch::Apply(&labels)).await?;
    Ok(())
}

fn reason(state: Marked) -> &'static str {
    match state {
        Marked::Healthy => "KdoctorRoundsPassing",
        Marked::Unhealthy => "KdoctorRoundsFailing",
    }
}

/// Marks the nodes the finished rounds of `history` decide (and, with `markPods`, the task's
/// agent pods among `pods` on them); returns the flips of the nodes' conditions.
pub async fn mark(
    client: &Client,
    kind: TaskKind,
    task: &str,
    policy: &MarkerPolicy,
    history: &[StatusHistoryRecord],
    pods: &[Arc<Pod>],
) -> Result<Vec<Flip>, kube::Error> {
    let runs = streaks(history);
    let wanted: Vec<(String, Marked, u32)> = runs
        .iter()
        .filter_map(|(node, s)| {
            let state = policy.verdict(s.failures, s.successes)?;
            let rounds = match state {
                Marked::Healthy => s.successes,
                Marked::Unhealthy => s.failures,
            };
            Some((node.clone(), state, rounds))
        })
        .collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let nodes: Api<Node> = Api::all(client.clone());
    // One list per round, not one read per node.
    let list = nodes.list(&ListParams::default()).await?;
    let manager = field_manager(kind, task);
    let params = PatchParams::apply(&manager).force();
    let now = jiff::Timestamp::now().to_string();
    let mut flips = Vec::new();
    for (node, state, rounds) in wanted {
        let Some(current) = list.items.iter().find(|n| n.name_any() == node) else {
            continue;
        };
        let status = condition_status(state);
        let message = match state {
            Marked::Healthy => {
                format!("{kind} {task}: the agent on this node passed {rounds} rounds in a row")
            }
            Marked::Unhealthy => format!(
                "{kind} {task}: the agent on this node failed or did not report {rounds} rounds in a row"
            ),
        };
        if let Some(taint) = &policy.taint
            && let Some(taints) = taints_with(
                current
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_deref())
                    .unwrap_or_default(),
                taint,
                state == Marked::Unhealthy,
            )
        {
            write_taints(&nodes, current, taints, &manager).await?;
        }
        if policy.mark_pods {
            for pod in pods
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node))
            {
                mark_pod(client, pod, policy, state, &message, &params).await?;
            }
        }
        let unchanged = current
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == policy.condition_type))
            .is_some_and(|c| c.status == status);
        if unchanged {
            continue;
        }
        let reason = reason(state);
        let condition = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node},
            "status": {"conditions": [{
                "type": policy.condition_type, "status": status, "reason": reason,
                "message": message, "lastTransitionTime": now, "lastHeartbeatTime": now,
            }]},
        });
        nodes
            .patch_status(&node, &params, &Patch::Apply(&condition))
            .await?;
        let set = policy.set(state);
        let metadata = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": set.labels.unwrap_or_default(),
                         "annotations": set.annotations.unwrap_or_default()},
        });
        nodes
            .patch(&node, &params, &Patch::Apply(&metadata))
            .await?;
        flips.push(Flip {
            node,
            state,
            rounds,
        });
    }
    Ok(flips)
}

fn managed_by(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    manager: &str,
) -> bool {
    meta.managed_fields
        .iter()
        .flatten()
        .any(|m| m.manager.as_deref() == Some(manager))
}

/// Removes every mark of `kind`/`task` from every Node, and from the agent pods of
/// `namespace`: applies nothing under its field manager, which drops the fields only it set,
/// and takes the policy's taint off. Returns how many nodes carried marks.
pub async fn unmark(
    client: &Client,
    kind: TaskKind,
    task: &str,
    policy: Option<&MarkerPolicy>,
    namespace: &str,
) -> Result<usize, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let manager = field_manager(kind, task);
    let params = PatchParams::apply(&manager).force();
    let list = nodes.list(&ListParams::default()).await?;
    let mut count = 0;
    if let Some(taint) = policy.and_then(|p| p.taint.as_ref()) {
        for node in &list.items {
            let current = node.spec.as_ref().and_then(|s| s.taints.as_deref());
            if let Some(taints) = taints_with(current.unwrap_or_default(), taint, false) {
                write_taints(&nodes, node, taints, &manager).await?;
            }
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for pod in pods.list(&ListParams::default()).await?.items {
        if !managed_by(&pod.metadata, &manager) {
            continue;
        }
        let name = pod.name_any();
        let empty = json!({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": namespace}});
        pods.patch_status(&name, &params, &Patch::Apply(&empty))
            .await?;
        pods.patch(&name, &params, &Patch::Apply(&empty)).await?;
    }
    for node in &list.items {
        if !managed_by(&node.metadata, &manager) {
            continue;
        }
        let name = node.name_any();
        let empty = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
        nodes
            .patch_status(&name, &params, &Patch::Apply(&empty))
            .await?;
        nodes.patch(&name, &params, &Patch::Apply(&empty)).await?;
        count += 1;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_taint_is_added_and_removed_and_no_other_taint_is_touched() {
        use kdoctor_api::task::TaintEffect;
        let taint = MarkerTaint {
            key: "kdoctor.io/unreachable".into(),
            value: None,
            effect: TaintEffect::NoSchedule,
        };
        let other = |key: &str, effect: &str| Taint {
            key: key.into(),
            value: Some("x".into()),
            effect: effect.into(),
            time_added: None,
        };
        let theirs = vec![
            other("node.kubernetes.io/unschedulable", "NoSchedule"),
            // Same key, another effect: someone else's.
            other("kdoctor.io/unreachable", "PreferNoSchedule"),
        ];
        let added = taints_with(&theirs, &taint, true).expect("added");
        assert_eq!(added.len(), 3);
        assert_eq!(&added[..2], &theirs[..]);
        assert_eq!(
            (
                added[2].key.as_str(),
                added[2].effect.as_str(),
                &added[2].value
            ),
            ("kdoctor.io/unreachable", "NoSchedule", &None)
        );
        assert_eq!(taints_with(&added, &taint, true), None, "already there");
        assert_eq!(taints_with(&added, &taint, false), Some(theirs.clone()));
        assert_eq!(taints_with(&theirs, &taint, false), None, "already gone");
    }

    #[test]
    fn field_managers_are_per_task_and_bounded() {
        assert_eq!(
            field_manager(TaskKind::NetReach, "mesh"),
            "kdoctor-marker-netreach-mesh"
        );
        assert_ne!(
            field_manager(TaskKind::NetReach, "mesh"),
            field_manager(TaskKind::Netdns, "mesh")
        );
        assert_eq!(field_manager(TaskKind::Netdns, &"x".repeat(300)).len(), 128);
    }
}
