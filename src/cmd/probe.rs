//! `kdoctor probe http URL`, `kdoctor probe tcp|udp|icmp ADDRESS` and `kdoctor probe dns SERVER`:
//! one probe run from this machine,
//! at a fixed rate for a fixed time, printing a summary (or the full agent report with
//! `-o json|yaml`) and a progress line on standard error while it runs. Exit 0 when the target
//! met the success condition, 1 when it did not, 2 on a usage or environment error.

use std::io::IsTerminal;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kdoctor_agent::oneshot::{
    ClientTls, Load, Outcome, probe_dns, probe_http, probe_icmp, probe_tcp, probe_udp,
};
use kdoctor_agent::probe::Progress;
use kdoctor_agent::probe::dns::{DnsProtocol, DnsRequestSpec, RecordType};
use kdoctor_agent::probe::http::HttpRequestSpec;
use kdoctor_agent::round::execute::execute;
use kdoctor_api::config::Config;
use kdoctor_api::defaults::ClusterFacts;
use kdoctor_api::document::parse_tasks;
use kdoctor_api::report::Report;
use kdoctor_api::task::apphttphealthy::parse_header;
use kdoctor_api::task::{NetSuccessCondition, TaskKind};
use kdoctor_api::validation;

use super::output::{Format, render};
use kdoctor_local::plan::{StandIns, local_plan};

/// Arguments of `kdoctor probe`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Probe an HTTP(S) URL.
    Http(HttpArgs),
    /// Time TCP connects (SYN to established) to an address and port.
    Tcp(TcpArgs),
    /// Send echo datagrams to an agent's UDP echo port: loss, duplicates, reordering, jitter,
    /// hops.
    Udp(UdpArgs),
    /// Send ICMP echo requests (ping) to an address: loss, duplicates, reordering, round-trip
    /// jitter, hops back. Needs this process's group in net.ipv4.ping_group_range.
    Icmp(IcmpArgs),
    /// Find the path MTU to an agent's UDP echo port: the largest packet that passes with
    /// don't-fragment set, and why no larger one does (interface, fragmentation-needed,
    /// black-hole).
    Mtu(MtuArgs),
    /// Probe a DNS server.
    Dns(DnsArgs),
    /// Run one round of each AppHttpHealthy or Netdns (targetUser) task in a file, from here.
    Task(TaskArgs),
}

