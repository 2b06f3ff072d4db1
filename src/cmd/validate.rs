//! `kdoctor validate -f FILE...`: check task files offline, with the same defaults and rules
//! the controller applies. Exit 0 when every task is valid, 1 otherwise, 2 when a file or the
//! configuration cannot be read.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use kdoctor_api::config::Config;
use kdoctor_api::defaults::ClusterFacts;
use kdoctor_api::document::{Document, DocumentError, parse_tasks};
use kdoctor_api::task::Task;
use kdoctor_api::validation::{self, ErrorList};

use super::output::{Format, render};

/// Arguments of `kdoctor validate`.
#[derive(clap::Args)]
pub struct Args {
    /// Task files or directories of them (`.yaml`, `.yml`, `.json`); `-` reads standard input.
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    files: Vec<PathBuf>,

    /// The kdoctor configuration (`conf.yml`) whose limits apply (default: upstream's defaults).
    #[arg(long = "config", short = 'C', value_name = "FILE")]
    config: Option<PathBuf>,

    /// `table`: one line per task; `yaml`/`json`: print the valid tasks with defaults applied.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// Checks every task of every file.
pub fn run(args: &Args) -> Result<ExitCode> {
    let config = load_config(args.config.as_deref())?;
    let checked = check_files(&args.files, &config)?;
    if args.output == Format::Table {
        super::output::print(&checked.report)?;
    } else {
        // The tasks go to stdout for piping; the verdicts to stderr.
        if !checked.valid.is_empty() {
            super::output::print(&render(&checked.valid, args.output)?)?;
        }
        std::io::stderr().write_all(checked.report.as_bytes())?;
    }
    Ok(if checked.all_valid {
        ExitCode::SUCCESS
    } else {
        super::exit_failed()
    })
}

/// `conf.yml` from `path`, or upstream's defaults without one.
pub fn load_config(path: Option<&Path>) -> Result<Config> {
    match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            Config::from_yaml(&text).with_context(|| format!("{}", path.display()))
        }
        None => Ok(Config::default()),
    }
}

/// The verdict on a set of task files.
pub struct Checked {
    /// One line (or block) per task or file: `<file>: <kind> "<name>": valid`, or the errors.
    pub report: String,
    /// The valid tasks, defaults applied, in file order.
    pub valid: Vec<Task>,
    /// The valid tasks as written (what `kubectl apply` would send), in file order.
    pub objects: Vec<serde_json::Value>,
    /// Every file held tasks and every task was valid.
    pub all_valid: bool,
}

impl Default for Checked {
    /// Nothing checked: no tasks, nothing wrong.
    fn default() -> Checked {
        Checked {
            report: String::new(),
            valid: Vec::new(),
            objects: Vec::new(),
            all_valid: true,
        }
    }
}

/// Checks every task of every file (directories: their task files; `-`: standard input). An
/// `Err` is a file that cannot be read at all.
pub fn check_files(files: &[PathBuf], config: &Config) -> Result<Checked> {
    let mut report = String::new();
    let mut valid: Vec<Task> = Vec::new();
    let mut objects = Vec::new();
    let mut all_valid = true;
    for (source, text) in read_sources(files)? {
        let Ok(text) = text else {
            all_valid = false;
            let _ = writeln!(report, "{source}: not a task file: not UTF-8 text");
            continue;
        };
        let documents = parse_tasks(&text);
        if documents.is_empty() {
            all_valid = false;
            let _ = writeln!(report, "{source}: no kdoctor task found");
        }
        for document in documents {
            let object = document.object.clone();
            match check(document, config) {
                Ok(task) => {
                    objects.push(object);
                    let _ = writeln!(report, "{source}: {} {:?}: valid", task.kind(), task.name());
                    valid.push(task);
                }
                Err(message) => {
                    all_valid = false;
                    let _ = writeln!(report, "{source}: {message}");
                }
            }
        }
    }
    Ok(Checked {
        report,
        valid,
        objects,
        all_valid,
    })
}

/// The effective task, or the text that says what is wrong with the document.
fn check(document: Document, config: &Config) -> Result<Task, String> {
    let what = match (&document.kind, &document.name) {
        (Some(kind), Some(name)) => format!("{kind} {name:?}"),
        (Some(kind), None) => kind.clone(),
        _ => format!("document {}", document.index),
    };
    match document.task {
        Ok(task) => validation::check(task, config, ClusterFacts::default())
            .map_err(|errors| invalid(&what, &errors)),
        Err(DocumentError::Schema(errors)) => Err(invalid(&what, &errors)),
        // Every error at once: the unknown fields, then what the rest of the task breaks.
        Err(DocumentError::UnknownFields { mut errors, task }) => {
            if let Err(more) = validation::check(*task, config, ClusterFacts::default()) {
                errors.extend(more);
            }
            Err(invalid(&what, &errors))
        }
        Err(e) => Err(format!("{what}: {e}")),
    }
}

/// kubectl's wording: `The NetReach "x" is invalid:` then one line per error.
fn invalid(what: &str, errors: &ErrorList) -> String {
    let mut text = format!("The {what} is invalid:");
    for error in errors.iter() {
        let _ = write!(text, "\n  * {error}");
    }
    text
}

/// Reads at most one byte more than a manifest may have (so that its check can say it is too
/// large), never a whole multi-gigabyte file; the inner `Err` is text that is not UTF-8.
fn read_bounded(reader: impl Read) -> std::io::Result<Result<String, ()>> {
    let mut bytes = Vec::new();
    reader
        .take(kdoctor_api::document::MAX_MANIFEST_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() > kdoctor_api::document::MAX_MANIFEST_BYTES {
        // Too large whatever it holds: the cut may fall inside a character, and the size is the
        // error to report, not the encoding.
        return Ok(Ok(String::from_utf8_lossy(&bytes).into_owned()));
    }
    Ok(String::from_utf8(bytes).map_err(|_| ()))
}

/// Reads every file (directories: their `.yaml`, `.yml` and `.json` files, sorted). A file that
/// is not text is returned as `Err`: a bad task file, not an environment problem.
fn read_sources(paths: &[PathBuf]) -> Result<Vec<(String, Result<String, ()>)>> {
    let mut sources = Vec::new();
    for path in paths {
        if path == Path::new("-") {
            let text = read_bounded(std::io::stdin()).context("cannot read standard input")?;
            sources.push(("<stdin>".to_string(), text));
            continue;
        }
        let files = if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("cannot read directory {}", path.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| {
                    matches!(
                        p.extension().and_then(|e| e.to_str()),
                        Some("yaml" | "yml" | "json")
                    )
                })
                .collect();
            files.sort();
            files
        } else {
            vec![path.clone()]
        };
        for file in files {
            let text = std::fs::File::open(&file)
                .and_then(read_bounded)
                .with_context(|| format!("cannot read {}", file.display()))?;
            sources.push((file.display().to_string(), text));
        }
    }
    Ok(sources)
}
