//! Which nodes a pod may run on: readiness, unschedulable, nodeSelector, NoSchedule taints
//! against tolerations (what the scheduler and the DaemonSet controller both ask).

use serde_json::Value;

use crate::selector::string_map;

/// Whether the node's Ready condition is True.
pub fn node_ready(node: &Value) -> bool {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn tolerates(tolerations: &[Value], taint: &Value) -> bool {
    let key = taint.get("key").and_then(Value::as_str).unwrap_or("");
    let value = taint.get("value").and_then(Value::as_str).unwrap_or("");
    let effect = taint.get("effect").and_then(Value::as_str).unwrap_or("");
    tolerations.iter().any(|t| {
        let tkey = t.get("key").and_then(Value::as_str).unwrap_or("");
        let teffect = t.get("effect").and_then(Value::as_str).unwrap_or("");
        let op = t.get("operator").and_then(Value::as_str).unwrap_or("Equal");
        let key_ok = tkey.is_empty() && op == "Exists" || tkey == key;
        let effect_ok = teffect.is_empty() || teffect == effect;
        let value_ok =
            op == "Exists" || t.get("value").and_then(Value::as_str).unwrap_or("") == value;
        key_ok && effect_ok && value_ok
    })
}

/// Whether a pod spec fits the node (ignoring readiness and resources).
pub fn fits(pod_spec: &Value, node: &Value) -> bool {
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        return false;
    }
    let selector = string_map(pod_spec.get("nodeSelector"));
    let labels = string_map(node.pointer("/metadata/labels"));
    if selector.iter().any(|(k, v)| labels.get(k) != Some(v)) {
        return false;
    }
    let tolerations = pod_spec
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .is_none_or(|taints| {
            taints.iter().all(|t| {
                t.get("effect").and_then(Value::as_str) == Some("PreferNoSchedule")
                    || tolerates(&tolerations, t)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_and_taints() {
        let node = json!({"metadata": {"labels": {"role": "agent"}},
            "spec": {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}});
        assert!(!fits(&json!({}), &node));
        assert!(fits(
            &json!({"tolerations": [{"operator": "Exists"}]}),
            &node
        ));
        assert!(fits(
            &json!({"nodeSelector": {"role": "agent"},
            "tolerations": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}),
            &node
        ));
        assert!(!fits(
            &json!({"nodeSelector": {"role": "db"}, "tolerations": [{"operator": "Exists"}]}),
            &node
        ));
    }
}