#[derive(clap::Args)]
struct TaskArgs {
    /// Task file (`.yaml` or `.json`; `-` reads standard input).
    #[arg(short = 'f', long = "filename")]
    file: PathBuf,
    /// The kdoctor configuration (`conf.yml`) whose defaults and limits apply.
    #[arg(long = "config", short = 'C', value_name = "FILE")]
    config: Option<PathBuf>,
    /// `table`: one line per target; `json`/`yaml`: the agent reports.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

fn duration(text: &str) -> Result<Duration, String> {
    kdoctor_agent::duration::parse(text)
}

#[derive(clap::Args)]
struct LoadArgs {
    /// Requests per second.
    #[arg(long, default_value_t = 10.0)]
    qps: f64,
    /// How long to probe (`10s`, `1m`, or seconds).
    #[arg(long, default_value = "2s", value_parser = duration)]
    duration: Duration,
    /// Timeout of one request, over connect, request and the whole answer.
    #[arg(long, default_value = "500ms", value_parser = duration)]
    timeout: Duration,
    /// Most requests in flight (default: qps × timeout plus slack); due requests beyond it are
    /// not sent and counted as unsent.
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// Lowest share of successful requests for success, 0 to 1.
    #[arg(long, default_value_t = 1.0)]
    success_rate: f64,
    /// Highest mean latency of successful requests for success, in milliseconds.
    #[arg(long, value_name = "MS")]
    mean_delay_ms: Option<i64>,
    /// CA certificate (PEM) to verify the server with; without it any certificate is accepted.
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// `table`: a summary; `json`/`yaml`: the agent report, with serialized histograms.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
    /// No progress line.
    #[arg(short, long)]
    quiet: bool,
}

#[derive(clap::Args)]
struct HttpArgs {
    /// URL to probe (`http://` is assumed without a scheme).
    url: String,
    /// HTTP method.
    #[arg(short = 'X', long, default_value = "GET")]
    method: String,
    /// A request header, `"Name: value"` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Request body.
    #[arg(short = 'd', long, conflicts_with = "body_file")]
    body: Option<String>,
    /// Request body from a file.
    #[arg(long, value_name = "FILE")]
    body_file: Option<PathBuf>,
    /// Offer HTTP/2 (ALPN over TLS; prior knowledge over plain HTTP).
    #[arg(long)]
    http2: bool,
    /// Open a new connection for every request instead of keeping connections alive.
    #[arg(long)]
    no_keep_alive: bool,
    /// Most kept-alive HTTP/1.1 connections; a request waits for a free one (counted in its
    /// response time) rather than opening more.
    #[arg(long, default_value_t = kdoctor_agent::probe::http::DEFAULT_MAX_CONNECTIONS)]
    connections: usize,
    /// The status code every answer must have (default: 2xx and 3xx succeed).
    #[arg(long, value_name = "CODE")]
    expect_status: Option<u16>,
    /// Client certificate (PEM).
    #[arg(long, value_name = "FILE", requires = "key")]
    cert: Option<PathBuf>,
    /// Private key (PEM) of `--cert`.
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(clap::Args)]
struct TcpArgs {
    /// `IP:PORT`, `[IPv6]:PORT` or `HOST:PORT` (a name is resolved once, before the run).
    address: String,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(clap::Args)]
struct UdpArgs {
    /// The echo port: `IP:PORT`, `[IPv6]:PORT` or `HOST:PORT` (an agent's is port 5712; a name
    /// is resolved once, before the run).
    address: String,
    /// Bytes of each datagram (UDP payload), 40 to 65507.
    #[arg(long, value_name = "BYTES", default_value_t = kdoctor_agent::probe::datagram::DEFAULT_PAYLOAD_BYTES)]
    size: usize,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(clap::Args)]
struct IcmpArgs {
    /// `IP` or `HOST` (a name is resolved once, before the run).
    address: String,
    /// Bytes of each ICMP message (its 8-byte header included), 48 to 65507.
    #[arg(long, value_name = "BYTES", default_value_t = kdoctor_agent::probe::datagram::DEFAULT_PAYLOAD_BYTES)]
    size: usize,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(clap::Args)]
struct MtuArgs {
    /// The echo port: `IP:PORT`, `[IPv6]:PORT` or `HOST:PORT` (an agent's is port 5712).
    address: String,
    /// How long each size's echo is waited for (a lost one is tried three times).
    #[arg(long, default_value = "500ms", value_parser = duration)]
    timeout: Duration,
    /// Exit 1 when the path MTU is below this many bytes, as `expect.minPathMTU` fails a round.
    #[arg(long, value_name = "BYTES")]
    min: Option<u32>,
    /// `table`: one line; `json`/`yaml`: the address, `pathMTU` and `pathMTULimit` as the
    /// report's UDP entries give them.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// What `kdoctor probe mtu` found, in the report's words.
#[derive(serde::Serialize)]
struct MtuFinding {
    address: String,
    #[serde(rename = "pathMTU", skip_serializing_if = "Option::is_none")]
    path_mtu: Option<u32>,
    #[serde(rename = "pathMTULimit")]
    path_mtu_limit: &'static str,
}

#[derive(clap::Args)]
struct DnsArgs {
    /// Server: `IP` or `IP:PORT` (port 53, or 853 for tcp-tls).
    server: String,
    /// Name to resolve.
    #[arg(long, default_value = kdoctor_api::task::netdns::DEFAULT_DOMAIN)]
    domain: String,
    /// Transport.
    #[arg(long, value_parser = dns_protocol(), default_value = "udp")]
    protocol: DnsProtocol,
    /// Record type (default: A for an IPv4 server, AAAA for an IPv6 one, as upstream).
    #[arg(long = "type", value_parser = ["A", "AAAA"])]
    record_type: Option<String>,
    /// Name expected in the server's certificate (tcp-tls; default: the server's IP).
    #[arg(long)]
    tls_server_name: Option<String>,
    #[command(flatten)]
    load: LoadArgs,
}

/// `--protocol`: the task's own values, each with what it does.
fn dns_protocol() -> impl clap::builder::TypedValueParser<Value = DnsProtocol> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(DnsProtocol::ALL.map(|p| {
        PossibleValue::new(p.as_str()).help(match p {
            DnsProtocol::Udp => {
                "UDP, on connected sockets kept between queries (as upstream's pool)"
            }
            DnsProtocol::Tcp => "TCP, a new connection per query (as upstream)",
            DnsProtocol::TcpTls => "DNS over TLS, a new connection per query",
        })
    }))
    .try_map(|text| text.parse::<DnsProtocol>())
}

/// Runs `kdoctor probe`.
pub fn run(args: &Args) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        match &args.command {
            Command::Http(a) => run_http(a).await,
            Command::Tcp(a) => run_tcp(a).await,
            Command::Udp(a) => run_udp(a).await,
            Command::Icmp(a) => run_icmp(a).await,
            Command::Mtu(a) => run_mtu(a).await,
            Command::Dns(a) => run_dns(a).await,
            Command::Task(a) => run_task(a).await,
        }
    })
}

fn load(args: &LoadArgs) -> Result<Load> {
    if !(0.0..=1.0).contains(&args.success_rate) {
        bail!(
            "--success-rate must be between 0 and 1, got {}",
            args.success_rate
        );
    }
    Ok(Load {
        qps: args.qps,
        duration: args.duration,
        timeout: args.timeout,
        max_in_flight: args.max_in_flight,
        expect: Some(NetSuccessCondition {
            success_rate: Some(args.success_rate),
            mean_access_delay_in_ms: args.mean_delay_ms,
            status_code: None,
            max_jitter_in_ms: None,
            min_path_mtu: None,
        }),
        max_connections: None,
    })
}

