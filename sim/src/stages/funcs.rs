//! Template functions backed by the cluster: time and loopback addresses (a pod or node keeps
//! the address it already has, so replaying a stage never leaks addresses).

use serde_json::{Value, json};

use crate::cluster::Cluster;
use crate::stages::template::{Funcs, TemplateError};

/// Functions for rendering a stage's statusTemplate against one object.
pub struct ClusterFuncs<'a> {
    /// The cluster (allocator, nodes).
    pub cluster: &'a Cluster,
}

/// A node's first InternalIP, if it has one.
pub fn internal_ip(node: &Value) -> Option<String> {
    internal_ips(node).into_iter().next()
}

/// Every InternalIP of a node (IPv4 first in a dual-stack cluster).
pub fn internal_ips(node: &Value) -> Vec<String> {
    node.pointer("/status/addresses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|a| a["type"] == "InternalIP")
        .filter_map(|a| a.get("address").and_then(Value::as_str))
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

impl ClusterFuncs<'_> {
    fn node_ip_of(&self, name: &str) -> String {
        self.cluster
            .store
            .get("core/nodes", "", name)
            .and_then(|n| internal_ip(&n))
            .unwrap_or_default()
    }
}

impl Funcs for ClusterFuncs<'_> {
    fn call(
        &self,
        name: &str,
        args: &[Value],
        dot: &Value,
    ) -> Option<Result<Value, TemplateError>> {
        let no_addr = || TemplateError("address pool exhausted".into());
        Some(match name {
            "Now" => Ok(json!(crate::clock::now())),
            // kwok's node helpers.
            "NodeName" => Ok(dot
                .pointer("/metadata/name")
                .cloned()
                .unwrap_or(Value::Null)),
            "NodePort" => Ok(json!(10250)),
            "Version" => Ok(json!(env!("CARGO_PKG_VERSION"))),
            "NodeConditions" => Ok(json!([
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"},
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "kubelet has sufficient memory available"},
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure", "message": "kubelet has no disk pressure"},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID", "message": "kubelet has sufficient PID available"},
                {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated", "message": "RouteController created a route"}
            ])),
            // YAML <value> <level>: the value as YAML, every line indented by `level` steps.
            "YAML" => serde_yaml::to_string(args.first().unwrap_or(&Value::Null))
                .map_err(|e| TemplateError(e.to_string()))
                .map(|text| {
                    let level = args.get(1).and_then(Value::as_u64).unwrap_or(0) as usize;
                    let pad = "  ".repeat(level);
                    let lines: Vec<String> = text
                        .trim_end()
                        .lines()
                        .map(|l| format!("{pad}{l}"))
                        .collect();
                    json!(lines.join("\n"))
                }),
            "NodeIP" => match internal_ip(dot) {
                Some(ip) => Ok(json!(ip)),
                None => self
                    .cluster
                    .alloc()
                    .nodes
                    .allocate()
                    .map(|ip| json!(ip.to_string()))
                    .ok_or_else(no_addr),
            },
            // True for a pod whose process the runner starts and whose readiness probe, not the
            // stage, decides when it is Ready.
            "ProbeGated" => {
                let node = dot
                    .pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let marked = self
                    .cluster
                    .store
                    .get("core/nodes", "", node)
                    .is_some_and(|n| {
                        n.pointer("/metadata/labels")
                            .and_then(|l| l.get(crate::runner::PROCESS_NODE_LABEL))
                            .and_then(Value::as_str)
                            == Some("true")
                    });
                let probed = dot.pointer("/spec/containers/0/readinessProbe").is_some();
                Ok(json!(marked && probed))
            }
            // IPv6Of <ip>: the IPv6 twin of an address in a dual-stack cluster, else "".
            "IPv6Of" => {
                let twin = args
                    .first()
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse::<std::net::Ipv4Addr>().ok())
                    .filter(|_| self.cluster.alloc().ipv6)
                    .map(|v4| crate::net::ipv6::twin(v4).to_string());
                Ok(json!(twin.unwrap_or_default()))
            }
            // kwok's names: NodeIPWith <node>, PodIPWith <node> <hostNetwork> <uid> <name> <ns>.
            "NodeIPOf" | "NodeIPWith" => Ok(json!(
                self.node_ip_of(args.first().and_then(Value::as_str).unwrap_or(""))
            )),
            "PodIPWith" => {
                let node = args.first().and_then(Value::as_str).unwrap_or("");
                if args.get(1).and_then(Value::as_bool) == Some(true) {
                    Ok(json!(self.node_ip_of(node)))
                } else if let Some(ip) = dot
                    .pointer("/status/podIP")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                {
                    Ok(json!(ip))
                } else {
                    self.cluster
                        .alloc()
                        .pods
                        .allocate()
                        .map(|ip| json!(ip.to_string()))
                        .ok_or_else(no_addr)
                }
            }
            "PodIP" => {
                if dot.pointer("/spec/hostNetwork").and_then(Value::as_bool) == Some(true) {
                    let node = dot
                        .pointer("/spec/nodeName")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    Ok(json!(self.node_ip_of(node)))
                } else if let Some(ip) = dot
                    .pointer("/status/podIP")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                {
                    Ok(json!(ip))
                } else {
                    self.cluster
                        .alloc()
                        .pods
                        .allocate()
                        .map(|ip| json!(ip.to_string()))
                        .ok_or_else(no_addr)
                }
            }
            _ => return None,
        })
    }
}
