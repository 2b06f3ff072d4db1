//! `-o table|json|yaml`, printed the way kubectl prints objects.

use std::io::Write;

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
                out.push_str(&serde_yaml_ng::to_string(object)?);
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

/// Writes `text` to standard output. A reader that went away (`| head`) comes back as a
/// `BrokenPipe` error for `main` to end on quietly, where `print!` would panic.
pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}
