//! Which column of the matrix a probed target falls in: the node whose agent pod it is, or
//! the kind and family of a Service, Ingress or other target.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::report::protocol::{Protocol, split_deny};

/// How the column of a peer that must not be reachable begins: `deny db: db-0`.
pub const DENY_COLUMN: &str = "deny";

/// A column: a node reached through its agent pod, or a kind of target.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Column {
    /// The agent pod on this node.
    Node(String),
    /// Service or Ingress targets, e.g. `ClusterIP v4`.
    Kind(String),
}

/// The column of a target name (upstream's names: `AgentPodV4IP_<pod>_<ip>`,
/// `AgentClusterV6IP_<ip>:<port>`, `AgentIngress_v4_<url>`, …) given which node runs each pod.
pub fn column_of(name: &str, pod_nodes: &HashMap<String, String>) -> Column {
    let (_, name) = Protocol::split(name);
    // A peer that must stay unreachable: its own column, whose cells count the tries that
    // were blocked as successes, so a full cell is an isolation that held.
    if let Some((check, peer)) = split_deny(name) {
        return Column::Kind(format!("{DENY_COLUMN} {check}: {peer}"));
    }
    let (prefix, rest) = name.split_once('_').unwrap_or((name, ""));
    let family = if prefix.contains("V6") || rest.starts_with("v6") {
        "v6"
    } else {
        "v4"
    };
    let kind = match prefix {
        p if p.starts_with("AgentPod") => {
            let pod = rest.rsplit_once('_').map_or(rest, |(pod, _)| pod);
            return match pod_nodes.get(pod) {
                Some(node) => Column::Node(node.clone()),
                None => Column::Kind(format!("pod {pod}")),
            };
        }
        p if p.starts_with("AgentCluster") => "ClusterIP",
        p if p.starts_with("AgentNodePort") => "NodePort",
        p if p.starts_with("AgentLoadbalancer") => "LoadBalancer",
        p if p.starts_with("AgentIngress") => "Ingress",
        p if p.starts_with("AgentMultus") => "Multus",
        other => other,
    };
    Column::Kind(format!("{kind} {family}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_become_node_and_kind_columns() {
        let pods = HashMap::from([("kdoctor-agent-x".to_string(), "node-x".to_string())]);
        assert_eq!(
            column_of("AgentPodV4IP_kdoctor-agent-x_10.0.0.1", &pods),
            Column::Node("node-x".into())
        );
        assert_eq!(
            column_of("AgentPodV6IP_other_fd00::1", &pods),
            Column::Kind("pod other".into())
        );
        assert_eq!(
            column_of("AgentClusterV6IP_[fd00::10]:80", &pods),
            Column::Kind("ClusterIP v6".into())
        );
        assert_eq!(
            column_of("AgentIngress_v4_http://1.2.3.4/kdoctoragent", &pods),
            Column::Kind("Ingress v4".into())
        );
        assert_eq!(
            column_of("AgentNodePortV4IP_172.18.0.2_31000", &pods),
            Column::Kind("NodePort v4".into())
        );
        // A peer that must not be reachable, even when it is an agent pod: expected and
        // observed differ from the mesh's, so it never shares the node's column.
        assert_eq!(
            column_of("TCP_Deny_db_kdoctor-agent-x_10.0.0.1", &pods),
            Column::Kind("deny db: kdoctor-agent-x".into())
        );
        assert_eq!(
            column_of("UDP_Deny_dns_svc-dns_fd00::10", &pods),
            Column::Kind("deny dns: svc-dns".into())
        );
    }
}
