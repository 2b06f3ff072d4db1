//! Report store benchmark: N tasks × R rounds × M nodes of realistic NetReach reports, written
//! and read through kdoctor-store, and the same bytes as one plain file per report (upstream
//! kdoctor's layout) in the same run.
//!
//! Usage: kdoctor-bench-store [--tasks N] [--rounds R] [--nodes M] [--targets T] [--batch B]
//!        [--reads K] [--dir DIR]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kdoctor_api::fixtures::net_reach_report;
use kdoctor_api::report::Report;
use kdoctor_api::task::TaskKind;
use kdoctor_store::{IncarnationId, NewReport, Store, StoreConfig, TaskRecord};

struct Options {
    tasks: u64,
    rounds: u64,
    nodes: u64,
    targets: usize,
    batch: usize,
    reads: usize,
    dir: PathBuf,
}

fn options() -> Options {
    let mut o = Options {
        tasks: 10_000,
        rounds: 10,
        nodes: 10,
        targets: 13,
        batch: 100,
        reads: 2_000,
        dir: std::env::temp_dir().join("kdoctor-bench-store"),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).map(String::as_str).unwrap_or_default();
        let number = || value.parse::<u64>().unwrap_or_else(|_| panic!("{} needs a number", pair[0]));
        match pair[0].as_str() {
            "--tasks" => o.tasks = number(),
            "--rounds" => o.rounds = number(),
            "--nodes" => o.nodes = number(),
            "--targets" => o.targets = number() as usize,
            "--batch" => o.batch = number() as usize,
            "--reads" => o.reads = number() as usize,
            "--dir" => o.dir = PathBuf::from(value),
            other => panic!("unknown option {other}"),
        }
    }
    o
}

/// The report of (task, round, node): deterministic, so both stores get the same bytes.
fn report(task: u64, round: u64, node: u64, targets: usize) -> Report {
    net_reach_report(&format!("node-{node:04}"), round as i64, targets, task * 1_000_000 + round * 1000 + node)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1).min(sorted.len() - 1);
    sorted[index]
}

fn rss_peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:").map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0)))
        .unwrap_or(0)
}

fn du(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    if meta.is_dir() {
        std::fs::read_dir(path).map(|d| d.filter_map(|e| e.ok()).map(|e| du(&e.path())).sum()).unwrap_or(0)
    } else {
        use std::os::unix::fs::MetadataExt;
        meta.blocks() * 512
    }
}

/// Upstream's file name for a report.
fn file_name(task: u64, round: u64, node: u64) -> String {
    format!("NetReach_task{task:05}_round{round}_node-{node:04}_2026-12-22T00:00:00Z")
}

