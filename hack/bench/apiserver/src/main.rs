//! Aggregated API server benchmark: GET of one ~300 KB report and LIST (Table) of 10,000 tasks
//! from kdoctor-apiserver over TLS, and the same GET bytes as a static file from nginx over TLS,
//! both driven by wrk at 1, 16 and 100 connections in the same run; memory while serving and
//! with 1,000 open watches; start-up to ready.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use kdoctor_api::fixtures::net_reach_report;
use kdoctor_api::task::TaskKind;
use kdoctor_apiserver::auth::Auth;
use kdoctor_apiserver::auth::config::AuthnConfig;
use kdoctor_apiserver::auth::review::{Attributes, Decision, Reviews};
use kdoctor_apiserver::auth::user::User;
use kdoctor_apiserver::pki::Ca;
use kdoctor_apiserver::server::{AuthMode, ServerOptions, start};
use kdoctor_store::{NewReport, Store, StoreConfig, TaskRecord};

const TOKEN: &str = "bench";

/// The bench client's token names a system:masters user (no review per request).
struct BenchReviews;

impl Reviews for BenchReviews {
    fn token_review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<User>, String>> {
        Box::pin(async move { Ok((token == TOKEN).then(|| User::new("bench", vec!["system:masters".to_string()]))) })
    }
    fn access_review<'a>(&'a self, _: &'a User, _: &'a Attributes) -> BoxFuture<'a, Result<Decision, String>> {
        Box::pin(async move { Ok(Decision { allowed: true, reason: String::new() }) })
    }
}

struct Options {
    tasks: u64,
    seconds: u64,
    dir: PathBuf,
}

fn options() -> Options {
    let mut o = Options { tasks: 10_000, seconds: 10, dir: std::env::temp_dir().join("kdoctor-bench-apiserver") };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--tasks" => o.tasks = value.parse().expect("--tasks N"),
            "--seconds" => o.seconds = value.parse().expect("--seconds S"),
            "--dir" => o.dir = PathBuf::from(value),
            other => panic!("unknown option {other}"),
        }
    }
    o
}

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field).map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0)))
        .unwrap_or(0)
}

fn fill(store: &Store, tasks: u64) -> String {
    let created = jiff::Timestamp::now();
    for chunk in (0..tasks).collect::<Vec<_>>().chunks(500) {
        let mut reports = Vec::new();
        for t in chunk {
            let record = TaskRecord {
                kind: TaskKind::NetReach,
                name: format!("task{t:05}"),
                uid: format!("{t:08x}-0000-0000-0000-000000000000"),
                created,
                spec: serde_json::json!({"request": {"qps": 10}}),
                status: Some(serde_json::json!({"expectedRound": 1, "doneRound": 1, "finish": true})),
                deleted: None,
            };
            let (id, _) = store.record_task(&record).expect("task");
            reports.push((id, net_reach_report("node-1", 1, 5, *t)));
        }
        let items: Vec<NewReport> = reports.iter().map(|(id, r)| NewReport { task: *id, report: r }).collect();
        store.put_reports(&items).expect("reports");
    }
    let big = TaskRecord {
        kind: TaskKind::NetReach,
        name: "big".into(),
        uid: "b1b1b1b1-0000-0000-0000-000000000000".into(),
        created,
        spec: serde_json::json!({}),
        status: None,
        deleted: None,
    };
    let (id, _) = store.record_task(&big).expect("task");
    store.put_report(id, &net_reach_report("node-1", 1, 500, 7)).expect("big report");
    "netreach-big".to_string()
}

/// Runs wrk and returns (requests/s, p50 ms, p99 ms).
fn wrk(url: &str, connections: u32, seconds: u64, headers: &[&str]) -> (f64, f64, f64) {
    let threads = connections.min(2);
    let mut command = Command::new("wrk");
    command.args(["-t", &threads.to_string(), "-c", &connections.to_string(), "-d", &format!("{seconds}s"), "--latency"]);
    for h in headers {
        command.args(["-H", h]);
    }
    let out = command.arg(url).output().expect("wrk runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rps = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:").map(|v| v.trim().parse::<f64>().unwrap_or(0.0)))
        .unwrap_or_else(|| panic!("no Requests/sec in wrk output:\n{text}\n{}", String::from_utf8_lossy(&out.stderr)));
    let percentile = |p: &str| {
        text.lines()
            .find_map(|l| {
                let l = l.trim();
                l.strip_prefix(p).map(|v| parse_duration_ms(v.trim()))
            })
            .unwrap_or(f64::NAN)
    };
    (rps, percentile("50%"), percentile("99%"))
}

