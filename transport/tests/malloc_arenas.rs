//! glibc keeps to the arena cap kdoctor sets, and to the operator's `MALLOC_ARENA_MAX` over it.
//! glibc fixes its limit once per process, so each case runs in a child process of this test.

use std::process::Command;
use std::sync::{Arc, Barrier};

use kdoctor_transport::malloc_arenas;

/// Set in the child: which case to run.
const CHILD: &str = "KDOCTOR_TEST_ARENAS_CHILD";
/// Threads that allocate at once in the child: more than any cap below.
const THREADS: usize = 12;

#[test]
fn threads_get_no_more_arenas_than_the_cap_and_the_operator_s_setting_wins() {
    if let Ok(case) = std::env::var(CHILD) {
        child(&case);
    }
    let (set, arenas) = run_child("capped", None);
    assert_eq!(
        set, "Some(4)",
        "two hot threads: one arena each and two for the rest"
    );
    assert!(arenas <= 4, "{arenas} arenas with a cap of 4");
    // The count is real: without the cap every thread gets an arena of its own.
    let (set, arenas) = run_child("uncapped", None);
    assert_eq!(set, "None");
    assert!(
        arenas > 4,
        "only {arenas} arenas for {THREADS} threads without a cap"
    );
    let (set, arenas) = run_child("capped", Some("1"));
    assert_eq!(set, "None", "MALLOC_ARENA_MAX set: kdoctor sets nothing");
    assert_eq!(arenas, 1, "MALLOC_ARENA_MAX=1: one arena");
}

/// Runs `case` in a child process of this test; its cap set and the arenas glibc reported.
fn run_child(case: &str, operator: Option<&str>) -> (String, usize) {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([
            "--exact",
            "threads_get_no_more_arenas_than_the_cap_and_the_operator_s_setting_wins",
        ])
        .args(["--test-threads=1", "--nocapture"])
        .env(CHILD, case)
        .env_remove(malloc_arenas::ENV);
    if let Some(value) = operator {
        command.env(malloc_arenas::ENV, value);
    }
    let out = command.output().expect("child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child {case}: {stdout}\n{stderr}");
    let set = stdout
        .lines()
        .find_map(|l| l.split_once("cap set: ").map(|(_, set)| set.trim()))
        .unwrap_or_else(|| panic!("child {case} said no cap: {stdout}"))
        .to_string();
    // malloc_stats prints an "Arena N:" block per arena.
    let arenas = stderr.lines().filter(|l| l.starts_with("Arena ")).count();
    assert!(
        arenas >= 1,
        "child {case}: no arena in malloc_stats: {stderr}"
    );
    (set, arenas)
}

/// The child: sets the cap (or not), has `THREADS` threads allocate at once, prints the arenas.
fn child(case: &str) -> ! {
    let set = match case {
        "capped" => malloc_arenas::cap(2),
        _ => None,
    };
    println!("cap set: {set:?}");
    let all = Arc::new(Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let all = all.clone();
            std::thread::spawn(move || {
                // Below the mmap threshold: served from the thread's arena, and held until
                // the arenas are counted.
                let held = std::hint::black_box(vec![1u8; 16 * 1024]);
                all.wait();
                all.wait();
                drop(held);
            })
        })
        .collect();
    all.wait();
    // SAFETY: malloc_stats only reads the allocator's state and prints it to stderr.
    unsafe { libc::malloc_stats() };
    all.wait();
    for thread in threads {
        thread.join().expect("thread");
    }
    std::process::exit(0);
}
