//! Field errors in the style of Kubernetes' `field.Error`:
//! `spec.request.qps: Invalid value: 25: must be less than 20`.

use std::fmt;

/// A path to a field, printed like Kubernetes does (`spec.target.header[0]`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FieldPath(String);

impl FieldPath {
    /// The empty path (for documents whose fields are top-level, like `conf.yml`).
    pub fn root() -> FieldPath {
        FieldPath(String::new())
    }

    /// A path starting at a top-level field.
    pub fn new(name: &str) -> FieldPath {
        FieldPath(name.to_string())
    }

    /// The path of a field of this object.
    pub fn child(&self, name: &str) -> FieldPath {
        if self.0.is_empty() {
            FieldPath(name.to_string())
        } else {
            FieldPath(format!("{}.{}", self.0, name))
        }
    }

    /// The path of an element of this list.
    pub fn index(&self, index: usize) -> FieldPath {
        FieldPath(format!("{}[{}]", self.0, index))
    }

    /// The path of a value of this map.
    pub fn key(&self, key: &str) -> FieldPath {
        FieldPath(format!("{}[{}]", self.0, key))
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The offending value, printed like Go's `%#v` (strings quoted, numbers bare).
#[derive(Clone, Debug, PartialEq)]
pub enum BadValue {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// Anything else, already rendered.
    Raw(String),
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadValue::Str(s) => write!(f, "{s:?}"),
            BadValue::Int(i) => write!(f, "{i}"),
            BadValue::Float(x) => write!(f, "{x}"),
            BadValue::Bool(b) => write!(f, "{b}"),
            BadValue::Raw(r) => f.write_str(r),
        }
    }
}

impl From<&str> for BadValue {
    fn from(s: &str) -> Self {
        BadValue::Str(s.to_string())
    }
}
impl From<String> for BadValue {
    fn from(s: String) -> Self {
        BadValue::Str(s)
    }
}
impl From<&String> for BadValue {
    fn from(s: &String) -> Self {
        BadValue::Str(s.clone())
    }
}
impl From<i64> for BadValue {
    fn from(i: i64) -> Self {
        BadValue::Int(i)
    }
}
impl From<i32> for BadValue {
    fn from(i: i32) -> Self {
        BadValue::Int(i.into())
    }
}
impl From<f64> for BadValue {
    fn from(x: f64) -> Self {
        BadValue::Float(x)
    }
}
impl From<bool> for BadValue {
    fn from(b: bool) -> Self {
        BadValue::Bool(b)
    }
}
impl From<&serde_json::Value> for BadValue {
    fn from(v: &serde_json::Value) -> Self {
        match v {
            serde_json::Value::String(s) => BadValue::Str(s.clone()),
            serde_json::Value::Bool(b) => BadValue::Bool(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => BadValue::Int(i),
                None => BadValue::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            other => BadValue::Raw(other.to_string()),
        }
    }
}

/// What is wrong with a field (Kubernetes' `field.ErrorType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A required field is missing.
    Required,
    /// The value breaks a rule.
    Invalid,
    /// The value is not one of a fixed set.
    NotSupported,
    /// The field may not be set (in this context).
    Forbidden,
    /// The field is not part of the schema.
    Unknown,
    /// The object the field names does not exist.
    NotFound,
}

impl ErrorKind {
    /// The phrase Kubernetes prints for this kind.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Required => "Required value",
            ErrorKind::Invalid => "Invalid value",
            ErrorKind::NotSupported => "Unsupported value",
            ErrorKind::Forbidden => "Forbidden",
            ErrorKind::Unknown => "Unknown field",
            ErrorKind::NotFound => "Not found",
        }
    }
}

/// One problem with one field.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// What is wrong.
    pub kind: ErrorKind,
    /// Where.
    pub field: FieldPath,
    /// The offending value (printed for Invalid and NotSupported).
    pub value: Option<BadValue>,
    /// The rule, in words.
    pub detail: String,
}

impl FieldError {
    /// A required field is missing.
    pub fn required(field: FieldPath, detail: impl Into<String>) -> FieldError {
        FieldError {
            kind: ErrorKind::Required,
            field,
            value: None,
            detail: detail.into(),
        }
    }

    /// The value breaks a rule.
    pub fn invalid(
        field: FieldPath,
        value: impl Into<BadValue>,
        detail: impl Into<String>,
    ) -> FieldError {
        FieldError {
            kind: ErrorKind::Invalid,
            field,
            value: Some(value.into()),
            detail: detail.into(),
        }
    }

    /// The value is not one of `supported`.
    pub fn not_supported(
        field: FieldPath,
        value: impl Into<BadValue>,
        supported: &[&str],
    ) -> FieldError {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        FieldError {
            kind: ErrorKind::NotSupported,
            field,
            value: Some(value.into()),
            detail: format!("supported values: {}", list.join(", ")),
        }
    }

    /// The field may not be set.
    pub fn forbidden(field: FieldPath, detail: impl Into<String>) -> FieldError {
        FieldError {
            kind: ErrorKind::Forbidden,
            field,
            value: None,
            detail: detail.into(),
        }
    }

    /// The object the field names does not exist (`detail` says where it was looked for).
    pub fn not_found(
        field: FieldPath,
        value: impl Into<BadValue>,
        detail: impl Into<String>,
    ) -> FieldError {
        FieldError {
            kind: ErrorKind::NotFound,
            field,
            value: Some(value.into()),
            detail: detail.into(),
        }
    }

    /// The field is not declared in the schema.
    pub fn unknown(field: FieldPath) -> FieldError {
        FieldError {
            kind: ErrorKind::Unknown,
            field,
            value: None,
            detail: "field not declared in schema".to_string(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.field.as_str().is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(self.kind.as_str())?;
        if let (Some(value), ErrorKind::Invalid | ErrorKind::NotSupported | ErrorKind::NotFound) =
            (&self.value, self.kind)
        {
            write!(f, ": {value}")?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// Every problem found in one object, in the order found.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ErrorList(pub Vec<FieldError>);

impl ErrorList {
    /// Records a problem.
    pub fn push(&mut self, error: FieldError) {
        self.0.push(error);
    }

    /// Records every problem of another list.
    pub fn extend(&mut self, other: ErrorList) {
        self.0.extend(other.0);
    }

    /// Whether nothing is wrong.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems.
    pub fn iter(&self) -> impl Iterator<Item = &FieldError> {
        self.0.iter()
    }

    /// `Ok` when nothing is wrong.
    pub fn into_result(self) -> Result<(), ErrorList> {
        if self.0.is_empty() { Ok(()) } else { Err(self) }
    }
}

impl fmt::Display for ErrorList {
    /// One error as is; several as `[a, b]`, like Kubernetes' aggregate errors.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            many => {
                let parts: Vec<String> = many.iter().map(ToString::to_string).collect();
                write!(f, "[{}]", parts.join(", "))
            }
        }
    }
}

impl std::error::Error for ErrorList {}
