//! Namespaces: the `kubernetes` spec finalizer, phase, and the namespaces that cannot be deleted.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};

/// Namespaces the real server refuses to delete.
pub const PROTECTED: &[&str] = &["default", "kube-system", "kube-public"];

/// Sets phase Active, the `kubernetes` finalizer and the name label.
pub fn prepare_create(obj: &mut Value) {
    if obj.pointer("/spec/finalizers").is_none() {
        obj["spec"] = json!({"finalizers": ["kubernetes"]});
    }
    obj["status"] = json!({"phase": "Active"});
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !obj
        .pointer("/metadata/labels")
        .is_some_and(Value::is_object)
    {
        obj["metadata"]["labels"] = json!({});
    }
    obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
}

/// 403 for the protected namespaces.
pub fn check_delete(name: &str) -> ApiResult<()> {
    if PROTECTED.contains(&name) {
        return Err(ApiError::forbidden(format!(
            "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
        )));
    }
    Ok(())
}

/// Whether spec.finalizers still holds entries.
pub fn has_spec_finalizers(obj: &Value) -> bool {
    obj.pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}
