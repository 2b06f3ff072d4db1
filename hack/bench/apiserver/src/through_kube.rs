//! End to end through the real aggregation layer (hack/bench/apiserver/through-kube.sh): a GET
//! of a KdoctorReport through kube-apiserver (its aggregator proxying to the controllers behind
//! the APIService) against a GET of a built-in ConfigMap of the same size and content through
//! the same kube-apiserver, same client (oha), same client certificate, same encoding asked, in
//! the same run. Each run counts only when every answer was a 200 of the size that path answered
//! before the runs; the CPU time of kube-apiserver and of the controllers is charged per request,
//! which says where the time of the aggregated path goes.

use std::path::PathBuf;

use crate::{Cell, Run, comma_list, cpu_ns, oha};

struct Options {
    oha: PathBuf,
    server: String,
    ca: String,
    cert: String,
    key: String,
    report: String,
    configmap: String,
    apiserver: u32,
    controllers: Vec<u32>,
    etcd: Vec<u32>,
    seconds: u64,
    repeat: usize,
    connections: Vec<u32>,
}

fn options(args: &[String]) -> Options {
    let mut o = Options {
        oha: PathBuf::from("oha"),
        server: String::new(),
        ca: String::new(),
        cert: String::new(),
        key: String::new(),
        report: String::new(),
        configmap: String::new(),
        apiserver: 0,
        controllers: Vec::new(),
        etcd: Vec::new(),
        seconds: 10,
        repeat: 3,
        connections: vec![1, 16],
    };
    for pair in args.chunks(2) {
        let value = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--oha" => o.oha = PathBuf::from(value),
            "--server" => o.server = value,
            "--ca" => o.ca = value,
            "--cert" => o.cert = value,
            "--key" => o.key = value,
            "--report" => o.report = value,
            "--configmap" => o.configmap = value,
            "--apiserver-pid" => o.apiserver = value.parse().expect("--apiserver-pid PID"),
            "--controller-pids" => {
                o.controllers = comma_list(&value, "--controller-pids PID,PID,…")
            }
            "--etcd-pids" => o.etcd = comma_list(&value, "--etcd-pids PID,PID,…"),
            "--seconds" => o.seconds = value.parse().expect("--seconds S"),
            "--repeat" => o.repeat = value.parse::<usize>().expect("--repeat N").max(1),
            "--connections" => o.connections = comma_list(&value, "--connections N,N,…"),
            other => panic!("through-kube: unknown option {other}"),
        }
    }
    for (name, value) in [
        ("--server", &o.server),
        ("--ca", &o.ca),
        ("--cert", &o.cert),
        ("--key", &o.key),
        ("--report", &o.report),
        ("--configmap", &o.configmap),
    ] {
        assert!(!value.is_empty(), "through-kube: {name} is required");
    }
    assert!(
        o.apiserver != 0,
        "through-kube: --apiserver-pid is required"
    );
    assert!(
        !o.controllers.is_empty(),
        "through-kube: --controller-pids is required"
    );
    o
}

