//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch
//! (with the list keys of `listtype`).

use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::listtype::{ListType, find_element, list_type};

/// The patch formats the server accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchType {
    /// The patch type of a Content-Type header.
    pub fn from_content_type(ct: &str) -> ApiResult<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchType::Apply),
            _ => Err(ApiError::unsupported_media_type(ct)),
        }
    }
}

/// Applies a merge, JSON or strategic patch to `target`.
pub fn apply_patch(kind: PatchType, target: &Value, body: &[u8]) -> ApiResult<Value> {
    match kind {
        PatchType::Merge => {
            let patch: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            let mut out = target.clone();
            json_patch::merge(&mut out, &patch);
            Ok(out)
        }
        PatchType::Json => {
            let patch: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            let mut out = target.clone();
            json_patch::patch(&mut out, &patch)
                .map_err(|e| ApiError::unprocessable(e.to_string()))?;
            Ok(out)
        }
        PatchType::Strategic => {
            let patch: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            let mut out = target.clone();
            strategic_merge(&mut out, &patch);
            Ok(out)
        }
        PatchType::Apply => Err(ApiError::internal(
            "apply patches go through server-side apply",
        )),
    }
}

/// Strategic merge: maps merge, null deletes, keyed lists merge by key, `$patch` directives.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Some(pm) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if pm.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut p = patch.clone();
        if let Some(o) = p.as_object_mut() {
            o.remove("$patch");
        }
        *target = p;
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let Some(tm) = target.as_object_mut() else {
        return;
    };
    for (k, v) in pm {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(del)) = (tm.get_mut(field), v.as_array()) {
                list.retain(|e| !del.contains(e));
            }
            continue;
        }
        match v {
            Value::Null => {
                tm.remove(k);
            }
            Value::Object(_) => {
                let entry = tm.entry(k.clone()).or_insert(Value::Null);
                strategic_merge(entry, v);
            }
            Value::Array(items) => {
                let current = tm
                    .get(k)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let lt = list_type(k, if current.is_empty() { items } else { &current });
                tm.insert(k.clone(), Value::Array(merge_list(lt, current, items)));
            }
            _ => {
                tm.insert(k.clone(), v.clone());
            }
        }
    }
}

fn merge_list(lt: ListType, mut current: Vec<Value>, items: &[Value]) -> Vec<Value> {
    match lt {
        ListType::Atomic => items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .cloned()
            .collect(),
        ListType::Set => {
            for i in items {
                if !current.contains(i) {
                    current.push(i.clone());
                }
            }
            current
        }
        ListType::Map(keys) => {
            for item in items {
                let directive = item.get("$patch").and_then(Value::as_str);
                match (find_element(&keys, &current, item), directive) {
                    (Some(idx), Some("delete")) => {
                        current.remove(idx);
                    }
                    (None, Some("delete")) => {}
                    (Some(idx), _) => strategic_merge(&mut current[idx], item),
                    (None, _) => {
                        let mut fresh = Value::Null;
                        strategic_merge(&mut fresh, item);
                        current.push(fresh);
                    }
                }
            }
            current
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merges_containers_by_name() {
        let mut target = json!({"spec": {"containers": [
            {"name": "a", "image": "x"}, {"name": "b", "image": "y"}
        ], "nodeSelector": {"k": "v"}}});
        strategic_merge(
            &mut target,
            &json!({"spec": {
                "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
                "containers": [{"name": "b", "image": "z"}, {"name": "a", "$patch": "delete"}],
                "nodeSelector": null
            }}),
        );
        assert_eq!(
            target,
            json!({"spec": {"containers": [{"name": "b", "image": "z"}]}})
        );
    }

    #[test]
    fn merge_and_json_patch() {
        let t = json!({"a": 1, "b": {"c": 2}});
        let m = apply_patch(PatchType::Merge, &t, br#"{"b": {"c": null, "d": 3}}"#).expect("merge");
        assert_eq!(m, json!({"a": 1, "b": {"d": 3}}));
        let j = apply_patch(
            PatchType::Json,
            &t,
            br#"[{"op": "replace", "path": "/a", "value": 5}]"#,
        )
        .expect("json");
        assert_eq!(j["a"], json!(5));
        assert!(
            apply_patch(
                PatchType::Json,
                &t,
                br#"[{"op": "test", "path": "/a", "value": 9}]"#
            )
            .is_err()
        );
    }
}
