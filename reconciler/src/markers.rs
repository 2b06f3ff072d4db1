//! A task's `spec.markerPolicy` applied to the Nodes: after each finished round, every node whose
//! run of failed (or good) rounds reached the policy's threshold gets the Node condition and the
//! labels and annotations of that state — written only when the state flips, so
//! `lastTransitionTime` means what it says. Each task writes with a field manager of its own by
//! server-side apply, so tasks never undo each other's marks, and a deleted task's marks are
//! removed by applying nothing under that manager (the finalizer holds the task until then).

use k8s_openapi::api::core::v1::Node;
use kdoctor_api::task::{Marked, MarkerPolicy, StatusHistoryRecord, TaskKind};
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

/// Marks the nodes the finished rounds of `history` decide; returns the flips.
pub async fn mark(
    client: &Client,
    kind: TaskKind,
    task: &str,
    policy: &MarkerPolicy,
    history: &[StatusHistoryRecord],
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
        let unchanged = current
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == policy.condition_type))
            .is_some_and(|c| c.status == status);
        if unchanged {
            continue;
        }
        let (reason, message) = match state {
            Marked::Healthy => (
                "KdoctorRoundsPassing",
                format!("{kind} {task}: the agent on this node passed {rounds} rounds in a row"),
            ),
            Marked::Unhealthy => (
                "KdoctorRoundsFailing",
                format!(
                    "{kind} {task}: the agent on this node failed or did not report {rounds} rounds in a row"
                ),
            ),
        };
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

/// Removes every mark of `kind`/`task` from every Node: applies nothing under its field
/// manager, which drops the fields only it set. Returns how many nodes carried marks.
pub async fn unmark(client: &Client, kind: TaskKind, task: &str) -> Result<usize, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let manager = field_manager(kind, task);
    let params = PatchParams::apply(&manager).force();
    let list = nodes.list(&ListParams::default()).await?;
    let mut count = 0;
    for node in &list.items {
        let ours = node
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some(manager.as_str()));
        if !ours {
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
