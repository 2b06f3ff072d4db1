//! Custom resources: the structural-schema defaults and pruning the real server applies on
//! every write (so clients see the CRD's `default:` values, and unknown fields disappear).

use serde_json::Value;

use crate::error::ApiResult;
use crate::resources::ResourceInfo;

/// Applies the schema's defaults and prunes unknown fields.
pub fn prepare(info: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
    if let Some(schema) = &info.schema {
        default_and_prune(obj, schema, true);
    }
    Ok(())
}

fn preserves(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Defaults and prunes `v` against `schema`; `root` keeps apiVersion, kind and metadata.
pub fn default_and_prune(v: &mut Value, schema: &Value, root: bool) {
    let preserve = preserves(schema);
    match v {
        Value::Object(m) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, s) in props {
                    if !m.contains_key(k)
                        && let Some(d) = s.get("default")
                    {
                        m.insert(k.clone(), d.clone());
                    }
                }
                let keys: Vec<String> = m.keys().cloned().collect();
                for k in keys {
                    if root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                        continue;
                    }
                    match props.get(&k) {
                        Some(s) => {
                            if let Some(child) = m.get_mut(&k) {
                                default_and_prune(child, s, false);
                            }
                        }
                        None if !preserve => {
                            m.remove(&k);
                        }
                        None => {}
                    }
                }
            } else if let Some(ap) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for child in m.values_mut() {
                    default_and_prune(child, ap, false);
                }
            } else if !preserve && schema.get("type").and_then(Value::as_str) == Some("object") {
                let allow_any =
                    schema.get("additionalProperties").and_then(Value::as_bool) == Some(true);
                if !allow_any {
                    m.retain(|k, _| {
                        root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata")
                    });
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for i in items {
                    default_and_prune(i, s, false);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_fill_and_unknown_fields_go() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "a": {"type": "integer", "default": 5},
                "b": {"type": "object", "default": {}, "properties": {"c": {"type": "string", "default": "x"}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "list": {"type": "array", "items": {"type": "object", "properties": {"d": {"type": "boolean", "default": true}}}}
            }}
        }});
        let mut obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"},
            "spec": {"junk": 1, "free": {"any": 1}, "list": [{}, {"d": false, "e": 1}]}, "other": 2});
        default_and_prune(&mut obj, &schema, true);
        assert_eq!(
            obj,
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"},
                "spec": {"a": 5, "b": {"c": "x"}, "free": {"any": 1}, "list": [{"d": true}, {"d": false}]}})
        );
    }
}
