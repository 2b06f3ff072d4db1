//! Reading task manifests: YAML (or JSON) text with one or more documents, or a `List`, into
//! typed tasks, with the structural errors the API server would give.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;

use crate::crd::crd;
use crate::task::{API_VERSION, AppHttpHealthy, NetReach, Netdns, Task, TaskKind};
use crate::validation::{ErrorList, structure};

/// Why a document is not a usable task.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// The text is not YAML.
    #[error("not valid YAML: {0}")]
    NotYaml(String),
    /// The document is YAML but not a Kubernetes object.
    #[error("not a Kubernetes object (expected a mapping with apiVersion and kind)")]
    NotAnObject,
    /// Some other kind of object.
    #[error(
        "not a kdoctor task: apiVersion {api_version:?}, kind {kind:?} (expected apiVersion \
         kdoctor.io/v1beta1 and kind NetReach, AppHttpHealthy or Netdns)"
    )]
    NotATask {
        /// The document's apiVersion.
        api_version: String,
        /// The document's kind.
        kind: String,
    },
    /// A task whose fields do not fit the schema.
    #[error("{0}")]
    Schema(ErrorList),
    /// A task whose only structural problems are unknown fields; `task` is what it is without
    /// them, so that the rest can be validated too and every error reported at once.
    #[error("{errors}")]
    UnknownFields {
        /// One `Unknown field` error per field.
        errors: ErrorList,
        /// The task without those fields.
        task: Box<Task>,
    },
    /// More text than any task file needs.
    #[error(
        "the manifest is larger than {MAX_MANIFEST_BYTES} bytes (the API server's request limit)"
    )]
    TooLarge {
        /// Its size, or as much of it as was read.
        size: usize,
    },
    /// Nesting deeper than any task needs (parsing such text costs time quadratic in depth).
    #[error(
        "flow collections ([ or {{) nested {depth} deep at line {line}; at most {MAX_FLOW_DEPTH} are read"
    )]
    TooDeep {
        /// How deep, where the limit was passed.
        depth: usize,
        /// The 1-based line.
        line: usize,
    },
}

/// The most text read as one manifest: kube-apiserver's own limit on a request body.
pub const MAX_MANIFEST_BYTES: usize = 3 * 1024 * 1024;

/// The deepest nesting of YAML flow collections read (a task needs fewer than ten).
pub const MAX_FLOW_DEPTH: usize = 100;

/// Refuses text that would take the YAML parser long: too large, or flow collections nested
/// deeper than [`MAX_FLOW_DEPTH`]. The scan errs on the side of counting: brackets in quoted
/// scalars on one line are skipped, brackets glued to a plain scalar in block context (`a[0]`)
/// are not collections; anything else counts (so a hundred unclosed ` [` in plain scalars
/// would be refused: no task file has them).
pub fn check_bounds(text: &str) -> Result<(), DocumentError> {
    if text.len() > MAX_MANIFEST_BYTES {
        return Err(DocumentError::TooLarge { size: text.len() });
    }
    let mut depth = 0usize;
    let mut line = 1;
    let mut quote: Option<u8> = None;
    let mut previous = b'\n';
    let mut bytes = text.bytes().peekable();
    while let Some(b) = bytes.next() {
        if b == b'\n' {
            line += 1;
            quote = None;
            previous = b;
            continue;
        }
        match quote {
            Some(b'"') if b == b'\\' => {
                bytes.next();
            }
            Some(q) if b == q => {
                if q == b'\'' && bytes.peek() == Some(&b'\'') {
                    bytes.next();
                } else {
                    quote = None;
                }
            }
            Some(_) => {}
            None => {
                let at_token = previous.is_ascii_whitespace() || b"[{,:-?".contains(&previous);
                match b {
                    b'#' if previous.is_ascii_whitespace() => {
                        // A comment: skip to the end of the line.
                        for c in bytes.by_ref() {
                            if c == b'\n' {
                                line += 1;
                                break;
                            }
                        }
                        previous = b'\n';
                        continue;
                    }
                    b'"' | b'\'' if at_token => quote = Some(b),
                    b'[' | b'{' if depth > 0 || at_token => {
                        depth += 1;
                        if depth > MAX_FLOW_DEPTH {
                            return Err(DocumentError::TooDeep { depth, line });
                        }
                    }
                    b']' | b'}' => depth = depth.saturating_sub(1),
                    _ => {}
                }
            }
        }
        previous = b;
    }
    Ok(())
}

