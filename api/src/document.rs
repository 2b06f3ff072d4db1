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
}

/// Splits manifest text into documents and decodes each. Empty documents are skipped; text that
/// is not YAML yields one error document and stops.
pub fn parse_tasks(text: &str) -> Vec<Document> {
    let mut values = Vec::new();
    for de in serde_yaml::Deserializer::from_str(text) {
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
            },
        })
        .collect()
}

fn decode(index: usize, mut value: Value) -> Document {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let name = value.get("metadata").and_then(|m| text(m, "name"));
    let kind = text(&value, "kind");
    let task = decode_task(&mut value);
    Document {
        index,
        kind,
        name,
        task,
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
    if !errors.is_empty() {
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
    decoded.map_err(|e| {
        DocumentError::Schema(ErrorList(vec![crate::validation::FieldError::invalid(
            crate::validation::FieldPath::root(),
            crate::validation::BadValue::Raw("object".into()),
            e.to_string(),
        )]))
    })
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
