//! Issue 18 item 3, a full disk: the store's filesystem (a small tmpfs mounted for the test, so
//! nothing else on the machine fills) runs out of space while reports are written. A write that
//! cannot be made fails with an error that says so, and the store reports that it stopped (sled
//! takes nothing more after an I/O error, and hangs if closed gracefully: the controller's
//! liveness check fails instead, and the pod restarts). sled's flush sometimes never returns
//! after the error; the store's flush deadline (30 s) then stops it with a message of its own.
//! Once space returns, the store reopens with every acknowledged write, and takes writes again.
//!
//! The writer is a child process (this test binary, with `KDOCTOR_STORE_FULL_DISK_CHILD` set)
//! that exits without closing the store, as a restarted controller does. Needs root (mount); CI
//! runs as root, and without it the test fails saying why rather than passing.

use std::path::{Path, PathBuf};
use std::process::Command;

use kdoctor_api::fixtures::net_reach_report;
use kdoctor_api::report::Report;
use kdoctor_store::{Store, StoreConfig};

use crate::support::{scratch, task};

const CHILD_ENV: &str = "KDOCTOR_STORE_FULL_DISK_CHILD";

/// A tmpfs of `size` at `dir`, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount(8) runs");
        assert!(
            status.success(),
            "mounting a tmpfs at {} failed: this test needs root (as CI runs it)",
            dir.display()
        );
        Tmpfs(dir.to_path_buf())
    }

    fn resize(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .expect("mount(8) runs");
        assert!(status.success(), "resizing the tmpfs failed");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// This test binary run again for the one test `test`, with `env` set to `path` (the test then
/// plays the child); what it printed.
fn child(test: &str, env: &str, path: &Path) -> String {
    let output = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(env, path)
        .output()
        .expect("the child runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Free space on `dir`'s filesystem, in KiB (df).
fn free_kib_at(dir: &Path) -> u64 {
    let out = Command::new("df")
        .args(["-k", "--output=avail"])
        .arg(dir)
        .output()
        .expect("df runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .and_then(|l| l.trim().parse::<u64>().ok())
        .expect("df says how much is free")
}

/// Report number `n`: many distinct targets, so that it compresses poorly and the disk fills.
fn report(n: u64) -> Report {
    net_reach_report(&format!("node-{n}"), 1, 400, n * 7919)
}

/// The child: writes until a write fails, prints what it saw, exits without closing the store.
fn fill(path: &Path) -> ! {
    let store = Store::open(StoreConfig::new(path)).expect("store opens");
    let (id, _) = store.record_task(&task("t", "uid-full")).expect("task");
    let mut acknowledged = 0u64;
    for n in 0..5_000u64 {
        match store.put_report(id, &report(n)) {
            Ok(_) => acknowledged = n + 1,
            Err(e) => {
                println!("FAILED {e}");
                break;
            }
        }
    }
    println!("ACKNOWLEDGED {acknowledged}");
    println!("STOPPED {}", store.failure().unwrap_or_default());
    let after = store.put_report(id, &report(9_999));
    println!("AFTER {}", after.is_err());
    std::process::exit(0);
}

#[test]
fn a_full_disk_fails_writes_clearly_keeps_what_was_acknowledged_and_recovers() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        fill(Path::new(&path));
    }
    let dir = scratch("full-disk");
    let disk = Tmpfs::mount(&dir, "24m");
    let path = dir.join("store");
    let text = child(
        "full_disk::a_full_disk_fails_writes_clearly_keeps_what_was_acknowledged_and_recovers",
        CHILD_ENV,
        &path,
    );
    let line = |prefix: &str| -> String {
        // Anywhere in a line: the test harness prints on the same line.
        text.lines()
            .find_map(|l| l.find(prefix).map(|at| &l[at + prefix.len()..]))
            .unwrap_or_else(|| panic!("the writer printed no {prefix:?} line: {text}"))
            .to_string()
    };
    // sled either returns the error or, now and then, leaves its flush waiting forever (seen in
    // CI): then the store's flush deadline says so instead (crate::flusher).
    let says_full =
        |text: &str| text.contains("No space left on device") || text.contains("disk is full");
    let failed = line("FAILED ");
    assert!(says_full(&failed), "the error says what happened: {failed}");
    let acknowledged: u64 = line("ACKNOWLEDGED ").parse().expect("a count");
    assert!(acknowledged > 0, "{text}");
    let stopped = line("STOPPED ");
    assert!(
        says_full(&stopped),
        "the store reports that it stopped: {text}"
    );
    assert_eq!(line("AFTER "), "true", "no write after the failure");

    // Space returns; the store reopens with every acknowledged report, and takes writes.
    disk.resize("256m");
    let store = Store::open(StoreConfig::new(&path)).expect("reopens once space returns");
    assert!(store.failure().is_none());
    let id = store.tasks()[0].id;
    for n in 0..acknowledged {
        assert_eq!(
            store
                .report(id, 1, &format!("node-{n}"))
                .expect("readable")
                .as_ref(),
            Some(&report(n)),
            "acknowledged report {n}"
        );
    }
    let before = store.resource_version();
    store
        .put_report(id, &report(10_000))
        .expect("writes resume once space returns");
    assert!(store.resource_version() > before);
    drop(store);
    drop(disk);
    let _ = std::fs::remove_dir_all(&dir);
}

const CREATE_CHILD_ENV: &str = "KDOCTOR_STORE_FULL_CREATE_CHILD";

/// The child: creates a store; exits without closing it (a write on a full disk may never
/// return: the other test covers writes).
fn create_on_full_disk(path: &Path) -> ! {
    match Store::open(StoreConfig::new(path)) {
        Err(e) => println!("OPEN FAILED {e}"),
        Ok(_store) => println!("OPENED"),
    }
    std::process::exit(0);
}

/// A replica that comes back as a new node on a volume that is full (the chaos suite's disk-full
/// case) fails to create its store; once space returns, the store it half made must open —
/// before, its durable mark could be left empty, which every later start refused as damaged.
#[test]
fn a_store_first_created_on_a_full_disk_opens_once_space_returns() {
    if let Ok(path) = std::env::var(CREATE_CHILD_ENV) {
        create_on_full_disk(Path::new(&path));
    }
    let dir = scratch("full-create");
    let disk = Tmpfs::mount(&dir, "8m");
    // Free space left for the store, from none to more than its first files take.
    for free_kib in [0u64, 4, 8, 12, 16, 20, 24, 28, 32, 64, 256, 1024] {
        let path = dir.join(format!("store-{free_kib}"));
        let filler = dir.join("filler");
        let fill = free_kib_at(&dir).saturating_sub(free_kib);
        std::fs::write(&filler, vec![0u8; (fill * 1024) as usize]).expect("filler written");
        let text = child(
            "full_disk::a_store_first_created_on_a_full_disk_opens_once_space_returns",
            CREATE_CHILD_ENV,
            &path,
        );
        assert!(
            text.contains("OPEN FAILED") || text.contains("OPENED"),
            "the creator said what happened ({free_kib} KiB free): {text}"
        );
        std::fs::remove_file(&filler).expect("space returns");
        let store = Store::open(StoreConfig::new(&path)).unwrap_or_else(|e| {
            panic!("the store half made with {free_kib} KiB free opens once space returns: {e}")
        });
        assert!(store.failure().is_none());
        drop(store);
        let _ = std::fs::remove_dir_all(&path);
    }
    drop(disk);
    let _ = std::fs::remove_dir_all(&dir);
}
