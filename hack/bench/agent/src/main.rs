//! Runs `kdoctor probe http` and oha at the same fixed rate and up a ladder of rates against
//! one nginx; `kdoctor probe dns` and dnsperf against one unbound; the agent's idle RSS; and
//! this library probing 100 targets at 100 requests/s each; `kdoctor probe tcp` and nping's
//! connect mode against the same nginx. Prints markdown.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kdoctor_agent::probe::http::{HttpProber, HttpRequestSpec};
use kdoctor_agent::probe::{Plan, Progress, run};

mod tcp;
mod untuned;

struct Options {
    kdoctor: PathBuf,
    oha: PathBuf,
    secs: u64,
    fixed_rate: u64,
    ladder: Vec<u64>,
    dns_ladder: Vec<u64>,
    dns_rates: Vec<u64>,
    stream_rates: Vec<u64>,
    untuned_rates: Vec<u64>,
    tcp_rates: Vec<u64>,
    only_untuned: bool,
    only_tcp: bool,
}

fn options() -> Options {
    let mut o = Options {
        kdoctor: PathBuf::from("kdoctor"),
        oha: PathBuf::from("oha"),
        secs: 10,
        fixed_rate: 2000,
        ladder: vec![
            5_000, 10_000, 15_000, 20_000, 25_000, 30_000, 40_000, 50_000,
        ],
        dns_ladder: vec![
            20_000, 40_000, 60_000, 80_000, 100_000, 120_000, 140_000, 160_000,
        ],
        dns_rates: vec![1_000, 5_000, 10_000, 20_000],
        stream_rates: vec![1_000, 5_000],
        untuned_rates: vec![20_000, 40_000, 60_000, 80_000, 100_000],
        tcp_rates: vec![100, 1_000, 5_000],
        only_untuned: false,
        only_tcp: false,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--kdoctor" => o.kdoctor = value.into(),
            "--oha" => o.oha = value.into(),
            "--secs" => o.secs = value.parse().expect("--secs N"),
            "--fixed-rate" => o.fixed_rate = value.parse().expect("--fixed-rate N"),
            "--ladder" => {
                o.ladder = value
                    .split(',')
                    .map(|v| v.parse().expect("--ladder a,b"))
                    .collect()
            }
            "--dns-ladder" => o.dns_ladder = rates(&value, "--dns-ladder a,b"),
            "--dns-rates" => o.dns_rates = rates(&value, "--dns-rates a,b"),
            "--stream-rates" => o.stream_rates = rates(&value, "--stream-rates a,b"),
            "--untuned-rates" => o.untuned_rates = rates(&value, "--untuned-rates a,b"),
            "--tcp-rates" => o.tcp_rates = rates(&value, "--tcp-rates a,b"),
            "--only" if value == "untuned-dns" => o.only_untuned = true,
            "--only" if value == "tcp" => o.only_tcp = true,
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    o
}

fn rates(value: &str, usage: &str) -> Vec<u64> {
    value.split(',').map(|v| v.parse().expect(usage)).collect()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Server(Child, PathBuf);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn temp(what: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("kdoctor-bench-agent-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn wait_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn nginx() -> (Server, u16) {
    let dir = temp("nginx");
    let port = free_port();
    let d = dir.display();
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::write(dir.join("www/index.html"), "x".repeat(100)).unwrap();
    let conf = format!(
        "daemon off; master_process off; pid {d}/pid; error_log {d}/error.log warn;
events {{ worker_connections 16384; }}
http {{ access_log off; keepalive_requests 1000000; client_body_temp_path {d}/b; proxy_temp_path {d}/p;
fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;
server {{ listen 127.0.0.1:{port} backlog=4096; root {d}/www; }} }}"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let child = Command::new("nginx")
        .args(["-c", &format!("{d}/nginx.conf"), "-p", &d.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx");
    wait_port(port);
    (Server(child, dir), port)
}

/// unbound with one thread: UDP and TCP on `port`, DNS over TLS on `tls_port` with a
/// self-signed certificate for 127.0.0.1 (`cert`). Tuned: 4 MiB socket buffers and 1,000 TCP
/// connections; untuned: Debian's defaults (the kernel's default buffers, 10 connections), as a
/// cluster's DNS server usually runs.
struct Unbound {
    _server: Server,
    port: u16,
    tls_port: u16,
    cert: PathBuf,
}

impl Unbound {
    /// Where unbound listens for `mode`.
    fn port(&self, mode: Dns) -> u16 {
        match mode {
            Dns::Dot => self.tls_port,
            Dns::Udp | Dns::Tcp => self.port,
        }
    }
}

fn unbound(tuned: bool) -> Unbound {
    let dir = temp("unbound");
    let port = free_port();
    let tls_port = free_port();
    let d = dir.display();
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = dir.join("cert.pem");
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), certified.signing_key.serialize_pem()).unwrap();
    let tuning = if tuned {
        "incoming-num-tcp: 1000\n  so-rcvbuf: 4m\n  so-sndbuf: 4m\n  "
    } else {
        ""
    };
    let conf = format!(
        "server:\n  use-syslog: no\n  chroot: \"\"\n  username: \"\"\n  directory: \"{d}\"\n  pidfile: \"{d}/pid\"\n  \
         interface: 127.0.0.1@{port}\n  interface: 127.0.0.1@{tls_port}\n  tls-port: {tls_port}\n  \
         tls-service-key: \"{d}/key.pem\"\n  tls-service-pem: \"{d}/cert.pem\"\n  \
         {tuning}access-control: 127.0.0.0/8 allow\n  module-config: \"iterator\"\n  \
         num-threads: 1\n  ratelimit: 0\n  ip-ratelimit: 0\n  local-zone: \"test.\" static\n  \
         local-data: \"probe.test. 3600 IN A 127.0.0.1\"\nremote-control:\n  control-enable: no\n"
    );
    std::fs::write(dir.join("unbound.conf"), conf).unwrap();
    let child = Command::new("unbound")
        .args(["-d", "-c", &format!("{d}/unbound.conf")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("unbound");
    wait_port(port);
    wait_port(tls_port);
    Unbound {
        _server: Server(child, dir),
        port,
        tls_port,
        cert,
    }
}

/// One run of a tool: what it achieved and what it cost.
#[derive(Debug, Default, Clone)]
struct Run {
    requests: f64,
    ok: f64,
    /// Answered requests per second of the tool's own run time (dnsperf's definition of its
    /// "Queries per second", applied to every tool).
    rate: f64,
    p50_ms: f64,
    /// The mean (dnsperf reports only this, never percentiles).
    mean_ms: f64,
    p99_ms: f64,
    cpu_s: f64,
    max_rss_kib: u64,
}

/// `802.02ms`, `5.0001s`, `250µs` in seconds (a report's requestDuration).
fn go_duration_s(text: &str) -> Option<f64> {
    let at = text.find(|c: char| c.is_ascii_alphabetic() || c == 'µ')?;
    let (number, unit) = text.split_at(at);
    let value: f64 = number.parse().ok()?;
    Some(match unit {
        "s" => value,
        "ms" => value / 1e3,
        "µs" | "us" => value / 1e6,
        "ns" => value / 1e9,
        "m" => value * 60.0,
        _ => return None,
    })
}

/// A kdoctor report's target metrics as a run.
fn kdoctor_run(m: &serde_json::Value, secs: u64, cpu_s: f64, max_rss_kib: u64) -> Run {
    let ok = m["successCounts"].as_f64().unwrap_or(0.0);
    let span = m["requestDuration"]
        .as_str()
        .and_then(go_duration_s)
        .unwrap_or(secs as f64);
    Run {
        requests: m["requestCounts"].as_f64().unwrap_or(0.0),
        ok,
        rate: ok / span.max(1e-9),
        p50_ms: m["latencies"]["p50InMs"].as_f64().unwrap_or(f64::NAN),
        mean_ms: m["latencies"]["meanInMs"].as_f64().unwrap_or(f64::NAN),
        p99_ms: m["latencies"]["p99InMs"].as_f64().unwrap_or(f64::NAN),
        cpu_s,
        max_rss_kib,
    }
}

impl Run {
    fn held(&self, target: u64) -> bool {
        self.rate >= target as f64 * 0.99 && self.ok >= self.requests * 0.999 && self.requests > 0.0
    }
    fn cpu_per_10k(&self) -> f64 {
        if self.requests > 0.0 {
            self.cpu_s * 10_000.0 / self.requests
        } else {
            f64::NAN
        }
    }
}

/// Runs a command under /usr/bin/time; returns stdout, CPU seconds and peak RSS.
fn timed(program: &Path, args: &[String]) -> (String, f64, u64) {
    let times = std::env::temp_dir().join(format!("kdoctor-bench-time-{}", std::process::id()));
    let out = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%U %S %M")
        .arg("-o")
        .arg(&times)
        .arg(program)
        .args(args)
        .stderr(Stdio::null())
        .output()
        .expect("run under /usr/bin/time");
    let t = std::fs::read_to_string(&times).unwrap_or_default();
    let fields: Vec<&str> = t.split_whitespace().rev().take(3).collect();
    let (user, sys, rss) = match fields[..] {
        [rss, sys, user] => (
            user.parse().unwrap_or(0.0),
            sys.parse().unwrap_or(0.0),
            rss.parse().unwrap_or(0),
        ),
        _ => (0.0, 0.0, 0),
    };
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        user + sys,
        rss,
    )
}

/// `kdoctor probe PROBE… --qps RATE --duration SECS` with the agent report's first target of
/// `result` (`taskAppHealthy`, `taskNetReach`) as a run.
fn kdoctor_probe(o: &Options, probe: &[&str], result: &str, rate: u64, secs: u64) -> Run {
    let load = [
        "--qps",
        &rate.to_string(),
        "--duration",
        &format!("{secs}s"),
        "--timeout",
        "2s",
        "-o",
        "json",
        "-q",
    ]
    .map(String::from);
    let args: Vec<String> = ["probe"]
        .iter()
        .chain(probe)
        .map(|s| s.to_string())
        .chain(load)
        .collect();
    let (out, cpu_s, max_rss_kib) = timed(&o.kdoctor, &args);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    kdoctor_run(
        &v[result]["roundTaskDetail"][0]["requestTargetMetrics"],
        secs,
        cpu_s,
        max_rss_kib,
    )
}

fn kdoctor_http(o: &Options, url: &str, rate: u64, secs: u64) -> Run {
    kdoctor_probe(o, &["http", url], "taskAppHealthy", rate, secs)
}

fn oha_http(o: &Options, url: &str, rate: u64, secs: u64) -> Run {
    // Enough connections for the rate at ~1 ms each, as kdoctor's in-flight cap allows.
    let connections = (rate / 500).clamp(10, 200);
    let args: Vec<String> = [
        "-z",
        &format!("{secs}s"),
        "-q",
        &rate.to_string(),
        "-c",
        &connections.to_string(),
        "--latency-correction",
        "--no-tui",
        "--output-format",
        "json",
        "-t",
        "2s",
        url,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (out, cpu_s, max_rss_kib) = timed(&o.oha, &args);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let ok: f64 = v["statusCodeDistribution"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.starts_with('2'))
                .map(|(_, n)| n.as_f64().unwrap_or(0.0))
                .sum()
        })
        .unwrap_or(0.0);
    let errors: f64 = v["errorDistribution"]
        .as_object()
        .map(|m| m.values().map(|n| n.as_f64().unwrap_or(0.0)).sum())
        .unwrap_or(0.0);
    let all: f64 = v["statusCodeDistribution"]
        .as_object()
        .map(|m| m.values().map(|n| n.as_f64().unwrap_or(0.0)).sum())
        .unwrap_or(0.0);
    let requests = all + errors;
    // oha's percentiles are in seconds.
    let p = |q: &str| {
        v["latencyPercentiles"][q]
            .as_f64()
            .map(|s| s * 1000.0)
            .unwrap_or(f64::NAN)
    };
    let total = v["summary"]["total"].as_f64().unwrap_or(secs as f64);
    Run {
        requests,
        ok,
        rate: ok / total.max(1e-9),
        p50_ms: p("p50"),
        mean_ms: v["summary"]["average"]
            .as_f64()
            .map(|s| s * 1000.0)
            .unwrap_or(f64::NAN),
        p99_ms: p("p99"),
        cpu_s,
        max_rss_kib,
    }
}

/// Transport of a DNS run: kdoctor's `--protocol` and dnsperf's `-m`.
#[derive(Clone, Copy)]
enum Dns {
    Udp,
    Tcp,
    Dot,
}

impl Dns {
    fn kdoctor(self) -> &'static str {
        match self {
            Dns::Udp => "udp",
            Dns::Tcp => "tcp",
            Dns::Dot => "tcp-tls",
        }
    }
    fn dnsperf(self) -> &'static str {
        match self {
            Dns::Udp => "udp",
            Dns::Tcp => "tcp",
            Dns::Dot => "dot",
        }
    }
}

fn kdoctor_dns(o: &Options, ub: &Unbound, mode: Dns, rate: u64, secs: u64) -> Run {
    let port = ub.port(mode);
    let mut args: Vec<String> = [
        "probe",
        "dns",
        &format!("127.0.0.1:{port}"),
        "--protocol",
        mode.kdoctor(),
        "--domain",
        "probe.test",
        "--qps",
        &rate.to_string(),
        "--duration",
        &format!("{secs}s"),
        "--timeout",
        "2s",
        "-o",
        "json",
        "-q",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Dns::Dot = mode {
        args.extend(["--ca".to_string(), ub.cert.display().to_string()]);
    }
    let (out, cpu_s, max_rss_kib) = timed(&o.kdoctor, &args);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    kdoctor_run(
        &v["taskNetDns"]["roundTaskDetail"][0]["requestTargetMetrics"],
        secs,
        cpu_s,
        max_rss_kib,
    )
}

/// dnsperf at `rate`, or as fast as unbound answers (closed loop: each of its 10 clients keeps
/// up to 100 queries outstanding) when `rate` is `None`.
fn dnsperf(ub: &Unbound, mode: Dns, rate: Option<u64>, secs: u64, data: &Path) -> Run {
    let port = ub.port(mode);
    let mut args: Vec<String> = [
        "-m",
        mode.dnsperf(),
        "-s",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-d",
        &data.display().to_string(),
        "-l",
        &secs.to_string(),
        "-c",
        "10",
        "-q",
        "1000",
        "-t",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(rate) = rate {
        args.extend(["-Q".to_string(), rate.to_string()]);
    }
    let (out, cpu_s, max_rss_kib) = timed(Path::new("/usr/bin/dnsperf"), &args);
    let find = |label: &str| -> f64 {
        out.lines()
            .find_map(|l| {
                let l = l.trim();
                l.strip_prefix(label)
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
            })
            .unwrap_or(0.0)
    };
    let sent = find("Queries sent:");
    let completed = find("Queries completed:");
    let avg = find("Average Latency (s):") * 1000.0;
    Run {
        requests: sent,
        ok: completed,
        // completed ÷ its run time.
        rate: find("Queries per second:"),
        p50_ms: f64::NAN,
        mean_ms: avg,
        p99_ms: f64::NAN,
        cpu_s,
        max_rss_kib,
    }
}

/// The median of three runs by rate.
fn median_of_three(mut run: impl FnMut() -> Run) -> Run {
    let mut runs = [run(), run(), run()];
    runs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    runs[1].clone()
}

fn highest(ladder: &[u64], mut probe: impl FnMut(u64) -> Run) -> (u64, Vec<(u64, Run)>) {
    let mut best = 0;
    let mut runs = Vec::new();
    for &rate in ladder {
        let r = probe(rate);
        let held = r.held(rate);
        runs.push((rate, r));
        if !held {
            break;
        }
        best = rate;
    }
    (best, runs)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn own_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn agent_idle_rss(o: &Options) -> u64 {
    let mut child = Command::new(&o.kdoctor)
        .args([
            "agent",
            "--bind",
            "127.0.0.1",
            "--app-http-port",
            "0",
            "--app-https-port",
            "0",
            "--health-port",
            "0",
            "--metrics-port",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kdoctor agent");
    std::thread::sleep(Duration::from_secs(3));
    let rss = rss_kib(child.id());
    let _ = child.kill();
    let _ = child.wait();
    rss
}

async fn hundred_targets(port: u16, secs: u64) -> (u64, u64, u64) {
    let mut tasks = Vec::new();
    for i in 0..100 {
        let spec = HttpRequestSpec {
            url: format!("http://127.0.0.1:{port}/?target={i}"),
            method: http::Method::GET,
            headers: vec![],
            body: bytes::Bytes::new(),
            http2: false,
            keep_alive: true,
            expected_status: None,
        };
        let prober = Arc::new(HttpProber::new(spec, None).unwrap());
        let plan = Plan::new(100.0, Duration::from_secs(secs), Duration::from_secs(2)).unwrap();
        tasks.push(tokio::spawn(run(
            prober,
            plan,
            Arc::new(Progress::default()),
            None,
        )));
    }
    let (mut sent, mut ok) = (0, 0);
    for t in tasks {
        let m = t.await.unwrap();
        sent += m.recorder.requests;
        ok += m.recorder.successes;
    }
    (sent, ok, own_hwm_kib())
}

fn f(v: f64, digits: usize) -> String {
    if v.is_nan() {
        "—".to_string()
    } else {
        format!("{v:.digits$}")
    }
}

/// The cells of a kdoctor run and a dnsperf run side by side: answered/s, succeeded, p50, mean
/// and p99 of kdoctor; answered/s, succeeded and mean of dnsperf (it gives no percentiles).
fn side_by_side(k: &Run, d: &Run) -> String {
    format!(
        "{} | {} / {} | {} | {} | {} | {} | {} / {} | {}",
        f(k.rate, 0),
        k.ok,
        k.requests,
        f(k.p50_ms, 3),
        f(k.mean_ms, 3),
        f(k.p99_ms, 3),
        f(d.rate, 0),
        d.ok,
        d.requests,
        f(d.mean_ms, 3)
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let o = options();
    if o.only_untuned {
        untuned::section(&o);
        return;
    }
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let (_nginx, http_port) = nginx();
    if o.only_tcp {
        tcp::section(&o, http_port);
        return;
    }
    let url = format!("http://127.0.0.1:{http_port}/");
    let secs = o.secs;

    let fixed_k = kdoctor_http(&o, &url, o.fixed_rate, secs);
    let fixed_o = oha_http(&o, &url, o.fixed_rate, secs);
    let ladder_secs = secs.min(5);
    let (best_k, runs_k) = highest(&o.ladder, |r| kdoctor_http(&o, &url, r, ladder_secs));
    let (best_o, runs_o) = highest(&o.ladder, |r| oha_http(&o, &url, r, ladder_secs));

    let ub = unbound(true);
    let data = std::env::temp_dir().join(format!("kdoctor-bench-dnsperf-{}", std::process::id()));
    std::fs::write(&data, "probe.test A\n").unwrap();
    let dns_fixed: Vec<(u64, Run, Run)> = o
        .dns_rates
        .iter()
        .map(|&r| {
            (
                r,
                kdoctor_dns(&o, &ub, Dns::Udp, r, ladder_secs),
                dnsperf(&ub, Dns::Udp, Some(r), ladder_secs, &data),
            )
        })
        .collect();
    let closed = median_of_three(|| dnsperf(&ub, Dns::Udp, None, ladder_secs, &data));
    let (best_kd, runs_kd) = highest(&o.dns_ladder, |r| {
        kdoctor_dns(&o, &ub, Dns::Udp, r, ladder_secs)
    });
    let mut streams = Vec::new();
    for mode in [Dns::Tcp, Dns::Dot] {
        for &r in &o.stream_rates {
            streams.push((
                mode,
                r,
                kdoctor_dns(&o, &ub, mode, r, ladder_secs),
                dnsperf(&ub, mode, Some(r), ladder_secs, &data),
            ));
        }
    }
    let _ = std::fs::remove_file(&data);

    let idle = agent_idle_rss(&o);
    let (sent100, ok100, hwm100) = hundred_targets(http_port, secs).await;

    println!("## Agent\n");
    println!(
        "`hack/bench/agent/run.sh --secs {secs}` ({cores} cores shared by the tools and the servers; nginx as one process, unbound with one thread; release build).\n"
    );
    println!(
        "### HTTP at a fixed {} requests/s for {secs} s, same nginx\n",
        o.fixed_rate
    );
    println!(
        "| tool | answered/s | succeeded | p50 ms | mean ms | p99 ms | CPU s per 10,000 requests | peak RSS MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, r) in [
        ("kdoctor probe http", &fixed_k),
        ("oha --latency-correction", &fixed_o),
    ] {
        println!(
            "| {name} | {} | {} / {} | {} | {} | {} | {} | {} |",
            f(r.rate, 1),
            r.ok,
            r.requests,
            f(r.p50_ms, 3),
            f(r.mean_ms, 3),
            f(r.p99_ms, 3),
            f(r.cpu_per_10k(), 3),
            r.max_rss_kib / 1024
        );
    }
    println!(
        "\nCPU per request, kdoctor / oha: {}\n",
        f(fixed_k.cpu_per_10k() / fixed_o.cpu_per_10k(), 2)
    );
    println!(
        "### Highest rate held ({ladder_secs} s per step; held = answered/s ≥ 99% of the target and ≥ 99.9% succeeded)\n"
    );
    println!(
        "| tool | highest held | steps (target: answered/s, succeeded %, mean ms, p99 ms, CPU s/10k) |"
    );
    println!("|---|---|---|");
    for (name, best, runs) in [
        ("kdoctor probe http", best_k, &runs_k),
        ("oha", best_o, &runs_o),
        ("kdoctor probe dns (udp)", best_kd, &runs_kd),
    ] {
        let steps: Vec<String> = runs
            .iter()
            .map(|(t, r)| {
                format!(
                    "{t}: {}, {}%, {}, {}, {}",
                    f(r.rate, 0),
                    f(100.0 * r.ok / r.requests.max(1.0), 2),
                    f(r.mean_ms, 3),
                    f(r.p99_ms, 2),
                    f(r.cpu_per_10k(), 2)
                )
            })
            .collect();
        println!("| {name} | {best}/s | {} |", steps.join("; "));
    }
    println!(
        "| dnsperf, closed loop (10 clients × 100 outstanding; median of 3) | {}/s answered ({}% of {} sent) | |",
        f(closed.rate, 0),
        f(100.0 * closed.ok / closed.requests.max(1.0), 2),
        closed.requests
    );
    println!(
        "\nHTTP highest held, kdoctor / oha: {}; DNS highest held by kdoctor / dnsperf's closed-loop rate: {}\n",
        f(best_k as f64 / best_o.max(1) as f64, 2),
        f(best_kd as f64 / closed.rate.max(1.0), 2)
    );
    println!("### DNS over UDP at fixed rates ({ladder_secs} s each, same unbound)\n");
    println!(
        "| q/s | kdoctor answered/s | succeeded | p50 ms | mean ms | p99 ms | dnsperf answered/s | succeeded | mean ms | kdoctor p50 − dnsperf mean | CPU s/10k kdoctor / dnsperf |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (r, k, d) in &dns_fixed {
        println!(
            "| {r} | {} | {} µs | {} / {} |",
            side_by_side(k, d),
            f((k.p50_ms - d.mean_ms) * 1000.0, 0),
            f(k.cpu_per_10k(), 2),
            f(d.cpu_per_10k(), 2)
        );
    }
    println!(
        "\n### DNS over TCP and TLS at fixed rates ({ladder_secs} s each; kdoctor opens a connection per query as upstream does, dnsperf keeps 10 open)\n"
    );
    println!(
        "| transport | q/s | kdoctor answered/s | succeeded | p50 ms | mean ms | p99 ms | dnsperf answered/s | succeeded | mean ms | CPU s/10k kdoctor / dnsperf |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (mode, r, k, d) in &streams {
        println!(
            "| {} | {r} | {} | {} / {} |",
            mode.kdoctor(),
            side_by_side(k, d),
            f(k.cpu_per_10k(), 2),
            f(d.cpu_per_10k(), 2)
        );
    }
    println!();
    println!("### Memory\n");
    println!("| measure | value |\n|---|---|");
    println!(
        "| `kdoctor agent` RSS, idle (echo targets, health, metrics) | {:.1} MiB |",
        idle as f64 / 1024.0
    );
    println!(
        "| peak RSS probing 100 targets at 100 requests/s each for {secs} s (library, one process) | {:.1} MiB ({ok100} of {sent100} succeeded) |",
        hwm100 as f64 / 1024.0
    );
    println!();
    tcp::section(&o, http_port);
    untuned::section(&o);
}
