//! `spec.markerPolicy` (beyond upstream, optional): results written back onto the Nodes, as
//! OpenKruise's PodProbeMarker does for pods. After a node's agent fails a task for
//! `failureThreshold` finished rounds in a row, the controller sets the Node condition
//! `conditionType` to False and the `unhealthy` labels and annotations; after
//! `successThreshold` good rounds, True and the `healthy` ones. Opt-in, markers that act: a
//! `taint` the scheduler honours while the node is unhealthy, and (`markPods`) the same
//! condition and labels on the task's agent pod of the node, for selectors and readiness gates.
//! Removed from every Node and Pod when the task is deleted.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where and when a task marks Nodes.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MarkerPolicy {
    /// Node condition type, a qualified name such as `kdoctor.io/NetReachHealthy`.
    #[schemars(
        length(min = 1, max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
        )
    )]
    pub condition_type: String,
    /// Finished rounds in a row a node must fail (or not report) to be marked unhealthy.
    #[serde(default = "default_failure_threshold")]
    #[schemars(range(min = 1, max = 10))]
    pub failure_threshold: u32,
    /// Finished rounds in a row a node must pass to be marked healthy again.
    #[serde(default = "default_success_threshold")]
    #[schemars(range(min = 1, max = 10))]
    pub success_threshold: u32,
    /// Labels and annotations a Node carries while unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy: Option<MarkerSet>,
    /// Labels and annotations a Node carries while healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy: Option<MarkerSet>,
    /// A taint put on a Node while it is unhealthy (removed when it is healthy again). Its key
    /// should be the task's own: another task with the same key and effect shares it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint: Option<MarkerTaint>,
    /// Also mark the task's agent pod on each marked Node: the Pod condition `conditionType`
    /// and the state's labels.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mark_pods: bool,
}

/// The taint of an unhealthy Node.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MarkerTaint {
    /// Taint key, a qualified name such as `kdoctor.io/netreach-unhealthy`.
    #[schemars(
        length(min = 1, max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
        )
    )]
    pub key: String,
    /// Taint value (a label value; empty by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 63),
        regex(pattern = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
    )]
    pub value: Option<String>,
    /// `PreferNoSchedule` (default: the scheduler avoids the node) or `NoSchedule` (new pods
    /// that do not tolerate it are not placed there). Never `NoExecute`: a network check does
    /// not evict workloads.
    #[serde(default)]
    pub effect: TaintEffect,
}

/// What a marker taint does.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TaintEffect {
    /// The scheduler tries to avoid the node.
    #[default]
    PreferNoSchedule,
    /// Pods that do not tolerate the taint are not scheduled there.
    NoSchedule,
}

impl TaintEffect {
    /// The name Kubernetes uses.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoSchedule => "NoSchedule",
        }
    }
}

fn default_failure_threshold() -> u32 {
    3
}

fn default_success_threshold() -> u32 {
    1
}

/// Metadata set on a Node in one state.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MarkerSet {
    /// Labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// A node's health for a marker policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marked {
    /// Passed `successThreshold` rounds in a row.
    Healthy,
    /// Failed `failureThreshold` rounds in a row.
    Unhealthy,
}

impl MarkerPolicy {
    /// The state a node with these runs of failures and successes should be marked with;
    /// `None`: not enough rounds in a row either way, keep whatever it has (no flapping).
    pub fn verdict(&self, failures: u32, successes: u32) -> Option<Marked> {
        if failures >= self.failure_threshold {
            Some(Marked::Unhealthy)
        } else if successes >= self.success_threshold {
            Some(Marked::Healthy)
        } else {
            None
        }
    }

    /// The metadata of `state`.
    pub fn set(&self, state: Marked) -> MarkerSet {
        match state {
            Marked::Healthy => self.healthy.clone(),
            Marked::Unhealthy => self.unhealthy.clone(),
        }
        .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_decide_and_in_between_keeps_the_mark() {
        let policy: MarkerPolicy = serde_json::from_value(serde_json::json!({
            "conditionType": "kdoctor.io/NetReachHealthy",
            "successThreshold": 2
        }))
        .unwrap();
        assert_eq!(policy.failure_threshold, 3, "default");
        assert_eq!(policy.verdict(3, 0), Some(Marked::Unhealthy));
        assert_eq!(policy.verdict(2, 0), None);
        assert_eq!(policy.verdict(0, 1), None);
        assert_eq!(policy.verdict(0, 2), Some(Marked::Healthy));
        assert_eq!(policy.set(Marked::Unhealthy), MarkerSet::default());
    }
}
