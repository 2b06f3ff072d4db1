//! Helpers: decode YAML tasks, run the controller's checks, and ask the CRD (schema bounds,
//! structure and CEL rules, evaluated locally by kube-cel) whether the API server would accept.

use kdoctor_api::config::Config;
use kdoctor_api::defaults::ClusterFacts;
use kdoctor_api::document::{DocumentError, decode_task, schema};
use kdoctor_api::task::{Task, TaskKind};
use kdoctor_api::validation::{self, structure};
use kube::core::cel::Validator;
use serde_json::Value;

/// Parses one YAML document into JSON.
pub fn json(yaml: &str) -> Value {
    serde_yaml_ng::from_str(yaml).expect("test YAML parses")
}

/// Decodes and checks a task the way `kdoctor validate` and the controller do: every error
/// message, or an empty list when the task is valid.
pub fn controller_errors(yaml: &str, config: &Config) -> Vec<String> {
    let mut value = json(yaml);
    match decode_task(&mut value) {
        Ok(task) => match validation::check(task, config, ClusterFacts::default()) {
            Ok(_) => vec![],
            Err(errors) => errors.iter().map(ToString::to_string).collect(),
        },
        Err(DocumentError::Schema(errors) | DocumentError::UnknownFields { errors, .. }) => {
            errors.iter().map(ToString::to_string).collect()
        }
        Err(e) => vec![e.to_string()],
    }
}

/// The effective task (defaults applied), panicking with the errors if it is invalid.
pub fn effective(yaml: &str, config: &Config, facts: ClusterFacts) -> Task {
    let mut value = json(yaml);
    let task = decode_task(&mut value).unwrap_or_else(|e| panic!("decodes: {e}"));
    validation::check(task, config, facts).unwrap_or_else(|e| panic!("valid: {e}"))
}

fn kind_of(value: &Value) -> TaskKind {
    value["kind"]
        .as_str()
        .expect("kind")
        .parse()
        .expect("a task kind")
}

/// What the API server would say about creating (or, with `old`, updating) this object from
/// the CRD alone: structural errors, OpenAPI bounds, then CEL rules. Empty: accepted.
pub fn crd_rejections(yaml: &str, old: Option<&str>) -> Vec<String> {
    let mut value = json(yaml);
    let schema = schema(kind_of(&value));
    let mut problems: Vec<String> = structure::check(&mut value, schema)
        .iter()
        .map(ToString::to_string)
        .collect();
    // Bounds are checked on the object as defaulted by the schema, as the API server does.
    let defaulted = kube::core::cel::apply_defaults(schema, &value);
    bounds(&defaulted, schema, "", &mut problems);
    let old = old.map(json);
    if let Err(errors) = Validator::new().validate(schema, &value, old.as_ref()) {
        problems.extend(errors.iter().map(|e| e.to_string()));
    }
    problems
}

/// OpenAPI value validations the API server applies: minimum/maximum, lengths, item counts.
fn bounds(value: &Value, schema: &Value, path: &str, problems: &mut Vec<String>) {
    let num = |k: &str| schema.get(k).and_then(Value::as_f64);
    let flag = |k: &str| schema.get(k).and_then(Value::as_bool).unwrap_or(false);
    if let Some(x) = value.as_f64() {
        // As kube-openapi's MinimumNativeType does: an integer value meets a bound truncated
        // to an integer, so `0` passes a minimum of 0.001.
        let bound = |b: f64| if value.is_i64() { b.trunc() } else { b };
        if let Some(min) = num("minimum").map(bound) {
            let exclusive = flag("exclusiveMinimum");
            if x < min || (exclusive && x == min) {
                problems.push(format!(
                    "{path}: should be greater than {min} (exclusive: {exclusive})"
                ));
            }
        }
        if let Some(max) = num("maximum").map(bound) {
            let exclusive = flag("exclusiveMaximum");
            if x > max || (exclusive && x == max) {
                problems.push(format!(
                    "{path}: should be less than {max} (exclusive: {exclusive})"
                ));
            }
        }
    }
    if let Some(s) = value.as_str() {
        let len = s.chars().count() as f64;
        if num("maxLength").is_some_and(|m| len > m) || num("minLength").is_some_and(|m| len < m) {
            problems.push(format!("{path}: length out of bounds"));
        }
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
            let re = regex::Regex::new(pattern).expect("the schema's pattern compiles");
            if !re.is_match(s) {
                problems.push(format!("{path}: should match '{pattern}'"));
            }
        }
    }
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let child_schema = schema
                    .get("properties")
                    .and_then(|p| p.get(key))
                    .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()));
                if let Some(child_schema) = child_schema {
                    bounds(child, child_schema, &format!("{path}.{key}"), problems);
                }
            }
        }
        Value::Array(items) => {
            if num("maxItems").is_some_and(|m| items.len() as f64 > m) {
                problems.push(format!("{path}: too many items"));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    bounds(item, item_schema, &format!("{path}[{i}]"), problems);
                }
            }
        }
        _ => {}
    }
}

/// Indents a YAML block by `n` spaces (to splice spec fragments into a task).
pub fn indent(block: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    block
        .lines()
        .map(|l| {
            if l.trim().is_empty() {
                String::new()
            } else {
                format!("{pad}{l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A task of `kind` named `name` with the given spec (YAML, unindented).
pub fn task(kind: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: kdoctor.io/v1beta1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n{}\n",
        indent(spec, 2)
    )
}
