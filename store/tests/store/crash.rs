//! Crash safety: a child process writes reports in a loop and is killed with SIGKILL at random
//! moments, over and over. After each kill the store reopens, every report whose write had
//! returned reads back byte-identical, and nothing half-written is visible.
//!
//! The child is this same test binary, started with `KDOCTOR_STORE_CRASH_CHILD` set, running
//! [`writer_acknowledges_only_durable_reports`], which then writes until it is killed.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use kdoctor_api::fixtures::net_reach_report;
use kdoctor_api::report::Report;
use kdoctor_store::{NewReport, Store, StoreConfig};

use crate::support::{scratch, task};

const CHILD_ENV: &str = "KDOCTOR_STORE_CRASH_CHILD";
const KILLS: u64 = 50;

/// The report the writer stores as number `k` of round `round`: the verifier regenerates it.
fn expected(round: u64, k: u64) -> Report {
    // Every seventh report is large enough to be chunked.
    let targets = if k % 7 == 3 {
        1500
    } else {
        5 + (k % 20) as usize
    };
    let mut report = net_reach_report(
        &format!("node-{k}"),
        round as i64,
        targets,
        round * 100_000 + k,
    );
    if targets > 1000 {
        for (j, d) in report
            .task_net_reach
            .as_mut()
            .expect("task")
            .round_task_detail
            .iter_mut()
            .enumerate()
        {
            d.failure_reason = Some(format!(
                "{:x}",
                (k + j as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ));
        }
    }
    report
}

/// Writes reports of `round`, alone or in batches, printing `ACK <round> <k>` once each write
/// has returned. Stops after `limit` reports, or never.
fn write_loop(dir: &Path, round: u64, limit: Option<u64>) {
    let store = Store::open(StoreConfig::new(dir)).expect("child opens the store");
    let (id, _) = store
        .record_task(&task("crash", "uid-crash"))
        .expect("task recorded");
    let mut k = 0;
    while limit.is_none_or(|l| k < l) {
        if k % 5 == 4 {
            let batch: Vec<Report> = (k..k + 3).map(|i| expected(round, i)).collect();
            let items: Vec<NewReport> = batch
                .iter()
                .map(|r| NewReport {
                    task: id,
                    report: r,
                })
                .collect();
            store.put_reports(&items).expect("batch stored");
            for i in k..k + 3 {
                println!("ACK {round} {i}");
            }
            k += 3;
        } else {
            store
                .put_report(id, &expected(round, k))
                .expect("report stored");
            println!("ACK {round} {k}");
            k += 1;
        }
    }
}

/// Checks what a killed writer left: every acknowledged report reads back byte-identical, and
/// every report the store lists is whole.
fn verify(
    dir: &Path,
    acked: &[(u64, u64)],
    cache: &mut HashMap<(u64, u64), Vec<u8>>,
) -> Result<(), String> {
    let store = Store::open(StoreConfig::new(dir)).map_err(|e| format!("reopen: {e}"))?;
    let task = store.by_uid("uid-crash").ok_or("task record lost")?;
    for (round, k) in acked {
        let want = cache
            .entry((*round, *k))
            .or_insert_with(|| serde_json::to_vec(&expected(*round, *k)).unwrap_or_default());
        let got = store
            .report_json(task.id, *round, &format!("node-{k}"))
            .map_err(|e| format!("round {round} report {k}: {e}"))?;
        if got.as_deref() != Some(&want[..]) || want.is_empty() {
            return Err(format!(
                "acknowledged report {k} of round {round} did not survive"
            ));
        }
    }
    let mut listed = 0;
    for round in store.rounds(task.id).map_err(|e| e.to_string())? {
        let reports = store
            .reports(task.id, round.round)
            .map_err(|e| e.to_string())?;
        if reports.len() as u64 != round.reports {
            return Err(format!(
                "round {} counts {} reports, lists {}",
                round.round,
                round.reports,
                reports.len()
            ));
        }
        for meta in reports {
            let json = store
                .report_json(task.id, round.round, &meta.node)
                .map_err(|e| format!("half-written report {} visible: {e}", meta.node))?
                .ok_or_else(|| format!("report {} listed without a body", meta.node))?;
            if json.len() as u64 != meta.json_bytes {
                return Err(format!(
                    "report {} has {} bytes, header says {}",
                    meta.node,
                    json.len(),
                    meta.json_bytes
                ));
            }
            // Acknowledged reports were compared byte for byte above; the others (written
            // before the kill, acknowledgement lost) must still be whole.
            let k = meta
                .node
                .trim_start_matches("node-")
                .parse::<u64>()
                .unwrap_or(u64::MAX);
            if !cache.contains_key(&(round.round, k)) {
                serde_json::from_slice::<Report>(&json)
                    .map_err(|e| format!("report {}: {e}", meta.node))?;
            }
            listed += 1;
        }
    }
    if (listed as u64) < acked.len() as u64 {
        return Err(format!(
            "{listed} reports listed, {} acknowledged",
            acked.len()
        ));
    }
    Ok(())
}

/// A small deterministic generator for kill delays.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// In a child: write until killed. Otherwise: a short run of the same writer must acknowledge
/// only reports that read back.
#[test]
fn writer_acknowledges_only_durable_reports() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        let round: u64 = std::env::var("KDOCTOR_STORE_CRASH_ROUND")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(1);
        write_loop(Path::new(&dir), round, None);
        return;
    }
    let dir = scratch("crash-inline");
    write_loop(&dir, 1, Some(12));
    let acked: Vec<(u64, u64)> = (0..12).map(|k| (1, k)).collect();
    verify(&dir, &acked, &mut HashMap::new()).expect("all acknowledged reports are there");
}

#[test]
fn acknowledged_reports_survive_sigkill_at_random_moments() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = scratch("crash-kill");
    let exe = std::env::current_exe().expect("test binary");
    let mut random = 0x2545_f491_4f6c_dd1d_u64;
    let mut acked: Vec<(u64, u64)> = Vec::new();
    let mut cache = HashMap::new();
    for kill in 0..KILLS {
        let round = kill + 1;
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash::writer_acknowledges_only_durable_reports",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &dir)
            .env("KDOCTOR_STORE_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("child starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let mut parts = line.split_whitespace();
                if parts.next() == Some("ACK") {
                    let r = parts.next().and_then(|p| p.parse::<u64>().ok());
                    let k = parts.next().and_then(|p| p.parse::<u64>().ok());
                    if let (Some(r), Some(k)) = (r, k) {
                        let _ = tx.send((r, k));
                    }
                }
            }
        });
        // Wait until the child writes, then kill it at a random moment of its loop.
        let first = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the child acknowledges a write");
        acked.push(first);
        std::thread::sleep(Duration::from_millis(next_random(&mut random) % 150));
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        reader.join().expect("reader ends");
        acked.extend(rx.try_iter());
        if let Err(problem) = verify(&dir, &acked, &mut cache) {
            panic!(
                "after kill {kill} ({} reports acknowledged so far): {problem}",
                acked.len()
            );
        }
    }
    assert!(
        acked.len() as u64 > KILLS,
        "too few writes to mean anything: {}",
        acked.len()
    );
    eprintln!("{} reports acknowledged across {KILLS} kills", acked.len());
}
