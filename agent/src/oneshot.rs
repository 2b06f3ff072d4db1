//! One probe run outside any task (`kdoctor probe http|tcp|udp|icmp|dns`): build the prober, run it with a
//! progress counter, and return the agent report a round with that one target would produce.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kdoctor_api::report::protocol::Protocol;
use kdoctor_api::report::{
    AppHttpHealthyTaskDetail, NetReachTaskDetail, Report, TargetOutcome, TaskResult,
    TotalRunningLoad,
};
use kdoctor_api::task::NetSuccessCondition;
use kdoctor_transport::tls::{Identity, ServerTrust, TlsError, client_config, read_roots};

use crate::config::host_name;
use crate::metrics::Metrics;
use crate::pacer::ScheduleError;
use crate::probe::datagram::{EchoCodec, IcmpEcho, IcmpProber, PayloadSizeError, UdpProber};
use crate::probe::dns::{DnsProber, DnsRequestSpec, DnsSetupError};
use crate::probe::http::{HttpProber, HttpRequestSpec, HttpSetupError, client_alpn};
use crate::probe::tcp::TcpProber;
use crate::probe::{Measurement, Plan, Prober, Progress, run};
use crate::report::{
    APP_HTTP_HEALTHY_TARGET_NAME, KindResult, RoundContext, TARGET_TYPE_APP_HTTP_HEALTHY,
    TARGET_TYPE_NETDNS, TARGET_TYPE_NETREACH, dns_detail, http_detail, round_report, task_result,
};
use crate::resource::{Sampler, Usage};

