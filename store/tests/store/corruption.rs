//! Issue 20 M6: damage to sled's files after a crash never turns into a silent loss. A child
//! process writes reports, purges one (a DELETE answered 200) and is killed with SIGKILL; the
//! log is then damaged three ways (garbage at the tail, a cut tail, zeroed pages). For each, the
//! reopened store either holds every acknowledged write (the purge included, the
//! resourceVersion not behind), or refuses with a message that says what to do; after
//! `Store::repair`, it opens and its resourceVersions never go back below what was acknowledged.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kdoctor_api::fixtures::net_reach_report;
use kdoctor_store::{Store, StoreConfig, StoreError};

use crate::support::{scratch, task};

const CHILD_ENV: &str = "KDOCTOR_STORE_CORRUPTION_CHILD";
const REPORTS: u64 = 40;

/// In the child: writes, purges round 1, prints the acknowledged resourceVersion, then waits to
/// be killed. In the parent (no env var): nothing.
#[test]
fn corruption_child_writes_then_waits() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = Store::open(StoreConfig::new(&dir)).expect("child opens");
    let (id, _) = store
        .record_task(&task("damage", "uid-damage"))
        .expect("task");
    for k in 0..REPORTS {
        let round = 1 + k % 2;
        store
            .put_report(
                id,
                &net_reach_report(&format!("node-{k}"), round as i64, 50, k),
            )
            .expect("report");
    }
    store.purge_round(id, 1).expect("purged");
    println!("ACK {}", store.resource_version());
    std::io::stdout().flush().expect("flush");
    std::thread::sleep(std::time::Duration::from_secs(600));
}

/// Runs the child, kills it once it acknowledged, returns the acknowledged resourceVersion.
fn write_and_kill(dir: &Path) -> u64 {
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "corruption::corruption_child_writes_then_waits",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("child starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut acked = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("line");
        // libtest prints the test's name first, on the same line.
        if let Some((_, rv)) = line.split_once("ACK ") {
            acked = Some(rv.trim().parse::<u64>().expect("rv"));
            break;
        }
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    acked.expect("the child acknowledged its writes")
}

/// sled's log: the largest file under `db/` (snapshots and config are small).
fn log_file(dir: &Path) -> std::path::PathBuf {
    std::fs::read_dir(dir.join("db"))
        .expect("db dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("a log file")
}

/// Every file under `dir` with its bytes (but the lock, which records its last holder).
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.file_name().is_some_and(|n| n != "LOCK") {
                files.insert(path.clone(), std::fs::read(&path).expect("read file"));
            }
        }
    }
    files
}

/// Checks the reopened store: whole, or refused with advice; then repaired and moving forward
/// (or, where sled itself refuses its files, left exactly as it was by the refusal and by the
/// attempt to repair it, which refuses too).
fn judge(dir: &Path, acked: u64, how: &str) {
    let before = contents(dir);
    match Store::open(StoreConfig::new(dir)) {
        Ok(store) => {
            assert!(
                store.resource_version() >= acked,
                "{how}: reopened at resourceVersion {} after {acked} was acknowledged",
                store.resource_version()
            );
            let task = store.by_uid("uid-damage").expect("task kept");
            assert_eq!(
                store.round_numbers(task.id),
                vec![2],
                "{how}: the purge of round 1 came back undone"
            );
            assert_eq!(
                store.reports(task.id, 2).expect("reports").len() as u64,
                REPORTS / 2,
                "{how}"
            );
        }
        Err(e) => {
            let message = e.to_string();
            assert!(
                matches!(
                    e,
                    StoreError::LostWrites { .. }
                        | StoreError::Open { .. }
                        | StoreError::MarkDamaged { .. }
                ),
                "{how}: {message}"
            );
            assert!(
                message.contains("Nothing was changed") && message.contains("kdoctor store"),
                "{how}: the refusal must say what to do: {message}"
            );
            if matches!(e, StoreError::Open { .. }) {
                // sled itself refuses the files: nothing to repair in place, and nothing may
                // be changed on the way (a backup or a replica's snapshot restores them).
                let repair = Store::repair(&StoreConfig::new(dir));
                assert!(
                    matches!(repair, Err(StoreError::Open { .. })),
                    "{how}: repairing what sled refuses: {repair:?}"
                );
                assert!(
                    contents(dir) == before,
                    "{how}: a refused store's files were changed"
                );
                return;
            }
            let repair = Store::repair(&StoreConfig::new(dir)).expect("repairs");
            assert!(repair.continues_from >= acked, "{how}: {repair:?}");
            let store = Store::open(StoreConfig::new(dir)).expect("opens after repair");
            assert!(store.resource_version() >= acked, "{how}");
            let before = store.resource_version();
            store
                .record_task(&task("after-repair", "uid-after"))
                .expect("writes after repair");
            assert!(store.resource_version() > before.max(acked), "{how}");
        }
    }
}