async fn run_http(args: &HttpArgs) -> Result<ExitCode> {
    let mut headers = Vec::new();
    for entry in &args.headers {
        let header = parse_header(entry).with_context(|| format!("--header {entry:?}"))?;
        headers.push(header);
    }
    let method: kdoctor_agent::probe::http::Method = args
        .method
        .to_uppercase()
        .parse()
        .map_err(|_| anyhow::anyhow!("--method {:?} is not an HTTP method", args.method))?;
    let body = match (&args.body, &args.body_file) {
        (Some(body), _) => body.clone().into_bytes(),
        (None, Some(file)) => {
            std::fs::read(file).with_context(|| format!("--body-file {}", file.display()))?
        }
        (None, None) => Vec::new(),
    };
    let spec = HttpRequestSpec {
        url: args.url.clone(),
        method,
        headers,
        body: body.into(),
        http2: args.http2,
        keep_alive: !args.no_keep_alive,
        expected_status: args.expect_status,
    };
    let tls = ClientTls {
        ca: args.load.ca.clone(),
        identity: args.cert.clone().zip(args.key.clone()),
    };
    let mut load = load(&args.load)?;
    load.max_connections = Some(args.connections);
    let outcome = with_progress(&load, args.load.quiet, |progress| {
        probe_http(spec, &tls, &load, progress, None)
    })
    .await?;
    print(&outcome, &args.url, &load, args.load.output)
}

async fn run_tcp(args: &TcpArgs) -> Result<ExitCode> {
    no_tls(&args.load, "a TCP probe")?;
    let addr = socket_address(&args.address).await?;
    let load = load(&args.load)?;
    let outcome = with_progress(&load, args.load.quiet, |progress| {
        probe_tcp(addr, &load, progress, None)
    })
    .await?;
    print(&outcome, &addr.to_string(), &load, args.load.output)
}

async fn run_udp(args: &UdpArgs) -> Result<ExitCode> {
    no_tls(&args.load, "a UDP probe")?;
    let addr = socket_address(&args.address).await?;
    let load = load(&args.load)?;
    let outcome = with_progress(&load, args.load.quiet, |progress| {
        probe_udp(addr, args.size, &load, progress, None)
    })
    .await
    .map_err(|e| size_error(e, args.size))?;
    print(&outcome, &addr.to_string(), &load, args.load.output)
}

async fn run_icmp(args: &IcmpArgs) -> Result<ExitCode> {
    no_tls(&args.load, "an ICMP probe")?;
    let ip = match args
        .address
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
    {
        Ok(ip) => ip,
        Err(_) => socket_address(&format!("{}:0", args.address)).await?.ip(),
    };
    let load = load(&args.load)?;
    let outcome = with_progress(&load, args.load.quiet, |progress| {
        probe_icmp(ip, args.size, &load, progress, None)
    })
    .await
    .map_err(|e| size_error(e, args.size))?;
    print(&outcome, &ip.to_string(), &load, args.load.output)
}

