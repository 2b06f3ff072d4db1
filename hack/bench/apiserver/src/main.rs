//! Aggregated API server benchmark: GETs of reports of about 8 KB, 85 KB and 300 KB and LIST
//! (Table) of 10,000 tasks from kdoctor-apiserver over TLS, and the same GET bytes (plain, and
//! kdoctor's own gzip-encoded bytes) as static files from nginx over TLS, both driven by wrk and
//! by oha at 1, 16 and 100 connections in the same run; a run counts only when every answer was
//! a 2xx (oha: a 200) of the expected size; with `--fixed-rate`, latencies of both servers at
//! the same open-loop rate (a closed-loop client loads the faster server harder, so its p99 is
//! not like for like); memory while serving and with 1,000 open watches; start-up to ready.
//!
//! kdoctor's side is asked through each way a real client authenticates (`--auth`): as
//! kube-apiserver's aggregator does (its front-proxy client certificate, the user and groups in
//! X-Remote-User/X-Remote-Group, authorized by a SubjectAccessReview that the server caches),
//! with a client certificate of the install's CA as a kubeconfig does (`kdoctor apiserver`'s,
//! `kdoctor local`'s; authorized likewise), and with a bearer token of a system:masters user
//! (TokenReview cached, no authorization). wrk presents no client certificate: the certificate
//! paths are driven by oha alone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use kdoctor_api::fixtures::net_reach_report;
use kdoctor_api::task::TaskKind;
use kdoctor_apiserver::auth::Auth;
use kdoctor_apiserver::auth::config::AuthnConfig;
use kdoctor_apiserver::auth::requestheader::RequestHeader;
use kdoctor_apiserver::auth::review::{Attributes, Decision, Reviews};
use kdoctor_apiserver::auth::user::User;
use kdoctor_apiserver::auth::x509::CaPool;
use kdoctor_apiserver::server::{AuthMode, CONNECTION_THREADS_CAP, ServerOptions, start};
use kdoctor_store::{NewReport, Store, StoreConfig, TaskRecord};
use kdoctor_transport::malloc_arenas;
use kdoctor_transport::pki::Ca;
use kdoctor_transport::runtime_threads::per_core;

mod through_kube;

const TOKEN: &str = "bench";
/// The user the certificate paths name (not system:masters: each is authorized by a review).
const USER: &str = "bench-reader";
const GROUP: &str = "bench-readers";

/// The bench client's token names a system:masters user (no review per request); every access
/// review allows (each answer cached by the server, as kube-apiserver's would be).
struct BenchReviews;

impl Reviews for BenchReviews {
    fn token_review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<User>, String>> {
        Box::pin(async move {
            Ok((token == TOKEN).then(|| User::new("bench", vec!["system:masters".to_string()])))
        })
    }
    fn access_review<'a>(
        &'a self,
        _: &'a User,
        _: &'a Attributes,
    ) -> BoxFuture<'a, Result<Decision, String>> {
        Box::pin(async move {
            Ok(Decision {
                allowed: true,
                reason: String::new(),
            })
        })
    }
}

struct Options {
    tasks: u64,
    seconds: u64,
    repeat: usize,
    /// Only the objects whose name contains this (all when empty).
    only: String,
    /// Load generators: wrk, oha, or both (each cell run with each).
    clients: Vec<Client>,
    /// oha's path.
    oha: PathBuf,
    /// Connection threads of the API server (0: its runtime's two workers; default: the server's).
    threads: Option<usize>,
    /// Client connections of each cell.
    connections: Vec<u32>,
    /// Also run each oha cell at this fraction of nginx's closed-loop rate, both servers at the
    /// same fixed rate, `repeat` times, for latencies at equal load (0: not).
    fixed_rate: f64,
    /// How kdoctor's side is asked.
    auths: Vec<Identity>,
    dir: PathBuf,
}

/// How a client authenticates to kdoctor's side.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Identity {
    /// As kube-apiserver's aggregator: its front-proxy certificate and the user in headers.
    FrontProxy,
    /// A client certificate of the install's CA (a kubeconfig's).
    ClientCert,
    /// A bearer token of a system:masters user.
    Token,
}

impl Identity {
    fn name(self) -> &'static str {
        match self {
            Identity::FrontProxy => "front-proxy",
            Identity::ClientCert => "client-cert",
            Identity::Token => "token",
        }
    }

    fn parse(text: &str) -> Identity {
        match text {
            "front-proxy" => Identity::FrontProxy,
            "client-cert" => Identity::ClientCert,
            "token" => Identity::Token,
            other => panic!("--auth front-proxy,client-cert,token, not {other}"),
        }
    }
}

/// What a client of each identity presents: headers, and a certificate and key (PEM files).
struct Credentials {
    token_header: String,
    proxy_headers: [String; 2],
    proxy_cert: (String, String),
    user_cert: (String, String),
}

