//! Backup and restore as JSON lines, one record per line:
//!
//! ```text
//! {"type":"task","kind":"NetReach","name":"t","uid":"…","created":"…","spec":{…},"status":{…}}
//! {"type":"round","uid":"…","summary":{…}}
//! {"type":"report","uid":"…","report":{…agent report in the v0.2.2 shape…}}
//! ```
//!
//! A task line comes before its rounds and reports. Import is idempotent: a line already stored
//! changes nothing.

use std::collections::HashMap;
use std::io::{BufRead, Write};

use kdoctor_api::report::Report;
use serde::Serialize;
use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::model::{IncarnationId, Outcome, RoundSummary, TaskRecord};
use crate::store::{NewReport, Store};

/// Reports written per batch (one flush each) during an import.
const IMPORT_BATCH: usize = 256;

/// One line of an export.
#[derive(Serialize, Debug)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Line {
    /// A task incarnation.
    Task(TaskRecord),
    /// A round summary of the task with this UID.
    Round {
        /// Task UID.
        uid: String,
        /// The summary.
        summary: RoundSummary,
    },
    /// An agent report of the task with this UID.
    Report {
        /// Task UID.
        uid: String,
        /// The report.
        report: Box<Report>,
    },
}

impl Line {
    /// Parses one line. (Not a derived internally-tagged enum: serde buffers those, and the
    /// buffer cannot read the integer keys of `statusCodes`.)
    pub fn parse(text: &str) -> std::result::Result<Line, String> {
        let bad = |e: serde_json::Error| format!("not a store record: {e}");
        let mut value: Value = serde_json::from_str(text).map_err(bad)?;
        let field = |value: &mut Value, name: &str| -> std::result::Result<Value, String> {
            value
                .get_mut(name)
                .map(Value::take)
                .ok_or_else(|| format!("not a store record: missing field `{name}`"))
        };
        let uid = |value: &mut Value| -> std::result::Result<String, String> {
            serde_json::from_value(field(value, "uid")?).map_err(bad)
        };
        match value.get("type").and_then(Value::as_str) {
            Some("task") => serde_json::from_value(value).map(Line::Task).map_err(bad),
            Some("round") => Ok(Line::Round {
                uid: uid(&mut value)?,
                summary: serde_json::from_value(field(&mut value, "summary")?).map_err(bad)?,
            }),
            Some("report") => Ok(Line::Report {
                uid: uid(&mut value)?,
                report: serde_json::from_value(field(&mut value, "report")?).map_err(bad)?,
            }),
            Some(other) => Err(format!(
                "not a store record: unknown type {other:?} (expected task, round or report)"
            )),
            None => Err("not a store record: no \"type\"".to_string()),
        }
    }
}

/// How many records an export or import handled.
#[derive(Serialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Task lines.
    pub tasks: u64,
    /// Round lines.
    pub rounds: u64,
    /// Report lines.
    pub reports: u64,
    /// Lines that changed nothing (already stored).
    pub unchanged: u64,
}

/// A line that could not be imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub problem: String,
}

/// Why an import stopped.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A line is not a valid record; the lines before it were stored, it and the rest were not.
    #[error("line {}: {}; the lines before it were imported, it and the lines after it were not", .0.line, .0.problem)]
    BadLine(BadLine),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The input could not be read.
    #[error("cannot read the input: {0}")]
    Read(std::io::Error),
}

/// Result of an import.
#[derive(Debug, Default)]
pub struct ImportReport {
    /// What was imported.
    pub counts: Counts,
    /// Lines skipped (only with `skip_invalid`).
    pub skipped: Vec<BadLine>,
}

