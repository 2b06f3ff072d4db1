//! `kdoctor store`: back up, restore, migrate and inspect a report store offline (the
//! controller must not be running on the same directory: the store allows one process).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kdoctor_store::{ImportError, Store, StoreConfig};

use super::output::{Format, render};
use crate::plural::count;

/// Arguments of `kdoctor store`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Write every task, round and report as JSON lines to standard output.
    Export(DataArgs),
    /// Load JSON lines written by `export` (idempotent), or migrate a Go kdoctor report directory.
    Import(ImportArgs),
    /// Print the number of tasks, rounds, reports and bytes.
    Stats(StatsArgs),
    /// Accept a store that lost acknowledged writes (the controller refuses to open it): keep
    /// its data, continue resourceVersions from the last one clients were shown.
    Repair(DataArgs),
}

#[derive(clap::Args)]
struct DataArgs {
    /// The store directory.
    #[arg(long = "data", value_name = "DIR", default_value = "./kdoctor-data")]
    data: PathBuf,
}

#[derive(clap::Args)]
struct ImportArgs {
    #[command(flatten)]
    data: DataArgs,
    /// A JSON-lines file written by `kdoctor store export` (`-` reads standard input).
    #[arg(
        value_name = "FILE",
        required_unless_present = "from_kdoctor_dir",
        conflicts_with = "from_kdoctor_dir"
    )]
    file: Option<PathBuf>,
    /// Migrate the report directory of a Go kdoctor controller instead.
    #[arg(long = "from-kdoctor-dir", value_name = "PATH")]
    from_kdoctor_dir: Option<PathBuf>,
    /// Skip bad lines (listing them) instead of stopping at the first one.
    #[arg(long = "skip-invalid")]
    skip_invalid: bool,
}

#[derive(clap::Args)]
struct StatsArgs {
    #[command(flatten)]
    data: DataArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// Opens a store that must exist: commands that only read never create one at a mistyped path.
fn open(data: &DataArgs) -> Result<Store> {
    existing(data)?;
    Ok(Store::open(StoreConfig::new(&data.data))?)
}

fn existing(data: &DataArgs) -> Result<()> {
    if !data.data.join("db").is_dir() {
        anyhow::bail!(
            "no store at {}: --data must name a store directory (the controller's --data)",
            data.data.display()
        );
    }
    Ok(())
}

/// Runs a `kdoctor store` subcommand.
pub fn run(args: &Args) -> Result<ExitCode> {
    match &args.command {
        Command::Export(data) => {
            let store = open(data)?;
            let mut out = BufWriter::new(std::io::stdout().lock());
            let counts = store.export(&mut out)?;
            // Before saying so: a failed last write would otherwise go unnoticed on drop.
            out.flush()?;
            eprintln!(
                "exported {} tasks, {} rounds, {} reports from {}",
                counts.tasks,
                counts.rounds,
                counts.reports,
                data.data.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Import(import) => run_import(import),
        Command::Repair(data) => {
            existing(data)?;
            let repair = Store::repair(&StoreConfig::new(&data.data))?;
            match repair.promised {
                Some(promised) if promised > repair.found => eprintln!(
                    "repaired {}: the data ends at resourceVersion {} where {} was acknowledged; \
                     the writes between are lost and resourceVersions continue from {}",
                    data.data.display(),
                    repair.found,
                    promised,
                    repair.continues_from
                ),
                _ => eprintln!(
                    "{}: nothing was lost (resourceVersion {}); the durable mark is rewritten",
                    data.data.display(),
                    repair.continues_from
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats(stats) => {
            let store = open(&stats.data)?;
            let s = store.stats()?;
            let text = match stats.output {
                Format::Table => format!(
                    "TASKS\tDELETED\tROUNDS\tREPORTS\tSTORED BYTES\tDISK BYTES\tRESOURCE VERSION\n{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                    s.tasks,
                    s.deleted_tasks,
                    s.rounds,
                    s.reports,
                    s.stored_bytes,
                    s.disk_bytes,
                    s.resource_version
                ),
                format => render(&[s], format)?,
            };
            super::output::print(&text)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn run_import(args: &ImportArgs) -> Result<ExitCode> {
    if let Some(dir) = &args.from_kdoctor_dir
        && !dir.is_dir()
    {
        anyhow::bail!(
            "--from-kdoctor-dir {}: no such directory (the Go kdoctor controller's report directory)",
            dir.display()
        );
    }
    // The one command that may start a new store.
    let store = Store::open(StoreConfig::new(&args.data.data))?;
    if let Some(dir) = &args.from_kdoctor_dir {
        let report = store.migrate_kdoctor_dir(dir)?;
        for (file, bad) in &report.skipped {
            eprintln!("skipped {file}: {}", bad.problem);
        }
        let c = &report.counts;
        eprintln!(
            "migrated {} tasks, {} round summaries, {} reports from {} ({} files skipped)",
            c.tasks,
            c.rounds,
            c.reports,
            dir.display(),
            report.skipped.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let file = args
        .file
        .as_ref()
        .context("a FILE or --from-kdoctor-dir is required")?;
    let input: Box<dyn BufRead> = if file.as_os_str() == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        Box::new(BufReader::new(
            File::open(file).with_context(|| format!("cannot read {}", file.display()))?,
        ))
    };
    match store.import(input, args.skip_invalid) {
        Ok(report) => {
            for bad in &report.skipped {
                eprintln!("skipped line {}: {}", bad.line, bad.problem);
            }
            eprintln!("{}", import_summary(&report.counts, report.skipped.len()));
            Ok(if report.skipped.is_empty() {
                ExitCode::SUCCESS
            } else {
                super::exit_failed()
            })
        }
        Err(ImportError::BadLine(bad)) => {
            eprintln!(
                "error: {}: line {}: {}; the lines before it were imported, it and the lines after it were not \
                 (--skip-invalid skips bad lines)",
                file.display(),
                bad.line,
                bad.problem
            );
            Ok(super::exit_failed())
        }
        Err(e) => Err(e.into()),
    }
}

/// What an import changed: the new lines first, so that a repeated import says it added nothing.
fn import_summary(c: &kdoctor_store::Counts, skipped: usize) -> String {
    let read = c.tasks + c.rounds + c.reports;
    let new = read.saturating_sub(c.unchanged);
    let what = format!(
        "{}, {}, {}",
        count(c.tasks, "task"),
        count(c.rounds, "round"),
        count(c.reports, "report")
    );
    let skipped = if skipped == 0 {
        String::new()
    } else {
        format!("; {} skipped", count(skipped, "line"))
    };
    if new == 0 && read > 0 {
        format!("nothing new: {what} already stored{skipped}")
    } else {
        format!(
            "imported {} of {what} ({} already stored){skipped}",
            count(new, "new line"),
            c.unchanged
        )
    }
}

#[cfg(test)]
mod tests {
    use kdoctor_store::Counts;

    use super::import_summary;

    #[test]
    fn an_import_says_what_was_new() {
        let all = Counts {
            tasks: 2,
            rounds: 1,
            reports: 5,
            unchanged: 0,
        };
        assert_eq!(
            import_summary(&all, 0),
            "imported 8 new lines of 2 tasks, 1 round, 5 reports (0 already stored)"
        );
        let again = Counts {
            unchanged: 8,
            ..all.clone()
        };
        assert_eq!(
            import_summary(&again, 1),
            "nothing new: 2 tasks, 1 round, 5 reports already stored; 1 line skipped"
        );
    }
}
