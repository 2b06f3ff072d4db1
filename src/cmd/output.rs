//! `-o table|json|yaml`, printed the way kubectl prints objects.

use anyhow::Result;
use serde::Serialize;
use serde_json::{Value, json};

/// Output format of a subcommand.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    /// Human-readable text.
    #[default]
    Table,
    /// JSON: one object, or a `List` of several.
    Json,
    /// YAML: one document per object.
    Yaml,
}

/// Renders objects as YAML documents or JSON (`List` when there are several).
pub fn render<T: Serialize>(objects: &[T], format: Format) -> Result<String> {
    match format {
        Format::Yaml | Format::Table => {
            let mut out = String::new();
            for object in objects {
                out.push_str("---\n");
                out.push_str(&serde_yaml::to_string(object)?);
            }
            Ok(out)
        }
        Format::Json => {
            let value = match objects {
                [one] => serde_json::to_value(one)?,
                many => {
                    let items: Vec<Value> = many
                        .iter()
                        .map(serde_json::to_value)
                        .collect::<Result<_, _>>()?;
                    json!({"apiVersion": "v1", "kind": "List", "items": items})
                }
            };
            Ok(serde_json::to_string_pretty(&value)? + "\n")
        }
    }
}

/// `n` and its noun, singular for one: "1 node", "5 nodes".
pub fn count(n: impl std::fmt::Display, noun: &str) -> String {
    let n = n.to_string();
    if n == "1" {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn counts_are_singular_for_one_only() {
        assert_eq!(count(1, "node"), "1 node");
        assert_eq!(count(0, "node"), "0 nodes");
        assert_eq!(count(1000_i64, "request"), "1000 requests");
    }
}
