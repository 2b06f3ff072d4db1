//! One type over the three task kinds, for code that handles any task.

use std::fmt;
use std::str::FromStr;

use kube::Resource;
use serde::{Deserialize, Serialize};

use super::{AgentSpec, AppHttpHealthy, NetReach, Netdns, SchedulePlan, TaskStatus};

/// API group of the task kinds.
pub const GROUP: &str = "kdoctor.io";
/// API version of the task kinds.
pub const VERSION: &str = "v1beta1";
/// `apiVersion` of the task kinds.
pub const API_VERSION: &str = "kdoctor.io/v1beta1";

/// The kind of a task.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaskKind {
    /// Pod, Service and Ingress reachability between agents.
    NetReach,
    /// Health of one HTTP(S) application.
    AppHttpHealthy,
    /// Health of a DNS server.
    Netdns,
}

impl TaskKind {
    /// Every kind, in upstream's order.
    pub const ALL: [TaskKind; 3] = [
        TaskKind::NetReach,
        TaskKind::AppHttpHealthy,
        TaskKind::Netdns,
    ];

    /// The kind name (`NetReach`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::NetReach => "NetReach",
            TaskKind::AppHttpHealthy => "AppHttpHealthy",
            TaskKind::Netdns => "Netdns",
        }
    }

    /// The lower-case kind, used in report and carrier names (`netreach`).
    pub fn lowercase(self) -> &'static str {
        match self {
            TaskKind::NetReach => "netreach",
            TaskKind::AppHttpHealthy => "apphttphealthy",
            TaskKind::Netdns => "netdns",
        }
    }

    /// The resource plural (`netreaches`).
    pub fn plural(self) -> &'static str {
        match self {
            TaskKind::NetReach => "netreaches",
            TaskKind::AppHttpHealthy => "apphttphealthies",
            TaskKind::Netdns => "netdnses",
        }
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no task kind.
#[derive(Debug, thiserror::Error)]
#[error("unknown task kind {0:?}: supported kinds are NetReach, AppHttpHealthy and Netdns")]
pub struct UnknownKind(pub String);

impl FromStr for TaskKind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownKind(s.to_string()))
    }
}

/// A task of any kind.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum Task {
    /// A NetReach task.
    NetReach(NetReach),
    /// An AppHttpHealthy task.
    AppHttpHealthy(AppHttpHealthy),
    /// A Netdns task.
    Netdns(Netdns),
}

impl Task {
    /// The kind.
    pub fn kind(&self) -> TaskKind {
        match self {
            Task::NetReach(_) => TaskKind::NetReach,
            Task::AppHttpHealthy(_) => TaskKind::AppHttpHealthy,
            Task::Netdns(_) => TaskKind::Netdns,
        }
    }

    /// `metadata`.
    pub fn metadata(&self) -> &kube::core::ObjectMeta {
        match self {
            Task::NetReach(t) => t.meta(),
            Task::AppHttpHealthy(t) => t.meta(),
            Task::Netdns(t) => t.meta(),
        }
    }

    /// `metadata.name` ("" when missing).
    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or("")
    }

    /// `spec.schedule`.
    pub fn schedule(&self) -> Option<&SchedulePlan> {
        match self {
            Task::NetReach(t) => t.spec.schedule.as_ref(),
            Task::AppHttpHealthy(t) => t.spec.schedule.as_ref(),
            Task::Netdns(t) => t.spec.schedule.as_ref(),
        }
    }

    /// `spec.request.durationInSecond`: how long an agent probes in a round (`None` when
    /// omitted, before validation fills the default).
    pub fn duration_in_second(&self) -> Option<i64> {
        match self {
            Task::NetReach(t) => t.spec.request.as_ref().map(|r| r.duration_in_second),
            Task::AppHttpHealthy(t) => t.spec.request.as_ref().map(|r| r.duration_in_second),
            Task::Netdns(t) => t.spec.request.as_ref().map(|r| r.duration_in_second),
        }
    }

    /// `spec.request.perRequestTimeoutInMS` (`None` when omitted, before defaults fill it).
    pub fn per_request_timeout_in_ms(&self) -> Option<i64> {
        match self {
            Task::NetReach(t) => t.spec.request.as_ref()?.per_request_timeout_in_ms,
            Task::AppHttpHealthy(t) => t.spec.request.as_ref()?.per_request_timeout_in_ms,
            Task::Netdns(t) => t.spec.request.as_ref()?.per_request_timeout_in_ms,
        }
    }

    /// `durationInSecond` as a duration (zero when omitted or negative).
    pub fn duration(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.duration_in_second().unwrap_or(0).max(0) as u64)
    }

    /// How long after a round's start an agent that started on time has finished probing:
    /// `durationInSecond`, then its last request's `perRequestTimeoutInMS`. Zero for what is
    /// omitted (an effective task has both).
    pub fn probing_time(&self) -> std::time::Duration {
        let ms = self.per_request_timeout_in_ms().unwrap_or(0).max(0) as u64;
        self.duration() + std::time::Duration::from_millis(ms)
    }

    /// `spec.agentSpec`.
    pub fn agent_spec(&self) -> Option<&AgentSpec> {
        match self {
            Task::NetReach(t) => t.spec.agent_spec.as_ref(),
            Task::AppHttpHealthy(t) => t.spec.agent_spec.as_ref(),
            Task::Netdns(t) => t.spec.agent_spec.as_ref(),
        }
    }

    /// `spec.markerPolicy`.
    pub fn marker_policy(&self) -> Option<&super::MarkerPolicy> {
        match self {
            Task::NetReach(t) => t.spec.marker_policy.as_ref(),
            Task::AppHttpHealthy(t) => t.spec.marker_policy.as_ref(),
            Task::Netdns(t) => t.spec.marker_policy.as_ref(),
        }
    }

    /// `status`.
    pub fn status(&self) -> Option<&TaskStatus> {
        match self {
            Task::NetReach(t) => t.status.as_ref(),
            Task::AppHttpHealthy(t) => t.status.as_ref(),
            Task::Netdns(t) => t.status.as_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn task(kind: &str, request: serde_json::Value) -> Task {
        let object = serde_json::json!({
            "apiVersion": API_VERSION, "kind": kind,
            "metadata": {"name": "t"},
            "spec": {"request": request, "target": {"host": "http://app", "method": "GET"}},
        });
        match kind {
            "NetReach" => Task::NetReach(serde_json::from_value(object).expect("NetReach")),
            "Netdns" => Task::Netdns(serde_json::from_value(object).expect("Netdns")),
            _ => Task::AppHttpHealthy(serde_json::from_value(object).expect("AppHttpHealthy")),
        }
    }

    #[test]
    fn probing_ends_one_request_timeout_after_the_round_s_duration() {
        for kind in ["NetReach", "AppHttpHealthy", "Netdns"] {
            let t = task(
                kind,
                serde_json::json!({"durationInSecond": 10, "qps": 1, "perRequestTimeoutInMS": 1500}),
            );
            assert_eq!(t.probing_time(), Duration::from_millis(11_500), "{kind}");
            let omitted = task(kind, serde_json::json!({"durationInSecond": 3, "qps": 1}));
            assert_eq!(omitted.probing_time(), Duration::from_secs(3), "{kind}");
        }
    }
}