async fn run_mtu(args: &MtuArgs) -> Result<ExitCode> {
    let addr = socket_address(&args.address).await?;
    let found = kdoctor_agent::probe::datagram::pmtu::discover(addr, args.timeout)
        .await
        .with_context(|| format!("path MTU to {addr}"))?;
    let finding = MtuFinding {
        address: addr.to_string(),
        path_mtu: found.map(|f| f.bytes),
        path_mtu_limit: found.map_or("nothing-passed", |f| f.limit.as_str()),
    };
    match args.output {
        Format::Table => match found {
            Some(f) => println!("PATH MTU {addr}: {} bytes ({})", f.bytes, f.limit.as_str()),
            None => println!(
                "PATH MTU {addr}: nothing passed, not even the smallest echo (is it an agent's \
                 UDP echo port?)"
            ),
        },
        format => print!("{}", render(&[&finding], format)?),
    }
    let enough = found.is_some_and(|f| args.min.is_none_or(|min| f.bytes >= min));
    Ok(if enough {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `--ca` refused where no TLS session is opened.
fn no_tls(load: &LoadArgs, what: &str) -> Result<()> {
    if load.ca.is_some() {
        bail!("--ca: {what} opens no TLS session");
    }
    Ok(())
}

/// Runs `run` with a progress line on standard error while it lasts.
async fn with_progress<T, F: std::future::Future<Output = T>>(
    load: &Load,
    quiet: bool,
    run: impl FnOnce(Arc<Progress>) -> F,
) -> T {
    let progress = Arc::new(Progress::default());
    let ticker = progress_line(progress.clone(), load, quiet);
    let outcome = run(progress).await;
    ticker.abort();
    finish_progress(quiet);
    outcome
}

/// A set-up error of a datagram probe, naming `--size` when it is the size's.
fn size_error(e: kdoctor_agent::oneshot::SetupError, size: usize) -> anyhow::Error {
    match e {
        kdoctor_agent::oneshot::SetupError::Size(e) => anyhow::anyhow!("--size {size}: {e}"),
        other => other.into(),
    }
}

/// The address of `kdoctor probe tcp|udp`: a socket address, or a name and port resolved once
/// (the first address; a run measures the path, not the resolver).
async fn socket_address(text: &str) -> Result<SocketAddr> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        bail!("address {text:?}: must be IP:PORT, [IPv6]:PORT or HOST:PORT");
    };
    let port: u16 = port
        .parse()
        .map_err(|_| anyhow::anyhow!("address {text:?}: {port:?} is not a port"))?;
    tokio::net::lookup_host((host, port))
        .await
        .with_context(|| format!("address {text:?}: cannot resolve {host:?}"))?
        .next()
        .with_context(|| format!("address {text:?}: {host:?} has no address"))
}

async fn run_dns(args: &DnsArgs) -> Result<ExitCode> {
    let server = parse_server(&args.server, args.protocol)?;
    let record_type = match args.record_type.as_deref() {
        Some("AAAA") => RecordType::AAAA,
        Some(_) => RecordType::A,
        None if server.is_ipv6() => RecordType::AAAA,
        None => RecordType::A,
    };
    let spec = DnsRequestSpec {
        server,
        domain: args.domain.clone(),
        record_type,
        protocol: args.protocol,
        tls_server_name: args.tls_server_name.clone(),
    };
    let tls = ClientTls {
        ca: args.load.ca.clone(),
        identity: None,
    };
    let load = load(&args.load)?;
    let outcome = with_progress(&load, args.load.quiet, |progress| {
        probe_dns(spec, &tls, &load, progress, None)
    })
    .await?;
    print(&outcome, &server.to_string(), &load, args.load.output)
}

async fn run_task(args: &TaskArgs) -> Result<ExitCode> {
    let config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            Config::from_yaml(&text).with_context(|| format!("{}", path.display()))?
        }
        None => Config::default(),
    };
    let text = if args.file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("cannot read standard input")?;
        text
    } else {
        std::fs::read_to_string(&args.file)
            .with_context(|| format!("cannot read {}", args.file.display()))?
    };
    let mut plans = Vec::new();
    for document in parse_tasks(&text) {
        let task = document
            .task
            .map_err(|e| anyhow::anyhow!("document {}: {e}", document.index))?;
        let task = validation::check(task, &config, ClusterFacts::default()).map_err(|errors| {
            let lines: Vec<String> = errors.iter().map(|e| format!("  * {e}")).collect();
            anyhow::anyhow!("the task is invalid:\n{}", lines.join("\n"))
        })?;
        // No stand-ins: one round from here probes only what the task names itself.
        let plan = local_plan(
            &task,
            &config,
            &kdoctor_agent::config::host_name(),
            &format!("kdoctor-probe-{}", std::process::id()),
            &StandIns::default(),
        )?;
        plans.push((task.kind(), task.name().to_string(), plan));
    }
    if plans.is_empty() {
        bail!("{}: no kdoctor task found", args.file.display());
    }
    let mut all = true;
    let mut reports = Vec::new();
    let mut table = String::new();
    for (kind, name, plan) in plans {
        let report = execute(plan, None).await;
        all &= report.round_result == kdoctor_agent::report::ROUND_SUCCEED;
        table.push_str(&task_table(kind, &name, &report));
        reports.push(report);
    }
    match args.output {
        Format::Table => super::output::print(&table)?,
        Format::Json => super::output::print(&render(&reports, Format::Json)?)?,
        Format::Yaml => super::output::print(&render(&reports, Format::Yaml)?)?,
    }
    Ok(if all {
        ExitCode::SUCCESS
    } else {
        super::exit_failed()
    })
}