fn main() {
    let o = options();
    let _ = std::fs::remove_dir_all(&o.dir);
    std::fs::create_dir_all(&o.dir).expect("bench dir");
    let total = o.tasks * o.rounds * o.nodes;
    println!(
        "workload: {} tasks x {} rounds x {} nodes = {total} reports of {} targets, batches of {}",
        o.tasks, o.rounds, o.nodes, o.targets, o.batch
    );

    // ---- kdoctor-store --------------------------------------------------------------------
    let store_dir = o.dir.join("store");
    let store = Store::open(StoreConfig::new(&store_dir)).expect("store opens");
    let mut ids: Vec<IncarnationId> = Vec::with_capacity(o.tasks as usize);
    for t in 0..o.tasks {
        let record = TaskRecord {
            kind: TaskKind::NetReach,
            name: format!("task{t:05}"),
            uid: format!("uid-{t}"),
            created: jiff::Timestamp::now(),
            spec: serde_json::json!({"request": {"qps": 10, "durationInSecond": 10}}),
            status: Some(serde_json::json!({"expectedRound": o.rounds, "doneRound": o.rounds, "finish": true})),
            deleted: None,
        };
        ids.push(store.record_task(&record).expect("task").0);
    }
    let mut json_bytes: u64 = 0;
    let mut store_put = Duration::ZERO;
    let mut batch: Vec<(IncarnationId, Report)> = Vec::with_capacity(o.batch);
    let mut written: u64 = 0;
    let started = Instant::now();
    let flush = |batch: &mut Vec<(IncarnationId, Report)>, put: &mut Duration| {
        let items: Vec<NewReport> = batch.iter().map(|(id, r)| NewReport { task: *id, report: r }).collect();
        let t0 = Instant::now();
        store.put_reports(&items).expect("put");
        *put += t0.elapsed();
        batch.clear();
    };
    for round in 1..=o.rounds {
        for t in 0..o.tasks {
            for node in 0..o.nodes {
                let r = report(t, round, node, o.targets);
                json_bytes += serde_json::to_vec(&r).expect("json").len() as u64;
                batch.push((ids[t as usize], r));
                if batch.len() == o.batch {
                    flush(&mut batch, &mut store_put);
                }
                written += 1;
                if written.is_multiple_of(100_000) {
                    eprintln!("  store: {written}/{total} reports, {:.0?}", started.elapsed());
                }
            }
        }
    }
    flush(&mut batch, &mut store_put);
    let store_rate = total as f64 / store_put.as_secs_f64();

    // Latest-round read: every report of the latest round of a random task.
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let picks: Vec<u64> = (0..o.reads).map(|_| next() % o.tasks).collect();
    let mut store_reads = Vec::with_capacity(o.reads);
    for t in &picks {
        let t0 = Instant::now();
        let id = ids[*t as usize];
        let summary = store.task(id).expect("task");
        let latest = summary.latest_round.expect("rounds");
        let mut bytes = 0;
        for meta in store.reports(id, latest).expect("list") {
            bytes += store.report_json(id, latest, &meta.node).expect("read").expect("exists").len();
        }
        store_reads.push(t0.elapsed());
        assert!(bytes > 0);
    }
    store_reads.sort();
    let mut lists = Vec::new();
    for _ in 0..50 {
        let t0 = Instant::now();
        let all = store.tasks();
        lists.push(t0.elapsed());
        assert_eq!(all.len() as u64, o.tasks);
    }
    lists.sort();
    let store_disk = store.stats().expect("stats").disk_bytes;
    let store_du = du(&store_dir);
    let store_rss = rss_peak_kib();
    drop(store);
    let t0 = Instant::now();
    let store = Store::open(StoreConfig::new(&store_dir)).expect("reopens");
    let reopen = t0.elapsed();
    drop(store);

    // ---- plain files (upstream's layout), same bytes, one sync per batch --------------------
    let files_dir = o.dir.join("files");
    std::fs::create_dir_all(&files_dir).expect("files dir");
    let dir_handle = File::open(&files_dir).expect("dir");
    let mut files_put = Duration::ZERO;
    let mut pending: Vec<(String, Vec<u8>)> = Vec::with_capacity(o.batch);
    let write_batch = |pending: &mut Vec<(String, Vec<u8>)>, put: &mut Duration| {
        let t0 = Instant::now();
        for (name, json) in pending.iter() {
            let tmp = files_dir.join(format!(".{name}.tmp"));
            let mut f = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp).expect("file");
            f.write_all(json).expect("write");
            f.sync_all().expect("fsync");
            std::fs::rename(&tmp, files_dir.join(name)).expect("rename");
        }
        dir_handle.sync_all().expect("dir fsync");
        *put += t0.elapsed();
        pending.clear();
    };
    for round in 1..=o.rounds {
        for t in 0..o.tasks {
            for node in 0..o.nodes {
                let json = serde_json::to_vec(&report(t, round, node, o.targets)).expect("json");
                pending.push((file_name(t, round, node), json));
                if pending.len() == o.batch {
                    write_batch(&mut pending, &mut files_put);
                }
            }
        }
    }
    write_batch(&mut pending, &mut files_put);
    let files_rate = total as f64 / files_put.as_secs_f64();
    let mut file_reads = Vec::with_capacity(o.reads);
    for t in &picks {
        let t0 = Instant::now();
        let mut bytes = 0;
        for node in 0..o.nodes {
            bytes += std::fs::read(files_dir.join(file_name(*t, o.rounds, node))).expect("read").len();
        }
        file_reads.push(t0.elapsed());
        assert!(bytes > 0);
    }
    file_reads.sort();
    // Upstream lists its report directory and parses every name to answer a list.
    let mut dir_lists = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        let mut tasks = std::collections::HashSet::new();
        for entry in std::fs::read_dir(&files_dir).expect("list") {
            let name = entry.expect("entry").file_name().into_string().unwrap_or_default();
            if let Some(task) = name.split('_').nth(1) {
                tasks.insert(task.to_string());
            }
        }
        dir_lists.push(t0.elapsed());
        assert_eq!(tasks.len() as u64, o.tasks);
    }
    dir_lists.sort();
    let files_du = du(&files_dir);

    println!("report JSON bytes: {json_bytes} ({:.1} KiB per report)", json_bytes as f64 / total as f64 / 1024.0);
    println!("| measure | kdoctor-store (sled) | plain files | ratio store/files |");
    println!("|---|---|---|---|");
    println!(
        "| put, reports/s (batches of {}, durable at return) | {store_rate:.0} | {files_rate:.0} | {:.2} |",
        o.batch,
        store_rate / files_rate
    );
    for (name, p) in [("p50", 0.5), ("p99", 0.99)] {
        let (s, f) = (percentile(&store_reads, p), percentile(&file_reads, p));
        println!(
            "| latest-round read ({} reports), {name} | {:.3} ms | {:.3} ms | {:.2} |",
            o.nodes,
            s.as_secs_f64() * 1e3,
            f.as_secs_f64() * 1e3,
            s.as_secs_f64() / f.as_secs_f64()
        );
    }
    let (ls, lf) = (percentile(&lists, 0.5), percentile(&dir_lists, 0.5));
    println!(
        "| list all {} tasks, median | {:.3} ms | {:.1} ms (readdir + parse names) | {:.4} |",
        o.tasks,
        ls.as_secs_f64() * 1e3,
        lf.as_secs_f64() * 1e3,
        ls.as_secs_f64() / lf.as_secs_f64()
    );
    println!(
        "| disk bytes per JSON byte | {:.3} (sled reports {:.3}) | {:.3} | {:.2} |",
        store_du as f64 / json_bytes as f64,
        store_disk as f64 / json_bytes as f64,
        files_du as f64 / json_bytes as f64,
        store_du as f64 / files_du as f64
    );
    println!("| peak RSS after the store phase | {} MiB | — | — |", store_rss / 1024);
    println!("| reopen (index rebuild) | {:.0} ms | — | — |", reopen.as_secs_f64() * 1e3);
    let _ = std::fs::remove_dir_all(&o.dir);
}