fn parse_duration_ms(text: &str) -> f64 {
    let (number, unit) = text.split_at(text.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(text.len()));
    let value: f64 = number.parse().unwrap_or(f64::NAN);
    match unit {
        "us" => value / 1000.0,
        "ms" => value,
        "s" => value * 1000.0,
        "m" => value * 60_000.0,
        _ => f64::NAN,
    }
}

fn start_nginx(dir: &Path, port: u16, cert: &Path, key: &Path, www: &Path) -> std::process::Child {
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "worker_processes 2;\nerror_log {err} warn;\npid {pid};\ndaemon off;\nevents {{ worker_connections 4096; }}\n\
             http {{\n  access_log off;\n  keepalive_requests 10000000;\n  client_body_temp_path {tmp};\n  proxy_temp_path {tmp};\n  fastcgi_temp_path {tmp};\n  uwsgi_temp_path {tmp};\n  scgi_temp_path {tmp};\n\
               server {{\n    listen 127.0.0.1:{port} ssl http2;\n    ssl_certificate {cert};\n    ssl_certificate_key {key};\n    root {www};\n    default_type application/json;\n    gzip_static on;\n  }}\n}}\n",
            err = dir.join("nginx-error.log").display(),
            pid = dir.join("nginx.pid").display(),
            tmp = dir.display(),
            cert = cert.display(),
            key = key.display(),
            www = www.display(),
        ),
    )
    .expect("nginx.conf");
    Command::new("nginx").args(["-c"]).arg(&conf).args(["-p"]).arg(dir).spawn().expect("nginx starts")
}

fn curl(args: &[&str]) -> std::process::Output {
    Command::new("curl").args(["-s", "--http1.1"]).args(args).output().expect("curl runs")
}