/// One line per target, then the round's verdict.
fn task_table(kind: TaskKind, name: &str, report: &Report) -> String {
    let mut rows: Vec<[String; 7]> = vec![[
        "TARGET".into(),
        "RESULT".into(),
        "REQUESTS".into(),
        "SUCCEEDED".into(),
        "MEAN ms".into(),
        "P99 ms".into(),
        "REASON".into(),
    ]];
    let mut row =
        |name: &str, ok: bool, m: &kdoctor_api::report::RequestMetrics, reason: Option<&str>| {
            rows.push([
                name.to_string(),
                if ok { "succeed" } else { "fail" }.to_string(),
                m.request_counts.to_string(),
                m.success_counts.to_string(),
                format!("{:.3}", m.latencies.mean),
                format!("{:.3}", m.latencies.p99),
                reason.unwrap_or("").to_string(),
            ]);
        };
    if let Some(r) = &report.task_app_http_healthy {
        for d in &r.round_task_detail {
            row(
                &d.name,
                d.request_succeed,
                &d.request_target_metrics.requests,
                d.failure_reason.as_deref(),
            );
        }
    }
    if let Some(r) = &report.task_net_dns {
        for d in &r.round_task_detail {
            row(
                &d.name,
                d.request_succeed,
                &d.request_target_metrics.requests,
                d.failure_reason.as_deref(),
            );
        }
    }
    let widths: Vec<usize> = (0..7)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = format!(
        "{kind} {name:?}: round {}{}\n",
        report.round_result,
        report
            .failed_reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    );
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// `IP` or `IP:PORT`, IPv6 with or without brackets.
fn parse_server(text: &str, protocol: DnsProtocol) -> Result<SocketAddr> {
    let port = if protocol == DnsProtocol::TcpTls {
        853
    } else {
        53
    };
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let ip = text.trim_start_matches('[').trim_end_matches(']');
    match ip.parse::<IpAddr>() {
        Ok(ip) => Ok(SocketAddr::new(ip, port)),
        Err(_) => bail!("server {text:?}: must be IP or IP:PORT"),
    }
}

/// Prints a progress line on standard error: rewritten in place on a terminal, one line per
/// second otherwise (so logs stay readable).
fn progress_line(progress: Arc<Progress>, load: &Load, quiet: bool) -> tokio::task::JoinHandle<()> {
    let total = load.duration;
    tokio::spawn(async move {
        if quiet {
            return;
        }
        let terminal = std::io::stderr().is_terminal();
        let every = if terminal {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(1)
        };
        let began = Instant::now();
        loop {
            tokio::time::sleep(every).await;
            let line = format!(
                "[{:>6.1}s/{:.1}s] sent {} done {} failed {} unsent {}",
                began.elapsed().as_secs_f64(),
                total.as_secs_f64(),
                progress.sent.load(Ordering::Relaxed),
                progress.done.load(Ordering::Relaxed),
                progress.failed.load(Ordering::Relaxed),
                progress.unsent.load(Ordering::Relaxed),
            );
            if terminal {
                eprint!("\r{line}\x1b[K");
            } else {
                eprintln!("{line}");
            }
        }
    })
}

fn finish_progress(quiet: bool) {
    if !quiet && std::io::stderr().is_terminal() {
        eprint!("\r\x1b[K");
    }
}

fn print(outcome: &Outcome, target: &str, load: &Load, format: Format) -> Result<ExitCode> {
    let text = match format {
        Format::Table => summary(outcome, target, load),
        // Serialized directly (not through a JSON value) so that keys keep the report's order
        // and f32 latencies print as f32 (0.312, not 0.31200000643730164).
        Format::Json => serde_json::to_string_pretty(&outcome.report)? + "\n",
        Format::Yaml => render(std::slice::from_ref(&outcome.report), format)?,
    };
    super::output::print(&text)?;
    Ok(if outcome.succeed {
        ExitCode::SUCCESS
    } else {
        super::exit_failed()
    })
}

fn ms(micros: u64) -> String {
    format!("{:.3}", micros as f64 / 1000.0)
}

fn quantiles(h: &kdoctor_agent::histogram::Latencies) -> String {
    if h.is_empty() {
        return "-".to_string();
    }
    format!(
        "p50 {}  p90 {}  p99 {}  max {}",
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.9)),
        ms(h.value_at_quantile(0.99)),
        ms(h.max())
    )
}

fn counts<K: std::fmt::Display>(map: impl IntoIterator<Item = (K, i64)>) -> String {
    let parts: Vec<String> = map.into_iter().map(|(k, v)| format!("{k}: {v}")).collect();
    if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join(", ")
    }
}

