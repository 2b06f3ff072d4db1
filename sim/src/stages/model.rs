//! kwok's Stage resource (`kwok.x-k8s.io/v1alpha1`), the parts the simulator plays: resourceRef,
//! selector (matchLabels, matchAnnotations, matchExpressions as jq), weight, delay (fixed,
//! jittered, or taken from the object), and next (statusTemplate, event, finalizers, delete),
//! immediateNextStage.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::stages::jq::{Expr, JqError};
use crate::stages::template::{Template, TemplateError};

/// A Stage document.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stage {
    /// `kwok.x-k8s.io/v1alpha1`.
    #[serde(default)]
    pub api_version: String,
    /// `Stage`.
    #[serde(default)]
    pub kind: String,
    /// Name in metadata.
    pub metadata: StageMeta,
    /// What the stage does.
    pub spec: StageSpec,
}

/// Stage metadata (the name is what tests and logs refer to).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageMeta {
    /// The stage's name.
    pub name: String,
}

/// `spec` of a Stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageSpec {
    /// Which kind the stage applies to.
    pub resource_ref: ResourceRef,
    /// Which objects.
    #[serde(default)]
    pub selector: Option<StageSelector>,
    /// Relative weight among stages matching the same object.
    #[serde(default)]
    pub weight: Option<u32>,
    /// How long after the object matches the stage plays.
    #[serde(default)]
    pub delay: Option<Delay>,
    /// What happens.
    pub next: Next,
    /// Evaluate the next stage without waiting for the watch event of this one's write.
    #[serde(default)]
    pub immediate_next_stage: bool,
}

/// `resourceRef`: kwok writes the core group as `v1`; `apps/v1` style is accepted too.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    /// `v1`, `apps`, `apps/v1`, `kdoctor.io`.
    #[serde(default)]
    pub api_group: String,
    /// Kind.
    pub kind: String,
}

impl ResourceRef {
    /// The API group (empty for core).
    pub fn group(&self) -> &str {
        let g = self.api_group.split('/').next().unwrap_or("");
        if g == "v1" { "" } else { g }
    }
}

/// The selector of a stage.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageSelector {
    /// Labels that must be equal.
    #[serde(default)]
    pub match_labels: std::collections::BTreeMap<String, String>,
    /// Annotations that must be equal.
    #[serde(default)]
    pub match_annotations: std::collections::BTreeMap<String, String>,
    /// jq expressions with operators.
    #[serde(default)]
    pub match_expressions: Vec<MatchExpression>,
}

/// One jq requirement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MatchExpression {
    /// A jq expression on the object.
    pub key: String,
    /// In, NotIn, Exists, DoesNotExist.
    pub operator: String,
    /// Values for In and NotIn.
    #[serde(default)]
    pub values: Vec<String>,
}

/// `delay`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delay {
    /// Base delay.
    #[serde(default)]
    pub duration_milliseconds: Option<u64>,
    /// Base delay from the object (RFC 3339 time or Go duration).
    #[serde(default)]
    pub duration_from: Option<ExpressionFrom>,
    /// Upper bound of the jittered delay.
    #[serde(default)]
    pub jitter_duration_milliseconds: Option<u64>,
    /// Upper bound from the object.
    #[serde(default)]
    pub jitter_duration_from: Option<ExpressionFrom>,
}

/// `{expressionFrom: <jq>}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpressionFrom {
    /// The jq expression.
    pub expression_from: String,
}

/// `next`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Next {
    /// The status, as a Go template rendering YAML.
    #[serde(default)]
    pub status_template: Option<String>,
    /// An Event to record.
    #[serde(default)]
    pub event: Option<StageEvent>,
    /// Finalizer changes.
    #[serde(default)]
    pub finalizers: Option<Finalizers>,
    /// Delete the object (wins over statusTemplate).
    #[serde(default)]
    pub delete: bool,
}

/// `next.event`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageEvent {
    /// Normal or Warning.
    #[serde(rename = "type", default)]
    pub type_: String,
    /// Reason.
    #[serde(default)]
    pub reason: String,
    /// Message.
    #[serde(default)]
    pub message: String,
}

/// `next.finalizers`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Finalizers {
    /// To add.
    #[serde(default)]
    pub add: Vec<FinalizerItem>,
    /// To remove.
    #[serde(default)]
    pub remove: Vec<FinalizerItem>,
    /// Remove all.
    #[serde(default)]
    pub empty: bool,
}

/// `{value: <finalizer>}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FinalizerItem {
    /// The finalizer.
    pub value: String,
}

/// Stage loading errors.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// YAML that is not a Stage.
    #[error("stage YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// A selector or delay expression the jq subset does not read.
    #[error("stage {0}: {1}")]
    Jq(String, JqError),
    /// A statusTemplate that does not parse.
    #[error("stage {0}: {1}")]
    Template(String, TemplateError),
    /// An operator other than In, NotIn, Exists, DoesNotExist.
    #[error("stage {0}: unknown operator {1:?}")]
    Operator(String, String),
}

/// A Stage with its expressions and template parsed once.
#[derive(Debug, Clone)]
pub struct CompiledStage {
    /// The source.
    pub stage: Stage,
    exprs: Vec<(Expr, String, Vec<String>)>,
    duration_from: Option<Expr>,
    jitter_from: Option<Expr>,
    /// The parsed statusTemplate.
    pub template: Option<Template>,
}