/// One document of a manifest: its task, or why it is not one.
#[derive(Debug)]
pub struct Document {
    /// 1-based position in the file (items of a `List` are counted individually).
    pub index: usize,
    /// Kind and name, when the document says them (for messages).
    pub kind: Option<String>,
    /// `metadata.name`, when present.
    pub name: Option<String>,
    /// The decoded task.
    pub task: Result<Task, DocumentError>,
    /// The object as written (`Null` when the text was not YAML).
    pub object: Value,
}

/// Splits manifest text into documents and decodes each. Empty documents are skipped; text that
/// is not YAML, or is beyond [`check_bounds`], yields one error document and stops.
pub fn parse_tasks(text: &str) -> Vec<Document> {
    if let Err(e) = check_bounds(text) {
        return vec![Document {
            index: 1,
            kind: None,
            name: None,
            task: Err(e),
            object: Value::Null,
        }];
    }
    let mut values = Vec::new();
    for de in serde_yaml_ng::Deserializer::from_str(text) {
        match Value::deserialize(de) {
            Ok(Value::Null) => {}
            Ok(Value::Object(mut map))
                if map.get("kind") == Some(&Value::String("List".into()))
                    && map.get("items").is_some_and(Value::is_array) =>
            {
                if let Some(Value::Array(items)) = map.remove("items") {
                    values.extend(items.into_iter().map(Ok));
                }
            }
            Ok(value) => values.push(Ok(value)),
            Err(e) => {
                let message = match e.location() {
                    Some(at) => format!("{e} (line {}, column {})", at.line(), at.column()),
                    None => e.to_string(),
                };
                values.push(Err(DocumentError::NotYaml(message)));
                break;
            }
        }
    }
    values
        .into_iter()
        .enumerate()
        .map(|(i, value)| match value {
            Ok(value) => decode(i + 1, value),
            Err(e) => Document {
                index: i + 1,
                kind: None,
                name: None,
                task: Err(e),
                object: Value::Null,
            },
        })
        .collect()
}

/// One YAML (or JSON) object, within [`check_bounds`] (a server-side apply body).
pub fn parse_object(text: &str) -> Result<Value, DocumentError> {
    check_bounds(text)?;
    let value: Value =
        serde_yaml_ng::from_str(text).map_err(|e| DocumentError::NotYaml(e.to_string()))?;
    if !value.is_object() {
        return Err(DocumentError::NotAnObject);
    }
    Ok(value)
}

fn decode(index: usize, mut value: Value) -> Document {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let name = value.get("metadata").and_then(|m| text(m, "name"));
    let kind = text(&value, "kind");
    let object = value.clone();
    let task = decode_task(&mut value);
    Document {
        index,
        kind,
        name,
        task,
        object,
    }
}