/// The summary table: one line per fact, latencies in milliseconds.
fn summary(outcome: &Outcome, target: &str, load: &Load) -> String {
    let m = &outcome.measurement;
    let r = &m.recorder;
    let reason = outcome
        .report
        .failed_reason
        .as_deref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    let mut rows = vec![
        ("TARGET", target.to_string()),
        (
            "RESULT",
            format!(
                "{}{reason}",
                if outcome.succeed { "succeed" } else { "fail" }
            ),
        ),
        (
            "REQUESTS",
            format!(
                "{} sent of {} planned, {} succeeded, {} failed, {} unsent",
                r.requests,
                m.planned,
                r.successes,
                r.requests - r.successes,
                r.unsent
            ),
        ),
        (
            "RATE",
            format!("{:.1}/s achieved of {}/s", m.achieved_rate(), load.qps),
        ),
        (
            "MEAN (ms)",
            r.mean_ok_micros()
                .map(|us| format!("{:.3} (successful requests)", us / 1000.0))
                .unwrap_or_else(|| "-".to_string()),
        ),
        ("RESPONSE (ms)", quantiles(&r.response_ok)),
        ("ALL RESPONSES (ms)", quantiles(&r.response)),
        ("SERVICE (ms)", quantiles(&r.service)),
        ("PACER LATE (ms)", quantiles(&r.lateness)),
        ("CONNECT (ms)", quantiles(&r.connect)),
    ];
    if !r.rcodes.is_empty() {
        rows.push(("RCODE", counts(r.rcodes.iter().map(|(k, v)| (k, *v)))));
    } else if outcome.report.task_net_reach.is_none() {
        // TCP, UDP and ICMP (the one-shot runs reported as NetReach) have no status to count.
        rows.push(("STATUS", counts(r.http_status.iter().map(|(k, v)| (k, *v)))));
    }
    if let Some(d) = &r.datagrams {
        let hops = |h: Option<u8>| h.map_or("-".to_string(), |h| h.to_string());
        rows.push((
            "DATAGRAMS",
            format!(
                "{} bytes, {:.1}% lost ({} late), {} duplicated, {} reordered, jitter {:.3} ms, \
                 hops {} there and {} back",
                d.payload_bytes,
                r.failed_percent(),
                d.late,
                d.duplicates,
                d.reordered,
                d.jitter_ms(),
                hops(d.forward_hops.most_seen()),
                hops(d.return_hops.most_seen()),
            ),
        ));
    }
    rows.push(("ERRORS", counts(r.errors.iter().map(|(k, v)| (k, *v)))));
    rows.push(("BYTES", r.bytes.to_string()));
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{k:<width$}  {v}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use clap::Parser;
    use kdoctor_agent::config::AgentArgs;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn dns_protocol_takes_the_task_s_values_and_names_them_when_refusing_another() {
        for (text, expected) in [
            ("udp", DnsProtocol::Udp),
            ("tcp", DnsProtocol::Tcp),
            ("tcp-tls", DnsProtocol::TcpTls),
        ] {
            let cli = Cli::try_parse_from(["probe", "dns", "10.0.0.1", "--protocol", text])
                .expect("a task's protocol");
            let Command::Dns(dns) = cli.args.command else {
                panic!("parsed as another command");
            };
            assert_eq!(dns.protocol, expected);
        }
        let refused = Cli::try_parse_from(["probe", "dns", "10.0.0.1", "--protocol", "quic"])
            .err()
            .expect("quic is refused")
            .to_string();
        assert!(
            refused.contains("quic") && refused.contains("tcp-tls"),
            "{refused}"
        );
    }

    fn load_args() -> LoadArgs {
        LoadArgs {
            qps: 20.0,
            duration: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            max_in_flight: None,
            success_rate: 1.0,
            mean_delay_ms: None,
            ca: None,
            output: Format::Table,
            quiet: true,
        }
    }

    fn http_args(url: String) -> HttpArgs {
        HttpArgs {
            url,
            method: "get".to_string(),
            headers: vec!["X-Probe: 1".to_string()],
            body: None,
            body_file: None,
            http2: false,
            no_keep_alive: false,
            connections: 4,
            expect_status: None,
            cert: None,
            key: None,
            load: load_args(),
        }
    }

    #[test]
    fn servers_take_default_ports_by_protocol() {
        assert_eq!(
            parse_server("10.0.0.1", DnsProtocol::Udp).unwrap(),
            "10.0.0.1:53".parse().unwrap()
        );
        assert_eq!(
            parse_server("10.0.0.1", DnsProtocol::TcpTls).unwrap(),
            "10.0.0.1:853".parse().unwrap()
        );
        assert_eq!(
            parse_server("[::1]:5353", DnsProtocol::Udp).unwrap(),
            "[::1]:5353".parse().unwrap()
        );
        assert_eq!(
            parse_server("::1", DnsProtocol::Tcp).unwrap(),
            "[::1]:53".parse().unwrap()
        );
        let err = parse_server("dns.example", DnsProtocol::Udp).unwrap_err();
        assert_eq!(
            err.to_string(),
            "server \"dns.example\": must be IP or IP:PORT"
        );
    }

    #[tokio::test]
    async fn http_probe_of_the_echo_server_succeeds_and_summarises() {
        let agent = kdoctor_agent::agent::start(&AgentArgs::ephemeral(vec![IpAddr::V4(
            Ipv4Addr::LOCALHOST,
        )]))
        .await
        .unwrap();
        let url = format!("http://{}/?task=cli", agent.http[0]);
        assert_eq!(
            run_http(&http_args(url.clone())).await.unwrap(),
            ExitCode::SUCCESS
        );
        assert_eq!(agent.echo.count("cli"), 20);
        let spec = HttpRequestSpec {
            url: url.clone(),
            method: kdoctor_agent::probe::http::Method::GET,
            headers: vec![],
            body: Default::default(),
            http2: false,
            keep_alive: true,
            expected_status: None,
        };
        let load = load(&load_args()).unwrap();
        let outcome = probe_http(spec, &ClientTls::default(), &load, Arc::default(), None)
            .await
            .unwrap();
        let text = summary(&outcome, &url, &load);
        assert!(text.contains("RESULT              succeed"), "{text}");
        assert!(
            text.contains("20 sent of 20 planned, 20 succeeded"),
            "{text}"
        );
        assert!(text.contains("STATUS              200: 20"), "{text}");
        let json = serde_json::to_string_pretty(&outcome.report).unwrap();
        assert!(json.contains("\"taskAppHealthy\""), "{json}");
    }

    #[tokio::test]
    async fn tcp_probe_times_connects_and_a_closed_port_fails_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = accepted.clone();
        let server = tokio::spawn(async move {
            while listener.accept().await.is_ok() {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        });
        let load = load(&load_args()).unwrap();
        let outcome = probe_tcp(addr, &load, Arc::default(), None).await.unwrap();
        let text = summary(&outcome, &addr.to_string(), &load);
        assert!(
            text.contains("20 sent of 20 planned, 20 succeeded"),
            "{text}"
        );
        assert!(!text.contains("STATUS"), "a TCP run has no status: {text}");
        let report = serde_json::to_value(&outcome.report).unwrap();
        let detail = &report["taskNetReach"]["roundTaskDetail"][0];
        assert_eq!(detail["name"], format!("TCP_{addr}"));
        assert_eq!(detail["method"], "TCP");
        assert_eq!(detail["url"], format!("tcp://{addr}"));
        assert_eq!(report["taskNetReach"]["roundSucceed"], true);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            accepted.load(Ordering::Relaxed),
            20,
            "every connect reached the listener"
        );
        server.abort();

        let args = |address: String| TcpArgs {
            address,
            load: load_args(),
        };
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let code = run_tcp(&args(format!("127.0.0.1:{port}"))).await.unwrap();
        assert_eq!(code, super::super::exit_failed());
        let err = run_tcp(&args("localhost".to_string())).await.unwrap_err();
        assert!(err.to_string().contains("HOST:PORT"), "{err:#}");
        let err = run_tcp(&args("localhost:http".to_string()))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("is not a port"), "{err:#}");
    }

    #[tokio::test]
    async fn mtu_probe_finds_loopback_s_path_mtu_and_fails_below_min() {
        let socket = kdoctor_agent::udp_echo::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = socket.local_addr().unwrap();
        let metrics = kdoctor_agent::metrics::Metrics::new();
        let server = kdoctor_agent::udp_echo::serve(socket, metrics.clone());
        let args = |min: Option<u32>| MtuArgs {
            address: addr.to_string(),
            timeout: Duration::from_millis(500),
            min,
            output: Format::Json,
        };
        // Loopback's MTU is 65,536; an IPv4 packet is at most 65,535 bytes.
        assert_eq!(
            run_mtu(&args(Some(65_535))).await.unwrap(),
            ExitCode::SUCCESS
        );
        assert_eq!(run_mtu(&args(None)).await.unwrap(), ExitCode::SUCCESS);
        assert_eq!(
            run_mtu(&args(Some(65_536))).await.unwrap(),
            ExitCode::from(1),
            "a path below --min fails as minPathMTU fails a round"
        );
        let echoed = metrics.udp_echo.with_label_values(&["echoed"]).get();
        assert!(echoed >= 3, "each search reached the echo port: {echoed}");
        server.abort();
    }

    #[tokio::test]
    async fn udp_probe_reports_loss_and_hops_and_a_closed_port_fails_it() {
        let socket = kdoctor_agent::udp_echo::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = socket.local_addr().unwrap();
        let metrics = kdoctor_agent::metrics::Metrics::new();
        let server = kdoctor_agent::udp_echo::serve(socket, metrics.clone());
        let load = load(&load_args()).unwrap();
        let outcome = probe_udp(addr, 200, &load, Arc::default(), None)
            .await
            .unwrap();
        let text = summary(&outcome, &addr.to_string(), &load);
        assert!(
            text.contains("20 sent of 20 planned, 20 succeeded"),
            "{text}"
        );
        assert!(
            text.contains("200 bytes, 0.0% lost (0 late), 0 duplicated, 0 reordered")
                && text.contains("hops 0 there and 0 back"),
            "{text}"
        );
        let report = serde_json::to_value(&outcome.report).unwrap();
        let detail = &report["taskNetReach"]["roundTaskDetail"][0];
        assert_eq!(detail["name"], format!("UDP_{addr}"));
        assert_eq!(detail["method"], "UDP");
        assert_eq!(detail["url"], format!("udp://{addr}"));
        let datagrams = &detail["requestTargetMetrics"]["datagrams"];
        assert_eq!(datagrams["payloadBytes"], 200);
        assert_eq!(datagrams["lossPercent"], 0.0);
        assert_eq!(datagrams["forwardHops"], 0);
        assert_eq!(
            metrics.udp_echo.with_label_values(&["echoed"]).get(),
            20,
            "every datagram reached the echo port"
        );
        server.abort();

        let args = |address: String, size: usize| UdpArgs {
            address,
            size,
            load: load_args(),
        };
        let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let code = run_udp(&args(format!("127.0.0.1:{port}"), 64))
            .await
            .unwrap();
        assert_eq!(code, super::super::exit_failed());
        let err = run_udp(&args(format!("127.0.0.1:{port}"), 10))
            .await
            .unwrap_err();
        assert!(
            format!("{err:#}").starts_with("--size 10: payload size 10"),
            "{err:#}"
        );
    }

    #[test]
    fn an_icmp_probe_where_ping_sockets_are_refused_stops_before_the_run_saying_why() {
        // A fresh network namespace has net.ipv4.ping_group_range "1 0": no group may open one,
        // and nobody has no CAP_NET_RAW for a raw socket.
        let err = std::thread::spawn(|| {
            // SAFETY: unshare affects only this thread's network namespace, and the raw
            // setresuid only this thread's credentials; neither touches memory.
            unsafe {
                if libc::unshare(libc::CLONE_NEWNET) != 0 {
                    panic!(
                        "unshare: {} (the test needs root)",
                        std::io::Error::last_os_error()
                    );
                }
                assert_eq!(
                    libc::syscall(libc::SYS_setresuid, 65_534, 65_534, 65_534),
                    0
                );
            }
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(run_icmp(&IcmpArgs {
                    address: "127.0.0.1".to_string(),
                    size: 64,
                    load: load_args(),
                }))
                .unwrap_err()
        })
        .join()
        .unwrap();
        assert!(
            format!("{err:#}").contains("net.ipv4.ping_group_range, and it lacks CAP_NET_RAW"),
            "{err:#}"
        );
        let err = std::thread::spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(run_icmp(&IcmpArgs {
                    address: "127.0.0.1".to_string(),
                    size: 20,
                    load: load_args(),
                }))
                .unwrap_err()
        })
        .join()
        .unwrap();
        assert!(
            format!("{err:#}").starts_with("--size 20: payload size 20: must be between 48"),
            "{err:#}"
        );
    }

    #[tokio::test]
    async fn failed_probe_exits_1_and_bad_usage_is_an_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let code = run_http(&http_args(format!("http://127.0.0.1:{port}/")))
            .await
            .unwrap();
        assert_eq!(code, super::super::exit_failed());
        let mut bad = http_args("http://127.0.0.1:1/".to_string());
        bad.headers = vec!["no colon".to_string()];
        let err = run_http(&bad).await.unwrap_err();
        assert!(
            format!("{err:#}").starts_with("--header \"no colon\""),
            "{err:#}"
        );
        let mut bad = http_args("ftp://x/".to_string());
        bad.load.quiet = true;
        let err = run_http(&bad).await.unwrap_err();
        assert!(
            format!("{err:#}").contains("the scheme must be http or https"),
            "{err:#}"
        );
        let mut bad = http_args("http://x/".to_string());
        bad.load.success_rate = 2.0;
        assert!(run_http(&bad).await.is_err());
    }

    #[tokio::test]
    async fn task_files_run_one_round_locally() {
        let agent = kdoctor_agent::agent::start(&AgentArgs::ephemeral(vec![IpAddr::V4(
            Ipv4Addr::LOCALHOST,
        )]))
        .await
        .unwrap();
        let dir = std::env::temp_dir().join(format!("kdoctor-probe-task-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("task.yaml");
        let task = |status: u16| {
            format!(
                "apiVersion: kdoctor.io/v1beta1\nkind: AppHttpHealthy\nmetadata: {{name: echo}}\n\
                 spec:\n  target: {{host: 'http://{}/?task=file', method: GET}}\n  \
                 request: {{qps: 10, durationInSecond: 1, perRequestTimeoutInMS: 1000}}\n  \
                 expect: {{successRate: 1, statusCode: {status}}}\n",
                agent.http[0]
            )
        };
        let args = |file: &PathBuf| TaskArgs {
            file: file.clone(),
            config: None,
            output: Format::Table,
        };
        std::fs::write(&file, task(200)).unwrap();
        assert_eq!(run_task(&args(&file)).await.unwrap(), ExitCode::SUCCESS);
        assert_eq!(agent.echo.count("file"), 10);
        std::fs::write(&file, task(201)).unwrap();
        assert_eq!(
            run_task(&args(&file)).await.unwrap(),
            super::super::exit_failed()
        );
        std::fs::write(
            &file,
            "apiVersion: kdoctor.io/v1beta1\nkind: NetReach\nmetadata: {name: nr}\nspec: {}\n",
        )
        .unwrap();
        let err = run_task(&args(&file)).await.unwrap_err();
        assert!(
            format!("{err:#}").contains("cannot run from here"),
            "{err:#}"
        );
        std::fs::write(
            &file,
            "kind: AppHttpHealthy\nmetadata: {name: bad}\nspec: {}\n",
        )
        .unwrap();
        assert!(run_task(&args(&file)).await.is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
