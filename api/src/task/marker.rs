//! `spec.markerPolicy` (beyond upstream, optional): results written back onto the Nodes, as
//! OpenKruise's PodProbeMarker does for pods. After a node's agent fails a task for
//! `failureThreshold` finished rounds in a row, the controller sets the Node condition
//! `conditionType` to False and the `unhealthy` labels and annotations; after
//! `successThreshold` good rounds, True and the `healthy` ones. Removed from every Node when the
//! task is deleted.

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
