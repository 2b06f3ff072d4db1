//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`, comma = AND) and field
//! selectors (`metadata.name`, `metadata.namespace` with `=`, `==`, `!=`).

use std::collections::BTreeMap;

use crate::kube::status::ApiError;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses `labelSelector`; errors are 400s with the Go server's kind of message.
    pub fn parse(text: &str) -> Result<LabelSelector, ApiError> {
        let mut requirements = Vec::new();
        for part in split_top_level(text)? {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(requirement(part).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "unable to parse requirement: {part:?}: invalid label selector"
                ))
            })?);
        }
        Ok(LabelSelector(requirements))
    }

    /// Whether labels match every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        })
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Splits at commas that are not inside `( … )`.
fn split_top_level(text: &str) -> Result<Vec<&str>, ApiError> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err(ApiError::bad_request(format!(
                "unable to parse requirement: unbalanced parentheses in {text:?}"
            )));
        }
    }
    if depth != 0 {
        return Err(ApiError::bad_request(format!(
            "unable to parse requirement: unbalanced parentheses in {text:?}"
        )));
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 317
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(value: &str) -> bool {
    value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn set(text: &str) -> Option<Vec<String>> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    values.iter().all(|v| valid_value(v)).then_some(values)
}

fn requirement(part: &str) -> Option<Requirement> {
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        return valid_key(key).then(|| Requirement::NotExists(key.to_string()));
    }
    for (op, build) in [
        (
            "!=",
            Requirement::NotEquals as fn(String, String) -> Requirement,
        ),
        ("==", Requirement::Equals),
        ("=", Requirement::Equals),
    ] {
        if let Some((key, value)) = part.split_once(op) {
            let (key, value) = (key.trim(), value.trim());
            return (valid_key(key) && valid_value(value))
                .then(|| build(key.to_string(), value.to_string()));
        }
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    match words.as_slice() {
        [key] => valid_key(key).then(|| Requirement::Exists(key.to_string())),
        [key, rest] => {
            let rest = rest.trim();
            if let Some(values) = rest.strip_prefix("notin") {
                Some(Requirement::NotIn(key.to_string(), set(values)?))
            } else if let Some(values) = rest.strip_prefix("in") {
                Some(Requirement::In(key.to_string(), set(values)?))
            } else {
                None
            }
            .filter(|_| valid_key(key))
        }
        _ => None,
    }
}

/// A parsed field selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `fieldSelector`; only `metadata.name` and `metadata.namespace` are fields here.
    pub fn parse(text: &str) -> Result<FieldSelector, ApiError> {
        let mut terms = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                )));
            };
            let field = field.trim();
            if field != "metadata.name" && field != "metadata.namespace" {
                return Err(ApiError::bad_request(format!(
                    "{field:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                )));
            }
            terms.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    /// Whether an object of this name (cluster-scoped: no namespace) matches.
    pub fn matches(&self, name: &str) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let actual = if field == "metadata.name" { name } else { "" };
            (actual == value) == *equal
        })
    }

    /// The single name the selector asks for, if it is `metadata.name=X`.
    pub fn name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(f, eq, _)| f == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}
