//! The report spool: one file per round report in a directory that survives agent restarts,
//! named as upstream's agent reports (`<Kind>_<task>_round<N>_<node>_<expiry RFC3339>`), written
//! to a temporary file, fsynced and renamed so that a reader never sees half a report.
//! Acknowledging a report (the harvester has it safely) writes a marker beside it; an
//! acknowledged report is removed [`ACK_RETENTION`] later, an unacknowledged one at its expiry.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use kdoctor_api::report::Report;
use kdoctor_api::report::files::{ReportFileName, parse_file_name};
use kdoctor_api::task::TaskKind;

/// How long an acknowledged report is kept (so a harvester that crashed after acknowledging
/// but before its own flush can fetch it again).
pub const ACK_RETENTION: Duration = Duration::from_secs(600);
/// Suffix of the acknowledgement marker of a report.
pub const ACK_SUFFIX: &str = ".ack";
/// Prefix of temporary files (never listed; removed when the spool is opened).
pub const TEMP_PREFIX: &str = ".tmp-";

/// What went wrong with the spool; names the file.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// An IO error on a path.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A name that is not a report of this spool.
    #[error("{0:?} is not a report name")]
    BadName(String),
    /// No such report.
    #[error("no report {0:?}")]
    NotFound(String),
    /// The report could not be serialized.
    #[error("report: {0}")]
    Encode(#[from] serde_json::Error),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One spooled report as listed (the report API's contract).
pub use kdoctor_transport::report_api::Entry;

/// The spool directory.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    next_temp: AtomicU64,
    /// Counts the reports written, for the report API's lists held until one is there.
    written: tokio::sync::watch::Sender<u64>,
}

/// The file name of a report: upstream's agent report name.
pub fn file_name(kind: TaskKind, task: &str, round: u64, node: &str, expiry: Timestamp) -> String {
    // Whole seconds, as upstream (Go's RFC3339).
    let expiry = Timestamp::from_second(expiry.as_second()).unwrap_or(expiry);
    format!("{kind}_{task}_round{round}_{node}_{expiry}")
}