impl Credentials {
    fn headers(&self, identity: Identity) -> Vec<&str> {
        match identity {
            Identity::FrontProxy => self.proxy_headers.iter().map(String::as_str).collect(),
            Identity::ClientCert => vec![],
            Identity::Token => vec![self.token_header.as_str()],
        }
    }

    fn cert(&self, identity: Identity) -> Option<(&str, &str)> {
        match identity {
            Identity::FrontProxy => Some((&self.proxy_cert.0, &self.proxy_cert.1)),
            Identity::ClientCert => Some((&self.user_cert.0, &self.user_cert.1)),
            Identity::Token => None,
        }
    }

    /// curl's arguments for `identity`.
    fn curl_args(&self, identity: Identity) -> Vec<&str> {
        let mut args = Vec::new();
        for h in self.headers(identity) {
            args.extend(["-H", h]);
        }
        if let Some((cert, key)) = self.cert(identity) {
            args.extend(["--cert", cert, "--key", key]);
        }
        args
    }
}

/// `a,b,c` as a list; panics with `usage` on anything else (the bench's own flags).
fn comma_list<T: std::str::FromStr>(value: &str, usage: &str) -> Vec<T> {
    value
        .split(',')
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{usage}")))
        .collect()
}

fn options() -> Options {
    let mut o = Options {
        tasks: 10_000,
        seconds: 10,
        repeat: 3,
        only: String::new(),
        clients: vec![Client::Wrk, Client::Oha],
        oha: PathBuf::from("oha"),
        threads: None,
        connections: vec![1, 16, 100],
        fixed_rate: 0.0,
        auths: vec![Identity::FrontProxy, Identity::ClientCert, Identity::Token],
        dir: std::env::temp_dir().join("kdoctor-bench-apiserver"),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--tasks" => o.tasks = value.parse().expect("--tasks N"),
            "--seconds" => o.seconds = value.parse().expect("--seconds S"),
            "--repeat" => o.repeat = value.parse::<usize>().expect("--repeat N").max(1),
            "--only" => o.only = value,
            "--client" => {
                o.clients = match value.as_str() {
                    "wrk" => vec![Client::Wrk],
                    "oha" => vec![Client::Oha],
                    "both" => vec![Client::Wrk, Client::Oha],
                    other => panic!("--client wrk|oha|both, not {other}"),
                }
            }
            "--oha" => o.oha = PathBuf::from(value),
            "--threads" => o.threads = Some(value.parse().expect("--threads N")),
            "--fixed-rate" => o.fixed_rate = value.parse().expect("--fixed-rate FRACTION"),
            "--connections" => o.connections = comma_list(&value, "--connections N,N,…"),
            "--auth" => o.auths = value.split(',').map(Identity::parse).collect(),
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
        .find_map(|l| {
            l.strip_prefix(field)
                .map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0))
        })
        .unwrap_or(0)
}

fn fill(store: &Store, tasks: u64) -> Vec<String> {
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
                status: Some(
                    serde_json::json!({"expectedRound": 1, "doneRound": 1, "finish": true}),
                ),
                deleted: None,
            };
            let (id, _) = store.record_task(&record).expect("task");
            reports.push((id, net_reach_report("node-1", 1, 5, *t)));
        }
        let items: Vec<NewReport> = reports
            .iter()
            .map(|(id, r)| NewReport {
                task: *id,
                report: r,
            })
            .collect();
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
    let mut names = Vec::new();
    // About 8 KB, 85 KB and 300 KB of JSON.
    for (name, targets) in [("small", 12), ("medium", 140), ("big", 500)] {
        let record = TaskRecord {
            name: name.into(),
            uid: format!(
                "{:08x}-0000-0000-0000-000000000000",
                0xb1b1_0000u32 + targets
            ),
            ..big.clone()
        };
        let (id, _) = store.record_task(&record).expect("task");
        store
            .put_report(id, &net_reach_report("node-1", 1, targets as usize, 7))
            .expect("report");
        names.push(format!("netreach-{name}"));
    }
    names
}

/// A load generator.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Client {
    Wrk,
    Oha,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::Wrk => "wrk",
            Client::Oha => "oha",
        }
    }
}

/// One load: where, how many connections for how long, and the answer expected.
#[derive(Clone, Copy)]
struct Cell<'a> {
    url: &'a str,
    connections: u32,
    seconds: u64,
    headers: &'a [&'a str],
    /// A client certificate and its key (PEM files) to present.
    cert: Option<(&'a str, &'a str)>,
    body: usize,
}

/// One run of a load generator: requests/s, p50 and p99 in ms, requests answered, and the
/// server's CPU time per answered request in µs (measured around the run by [`metered`]).
struct Run {
    rps: f64,
    p50: f64,
    p99: f64,
    requests: f64,
    cpu_us: f64,
}

