//! Label and field selectors, in their query-string form and as `metav1.LabelSelector` objects.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceInfo;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
pub enum Requirement {
    /// key = value (also `==`).
    Eq(String, String),
    /// key != value.
    NotEq(String, String),
    /// key in (values).
    In(String, Vec<String>),
    /// key notin (values).
    NotIn(String, Vec<String>),
    /// key present.
    Exists(String),
    /// !key.
    NotExists(String),
}

/// A label selector: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(pub Vec<Requirement>);

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (f,g),!h`.
    pub fn parse(s: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            reqs.push(parse_requirement(part)?);
        }
        Ok(LabelSelector(reqs))
    }

    /// Builds a selector from a `metav1.LabelSelector` object (matchLabels + matchExpressions).
    pub fn from_object(sel: &Value) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(Requirement::Eq(
                    k.clone(),
                    v.as_str().unwrap_or("").to_string(),
                ));
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
                reqs.push(match op {
                    "In" => Requirement::In(key, values),
                    "NotIn" => Requirement::NotIn(key, values),
                    "Exists" => Requirement::Exists(key),
                    "DoesNotExist" => Requirement::NotExists(key),
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "{other:?} is not a valid label selector operator"
                        )));
                    }
                });
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether the selector selects nothing-in-particular (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a label map satisfies the selector.
    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Eq(k, v) => labels.get(k) == Some(v),
            Requirement::NotEq(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        })
    }

    /// Whether an object's metadata.labels satisfy the selector.
    pub fn matches(&self, obj: &Value) -> bool {
        self.is_empty() || self.matches_labels(&labels_of(obj))
    }
}

/// The labels of an object as a map.
pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    string_map(obj.pointer("/metadata/labels"))
}

/// A JSON object of strings as a map (non-strings are skipped).
pub fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 316
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_requirement(part: &str) -> ApiResult<Requirement> {
    let bad = || ApiError::bad_request(format!("unable to parse requirement: {part:?}"));
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        return if valid_key(key) {
            Ok(Requirement::NotExists(key.to_string()))
        } else {
            Err(bad())
        };
    }
    for (op, is_not) in [(" notin ", true), (" in ", false)] {
        if let Some(idx) = part.find(op) {
            let key = part[..idx].trim();
            let rest = part[idx + op.len()..].trim();
            let inner = rest
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(bad)?;
            let values: Vec<String> = inner
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            if !valid_key(key) {
                return Err(bad());
            }
            return Ok(if is_not {
                Requirement::NotIn(key.to_string(), values)
            } else {
                Requirement::In(key.to_string(), values)
            });
        }
    }
    if let Some((k, v)) = part.split_once("!=") {
        let k = k.trim();
        return if valid_key(k) {
            Ok(Requirement::NotEq(k.to_string(), v.trim().to_string()))
        } else {
            Err(bad())
        };
    }
    if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
        let k = k.trim();
        return if valid_key(k) {
            Ok(Requirement::Eq(k.to_string(), v.trim().to_string()))
        } else {
            Err(bad())
        };
    }
    if valid_key(part) {
        Ok(Requirement::Exists(part.to_string()))
    } else {
        Err(bad())
    }
}

/// A field selector: `metadata.name=x,spec.nodeName!=y`.
#[derive(Debug, Clone, Default)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses and checks the keys against what the resource serves, with the real server's messages.
    pub fn parse(s: &str, info: &ResourceInfo) -> ApiResult<Self> {
        let mut out = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (key, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                )));
            };
            let key = key.trim();
            if !info.allows_field(key) {
                return Err(ApiError::bad_request(if info.custom {
                    format!("field label not supported: {key}")
                } else {
                    let mut allowed = vec!["\"metadata.name\"".to_string()];
                    if info.namespaced {
                        allowed.push("\"metadata.namespace\"".into());
                    }
                    allowed.extend(info.field_selectors.iter().map(|f| format!("\"{f}\"")));
                    format!(
                        "\"{key}\" is not a known field selector: only {}",
                        allowed.join(", ")
                    )
                }));
            }
            out.push((key.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    /// Whether the object satisfies every term.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(key, eq, want)| {
            let got = field_value(obj, key);
            (got == *want) == *eq
        })
    }

    /// The value of `metadata.name=` when the selector pins one name.
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| k == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

/// An object's field as the field selector compares it (absent = "", booleans and numbers as text).
pub fn field_value(obj: &Value, key: &str) -> String {
    let mut cur = obj;
    for seg in key.split('.') {
        match cur.get(seg) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => String::new(),
        // Events' `source` selects on the component.
        Value::Object(m) => m
            .get("component")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        Value::Array(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_forms() {
        let sel = LabelSelector::parse("a=b,c!=d,e in (f, g),h notin (i),j,!k").expect("parse");
        let yes = json!({"metadata": {"labels": {"a": "b", "e": "g", "h": "x", "j": ""}}});
        let no = json!({"metadata": {"labels": {"a": "b", "e": "g", "j": "", "k": "1"}}});
        assert!(sel.matches(&yes));
        assert!(!sel.matches(&no));
        assert!(LabelSelector::parse("a in b").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
    }

    #[test]
    fn label_selector_object() {
        let sel = LabelSelector::from_object(&json!({
            "matchLabels": {"app": "x"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]
        }))
        .expect("sel");
        assert!(sel.matches(&json!({"metadata": {"labels": {"app": "x", "tier": "a"}}})));
        assert!(!sel.matches(&json!({"metadata": {"labels": {"app": "x"}}})));
    }
}
