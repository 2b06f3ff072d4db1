//! Migration from a Go kdoctor controller's report directory (`/report` on the controller,
//! hostPath `/var/run/kdoctor/reports` in its chart).
//!
//! Each `<Kind>_<task>_round<N>_<node>_<expiry>` file is an agent report in the v0.2.2 shape or
//! the older Go-name shape; `…_summary_…` files are the controller's round summaries. Go kdoctor
//! did not keep task UIDs, so every task name becomes one incarnation with the UID
//! `migrated:<Kind>/<task>`; its spec is unknown (`null`).

use std::collections::BTreeMap;
use std::path::Path;

use jiff::Timestamp;
use kdoctor_api::report::Report;
use kdoctor_api::report::files::{SummaryFile, parse_file_name};
use kdoctor_api::report::legacy::parse_any_report;
use kdoctor_api::task::{RoundStatus, TaskKind};

use crate::error::{Result, StoreError};
use crate::model::{RoundResult, RoundSummary, TaskRecord};
use crate::store::{NewReport, Store};
use crate::transfer::{BadLine, Counts};

/// What a migration did.
#[derive(Debug, Default)]
pub struct MigrationReport {
    /// Imported records.
    pub counts: Counts,
    /// Files that were not imported, with the reason (the `line` is 0; see `file`).
    pub skipped: Vec<(String, BadLine)>,
}

/// The UID given to a task migrated from Go kdoctor.
pub fn migrated_uid(kind: TaskKind, task: &str) -> String {
    format!("migrated:{}/{task}", kind.as_str())
}

enum Parsed {
    Report(Box<Report>),
    Summary(RoundSummary),
}

impl Store {
    /// Imports every report file of a Go kdoctor report directory. Files that are not report
    /// files, or do not parse, are skipped and listed; the rest are imported (idempotently).
    pub fn migrate_kdoctor_dir(&self, dir: &Path) -> Result<MigrationReport> {
        let io = |e| StoreError::Io {
            path: dir.to_path_buf(),
            source: e,
        };
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        let mut report = MigrationReport::default();
        // (kind, task) → parsed files.
        let mut tasks: BTreeMap<(TaskKind, String), Vec<Parsed>> = BTreeMap::new();
        for name in names {
            let skip = |problem: String| (name.clone(), BadLine { line: 0, problem });
            let file = match parse_file_name(&name) {
                Ok(file) => file,
                Err(e) => {
                    report.skipped.push(skip(e.to_string()));
                    continue;
                }
            };
            let bytes = std::fs::read(dir.join(&name)).map_err(io)?;
            let parsed = match &file.node {
                Some(node) => match parse_any_report(&bytes) {
                    Ok(r) if r.node_name == *node && r.round_number as u64 == file.round => {
                        Ok(Parsed::Report(Box::new(r)))
                    }
                    Ok(r) => Err(format!(
                        "the file name says round {} of node {node}, the report round {} of node {}",
                        file.round, r.round_number, r.node_name
                    )),
                    Err(e) => Err(format!("not a kdoctor agent report: {e}")),
                },
                None => serde_json::from_slice::<SummaryFile>(&bytes)
                    .map(|s| Parsed::Summary(summary_of(&s)))
                    .map_err(|e| format!("not a kdoctor round summary: {e}")),
            };
            match parsed {
                Ok(parsed) => tasks
                    .entry((file.kind, file.task))
                    .or_default()
                    .push(parsed),
                Err(problem) => report.skipped.push(skip(problem)),
            }
        }
        for ((kind, task), files) in tasks {
            let created = files
                .iter()
                .map(|f| match f {
                    Parsed::Report(r) => r.round_start_time_stamp.0,
                    Parsed::Summary(s) => s.start,
                })
                .min()
                .unwrap_or_else(Timestamp::now);
            let record = TaskRecord {
                kind,
                name: task.clone(),
                uid: migrated_uid(kind, &task),
                created,
                spec: serde_json::Value::Null,
                status: None,
                deleted: None,
            };
            let (id, _) = self.record_task(&record)?;
            report.counts.tasks += 1;
            let mut reports = Vec::new();
            for file in files {
                match file {
                    Parsed::Summary(summary) => {
                        self.put_round(id, &summary)?;
                        report.counts.rounds += 1;
                    }
                    Parsed::Report(r) => reports.push(*r),
                }
            }
            let items: Vec<NewReport> = reports
                .iter()
                .map(|r| NewReport {
                    task: id,
                    report: r,
                })
                .collect();
            for chunk in items.chunks(256) {
                report.counts.reports += self.put_reports(chunk)?.len() as u64;
            }
        }
        Ok(report)
    }
}

/// A Go controller's summary file as a round summary.
fn summary_of(file: &SummaryFile) -> RoundSummary {
    let d = &file.detail;
    let result = match d.status {
        RoundStatus::Succeed => RoundResult::Succeed,
        RoundStatus::Fail => RoundResult::Fail,
        _ => RoundResult::from_report(&file.round_result),
    };
    let succeeded = d.succeed_agent_node_list.len() as u32;
    let failed = d.failed_agent_node_list.len() as u32;
    RoundSummary {
        round: file.round_number.max(1) as u64,
        result,
        start: d.start_time_stamp.0,
        end: Some(d.end_time_stamp.as_ref().map_or(file.end, |t| t.0)),
        expected_nodes: d.expected_actor_number.map_or(
            succeeded + failed + d.not_report_agent_node_list.len() as u32,
            |n| n.max(0) as u32,
        ),
        succeeded_nodes: succeeded,
        failed_nodes: failed,
        not_reported: d.not_report_agent_node_list.clone(),
        failure_reason: d.failure_reason.clone().filter(|r| !r.is_empty()),
    }
}