/// Why a probe run could not start (a usage or environment problem, not a failed probe).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// qps, duration or timeout.
    #[error("{0}")]
    Plan(#[from] ScheduleError),
    /// CA or client certificate.
    #[error("{0}")]
    Tls(#[from] TlsError),
    /// URL, headers.
    #[error("{0}")]
    Http(#[from] HttpSetupError),
    /// Domain, DoT settings.
    #[error("{0}")]
    Dns(#[from] DnsSetupError),
    /// A UDP or ICMP datagram size out of range.
    #[error("{0}")]
    Size(#[from] PayloadSizeError),
    /// This process may not open ICMP echo sockets.
    #[error("{0}")]
    Icmp(std::io::Error),
    /// The timeout is zero.
    #[error("timeout must be positive")]
    Timeout,
}

/// Load and checks common to both kinds.
#[derive(Clone, Debug)]
pub struct Load {
    /// Requests per second.
    pub qps: f64,
    /// How long.
    pub duration: Duration,
    /// Per-request timeout.
    pub timeout: Duration,
    /// In-flight cap (default: qps × timeout plus slack).
    pub max_in_flight: Option<usize>,
    /// Success condition (default: every request succeeds).
    pub expect: Option<NetSuccessCondition>,
    /// Most kept-alive HTTP/1.1 connections (HTTP only; default
    /// [`crate::probe::http::DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: Option<usize>,
}

/// TLS settings of the client.
#[derive(Clone, Debug, Default)]
pub struct ClientTls {
    /// Verify the server against this CA (PEM); without it any certificate is accepted.
    pub ca: Option<PathBuf>,
    /// Client certificate and key (PEM).
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl ClientTls {
    fn config(&self, alpn: &[&[u8]]) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        let trust = match &self.ca {
            Some(ca) => ServerTrust::Roots(read_roots(ca)?),
            None => ServerTrust::Any,
        };
        let identity = match &self.identity {
            Some((cert, key)) => Some(Identity::from_files(cert, key)?),
            None => None,
        };
        Ok(Arc::new(client_config(trust, identity, alpn)?))
    }
}

/// A finished run.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The agent report (round 1, one target).
    pub report: Report,
    /// The raw measurement, for summaries.
    pub measurement: Measurement,
    /// The target met the success condition.
    pub succeed: bool,
}

fn plan(load: &Load) -> Result<Plan, SetupError> {
    if load.timeout.is_zero() {
        return Err(SetupError::Timeout);
    }
    let mut plan = Plan::new(load.qps, load.duration, load.timeout)?;
    if let Some(cap) = load.max_in_flight {
        plan.max_in_flight = cap.max(1);
    }
    Ok(plan)
}

/// The one-target report of a probe that started at `started`, used `usage` and ran `load`,
/// and its verdict; `kind` says which of the report's task results it is.
fn outcome<D: TargetOutcome>(
    (started, usage): (jiff::Timestamp, Usage),
    load: TotalRunningLoad,
    target_type: &str,
    detail: D,
    measurement: Measurement,
    kind: fn(TaskResult<D>) -> KindResult,
) -> Outcome {
    let host = host_name();
    let context = RoundContext {
        round: 1,
        node: host.clone(),
        pod: format!("kdoctor-probe-{}", std::process::id()),
        started,
        ended: jiff::Timestamp::now(),
        resources: usage.system_resource(),
        load,
    };
    let result = task_result(target_type, vec![detail], &context);
    let succeed = result.round_succeed;
    Outcome {
        report: round_report(&context, None, kind(result)),
        measurement,
        succeed,
    }
}

/// Runs `prober` at the load's plan from this process: the measurement, when it started, and
/// the CPU and memory this process used meanwhile (the report's `systemResource`).
async fn measure<P: Prober>(
    prober: P,
    plan: Plan,
    progress: Arc<Progress>,
    metrics: Option<Metrics>,
) -> (Measurement, jiff::Timestamp, Usage) {
    let started = jiff::Timestamp::now();
    let sampler = Sampler::start(Duration::from_secs(1));
    let measurement = run(Arc::new(prober), plan, progress, metrics).await;
    (measurement, started, sampler.finish().await)
}

/// Probes one HTTP target.
pub async fn probe_http(
    spec: HttpRequestSpec,
    tls: &ClientTls,
    load: &Load,
    progress: Arc<Progress>,
    metrics: Option<Metrics>,
) -> Result<Outcome, SetupError> {
    let plan = plan(load)?;
    let config = tls.config(client_alpn(spec.http2))?;
    let url = spec.url.clone();
    let method = spec.method.to_string();
    let mut prober = HttpProber::new(spec, Some(config))?;
    if let Some(max) = load.max_connections {
        prober = prober.with_max_connections(max);
    }
    let (measurement, started, usage) = measure(prober, plan, progress, metrics).await;
    let detail: AppHttpHealthyTaskDetail = http_detail(
        APP_HTTP_HEALTHY_TARGET_NAME,
        &url,
        &method,
        &measurement,
        load.expect.as_ref(),
    );
    Ok(outcome(
        (started, usage),
        TotalRunningLoad {
            app_http_healthy_qps: load.qps.round() as i64,
            ..TotalRunningLoad::default()
        },
        TARGET_TYPE_APP_HTTP_HEALTHY,
        detail,
        measurement,
        KindResult::AppHttpHealthy,
    ))
}

/// The target name of a one-shot TCP, UDP or ICMP run: the protocol's prefix and the address
/// (ICMP's without a port), as a NetReach round names its entries (the prefix and the target's
/// name).
pub fn socket_target_name(protocol: Protocol, addr: SocketAddr) -> String {
    match protocol {
        Protocol::Icmp => protocol.entry_name(&addr.ip().to_string()),
        _ => protocol.entry_name(&addr.to_string()),
    }
}

/// Times TCP connects to one address; the report is a NetReach round's with that one entry.
pub async fn probe_tcp(
    addr: SocketAddr,
    load: &Load,
    progress: Arc<Progress>,
    metrics: Option<Metrics>,
) -> Result<Outcome, SetupError> {
    let plan = plan(load)?;
    let measured = measure(TcpProber::new(addr), plan, progress, metrics).await;
    Ok(socket_outcome(Protocol::Tcp, addr, load, measured))
}

/// Sends UDP echo datagrams of `payload_bytes` to one agent's echo port; the report is a
/// NetReach round's with that one entry.
pub async fn probe_udp(
    addr: SocketAddr,
    payload_bytes: usize,
    load: &Load,
    progress: Arc<Progress>,
    metrics: Option<Metrics>,
) -> Result<Outcome, SetupError> {
    let plan = plan(load)?;
    let prober = UdpProber::new(addr, payload_bytes)?;
    let measured = measure(prober, plan, progress, metrics).await;
    Ok(socket_outcome(Protocol::Udp, addr, load, measured))
}

/// Sends ICMP echo requests of `payload_bytes` (ICMP header included) to one address; the
/// report is a NetReach round's with that one entry.
pub async fn probe_icmp(
    addr: std::net::IpAddr,
    payload_bytes: usize,
    load: &Load,
    progress: Arc<Progress>,
    metrics: Option<Metrics>,
) -> Result<Outcome, SetupError> {
    let plan = plan(load)?;
    let addr = SocketAddr::new(addr, 0);
    let prober = IcmpProber::new(addr, payload_bytes)?;
    // Refused sockets would fail every request alike: say so once, before the run.
    IcmpEcho::open(addr).map_err(SetupError::Icmp)?;
    let measured = measure(prober, plan, progress, metrics).await;
    Ok(socket_outcome(Protocol::Icmp, addr, load, measured))
}

/// The outcome of a run against a socket address (TCP, UDP, ICMP), as a NetReach round reports
/// it.
fn socket_outcome(
    protocol: Protocol,
    addr: SocketAddr,
    load: &Load,
    (measurement, started, usage): (Measurement, jiff::Timestamp, Usage),
) -> Outcome {
    let (method, url) = protocol.method_and_url(addr).unwrap_or(("", String::new()));
    let detail: NetReachTaskDetail = http_detail(
        &socket_target_name(protocol, addr),
        &url,
        method,
        &measurement,
        load.expect.as_ref(),
    );
    outcome(
        (started, usage),
        TotalRunningLoad {
            net_reach_qps: load.qps.round() as i64,
            ..TotalRunningLoad::default()
        },
        TARGET_TYPE_NETREACH,
        detail,
        measurement,
        KindResult::NetReach,
    )
}

/// Upstream's DNS target name: `typeA_<server:port>_<domain>` / `typeAAAA_…`.
pub fn dns_target_name(spec: &DnsRequestSpec) -> String {
    format!("type{}_{}_{}", spec.record_type, spec.server, spec.domain)
}

/// Probes one DNS server.
pub async fn probe_dns(
    spec: DnsRequestSpec,
    tls: &ClientTls,
    load: &Load,
    progress: Arc<Progress>,
    metrics: Option<Metrics>,
) -> Result<Outcome, SetupError> {
    let plan = plan(load)?;
    let config = tls.config(&[])?;
    let name = dns_target_name(&spec);
    let server = spec.server.to_string();
    let protocol = spec.protocol.as_str();
    let prober = DnsProber::new(spec, Some(config))?;
    let domain = prober.name().to_string();
    let (measurement, started, usage) = measure(prober, plan, progress, metrics).await;
    let detail = dns_detail(
        &name,
        &server,
        protocol,
        &domain,
        &measurement,
        load.expect.as_ref(),
    );
    Ok(outcome(
        (started, usage),
        TotalRunningLoad {
            net_dns_qps: load.qps.round() as i64,
            ..TotalRunningLoad::default()
        },
        TARGET_TYPE_NETDNS,
        detail,
        measurement,
        KindResult::Netdns,
    ))
}
