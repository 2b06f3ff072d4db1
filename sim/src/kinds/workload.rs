//! Deployments, DaemonSets and ReplicaSets: the API server's defaults and the selector check.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::kinds::pod;
use crate::resources::ResourceInfo;
use crate::selector::{LabelSelector, labels_of};

fn set_default(obj: &mut Value, key: &str, v: Value) {
    if let Some(m) = obj.as_object_mut() {
        m.entry(key.to_string()).or_insert(v);
    }
}

/// Defaults (replicas, strategies, history limits, template pod defaults) and the check that
/// the selector selects the template's labels.
pub fn prepare(info: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let Some(spec) = obj.get_mut("spec") else {
        return Err(ApiError::invalid(
            info,
            &name,
            "spec.selector",
            "Required value",
        ));
    };
    match info.plural.as_str() {
        "deployments" => {
            set_default(spec, "replicas", json!(1));
            set_default(
                spec,
                "strategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
            );
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "progressDeadlineSeconds", json!(600));
        }
        "daemonsets" => {
            set_default(
                spec,
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
            );
            set_default(spec, "revisionHistoryLimit", json!(10));
        }
        "replicasets" => set_default(spec, "replicas", json!(1)),
        _ => return Ok(()),
    }
    if let Some(tspec) = spec.pointer_mut("/template/spec") {
        pod::default_spec(tspec);
    }
    let selector = spec.get("selector").cloned().unwrap_or(Value::Null);
    if !selector.is_object() {
        return Err(ApiError::invalid(
            info,
            &name,
            "spec.selector",
            "Required value",
        ));
    }
    let sel = LabelSelector::from_object(&selector)?;
    let template = spec.get("template").cloned().unwrap_or(Value::Null);
    let labels = labels_of(&template);
    if sel.is_empty() || !sel.matches_labels(&labels) {
        return Err(ApiError::invalid(
            info,
            &name,
            "spec.template.metadata.labels",
            &format!("Invalid value: {labels:?}: `selector` does not match template `labels`"),
        ));
    }
    Ok(())
}