impl Spool {
    /// Opens (creating) the directory and removes temporary files a killed writer left.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Spool, SpoolError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        for entry in fs::read_dir(&dir).map_err(io(&dir))? {
            let entry = entry.map_err(io(&dir))?;
            if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                let path = entry.path();
                fs::remove_file(&path).map_err(io(&path))?;
            }
        }
        Ok(Spool {
            dir,
            next_temp: AtomicU64::new(0),
            written: tokio::sync::watch::Sender::new(0),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Checks that `name` is a report name (no path tricks) and parses it.
    fn check(&self, name: &str) -> Result<ReportFileName, SpoolError> {
        if name.contains('/') || name.contains('\\') || name.starts_with('.') {
            return Err(SpoolError::BadName(name.to_string()));
        }
        let parsed = parse_file_name(name).map_err(|_| SpoolError::BadName(name.to_string()))?;
        if parsed.node.is_none() {
            return Err(SpoolError::BadName(name.to_string()));
        }
        Ok(parsed)
    }

    /// Writes bytes durably under `name`: temporary file, fsync, rename, fsync of the directory.
    fn write_atomically(&self, name: &str, bytes: &[u8]) -> Result<(), SpoolError> {
        let n = self.next_temp.fetch_add(1, Ordering::Relaxed);
        let temp = self
            .dir
            .join(format!("{TEMP_PREFIX}{}-{n}-{name}", std::process::id()));
        let mut file = File::create(&temp).map_err(io(&temp))?;
        file.write_all(bytes).map_err(io(&temp))?;
        file.sync_all().map_err(io(&temp))?;
        drop(file);
        let target = self.dir.join(name);
        fs::rename(&temp, &target).map_err(io(&target))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&self.dir))?;
        Ok(())
    }

    /// Spools a round report; returns its name. Never replaces a spooled report: names have
    /// whole-second expiries, so a second report of the same task name, round and node in the
    /// same second (a task deleted and re-created at once) gets the next free second instead of
    /// overwriting one not harvested yet, or inheriting its acknowledgement.
    pub fn write(
        &self,
        kind: TaskKind,
        task: &str,
        node: &str,
        report: &Report,
        expiry: Timestamp,
    ) -> Result<String, SpoolError> {
        let round = u64::try_from(report.round_number).unwrap_or(0);
        let mut expiry = expiry;
        let mut name = file_name(kind, task, round, node, expiry);
        while self.dir.join(&name).exists() || self.dir.join(format!("{name}{ACK_SUFFIX}")).exists()
        {
            expiry += jiff::SignedDuration::from_secs(1);
            name = file_name(kind, task, round, node, expiry);
        }
        self.check(&name)?;
        let bytes = serde_json::to_vec(report)?;
        self.write_atomically(&name, &bytes)?;
        self.written.send_modify(|n| *n += 1);
        Ok(name)
    }

    /// Changes each time a report is written (subscribe before listing, then wait for a change:
    /// no write between the two is missed).
    pub fn writes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.written.subscribe()
    }

    /// Every report, sorted by name.
    pub fn list(&self) -> Result<Vec<Entry>, SpoolError> {
        let mut entries = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io(&self.dir))? {
            let entry = entry.map_err(io(&self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(ACK_SUFFIX) {
                continue;
            }
            let Ok(parsed) = self.check(&name) else {
                continue;
            };
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            entries.push(Entry {
                acknowledged: self.acknowledged(&name),
                name,
                kind: parsed.kind.to_string(),
                task: parsed.task,
                round: parsed.round,
                node: parsed.node.unwrap_or_default(),
                expiry: parsed.expiry,
                size: meta.len(),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn acknowledged(&self, name: &str) -> Option<Timestamp> {
        let marker = self.dir.join(format!("{name}{ACK_SUFFIX}"));
        fs::read_to_string(marker).ok()?.trim().parse().ok()
    }

    /// The bytes of a report.
    pub fn read(&self, name: &str) -> Result<Vec<u8>, SpoolError> {
        self.check(name)?;
        let path = self.dir.join(name);
        fs::read(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SpoolError::NotFound(name.to_string()),
            _ => SpoolError::Io { path, source: e },
        })
    }

    /// Marks a report acknowledged at `now` (idempotent: the first time counts).
    pub fn acknowledge(&self, name: &str, now: Timestamp) -> Result<Timestamp, SpoolError> {
        self.check(name)?;
        if !self.dir.join(name).exists() {
            return Err(SpoolError::NotFound(name.to_string()));
        }
        if let Some(at) = self.acknowledged(name) {
            return Ok(at);
        }
        self.write_atomically(&format!("{name}{ACK_SUFFIX}"), now.to_string().as_bytes())?;
        Ok(now)
    }

    /// Removes acknowledged reports older than [`ACK_RETENTION`] and expired ones; returns the
    /// names removed.
    pub fn sweep(&self, now: Timestamp) -> Result<Vec<String>, SpoolError> {
        let retention = jiff::SignedDuration::try_from(ACK_RETENTION).unwrap_or_default();
        let mut removed = Vec::new();
        for entry in self.list()? {
            let acked_out = entry
                .acknowledged
                .and_then(|at| at.checked_add(retention).ok())
                .is_some_and(|until| until <= now);
            if acked_out || entry.expiry <= now {
                let path = self.dir.join(&entry.name);
                fs::remove_file(&path).map_err(io(&path))?;
                let marker = self.dir.join(format!("{}{ACK_SUFFIX}", entry.name));
                let _ = fs::remove_file(marker);
                removed.push(entry.name);
            }
        }
        // Markers whose report is gone (a crash between the two removals).
        for entry in fs::read_dir(&self.dir).map_err(io(&self.dir))?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(report) = name.strip_suffix(ACK_SUFFIX)
                && !self.dir.join(report).exists()
            {
                let _ = fs::remove_file(entry.path());
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(what: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kdoctor-spool-{what}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn report(round: i64) -> Report {
        let mut r: Report = serde_json::from_value(serde_json::json!({
            "roundNumber": round, "roundResult": "succeed", "nodeName": "node-1",
            "podName": "kdoctor-agent-x", "roundStartTimeStamp": "2026-01-01T00:00:00Z",
            "roundEndTimeStamp": "2026-01-01T00:00:02Z", "roundDuration": "2s"
        }))
        .unwrap();
        r.round_number = round;
        r
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    #[test]
    fn names_are_upstreams() {
        assert_eq!(
            file_name(TaskKind::NetReach, "task", 1, "kdoctor-worker", at(0)),
            "NetReach_task_round1_kdoctor-worker_2026-01-01T00:00:00Z"
        );
    }

    #[test]
    fn write_list_read_acknowledge_sweep() {
        let dir = temp_dir("cycle");
        let spool = Spool::open(&dir).unwrap();
        let a = spool
            .write(TaskKind::Netdns, "dns", "node-1", &report(1), at(3600))
            .unwrap();
        let b = spool
            .write(
                TaskKind::AppHttpHealthy,
                "app",
                "node-1",
                &report(2),
                at(60),
            )
            .unwrap();
        let list = spool.list().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].name, b);
        assert_eq!(list[0].kind, "AppHttpHealthy");
        assert_eq!(list[0].round, 2);
        let back: Report = serde_json::from_slice(&spool.read(&a).unwrap()).unwrap();
        assert_eq!(back, report(1));
        assert_eq!(spool.acknowledge(&a, at(10)).unwrap(), at(10));
        assert_eq!(
            spool.acknowledge(&a, at(20)).unwrap(),
            at(10),
            "the first ack counts"
        );
        assert_eq!(spool.list().unwrap()[1].acknowledged, Some(at(10)));
        // b expires at 60; a was acknowledged at 10 and goes 600 s later.
        assert_eq!(spool.sweep(at(59)).unwrap(), Vec::<String>::new());
        assert_eq!(spool.sweep(at(60)).unwrap(), vec![b.clone()]);
        assert_eq!(spool.sweep(at(609)).unwrap(), Vec::<String>::new());
        assert_eq!(spool.sweep(at(610)).unwrap(), vec![a.clone()]);
        assert!(spool.list().unwrap().is_empty());
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            0,
            "markers removed too"
        );
        assert!(matches!(spool.read(&a), Err(SpoolError::NotFound(_))));
        assert!(matches!(
            spool.acknowledge(&a, at(0)),
            Err(SpoolError::NotFound(_))
        ));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn reopening_keeps_reports_and_drops_temporary_files() {
        let dir = temp_dir("reopen");
        let spool = Spool::open(&dir).unwrap();
        let name = spool
            .write(TaskKind::NetReach, "t", "n", &report(1), at(0))
            .unwrap();
        fs::write(dir.join(format!("{TEMP_PREFIX}1-0-{name}")), b"{half").unwrap();
        fs::write(dir.join("README"), b"not a report").unwrap();
        drop(spool);
        let spool = Spool::open(&dir).unwrap();
        let names: Vec<String> = spool.list().unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec![name]);
        assert!(
            !fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with(TEMP_PREFIX))
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn names_cannot_escape_the_directory() {
        let dir = temp_dir("names");
        let spool = Spool::open(&dir).unwrap();
        for bad in [
            "../x",
            "/etc/passwd",
            ".tmp-1-0-x",
            "NetReach_t_round1_summary_2026-01-01T00:00:00Z",
            "x",
        ] {
            assert!(
                matches!(spool.read(bad), Err(SpoolError::BadName(_))),
                "{bad}"
            );
        }
        let _ = fs::remove_dir_all(&dir);
    }
}