impl CompiledStage {
    /// Parses the expressions and template of a Stage.
    pub fn compile(stage: Stage) -> Result<Self, StageError> {
        let name = stage.metadata.name.clone();
        let mut exprs = Vec::new();
        if let Some(sel) = &stage.spec.selector {
            for m in &sel.match_expressions {
                if !matches!(
                    m.operator.as_str(),
                    "In" | "NotIn" | "Exists" | "DoesNotExist"
                ) {
                    return Err(StageError::Operator(name, m.operator.clone()));
                }
                let e = Expr::parse(&m.key).map_err(|e| StageError::Jq(name.clone(), e))?;
                exprs.push((e, m.operator.clone(), m.values.clone()));
            }
        }
        let parse_from = |f: &Option<ExpressionFrom>| -> Result<Option<Expr>, StageError> {
            f.as_ref()
                .map(|e| {
                    Expr::parse(&e.expression_from).map_err(|e| StageError::Jq(name.clone(), e))
                })
                .transpose()
        };
        let delay = stage.spec.delay.clone().unwrap_or_default();
        let duration_from = parse_from(&delay.duration_from)?;
        let jitter_from = parse_from(&delay.jitter_duration_from)?;
        let template = stage
            .spec
            .next
            .status_template
            .as_deref()
            .map(Template::parse)
            .transpose()
            .map_err(|e| StageError::Template(name.clone(), e))?;
        Ok(CompiledStage {
            stage,
            exprs,
            duration_from,
            jitter_from,
            template,
        })
    }

    /// The stage's name.
    pub fn name(&self) -> &str {
        &self.stage.metadata.name
    }

    /// Whether the stage applies to objects of this group and kind.
    pub fn applies_to(&self, group: &str, kind: &str) -> bool {
        self.stage.spec.resource_ref.group() == group && self.stage.spec.resource_ref.kind == kind
    }

    /// Whether the object satisfies the selector.
    pub fn matches(&self, obj: &Value) -> bool {
        if let Some(sel) = &self.stage.spec.selector {
            let labels = crate::selector::string_map(obj.pointer("/metadata/labels"));
            if sel
                .match_labels
                .iter()
                .any(|(k, v)| labels.get(k) != Some(v))
            {
                return false;
            }
            let ann = crate::selector::string_map(obj.pointer("/metadata/annotations"));
            if sel
                .match_annotations
                .iter()
                .any(|(k, v)| ann.get(k) != Some(v))
            {
                return false;
            }
        }
        self.exprs.iter().all(|(e, op, values)| {
            let out: Vec<Value> = e.eval(obj).into_iter().filter(|v| !v.is_null()).collect();
            let as_str = |v: &Value| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            match op.as_str() {
                "Exists" => !out.is_empty(),
                "DoesNotExist" => out.is_empty(),
                "In" => out.iter().any(|v| values.contains(&as_str(v))),
                _ => !out.iter().any(|v| values.contains(&as_str(v))),
            }
        })
    }

    /// The weight (1 when unset).
    pub fn weight(&self) -> u32 {
        self.stage.spec.weight.unwrap_or(1)
    }

    /// The delay for this object in milliseconds, `rand` picking within the jitter range.
    pub fn delay_ms(&self, obj: &Value, rand: &mut dyn FnMut(u64) -> u64) -> u64 {
        let d = self.stage.spec.delay.clone().unwrap_or_default();
        let from = |e: &Option<Expr>| {
            e.as_ref()
                .and_then(|e| e.eval(obj).into_iter().find_map(|v| duration_of(&v)))
        };
        let base = from(&self.duration_from)
            .or(d.duration_milliseconds)
            .unwrap_or(0);
        let jitter = from(&self.jitter_from).or(d.jitter_duration_milliseconds);
        match jitter {
            Some(j) if j > base => base + rand(j - base + 1),
            _ => base,
        }
    }
}

/// Milliseconds from a value: an RFC 3339 time (minus now, never negative) or a Go duration.
pub fn duration_of(v: &Value) -> Option<u64> {
    let s = v.as_str()?;
    if let Some(t) = crate::clock::parse(s) {
        let ms = t.as_millisecond() - jiff::Timestamp::now().as_millisecond();
        return Some(ms.max(0) as u64);
    }
    go_duration_ms(s)
}

/// Parses a Go duration (`1h2m3s`, `500ms`, `1.5s`) into milliseconds.
pub fn go_duration_ms(s: &str) -> Option<u64> {
    let mut total = 0f64;
    let mut num = String::new();
    let mut chars = s.trim().chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let mut unit = c.to_string();
        while let Some(&n) = chars.peek() {
            if n.is_ascii_alphabetic() || n == 'µ' {
                unit.push(n);
                chars.next();
            } else {
                break;
            }
        }
        let n: f64 = num.parse().ok()?;
        num.clear();
        let factor = match unit.as_str() {
            "h" => 3_600_000.0,
            "m" => 60_000.0,
            "s" => 1000.0,
            "ms" => 1.0,
            "us" | "µs" => 0.001,
            "ns" => 0.000_001,
            _ => return None,
        };
        total += n * factor;
        any = true;
    }
    if !num.is_empty() {
        return None;
    }
    any.then_some(total as u64)
}

/// Parses one or more Stage documents (separated by `---`).
pub fn parse_stages(yaml: &str) -> Result<Vec<CompiledStage>, StageError> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let v = Value::deserialize(doc)?;
        if v.is_null() {
            continue;
        }
        let stage: Stage = serde_json::from_value(v).map_err(|e| {
            StageError::Yaml(<serde_yaml::Error as serde::de::Error>::custom(
                e.to_string(),
            ))
        })?;
        out.push(CompiledStage::compile(stage)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(go_duration_ms("1m30s"), Some(90_000));
        assert_eq!(go_duration_ms("250ms"), Some(250));
        assert_eq!(go_duration_ms("1.5s"), Some(1500));
        assert_eq!(go_duration_ms("10"), None);
        assert_eq!(go_duration_ms("5x"), None);
    }
}
