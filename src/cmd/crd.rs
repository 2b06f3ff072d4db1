//! `kdoctor crd`: print the task CRDs, e.g. `kdoctor crd | kubectl apply -f -`.

use std::process::ExitCode;

use anyhow::Result;
use kdoctor_api::task::TaskKind;

use super::output::{Format, render};

/// Arguments of `kdoctor crd`.
#[derive(clap::Args)]
pub struct Args {
    /// Only this kind's CRD (NetReach, AppHttpHealthy or Netdns); repeatable.
    #[arg(long = "kind", value_parser = parse_kind)]
    kinds: Vec<TaskKind>,

    /// Output format (table prints YAML, like yaml).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Yaml)]
    output: Format,
}

fn parse_kind(text: &str) -> Result<TaskKind, String> {
    text.parse()
        .map_err(|e: kdoctor_api::task::UnknownKind| e.to_string())
}

/// Prints the CRDs.
pub fn run(args: &Args) -> Result<ExitCode> {
    let kinds: &[TaskKind] = if args.kinds.is_empty() {
        &TaskKind::ALL
    } else {
        &args.kinds
    };
    let crds: Vec<_> = kinds.iter().map(|k| kdoctor_api::crd::crd(*k)).collect();
    super::output::print(&render(&crds, args.output)?)?;
    Ok(ExitCode::SUCCESS)
}
