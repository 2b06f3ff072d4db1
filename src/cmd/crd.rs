//! `kdoctor crd`: print the task CRDs, e.g. `kdoctor crd | kubectl apply -f -`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;

use super::output::{Format, render};

/// Arguments of `kdoctor crd`.
#[derive(clap::Args)]
pub struct Args {
    /// Output format (table prints YAML, like yaml).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Yaml)]
    output: Format,
}

/// Prints the three CRDs.
pub fn run(args: &Args) -> Result<ExitCode> {
    let text = render(&kdoctor_api::crd::crds(), args.output)?;
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