/// One answer's status and size (curl, the bench's certificate): what every answer of a run
/// must match. Not as curl: kube-apiserver indents its JSON for a user agent named curl.
fn probe(o: &Options, url: &str, headers: &[&str]) -> Result<(u16, usize), String> {
    let mut args = vec![
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{size_download}",
        "-A",
        "kdoctor-bench",
        "--cacert",
        &o.ca,
        "--cert",
        &o.cert,
        "--key",
        &o.key,
    ];
    for h in headers {
        args.extend(["-H", h]);
    }
    args.push(url);
    let out = crate::curl(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    let (code, size) = text
        .split_once(' ')
        .ok_or_else(|| format!("curl {url}: {text}"))?;
    Ok((
        code.parse().map_err(|_| format!("curl {url}: {text}"))?,
        size.parse().map_err(|_| format!("curl {url}: {text}"))?,
    ))
}

/// A run and the CPU time kube-apiserver, the controllers and etcd used during it, each in µs
/// per answered request.
struct Charged {
    run: Run,
    apiserver_us: f64,
    controllers_us: f64,
    etcd_us: f64,
}

fn charged(o: &Options, load: impl FnOnce() -> Result<Run, String>) -> Result<Charged, String> {
    let sum = |pids: &[u32]| -> u64 { pids.iter().map(|&p| cpu_ns(p, false)).sum() };
    let before = [sum(&[o.apiserver]), sum(&o.controllers), sum(&o.etcd)];
    let run = load()?;
    let after = [sum(&[o.apiserver]), sum(&o.controllers), sum(&o.etcd)];
    let per = |i: usize| after[i].saturating_sub(before[i]) as f64 / 1000.0 / run.requests.max(1.0);
    Ok(Charged {
        apiserver_us: per(0),
        controllers_us: per(1),
        etcd_us: per(2),
        run,
    })
}

pub fn main(args: &[String]) {
    let o = options(args);
    let report_url = format!("{}{}", o.server, o.report);
    let configmap_url = format!("{}{}", o.server, o.configmap);
    println!(
        "| GET through kube-apiserver | connections | KdoctorReport req/s | ConfigMap req/s | ratio (median of {}) | p50 / p99 ms (report) | p50 / p99 ms (ConfigMap) | kube-apiserver µs CPU/req (report / ConfigMap) | controllers µs CPU/req (report) | etcd µs CPU/req (report / ConfigMap) |",
        o.repeat
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (encoding, headers) in [
        ("identity", &["Accept: application/json"][..]),
        (
            "gzip",
            &["Accept: application/json", "Accept-Encoding: gzip"][..],
        ),
    ] {
        let sizes = (
            probe(&o, &report_url, headers),
            probe(&o, &configmap_url, headers),
        );
        let (report_body, configmap_body) = match sizes {
            (Ok((200, r)), Ok((200, c))) => (r, c),
            other => {
                println!(
                    "| {encoding} | | not run: the first answers were {other:?} | | | | | | | |"
                );
                continue;
            }
        };
        for &connections in &o.connections {
            let load = |url: &str, body: usize| {
                let cell = Cell {
                    url,
                    connections,
                    seconds: o.seconds,
                    headers,
                    cert: Some((&o.cert, &o.key)),
                    body,
                };
                charged(&o, || oha(&o.oha, &o.ca, &cell, None))
            };
            // Each pair: the report's run, then the ConfigMap's, back to back.
            let mut pairs = Vec::new();
            let mut discarded = Vec::new();
            for _ in 0..o.repeat {
                match (
                    load(&report_url, report_body),
                    load(&configmap_url, configmap_body),
                ) {
                    (Ok(r), Ok(c)) => pairs.push((r.run.rps / c.run.rps, r, c)),
                    (r, c) => discarded.push(format!("{:?} / {:?}", r.err(), c.err())),
                }
            }
            pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let Some((ratio, r, c)) = pairs.get(pairs.len() / 2) else {
                println!(
                    "| {encoding} ({report_body} / {configmap_body} bytes) | {connections} | every run discarded: {} | | | | | | | |",
                    discarded.join("; ")
                );
                continue;
            };
            println!(
                "| {encoding} ({report_body} / {configmap_body} bytes) | {connections} | {:.0} | {:.0} | {ratio:.2} ({} of {} pairs) | {:.2} / {:.2} | {:.2} / {:.2} | {:.0} / {:.0} | {:.0} | {:.0} / {:.0} |",
                r.run.rps,
                c.run.rps,
                pairs.len(),
                o.repeat,
                r.run.p50,
                r.run.p99,
                c.run.p50,
                c.run.p99,
                r.apiserver_us,
                c.apiserver_us,
                r.controllers_us,
                r.etcd_us,
                c.etcd_us,
            );
            for why in discarded {
                println!("  discarded pair: {why}");
            }
        }
    }
}
