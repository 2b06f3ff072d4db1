//! Structural checks of a raw object against the CRD's OpenAPI schema, as the API server makes
//! them before anything else: unknown fields (kubectl's default `--validate=strict`), types,
//! enums and required fields. Nulls in non-nullable fields are dropped, as the API server does.

use serde_json::Value;

use super::field::{BadValue, ErrorList, FieldError, FieldPath};

/// Fields every object has, checked by the API server itself rather than the CRD schema.
const ROOT_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Checks `value` against `schema` and prunes nulls the API server would drop.
pub fn check(value: &mut Value, schema: &Value) -> ErrorList {
    let mut errors = ErrorList::default();
    walk(value, schema, &FieldPath::root(), &mut errors);
    errors
}

fn walk(value: &mut Value, schema: &Value, path: &FieldPath, errors: &mut ErrorList) {
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            errors.push(FieldError::invalid(
                path.clone(),
                BadValue::from(&*value),
                "must be an integer or a string",
            ));
        }
        return;
    }
    let expected = schema.get("type").and_then(Value::as_str);
    if let Some(expected) = expected
        && !has_type(value, expected)
    {
        errors.push(FieldError::invalid(
            path.clone(),
            BadValue::from(&*value),
            format!("must be of type {expected}"),
        ));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let names: Vec<String> = allowed
            .iter()
            .map(|v| v.as_str().map_or(v.to_string(), str::to_string))
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        errors.push(FieldError::not_supported(
            path.clone(),
            BadValue::from(&*value),
            &names,
        ));
        return;
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let preserve =
                schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            let additional = schema.get("additionalProperties");
            // Drop nulls of non-nullable fields first, as the API server prunes them.
            map.retain(|key, v| {
                !(v.is_null()
                    && properties
                        .and_then(|p| p.get(key))
                        .is_some_and(|s| s.get("nullable") != Some(&Value::Bool(true))))
            });
            // Unknown fields are reported and pruned, so that the rest of the object can still
            // be checked and every problem of a file is reported at once.
            let mut unknown = Vec::new();
            for (key, child) in map.iter_mut() {
                let child_path = if path.as_str().is_empty() {
                    FieldPath::new(key)
                } else if properties.is_some() {
                    path.child(key)
                } else {
                    path.key(key)
                };
                // The API server owns these at the root; the CRD schema does not list them.
                if path.as_str().is_empty() && ROOT_FIELDS.contains(&key.as_str()) {
                    continue;
                }
                match (properties.and_then(|p| p.get(key)), additional) {
                    (Some(child_schema), _) => walk(child, child_schema, &child_path, errors),
                    (None, Some(Value::Object(_))) => {
                        if let Some(additional) = additional {
                            walk(child, additional, &child_path, errors)
                        }
                    }
                    (None, _) if properties.is_some() && !preserve => {
                        errors.push(FieldError::unknown(child_path));
                        unknown.push(key.clone());
                    }
                    _ => {}
                }
            }
            for key in unknown {
                map.remove(&key);
            }
            for required in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(name) = required.as_str()
                    && !map.contains_key(name)
                {
                    errors.push(FieldError::required(path.child(name), ""));
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    walk(item, item_schema, &path.index(i), errors);
                }
            }
        }
        _ => {}
    }
}

fn has_type(value: &Value, expected: &str) -> bool {
    match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        _ => true,
    }
}
