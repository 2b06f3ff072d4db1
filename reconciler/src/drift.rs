//! Whether a live object still holds what the controller declared for it: the test that lets
//! every reconcile declare a task's carrier without writing to the API server when nothing
//! changed. Pure, on JSON, so it is tested without a server.
//!
//! The rule is "the declaration is contained in the live object": the API server adds defaults
//! (a container's `terminationMessagePath`, a port's `protocol`), other controllers add their
//! own fields, and neither is drift; a changed, missing or removed declared value is. A declared
//! zero value (`false`, `0`, `""`, `[]`, `{}`, `null`) matches an absent field, because the API
//! server drops those on the way in. Quantities under `limits` and `requests` compare by value
//! (`"0.5"` is stored as `"500m"`).

use serde::Serialize;
use serde_json::Value;

/// Whether `live` holds every field of `desired` (see the module's rule); an object that cannot
/// be serialized counts as drifted, so the caller applies it.
pub fn holds<K: Serialize>(live: &K, desired: &K) -> bool {
    match (serde_json::to_value(live), serde_json::to_value(desired)) {
        (Ok(live), Ok(desired)) => contains(&live, &desired, false),
        _ => false,
    }
}

fn contains(live: &Value, desired: &Value, quantities: bool) -> bool {
    match (desired, live) {
        (Value::Object(want), Value::Object(have)) => want.iter().all(|(key, value)| {
            let quantities = quantities || key == "limits" || key == "requests";
            match have.get(key) {
                Some(found) => contains(found, value, quantities),
                None => is_zero(value),
            }
        }),
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len()
                && want
                    .iter()
                    .zip(have)
                    .all(|(w, h)| contains(h, w, quantities))
        }
        (Value::String(want), Value::String(have)) if quantities && want != have => {
            match (quantity(want), quantity(have)) {
                (Some(w), Some(h)) => (w - h).abs() <= f64::EPSILON * w.abs().max(1.0),
                _ => false,
            }
        }
        (Value::Number(want), Value::Number(have)) => want.as_f64() == have.as_f64(),
        (want, Value::Null) => is_zero(want),
        (want, have) => want == have,
    }
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// The value of a Kubernetes quantity (`100m`, `64Mi`, `1e3`, `2k`); `None` when it is not one.
fn quantity(text: &str) -> Option<f64> {
    const SUFFIXES: [(&str, f64); 15] = [
        ("Ki", 1024.0),
        ("Mi", 1_048_576.0),
        ("Gi", 1_073_741_824.0),
        ("Ti", 1_099_511_627_776.0),
        ("Pi", 1_125_899_906_842_624.0),
        ("Ei", 1_152_921_504_606_846_976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let text = text.trim();
    for (suffix, factor) in SUFFIXES {
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<f64>().ok().map(|n| n * factor);
        }
    }
    text.parse::<f64>().ok().filter(|n| n.is_finite())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn holds_json(live: Value, desired: Value) -> bool {
        holds(&live, &desired)
    }

    #[test]
    fn server_defaults_and_other_managers_fields_are_not_drift() {
        let desired = json!({
            "metadata": {"name": "c", "labels": {"a": "1"}},
            "spec": {"template": {"spec": {
                "hostNetwork": false,
                "tolerations": [],
                "containers": [{"name": "agent", "image": "kdoctor:1", "ports": [{"containerPort": 80}]}],
            }}},
        });
        let live = json!({
            "metadata": {"name": "c", "uid": "u", "resourceVersion": "9",
                         "labels": {"a": "1", "other": "x"}, "annotations": {"deprecated.daemonset.template.generation": "1"}},
            "spec": {"revisionHistoryLimit": 10, "template": {"spec": {
                "dnsPolicy": "ClusterFirst",
                "containers": [{"name": "agent", "image": "kdoctor:1", "terminationMessagePath": "/dev/termination-log",
                                "ports": [{"containerPort": 80, "protocol": "TCP"}]}],
            }}},
            "status": {"numberReady": 3},
        });
        assert!(holds_json(live, desired));
    }

    #[test]
    fn changed_removed_or_extra_declared_values_are_drift() {
        let desired = json!({"metadata": {"labels": {"a": "1"}},
            "spec": {"containers": [{"image": "kdoctor:2", "args": ["--x"]}], "hostNetwork": true}});
        let live = |image: &str, args: Value, host: Value, labels: Value| {
            json!({"metadata": {"labels": labels},
                   "spec": {"containers": [{"image": image, "args": args}], "hostNetwork": host}})
        };
        assert!(holds_json(
            live("kdoctor:2", json!(["--x"]), json!(true), json!({"a": "1"})),
            desired.clone()
        ));
        for (what, object) in [
            (
                "image",
                live("kdoctor:1", json!(["--x"]), json!(true), json!({"a": "1"})),
            ),
            (
                "an argument",
                live(
                    "kdoctor:2",
                    json!(["--x", "--y"]),
                    json!(true),
                    json!({"a": "1"}),
                ),
            ),
            (
                "a true flag",
                live("kdoctor:2", json!(["--x"]), Value::Null, json!({"a": "1"})),
            ),
            (
                "a label",
                live("kdoctor:2", json!(["--x"]), json!(true), json!({"b": "1"})),
            ),
        ] {
            assert!(!holds_json(object, desired.clone()), "{what} changed");
        }
        assert!(!holds_json(json!({}), json!({"spec": {"a": 1}})));
        assert!(!holds_json(json!({"n": 2}), json!({"n": 1})));
    }

    #[test]
    fn quantities_compare_by_value_only_where_they_are_quantities() {
        let desired = json!({"resources": {"limits": {"cpu": "0.5", "memory": "1Gi"}, "requests": {"cpu": "1"}}});
        let live = json!({"resources": {"limits": {"cpu": "500m", "memory": "1024Mi"}, "requests": {"cpu": "1000m"}}});
        assert!(holds_json(live, desired.clone()));
        let more = json!({"resources": {"limits": {"cpu": "600m", "memory": "1Gi"}, "requests": {"cpu": "1"}}});
        assert!(!holds_json(more, desired));
        // Elsewhere a string is a string.
        assert!(!holds_json(
            json!({"label": "1000"}),
            json!({"label": "1k"})
        ));
        assert_eq!(quantity("64Mi"), Some(67_108_864.0));
        assert_eq!(quantity("1e3"), Some(1000.0));
        assert_eq!(quantity("lots"), None);
    }
}