fn main() {
    let o = options();
    let _ = std::fs::remove_dir_all(&o.dir);
    std::fs::create_dir_all(&o.dir).expect("dir");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");

    eprintln!("filling a store with {} tasks …", o.tasks);
    let store_dir = o.dir.join("store");
    let store = Arc::new(Store::open(StoreConfig::new(&store_dir)).expect("store"));
    let big = fill(&store, o.tasks);
    drop(store);

    // Start-up to ready: open the store (index rebuild), start serving, readyz answers 200.
    let started = Instant::now();
    let store = Arc::new(Store::open(StoreConfig::new(&store_dir)).expect("store"));
    let auth = Arc::new(Auth::delegated(AuthnConfig::default(), Arc::new(BenchReviews)));
    let options = ServerOptions {
        auth: AuthMode::Custom(auth),
        store: Some(store),
        ..ServerOptions::standalone(o.dir.join("server"), "127.0.0.1:0".parse().expect("addr"))
    };
    let server = runtime.block_on(start(options)).expect("server");
    let ca = o.dir.join("server").join("pki").join("ca.crt");
    let ca_arg = ca.display().to_string();
    let ready_url = format!("{}/readyz", server.url());
    loop {
        let out = curl(&["-o", "/dev/null", "-w", "%{http_code}", "--cacert", &ca_arg, &ready_url]);
        if String::from_utf8_lossy(&out.stdout) == "200" {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let startup = started.elapsed();

    let base = format!("{}/apis/system.kdoctor.io/v1beta1/kdoctorreports", server.url());
    let get_url = format!("{base}/{big}");
    let auth_header = format!("Authorization: Bearer {TOKEN}");
    let www = o.dir.join("www");
    std::fs::create_dir_all(&www).expect("www");
    let body = curl(&["--cacert", &ca_arg, "-H", &auth_header, &get_url]).stdout;
    assert!(body.len() > 100_000, "the GET body is {} bytes", body.len());
    std::fs::write(www.join("big.json"), &body).expect("static copy");
    // nginx's gzip_static serves the pre-compressed copy to clients that take gzip, as our
    // cache serves its once-compressed bytes.
    let gzipped = Command::new("gzip").args(["-6", "-k", "-f"]).arg(www.join("big.json")).status().expect("gzip runs");
    assert!(gzipped.success(), "gzip failed");

    // nginx serves the same bytes with a certificate of the same CA.
    let ca_pem = Ca::load_or_create(&o.dir.join("server").join("pki"), "unused").expect("ca");
    let serving = ca_pem.serving(&["127.0.0.1".to_string()]).expect("cert");
    let (cert, key) = (o.dir.join("nginx.crt"), o.dir.join("nginx.key"));
    std::fs::write(&cert, &serving.cert).expect("cert");
    std::fs::write(&key, &serving.key).expect("key");
    let nginx_port = 20_000 + (std::process::id() % 20_000) as u16;
    let mut nginx = start_nginx(&o.dir, nginx_port, &cert, &key, &www);
    let nginx_url = format!("https://127.0.0.1:{nginx_port}/big.json");
    for _ in 0..100 {
        if curl(&["-o", "/dev/null", "-w", "%{http_code}", "--cacert", &ca_arg, &nginx_url]).stdout == b"200" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let rss_serving_before = rss_kib("VmRSS:");

    let gzip_header = "Accept-Encoding: gzip";
    let size_with = |url: &str, headers: &[&str]| -> String {
        let mut args = vec!["-o", "/dev/null", "-w", "%{size_download}", "--cacert", &ca_arg];
        for h in headers {
            args.extend(["-H", h]);
        }
        args.push(url);
        String::from_utf8_lossy(&curl(&args).stdout).into_owned()
    };
    println!(
        "GET body: {} bytes ({} gzip-encoded from kdoctor, {} from nginx); {} tasks in the store",
        body.len(),
        size_with(&get_url, &[&auth_header, gzip_header]),
        size_with(&nginx_url, &[gzip_header]),
        o.tasks
    );
    println!("| GET one report | kdoctor-apiserver req/s | nginx req/s | ratio | kdoctor p50 / p99 | nginx p50 / p99 |");
    println!("|---|---|---|---|---|---|");
    for (encoding, extra) in [("identity", None), ("gzip", Some(gzip_header))] {
        for connections in [1u32, 16, 100] {
            let ours_headers: Vec<&str> = std::iter::once(auth_header.as_str()).chain(extra).collect();
            let theirs_headers: Vec<&str> = extra.into_iter().collect();
            let ours = wrk(&get_url, connections, o.seconds, &ours_headers);
            let theirs = wrk(&nginx_url, connections, o.seconds, &theirs_headers);
            println!(
                "| {encoding}, {connections} connections | {:.0} | {:.0} | {:.2} | {:.2} / {:.2} ms | {:.2} / {:.2} ms |",
                ours.0,
                theirs.0,
                ours.0 / theirs.0,
                ours.1,
                ours.2,
                theirs.1,
                theirs.2
            );
        }
    }
    let table = "Accept: application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let list = wrk(&format!("{base}?limit=500000"), 1, o.seconds, &[&auth_header, table]);
    println!("\nLIST as a Table of all {} tasks, 1 connection: {:.1} req/s, p50 {:.1} ms, p99 {:.1} ms", o.tasks, list.0, list.1, list.2);
    let rss_serving = rss_kib("VmRSS:");
    let peak = rss_kib("VmHWM:");
    println!("RSS while serving: {} MiB before the runs, {} MiB after, peak {} MiB", rss_serving_before / 1024, rss_serving / 1024, peak / 1024);

    // 1,000 watches held open by a separate process.
    let script = format!(
        "import socket, ssl, sys, time\nctx = ssl.create_default_context(cafile='{ca}')\nsocks = []\nfor i in range(1000):\n    s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', {port})), server_hostname='127.0.0.1')\n    s.sendall(b'GET /apis/system.kdoctor.io/v1beta1/kdoctorreports?watch=true&resourceVersion={rv} HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer {token}\\r\\n\\r\\n')\n    socks.append(s)\nfor s in socks:\n    s.recv(1024)\nprint('open', flush=True)\ntime.sleep(30)\n",
        ca = ca.display(),
        port = server.address.port(),
        rv = server.state.store().map(|s| s.resource_version()).unwrap_or(0),
        token = TOKEN,
    );
    let script_path = o.dir.join("watches.py");
    std::fs::write(&script_path, script).expect("script");
    let before = rss_kib("VmRSS:");
    let mut clients = Command::new("python3").arg(&script_path).stdout(std::process::Stdio::piped()).spawn().expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(clients.stdout.take().expect("stdout")), &mut line).expect("read");
    std::thread::sleep(Duration::from_secs(2));
    let watches = server.state.metrics.watches.get();
    let after = rss_kib("VmRSS:");
    println!(
        "1,000 watches: {watches} open on the server, RSS {} MiB -> {} MiB (+{} MiB)",
        before / 1024,
        after / 1024,
        (after.saturating_sub(before)) / 1024
    );
    let _ = clients.kill();
    println!("start-up to ready (open the store of {} tasks, serve, /readyz 200): {:.0} ms", o.tasks + 1, startup.as_secs_f64() * 1e3);
    // Stop through the master first: killing it alone leaves its workers running.
    let _ = Command::new("nginx").args(["-c"]).arg(o.dir.join("nginx.conf")).args(["-p"]).arg(&o.dir).args(["-s", "stop"]).output();
    let _ = nginx.kill();
    let _ = nginx.wait();
    runtime.block_on(server.stop());
}