/// A server whose CPU time a run is charged: a process's threads, and with `children` those
/// of its child processes (nginx's workers).
#[derive(Clone, Copy)]
struct Server {
    pid: u32,
    children: bool,
}

/// CPU time in ns of every thread of `pid` (and of its children's with `children`), from the
/// scheduler's own count (`schedstat`: exact, unlike the 4 ms ticks of `stat`).
fn cpu_ns(pid: u32, children: bool) -> u64 {
    let mut total = 0;
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"));
    for task in tasks.into_iter().flatten().flatten() {
        let path = task.path();
        total += std::fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        if children {
            let list = std::fs::read_to_string(path.join("children")).unwrap_or_default();
            for child in list.split_whitespace().filter_map(|c| c.parse().ok()) {
                total += cpu_ns(child, false);
            }
        }
    }
    total
}

/// Runs kdoctor's load then nginx's `repeat` times: the pairs where both runs counted, sorted
/// by `ratio`, and why the others did not count.
fn paired(
    repeat: usize,
    mut ours: impl FnMut() -> Result<Run, String>,
    mut theirs: impl FnMut() -> Result<Run, String>,
    ratio: impl Fn(&Run, &Run) -> f64,
) -> (Vec<(f64, Run, Run)>, Vec<String>) {
    let mut pairs = Vec::new();
    let mut discarded = Vec::new();
    for _ in 0..repeat {
        match (ours(), theirs()) {
            (Ok(ours), Ok(theirs)) => pairs.push((ratio(&ours, &theirs), ours, theirs)),
            (ours, theirs) => discarded.push(format!("{:?} / {:?}", ours.err(), theirs.err())),
        }
    }
    pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
    (pairs, discarded)
}

/// Runs `load` and charges `server` the CPU time it used meanwhile, per answered request. The
/// client is a child of the bench only while it runs, so it is never counted as ours.
fn metered(server: Server, load: impl FnOnce() -> Result<Run, String>) -> Result<Run, String> {
    let before = cpu_ns(server.pid, server.children);
    let mut run = load()?;
    let used = cpu_ns(server.pid, server.children).saturating_sub(before);
    run.cpu_us = used as f64 / 1000.0 / run.requests.max(1.0);
    Ok(run)
}

/// Runs wrk; `Err` says why the run does not count (an answer that was not a 2xx, a socket
/// error, or a mean answer size that is not the expected body plus headers).
fn wrk(
    url: &str,
    connections: u32,
    seconds: u64,
    headers: &[&str],
    body: usize,
) -> Result<Run, String> {
    wrk_framed(url, connections, seconds, headers, body, 0)
}