impl Store {
    /// Writes every task, round and report as JSON lines.
    pub fn export(&self, out: &mut dyn Write) -> Result<Counts> {
        let mut counts = Counts::default();
        let io = |e: std::io::Error| StoreError::Io {
            path: self.path().to_path_buf(),
            source: e,
        };
        for task in self.tasks() {
            let Some(record) = self.task_record(task.id)? else {
                continue;
            };
            serde_json::to_writer(&mut *out, &Line::Task(record))?;
            out.write_all(b"\n").map_err(io)?;
            counts.tasks += 1;
            for round in self.rounds(task.id)? {
                if let Some(summary) = round.summary {
                    serde_json::to_writer(
                        &mut *out,
                        &Line::Round {
                            uid: task.uid.clone(),
                            summary,
                        },
                    )?;
                    out.write_all(b"\n").map_err(io)?;
                    counts.rounds += 1;
                }
                for meta in self.reports(task.id, round.round)? {
                    // The stored JSON goes out as is, without a parse and re-serialization.
                    let Some(json) = self.report_json(task.id, round.round, &meta.node)? else {
                        continue;
                    };
                    write!(
                        out,
                        "{{\"type\":\"report\",\"uid\":{},\"report\":",
                        serde_json::to_string(&task.uid)?
                    )
                    .map_err(io)?;
                    out.write_all(&json).map_err(io)?;
                    out.write_all(b"}\n").map_err(io)?;
                    counts.reports += 1;
                }
            }
        }
        out.flush().map_err(io)?;
        Ok(counts)
    }

    /// Imports JSON lines. Stops at the first bad line (storing the lines before it) unless
    /// `skip_invalid`, in which case bad lines are skipped and listed.
    pub fn import(
        &self,
        input: impl BufRead,
        skip_invalid: bool,
    ) -> Result<ImportReport, ImportError> {
        let mut report = ImportReport::default();
        let mut ids: HashMap<String, IncarnationId> = HashMap::new();
        let mut pending: Vec<(usize, IncarnationId, Report)> = Vec::new();
        for (index, line) in input.lines().enumerate() {
            let number = index + 1;
            let line = line.map_err(ImportError::Read)?;
            if line.trim().is_empty() {
                continue;
            }
            match self.import_line(&line, &mut ids, &mut pending, number, &mut report.counts) {
                Ok(()) => {}
                Err(problem) if skip_invalid => report.skipped.push(BadLine {
                    line: number,
                    problem,
                }),
                Err(problem) => {
                    self.flush_pending(&mut pending, &mut report.counts)?;
                    return Err(ImportError::BadLine(BadLine {
                        line: number,
                        problem,
                    }));
                }
            }
            if pending.len() >= IMPORT_BATCH {
                self.flush_pending(&mut pending, &mut report.counts)?;
            }
        }
        self.flush_pending(&mut pending, &mut report.counts)?;
        Ok(report)
    }

    fn import_line(
        &self,
        line: &str,
        ids: &mut HashMap<String, IncarnationId>,
        pending: &mut Vec<(usize, IncarnationId, Report)>,
        number: usize,
        counts: &mut Counts,
    ) -> std::result::Result<(), String> {
        let parsed = Line::parse(line)?;
        let mut id_of = |uid: &str| -> std::result::Result<IncarnationId, String> {
            if let Some(id) = ids.get(uid) {
                return Ok(*id);
            }
            let id = self
                .by_uid(uid)
                .map(|t| t.id)
                .ok_or_else(|| format!("no task with uid {uid:?} before this line"))?;
            ids.insert(uid.to_string(), id);
            Ok(id)
        };
        match parsed {
            Line::Task(record) => {
                let (id, outcome) = self.record_task(&record).map_err(|e| e.to_string())?;
                ids.insert(record.uid.clone(), id);
                counts.tasks += 1;
                counts.unchanged += u64::from(outcome == Outcome::Unchanged);
            }
            Line::Round { uid, summary } => {
                let id = id_of(&uid)?;
                let outcome = self.put_round(id, &summary).map_err(|e| e.to_string())?;
                counts.rounds += 1;
                counts.unchanged += u64::from(outcome == Outcome::Unchanged);
            }
            Line::Report { uid, report } => {
                let id = id_of(&uid)?;
                if report.node_name.is_empty() || report.round_number < 1 {
                    return Err("a report needs a nodeName and a roundNumber of at least 1".into());
                }
                pending.push((number, id, *report));
            }
        }
        Ok(())
    }

    fn flush_pending(
        &self,
        pending: &mut Vec<(usize, IncarnationId, Report)>,
        counts: &mut Counts,
    ) -> Result<(), ImportError> {
        if pending.is_empty() {
            return Ok(());
        }
        let items: Vec<NewReport> = pending
            .iter()
            .map(|(_, id, report)| NewReport { task: *id, report })
            .collect();
        let outcomes = self.put_reports(&items)?;
        counts.reports += outcomes.len() as u64;
        counts.unchanged += outcomes
            .iter()
            .filter(|o| **o == Outcome::Unchanged)
            .count() as u64;
        pending.clear();
        Ok(())
    }
}