fn damaged(name: &str, damage: impl FnOnce(&Path)) -> Option<String> {
    let dir = scratch(name);
    let acked = write_and_kill(&dir);
    damage(&log_file(&dir));
    let outcome = match Store::open(StoreConfig::new(&dir)) {
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    };
    judge(&dir, acked, name);
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

#[test]
fn damaged_logs_are_whole_or_refused_never_silently_behind() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let mut refusals = Vec::new();
    refusals.push(damaged("corrupt-garbage-tail", |log| {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(log)
            .expect("log");
        file.write_all(&[0xa5; 32]).expect("garbage");
    }));
    refusals.push(damaged("corrupt-cut-tail", |log| {
        let len = std::fs::metadata(log).expect("len").len();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(log)
            .expect("log");
        file.set_len(len.saturating_sub(4096).max(len / 2))
            .expect("cut");
    }));
    refusals.push(damaged("corrupt-zeroed-pages", |log| {
        let len = std::fs::metadata(log).expect("len").len();
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(log)
            .expect("log");
        file.seek(SeekFrom::Start(len / 2 / 4096 * 4096))
            .expect("seek");
        file.write_all(&[0u8; 8192]).expect("zeroes");
    }));
    // sled's own configuration damaged: sled refuses the files (the branch of `judge` where
    // nothing can be repaired in place and nothing may be changed).
    let dir = scratch("corrupt-sled-conf");
    let acked = write_and_kill(&dir);
    let conf = dir.join("db").join("conf");
    assert!(conf.is_file(), "sled keeps its configuration in db/conf");
    std::fs::write(&conf, [0xa5u8; 64]).expect("garbage");
    assert!(
        matches!(
            Store::open(StoreConfig::new(&dir)),
            Err(StoreError::Open { .. })
        ),
        "sled should refuse a damaged configuration"
    );
    judge(&dir, acked, "corrupt-sled-conf");
    let _ = std::fs::remove_dir_all(&dir);
    // The mark itself damaged: refused until repaired.
    let dir = scratch("corrupt-mark");
    let acked = write_and_kill(&dir);
    std::fs::write(dir.join("durable-rv"), b"garbage").expect("mark");
    judge(&dir, acked, "corrupt-mark");
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("refusals: {refusals:?}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("dir");
    for entry in std::fs::read_dir(from).expect("read dir").flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The mechanism itself, deterministically: database files put back to an older state (as a
/// disk that lost its last writes would) are refused, the repair continues from the
/// acknowledged resourceVersion, and a watcher's resourceVersion stays valid.
#[test]
fn a_database_behind_its_acknowledged_writes_is_refused_until_repaired() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = scratch("corrupt-rolled-back");
    let old = scratch("corrupt-rolled-back-copy");
    let store = Store::open(StoreConfig::new(&dir)).expect("opens");
    let (id, _) = store
        .record_task(&task("damage", "uid-damage"))
        .expect("task");
    store
        .put_report(id, &net_reach_report("node-1", 1, 5, 1))
        .expect("report");
    drop(store);
    copy_dir(&dir.join("db"), &old);
    let store = Store::open(StoreConfig::new(&dir)).expect("reopens");
    let (id, _) = store
        .record_task(&task("damage", "uid-damage"))
        .expect("task");
    store.purge_round(id, 1).expect("purged");
    let acked = store.resource_version();
    drop(store);
    std::fs::remove_dir_all(dir.join("db")).expect("rm");
    copy_dir(&old, &dir.join("db"));

    let error = match Store::open(StoreConfig::new(&dir)) {
        Ok(store) => panic!(
            "opened silently at resourceVersion {} after {acked} was acknowledged",
            store.resource_version()
        ),
        Err(e) => e,
    };
    assert!(
        matches!(error, StoreError::LostWrites { promised, found, .. } if promised == acked && found < acked),
        "{error}"
    );
    assert!(
        error.to_string().contains("kdoctor store repair --data"),
        "{error}"
    );
    // Refusing changed nothing: it refuses again.
    assert!(matches!(
        Store::open(StoreConfig::new(&dir)),
        Err(StoreError::LostWrites { .. })
    ));
    let repair = Store::repair(&StoreConfig::new(&dir)).expect("repairs");
    assert_eq!(repair.promised, Some(acked));
    assert_eq!(repair.continues_from, acked);
    let store = Store::open(StoreConfig::new(&dir)).expect("opens after repair");
    assert_eq!(store.resource_version(), acked);
    // A watcher that had seen `acked` resumes (nothing from its future), and the next write
    // is newer than anything it saw.
    let mut watch = store.subscribe(Some(acked)).expect("resumes");
    assert!(watch.backlog.is_empty());
    store
        .record_task(&task("after-repair", "uid-after"))
        .expect("writes");
    let event = watch.live.try_recv().expect("published after the flush");
    assert!(event.resource_version > acked);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&old);
}