/// Decodes one object into a task, checking it against the CRD schema first.
pub fn decode_task(value: &mut Value) -> Result<Task, DocumentError> {
    if !value.is_object() {
        return Err(DocumentError::NotAnObject);
    }
    let text = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (api_version, kind_name) = (text("apiVersion"), text("kind"));
    let kind = match kind_name.parse::<TaskKind>() {
        Ok(kind) if api_version == API_VERSION => kind,
        _ => {
            return Err(DocumentError::NotATask {
                api_version,
                kind: kind_name,
            });
        }
    };
    let errors = structure::check(value, schema(kind));
    let only_unknown = errors
        .iter()
        .all(|e| e.kind == crate::validation::ErrorKind::Unknown);
    if !errors.is_empty() && !only_unknown {
        return Err(DocumentError::Schema(errors));
    }
    let value = value.take();
    let decoded = match kind {
        TaskKind::NetReach => serde_json::from_value::<NetReach>(value).map(Task::NetReach),
        TaskKind::AppHttpHealthy => {
            serde_json::from_value::<AppHttpHealthy>(value).map(Task::AppHttpHealthy)
        }
        TaskKind::Netdns => serde_json::from_value::<Netdns>(value).map(Task::Netdns),
    };
    let task = decoded.map_err(|e| {
        let mut list = errors.clone();
        list.push(crate::validation::FieldError::invalid(
            crate::validation::FieldPath::root(),
            crate::validation::BadValue::Raw("object".into()),
            e.to_string(),
        ));
        DocumentError::Schema(list)
    })?;
    if errors.is_empty() {
        Ok(task)
    } else {
        Err(DocumentError::UnknownFields {
            errors,
            task: Box::new(task),
        })
    }
}

/// The OpenAPI schema of a kind's CRD, as JSON (built once).
pub fn schema(kind: TaskKind) -> &'static Value {
    static SCHEMAS: OnceLock<HashMap<TaskKind, Value>> = OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| {
        TaskKind::ALL
            .into_iter()
            .map(|k| {
                let crd = crd(k);
                let schema = crd
                    .spec
                    .versions
                    .first()
                    .and_then(|v| v.schema.as_ref())
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .and_then(|s| serde_json::to_value(s).ok())
                    .unwrap_or(Value::Null);
                (k, schema)
            })
            .collect()
    });
    &schemas[&kind]
}

#[cfg(test)]
mod tests {
    use super::{DocumentError, MAX_FLOW_DEPTH, MAX_MANIFEST_BYTES, check_bounds, parse_tasks};

    #[test]
    fn deep_flow_nesting_is_refused_before_parsing() {
        let deep = format!("spec: {}", "[".repeat(200_000));
        let documents = parse_tasks(&deep);
        assert_eq!(documents.len(), 1);
        assert!(
            matches!(documents[0].task, Err(DocumentError::TooDeep { depth, line: 1 }) if depth == MAX_FLOW_DEPTH + 1),
            "{:?}",
            documents[0].task
        );
        let message = documents[0]
            .task
            .as_ref()
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(message.contains("nested 101 deep at line 1"), "{message}");
    }

    #[test]
    fn brackets_that_are_not_collections_do_not_count() {
        let mut text = String::from("a: \"[[[[[[[[[[\"\nb: '{{{{ it''s [[[['\n# [[[[[[[[\n");
        for i in 0..(MAX_FLOW_DEPTH * 2) {
            text.push_str(&format!("k{i}: x[{i} don't a{{b\n"));
        }
        text.push_str(&format!(
            "deep: {}{}\n",
            "[".repeat(MAX_FLOW_DEPTH),
            "]".repeat(MAX_FLOW_DEPTH)
        ));
        assert!(check_bounds(&text).is_ok());
    }

    #[test]
    fn unknown_fields_leave_a_task_to_validate_further() {
        let documents = parse_tasks(
            "apiVersion: kdoctor.io/v1beta1
kind: NetReach
metadata: {name: t}
spec:
  request: {qsp: 5, qps: 25}
  bogus: true
",
        );
        let Err(DocumentError::UnknownFields { errors, task }) = &documents[0].task else {
            panic!("{:?}", documents[0].task);
        };
        let text = errors.to_string();
        assert!(
            text.contains("spec.request.qsp: Unknown field")
                && text.contains("spec.bogus: Unknown field"),
            "{text}"
        );
        let crate::task::Task::NetReach(t) = task.as_ref() else {
            panic!("a NetReach");
        };
        assert_eq!(t.spec.request.as_ref().map(|r| r.qps), Some(25));
    }

    #[test]
    fn an_oversized_manifest_is_refused() {
        let text = format!("# {}\n", "x".repeat(MAX_MANIFEST_BYTES));
        assert!(matches!(
            check_bounds(&text),
            Err(DocumentError::TooLarge { size }) if size == text.len()
        ));
    }
}