/// [`wrk`] for a body sent in chunks: wrk counts the chunk framing too, up to `framing` bytes.
fn wrk_framed(
    url: &str,
    connections: u32,
    seconds: u64,
    headers: &[&str],
    body: usize,
    framing: usize,
) -> Result<Run, String> {
    let threads = connections.min(2);
    let mut command = Command::new("wrk");
    command.args([
        "-t",
        &threads.to_string(),
        "-c",
        &connections.to_string(),
        "-d",
        &format!("{seconds}s"),
        "--latency",
    ]);
    for h in headers {
        command.args(["-H", h]);
    }
    let out = command.arg(url).output().expect("wrk runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    for bad in ["Non-2xx or 3xx responses", "Socket errors"] {
        if let Some(line) = text.lines().find(|l| l.trim_start().starts_with(bad)) {
            return Err(line.trim().to_string());
        }
    }
    let rps = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("Requests/sec:")
                .map(|v| v.trim().parse::<f64>().unwrap_or(0.0))
        })
        .ok_or_else(|| {
            format!(
                "no Requests/sec in wrk output:\n{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    // "  48512 requests in 10.00s, 13.55GB read": every answer the body plus its headers.
    let (requests, read) = text
        .lines()
        .find_map(|l| {
            let l = l.trim();
            let (count, rest) = l.split_once(" requests in ")?;
            let read = rest.split(", ").nth(1)?.strip_suffix(" read")?;
            Some((count.parse::<f64>().ok()?, parse_bytes(read)?))
        })
        .ok_or_else(|| format!("no request count in wrk output:\n{text}"))?;
    let mean = read / requests.max(1.0);
    // wrk rounds what it read to two decimals of its unit: allow 1% and the headers. What it
    // read also holds the answers cut off when its time was up (one per connection at most),
    // which it does not count as requests: 1.3% more than the body for a 7 MB LIST at 37/s.
    let cut_off = f64::from(connections) / requests.max(1.0);
    let most = (body as f64 * 1.01 + 1024.0 + framing as f64) * (1.0 + cut_off);
    if mean < body as f64 * 0.99 || mean > most {
        return Err(format!(
            "answers averaged {mean:.0} bytes, the body is {body}"
        ));
    }
    let percentile = |p: &str| {
        text.lines()
            .find_map(|l| {
                let l = l.trim();
                l.strip_prefix(p).map(|v| parse_duration_ms(v.trim()))
            })
            .unwrap_or(f64::NAN)
    };
    Ok(Run {
        rps,
        p50: percentile("50%"),
        p99: percentile("99%"),
        requests,
        cpu_us: f64::NAN,
    })
}

/// Runs oha (HTTP/1.1, `connections` kept-alive connections, for `seconds`); `Err` says why the
/// run does not count: an answer that was not a 200, an error other than the requests still in
/// flight when the time was up, or an answer whose body is not `body` bytes.
fn oha(oha: &Path, ca: &str, cell: &Cell, rate: Option<f64>) -> Result<Run, String> {
    let Cell {
        url,
        connections,
        seconds,
        headers,
        cert,
        body,
    } = *cell;
    let mut command = Command::new(oha);
    command.args([
        "-z",
        &format!("{seconds}s"),
        "-c",
        &connections.to_string(),
        "--no-tui",
        "--output-format",
        "json",
        "--cacert",
        ca,
    ]);
    if let Some(rate) = rate {
        // Open loop at a fixed rate; latencies from when each request was due.
        command.args(["-q", &format!("{rate:.0}"), "--latency-correction"]);
    }
    // oha asks for compressed answers unless told not to; the gzip cells ask by header.
    command.arg("--disable-compression");
    for h in headers {
        command.args(["-H", h]);
    }
    if let Some((cert, key)) = cert {
        command.args(["--cert", cert, "--key", key]);
    }
    let out = command
        .arg(url)
        .output()
        .map_err(|e| format!("{}: {e}", oha.display()))?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "oha's output is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let codes = v["statusCodeDistribution"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    if let Some((code, n)) = codes.iter().find(|(code, _)| code.as_str() != "200") {
        return Err(format!("{n} answers with status {code}"));
    }
    let answered: f64 = codes.values().filter_map(|n| n.as_f64()).sum();
    // The requests in flight when the time is up are cut off: at most one per connection.
    for (error, n) in v["errorDistribution"]
        .as_object()
        .cloned()
        .unwrap_or_default()
    {
        let n = n.as_u64().unwrap_or(u64::MAX);
        if error != "aborted due to deadline" || n > u64::from(connections) {
            return Err(format!("{n} × {error}"));
        }
    }
    let size = v["summary"]["sizePerRequest"].as_u64().unwrap_or(0);
    if size != body as u64 {
        return Err(format!("answers averaged {size} bytes, the body is {body}"));
    }
    let total = v["summary"]["total"].as_f64().unwrap_or(f64::NAN);
    // oha's percentiles are in seconds.
    let p = |q: &str| {
        v["latencyPercentiles"][q]
            .as_f64()
            .map(|s| s * 1000.0)
            .unwrap_or(f64::NAN)
    };
    let rps = answered / total;
    if let Some(rate) = rate
        && rps < rate * 0.99
    {
        return Err(format!("held {rps:.0} of {rate:.0} requests/s"));
    }
    Ok(Run {
        rps,
        p50: p("p50"),
        p99: p("p99"),
        requests: answered,
        cpu_us: f64::NAN,
    })
}

/// `13.55GB` in bytes.
fn parse_bytes(text: &str) -> Option<f64> {
    let (number, unit) = text.split_at(text.find(|c: char| c.is_ascii_alphabetic())?);
    let value: f64 = number.parse().ok()?;
    let scale = match unit {
        "B" => 1.0,
        "KB" => 1024.0,
        "MB" => 1024.0 * 1024.0,
        "GB" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(value * scale)
}

fn parse_duration_ms(text: &str) -> f64 {
    let (number, unit) = text.split_at(
        text.find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(text.len()),
    );
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
    Command::new("nginx")
        .args(["-c"])
        .arg(&conf)
        .args(["-p"])
        .arg(dir)
        .spawn()
        .expect("nginx starts")
}

fn curl(args: &[&str]) -> std::process::Output {
    Command::new("curl")
        .args(["-s", "--http1.1"])
        .args(args)
        .output()
        .expect("curl runs")
}

/// Whether `url` answers 200 (the server's certificate checked against `ca`).
fn answers_ok(ca: &str, url: &str) -> bool {
    curl(&["-o", "/dev/null", "-w", "%{http_code}", "--cacert", ca, url]).stdout == b"200"
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("through-kube") {
        return through_kube::main(&args[1..]);
    }
    let o = options();
    // As `kdoctor controller` does, before any thread starts (MALLOC_ARENA_MAX overrides).
    let threads = o
        .threads
        .unwrap_or_else(|| per_core(CONNECTION_THREADS_CAP));
    let arenas = malloc_arenas::cap(threads);
    let _ = std::fs::remove_dir_all(&o.dir);
    std::fs::create_dir_all(&o.dir).expect("dir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");

    eprintln!("filling a store with {} tasks …", o.tasks);
    let store_dir = o.dir.join("store");
    let store = Arc::new(Store::open(StoreConfig::new(&store_dir)).expect("store"));
    let big = fill(&store, o.tasks);
    drop(store);

    // Start-up to ready: open the store (index rebuild), start serving, readyz answers 200.
    // The install's CA (the server's, made first so that the server loads it) issues the
    // user's certificate; a CA of its own issues the aggregator's front-proxy certificate.
    let pki = o.dir.join("server").join("pki");
    let install = Ca::load_or_create(&pki, "kdoctor-bench").expect("the install's CA");
    let front_proxy = Ca::generate("front-proxy-ca").expect("front-proxy CA");
    let pem_files = |name: &str, pem: &kdoctor_transport::pki::Pem| {
        let (cert, key) = (
            o.dir.join(format!("{name}.crt")),
            o.dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert, &pem.cert).expect("cert");
        std::fs::write(&key, &pem.key).expect("key");
        (cert.display().to_string(), key.display().to_string())
    };
    let credentials = Credentials {
        token_header: format!("Authorization: Bearer {TOKEN}"),
        proxy_headers: [
            format!("X-Remote-User: {USER}"),
            format!("X-Remote-Group: {GROUP}"),
        ],
        proxy_cert: pem_files(
            "front-proxy-client",
            &front_proxy
                .client("front-proxy-client", &[])
                .expect("front-proxy client certificate"),
        ),
        user_cert: pem_files(
            "user",
            &install.client(USER, &[GROUP]).expect("user certificate"),
        ),
    };
    let pool = |ca: &Ca| CaPool::from_pem(ca.pem.cert.as_bytes()).expect("CA pool");
    let authn = AuthnConfig {
        client_ca: Some(pool(&install)),
        requestheader: Some(RequestHeader {
            ca: pool(&front_proxy),
            allowed_names: vec!["front-proxy-client".into()],
            username_headers: vec!["X-Remote-User".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_prefixes: vec!["X-Remote-Extra-".into()],
            uid_headers: vec![],
        }),
    };

    let started = Instant::now();
    let store = Arc::new(Store::open(StoreConfig::new(&store_dir)).expect("store"));
    let auth = Arc::new(Auth::delegated(authn, Arc::new(BenchReviews)));
    let mut options = ServerOptions {
        auth: AuthMode::Custom(auth),
        store: Some(store),
        ..ServerOptions::standalone(o.dir.join("server"), "127.0.0.1:0".parse().expect("addr"))
    };
    options.connection_threads = o.threads.unwrap_or(options.connection_threads);
    println!(
        "API server: {} connection thread(s), malloc arenas: {}",
        options.connection_threads,
        arenas.map_or_else(
            || format!(
                "{}={:?}",
                malloc_arenas::ENV,
                std::env::var(malloc_arenas::ENV).ok()
            ),
            |n| n.to_string()
        )
    );
    let server = runtime.block_on(start(options)).expect("server");
    let ca = o.dir.join("server").join("pki").join("ca.crt");
    let ca_arg = ca.display().to_string();
    let ready_url = format!("{}/readyz", server.url());
    loop {
        if answers_ok(&ca_arg, &ready_url) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let startup = started.elapsed();

    let base = format!(
        "{}/apis/system.kdoctor.io/v1beta1/kdoctorreports",
        server.url()
    );
    let auth_header = credentials.token_header.clone();
    let gzip_header = "Accept-Encoding: gzip";
    let www = o.dir.join("www");
    std::fs::create_dir_all(&www).expect("www");
    // nginx serves exactly kdoctor's bytes: the plain body, and (gzip_static) the gzip-encoded
    // body kdoctor sends, so both sides send the same bytes in the same encoding.
    let mut objects = Vec::new();
    for name in &big {
        let url = format!("{base}/{name}");
        let plain = curl(&["--cacert", &ca_arg, "-H", &auth_header, &url]).stdout;
        let gzipped = curl(&[
            "--cacert",
            &ca_arg,
            "-H",
            &auth_header,
            "-H",
            gzip_header,
            &url,
        ])
        .stdout;
        assert!(
            plain.len() > 4_000,
            "{name}: the GET body is {} bytes",
            plain.len()
        );
        assert_eq!(
            gzipped.get(..2),
            Some(&[0x1f, 0x8b][..]),
            "{name}: kdoctor's gzip answer is not gzip"
        );
        std::fs::write(www.join(format!("{name}.json")), &plain).expect("static copy");
        std::fs::write(www.join(format!("{name}.json.gz")), &gzipped).expect("static gzip copy");
        objects.push((name.clone(), url, plain.len(), gzipped.len()));
    }

    // nginx serves the same bytes with a certificate of the same CA.
    let serving = install.serving(&["127.0.0.1".to_string()]).expect("cert");
    let (cert, key) = (o.dir.join("nginx.crt"), o.dir.join("nginx.key"));
    std::fs::write(&cert, &serving.cert).expect("cert");
    std::fs::write(&key, &serving.key).expect("key");
    let nginx_port = 20_000 + (std::process::id() % 20_000) as u16;
    let mut nginx = start_nginx(&o.dir, nginx_port, &cert, &key, &www);
    let (kdoctor_server, nginx_server) = (
        Server {
            pid: std::process::id(),
            children: false,
        },
        Server {
            pid: nginx.id(),
            children: true,
        },
    );
    let nginx_base = format!("https://127.0.0.1:{nginx_port}");
    let up = (0..100).any(|_| {
        let ok = answers_ok(&ca_arg, &format!("{nginx_base}/{}.json", big[0]));
        if !ok {
            std::thread::sleep(Duration::from_millis(50));
        }
        ok
    });
    assert!(
        up,
        "nginx did not come up: {}",
        std::fs::read_to_string(o.dir.join("nginx-error.log")).unwrap_or_default()
    );
    let rss_serving_before = rss_kib("VmRSS:");

    // The size of the answer to curl's ARGS (headers as -H, a client certificate) for URL.
    let size_with = |url: &str, headers: &[&str], identity: &[&str]| -> usize {
        let mut args = vec![
            "-o",
            "/dev/null",
            "-w",
            "%{size_download}",
            "--cacert",
            &ca_arg,
        ];
        for h in headers {
            args.extend(["-H", h]);
        }
        args.extend(identity);
        args.push(url);
        String::from_utf8_lossy(&curl(&args).stdout)
            .parse()
            .unwrap_or(0)
    };
    println!(
        "{} tasks in the store; {} run(s) of {} s per cell, the median ratio shown",
        o.tasks, o.repeat, o.seconds
    );
    println!(
        "| GET | kdoctor-apiserver req/s | nginx req/s | ratio | kdoctor p50 / p99 | nginx p50 / p99 | CPU per request, kdoctor / nginx |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut fixed = Vec::new();
    for (name, url, plain, gzipped) in objects.iter().filter(|(name, ..)| name.contains(&o.only)) {
        let nginx_url = format!("{nginx_base}/{name}.json");
        for (encoding, extra, body, identity) in [
            ("plain", None, *plain),
            ("gzip", Some(gzip_header), *gzipped),
        ]
        .into_iter()
        .flat_map(|(e, x, b)| o.auths.iter().map(move |i| (e, x, b, *i)))
        {
            // The encoding's header alone: nginx's request, and kdoctor's before its identity.
            let theirs_headers: Vec<&str> = extra.into_iter().collect();
            let ours_headers: Vec<&str> = credentials
                .headers(identity)
                .into_iter()
                .chain(extra)
                .collect();
            let cert = credentials.cert(identity);
            assert_eq!(
                size_with(url, &theirs_headers, &credentials.curl_args(identity)),
                body,
                "{name} {encoding}, {}: kdoctor's size",
                identity.name()
            );
            assert_eq!(
                size_with(&nginx_url, &theirs_headers, &[]),
                body,
                "{name} {encoding}: nginx's size differs from kdoctor's"
            );
            // wrk presents no client certificate.
            let clients = o
                .clients
                .iter()
                .filter(|c| cert.is_none() || **c == Client::Oha);
            for (client, connections) in
                clients.flat_map(|c| o.connections.iter().map(move |n| (*c, *n)))
            {
                // nginx asks for no client certificate: only kdoctor's side is given one.
                let load = |server: Server, url: &str, headers: &[&str], cert| {
                    metered(server, || match client {
                        Client::Wrk => wrk(url, connections, o.seconds, headers, body),
                        Client::Oha => oha(
                            &o.oha,
                            &ca_arg,
                            &Cell {
                                url,
                                connections,
                                seconds: o.seconds,
                                headers,
                                cert,
                                body,
                            },
                            None,
                        ),
                    })
                };
                let (runs, discarded) = paired(
                    o.repeat,
                    || load(kdoctor_server, url, &ours_headers, cert),
                    || load(nginx_server, &nginx_url, &theirs_headers, None),
                    |ours, theirs| ours.rps / theirs.rps,
                );
                let label = format!(
                    "{name} ({} KB) {encoding}, {}, {connections} conn., {}",
                    body / 1024,
                    identity.name(),
                    client.name()
                );
                match runs.get(runs.len() / 2) {
                    Some((ratio, ours, theirs)) => println!(
                        "| {label} | {:.0} | {:.0} | {ratio:.2} | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.1} / {:.1} µs |{}",
                        ours.rps,
                        theirs.rps,
                        ours.p50,
                        ours.p99,
                        theirs.p50,
                        theirs.p99,
                        ours.cpu_us,
                        theirs.cpu_us,
                        if discarded.is_empty() {
                            String::new()
                        } else {
                            format!(
                                " ({} run(s) discarded: {})",
                                discarded.len(),
                                discarded.join("; ")
                            )
                        }
                    ),
                    None => println!(
                        "| {label} | every run discarded: {} | | | | | |",
                        discarded.join("; ")
                    ),
                }
                if let (Client::Oha, true, Some((_, _, theirs))) =
                    (client, o.fixed_rate > 0.0, runs.get(runs.len() / 2))
                {
                    let rate = theirs.rps * o.fixed_rate;
                    let at = |server: Server, url: &str, headers: &[&str], cert| {
                        let cell = Cell {
                            url,
                            connections,
                            seconds: o.seconds,
                            headers,
                            cert,
                            body,
                        };
                        metered(server, || oha(&o.oha, &ca_arg, &cell, Some(rate)))
                    };
                    // As many runs as the closed-loop cells; the run with the median p99 ratio
                    // is shown, with how many runs had kdoctor's p99 at or below nginx's.
                    let (pairs, discarded) = paired(
                        o.repeat,
                        || at(kdoctor_server, url, &ours_headers, cert),
                        || at(nginx_server, &nginx_url, &theirs_headers, None),
                        |ours, theirs| ours.p99 / theirs.p99,
                    );
                    let at_or_below = pairs.iter().filter(|(ratio, ..)| *ratio <= 1.0).count();
                    fixed.push(match pairs.get(pairs.len() / 2) {
                        Some((_, ours, theirs)) => format!(
                            "| {label} | {rate:.0} | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {at_or_below} of {} | {:.1} / {:.1} µs |{}",
                            ours.p50,
                            ours.p99,
                            theirs.p50,
                            theirs.p99,
                            pairs.len(),
                            ours.cpu_us,
                            theirs.cpu_us,
                            if discarded.is_empty() {
                                String::new()
                            } else {
                                format!(" discarded: {}", discarded.join("; "))
                            }
                        ),
                        None => format!(
                            "| {label} | {rate:.0} | every run discarded: {} | | | |",
                            discarded.join("; ")
                        ),
                    });
                }
            }
        }
    }
    if !fixed.is_empty() {
        println!(
            "\nBoth servers at the same fixed rate ({:.0}% of nginx's closed-loop rate, oha -q with latency correction):\n",
            o.fixed_rate * 100.0
        );
        println!(
            "| GET, client | requests/s (both) | kdoctor p50 / p99 | nginx p50 / p99 | kdoctor's p99 ≤ nginx's | CPU per request, kdoctor / nginx |"
        );
        println!("|---|---|---|---|---|---|");
        for row in &fixed {
            println!("{row}");
        }
    }
    let table = "Accept: application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let list_url = format!("{base}?limit=500000");
    // As kubectl asks (gzip) and without.
    for (encoding, extra) in [("identity", None), ("gzip", Some("Accept-Encoding: gzip"))] {
        let headers: Vec<&str> = [auth_header.as_str(), table]
            .into_iter()
            .chain(extra)
            .collect();
        let list_size = size_with(&list_url, &headers, &[]);
        // Streamed in chunks of 64 KiB (`resource::sink`): each chunk's header and trailer (hex
        // length, two CRLFs), and the last chunk's.
        let framing = 12 * (list_size / (64 * 1024) + 2);
        match wrk_framed(&list_url, 1, o.seconds, &headers, list_size, framing) {
            Ok(list) => println!(
                "\nLIST as a Table of all {} tasks ({encoding}, {list_size} bytes), 1 connection: {:.1} req/s, p50 {:.1} ms, p99 {:.1} ms",
                o.tasks, list.rps, list.p50, list.p99
            ),
            Err(why) => println!("\nLIST as a Table ({encoding}): run discarded: {why}"),
        }
    }
    let rss_serving = rss_kib("VmRSS:");
    let peak = rss_kib("VmHWM:");
    println!(
        "RSS while serving: {} MiB before the runs, {} MiB after, peak {} MiB",
        rss_serving_before / 1024,
        rss_serving / 1024,
        peak / 1024
    );

    // 1,000 watches held open by a separate process, as kube-apiserver's aggregator opens them
    // for `kubectl get -w` (its front-proxy certificate and headers); then EVENTS changes, each
    // of which every watcher must see.
    const WATCHERS: usize = 1000;
    const EVENTS: usize = 20;
    let (proxy_cert, proxy_key) = credentials
        .cert(Identity::FrontProxy)
        .expect("front-proxy certificate");
    let headers: String = credentials
        .headers(Identity::FrontProxy)
        .iter()
        .map(|h| format!("{h}\\r\\n"))
        .collect();
    let script = format!(
        "import select, socket, ssl, sys, time\n\
         ctx = ssl.create_default_context(cafile='{ca}')\n\
         ctx.load_cert_chain('{proxy_cert}', '{proxy_key}')\n\
         socks = []\n\
         for i in range({WATCHERS}):\n\
         \x20   s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', {port})), server_hostname='127.0.0.1')\n\
         \x20   s.sendall(b'GET /apis/system.kdoctor.io/v1beta1/kdoctorreports?watch=true&resourceVersion={rv} HTTP/1.1\\r\\nHost: x\\r\\n{headers}\\r\\n')\n\
         \x20   socks.append(s)\n\
         for s in socks:\n\
         \x20   s.recv(1024)\n\
         print('open', flush=True)\n\
         sys.stdin.readline()\n\
         pat = b'\"type\":\"MODIFIED\"'\n\
         seen = {{s: 0 for s in socks}}\n\
         tail = {{s: b'' for s in socks}}\n\
         for s in socks:\n\
         \x20   s.setblocking(False)\n\
         start = time.time()\n\
         waiting = set(socks)\n\
         while waiting and time.time() - start < 60:\n\
         \x20   ready = [s for s in waiting if s.pending()] or select.select(list(waiting), [], [], 1)[0]\n\
         \x20   for s in ready:\n\
         \x20       try:\n\
         \x20           data = s.recv(65536)\n\
         \x20       except (ssl.SSLWantReadError, BlockingIOError):\n\
         \x20           continue\n\
         \x20       if not data:\n\
         \x20           waiting.discard(s)\n\
         \x20           continue\n\
         \x20       buf = tail[s] + data\n\
         \x20       seen[s] += buf.count(pat)\n\
         \x20       tail[s] = buf[-(len(pat) - 1):]\n\
         \x20       if seen[s] >= {EVENTS}:\n\
         \x20           waiting.discard(s)\n\
         complete = sum(1 for n in seen.values() if n == {EVENTS})\n\
         print(complete, min(seen.values()), max(seen.values()), round(time.time() - start, 2), flush=True)\n",
        ca = ca.display(),
        port = server.address.port(),
        rv = server
            .state
            .store()
            .map(|s| s.resource_version())
            .unwrap_or(0),
    );
    let script_path = o.dir.join("watches.py");
    std::fs::write(&script_path, script).expect("script");
    let before = rss_kib("VmRSS:");
    let mut clients = Command::new("python3")
        .arg(&script_path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut out = std::io::BufReader::new(clients.stdout.take().expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).expect("read");
    std::thread::sleep(Duration::from_secs(2));
    let watches = server.state.metrics.watches.get();
    let after = rss_kib("VmRSS:");
    println!(
        "{WATCHERS} watches (front-proxy): {watches} open on the server, RSS {} MiB -> {} MiB (+{} MiB)",
        before / 1024,
        after / 1024,
        (after.saturating_sub(before)) / 1024
    );
    // The changes: reports stored for the first task, one MODIFIED event each.
    let store = server.state.store().expect("store");
    let id = store.find(TaskKind::NetReach, "task00000")[0].id;
    let _ = std::io::Write::write_all(clients.stdin.as_mut().expect("stdin"), b"go\n");
    let fan_out = Instant::now();
    for event in 0..EVENTS {
        store
            .put_report(
                id,
                &net_reach_report(&format!("node-{}", event + 2), 1, 5, 0),
            )
            .expect("a report");
    }
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).expect("read");
    let fields: Vec<&str> = line.split_whitespace().collect();
    let peak_during = rss_kib("VmHWM:");
    println!(
        "{EVENTS} changes to {WATCHERS} watchers: {} of them saw every event (fewest {}, most {} \
         MODIFIED), all delivered {:.2} s after the first write; the server's peak RSS {} MiB",
        fields.first().unwrap_or(&"?"),
        fields.get(1).unwrap_or(&"?"),
        fields.get(2).unwrap_or(&"?"),
        fan_out.elapsed().as_secs_f64(),
        peak_during / 1024
    );
    let _ = clients.kill();
    let _ = clients.wait();
    println!(
        "start-up to ready (open the store of {} tasks, serve, /readyz 200): {:.0} ms",
        o.tasks + 1,
        startup.as_secs_f64() * 1e3
    );
    // Stop through the master first: killing it alone leaves its workers running.
    let _ = Command::new("nginx")
        .args(["-c"])
        .arg(o.dir.join("nginx.conf"))
        .args(["-p"])
        .arg(&o.dir)
        .args(["-s", "stop"])
        .output();
    // The master stops its workers before it exits: killed at once, it left them running.
    let deadline = Instant::now() + Duration::from_secs(5);
    while matches!(nginx.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = nginx.kill();
    let _ = nginx.wait();
    runtime.block_on(server.stop());
}
