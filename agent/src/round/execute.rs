//! Executing a round: every target probed at once for the round's load, the whole round
//! bounded by its timeout, the result as one agent report of the task's kind.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kdoctor_api::report::protocol::Protocol;
use kdoctor_api::report::{HttpTargetResult, Report, TargetOutcome, TaskResult, TotalRunningLoad};
use kdoctor_api::task::{NetSuccessCondition, TaskKind};
use kdoctor_transport::tls::{ServerTrust, client_config};
use rustls::ClientConfig;
use tokio::task::JoinSet;

use super::targets::{DnsTarget, HttpTarget, IsolationTarget, Load, SocketTarget};
use crate::metrics::Metrics;
use crate::probe::datagram::tally::PathMtuFinding;
use crate::probe::datagram::{DEFAULT_PAYLOAD_BYTES, IcmpProber, UdpProber, pmtu};
use crate::probe::dns::DnsProber;
use crate::probe::http::{HttpProber, client_alpn};
use crate::probe::isolation::{self, Tally};
use crate::probe::tcp::TcpProber;
use crate::probe::{Measurement, Plan, Prober, Progress, run_observed};
use crate::probe_metrics::{RoundLabels, TargetSeries};
use crate::report::{
    KindResult, RoundContext, TARGET_TYPE_APP_HTTP_HEALTHY, TARGET_TYPE_NETDNS,
    TARGET_TYPE_NETREACH, dns_detail, http_detail, isolation_detail, round_report, task_result,
};
use crate::resource::{Sampler, Source};

/// Everything one agent needs to run one round of one task.
#[derive(Clone, Debug)]
pub struct RoundPlan {
    /// Task kind.
    pub kind: TaskKind,
    /// Round number.
    pub round: i64,
    /// UID of the task incarnation (reports carry it so a re-created task never gets them).
    pub task_uid: Option<String>,
    /// Node of the agent.
    pub node: String,
    /// Agent pod.
    pub pod: String,
    /// HTTP targets (NetReach, AppHttpHealthy).
    pub http: Vec<HttpTarget>,
    /// TCP connect targets (NetReach with `spec.target.tcp`).
    pub tcp: Vec<SocketTarget>,
    /// UDP echo targets (NetReach with `spec.target.udp`).
    pub udp: Vec<SocketTarget>,
    /// ICMP echo targets (NetReach with `spec.target.icmp`).
    pub icmp: Vec<SocketTarget>,
    /// Peers that must not be reachable (NetReach `spec.isolation`).
    pub isolation: Vec<IsolationTarget>,
    /// Search the path MTU to each UDP target after its run (`spec.target.pathMTU`).
    pub path_mtu: bool,
    /// DNS targets (Netdns).
    pub dns: Vec<DnsTarget>,
    /// Load per target.
    pub load: Load,
    /// Success condition.
    pub expect: Option<NetSuccessCondition>,
    /// TLS for HTTPS targets (AppHttpHealthy's Secret); default: any server certificate.
    pub tls: Option<Arc<ClientConfig>>,
    /// Longest the round may take (`roundTimeoutMinute`).
    pub round_timeout: Duration,
    /// Targets that could not be built (missing addresses): each fails the round.
    pub setup_failures: Vec<String>,
    /// Where the report's CPU and memory come from (an agent: its cgroup).
    pub resources: Source,
}

impl RoundPlan {
    /// Targets probed, whatever their protocol (the report's `targetNumber`).
    pub fn target_count(&self) -> i64 {
        (self.http.len()
            + self.tcp.len()
            + self.udp.len()
            + self.icmp.len()
            + self.isolation.len()
            + self.dns.len()) as i64
    }
}

enum Done {
    Http(HttpTarget, Measurement),
    /// A TCP connect, UDP or ICMP echo target.
    Socket(Protocol, SocketTarget, Measurement),
    Dns(DnsTarget, Measurement),
    /// A peer of an isolation check.
    Isolation(IsolationTarget, Tally),
}

/// Runs the round and returns its report (never an error: problems are the report's verdict).
/// With `metrics`, every request is also counted in the per-probe series, labelled with the
/// plan's kind and node only (no task name): [`execute_with`] takes the round's labels.
pub async fn execute(plan: RoundPlan, metrics: Option<Metrics>) -> Report {
    execute_with(plan, metrics, None).await
}

/// [`execute`], with the labels of the round's per-probe series (task, zones, per-target
/// series, copied task labels); `None`: the plan's kind and node.
pub async fn execute_with(
    plan: RoundPlan,
    metrics: Option<Metrics>,
    labels: Option<RoundLabels>,
) -> Report {
    let labels = labels.unwrap_or_else(|| RoundLabels {
        task_kind: plan.kind.as_str().to_string(),
        source_node: plan.node.clone(),
        ..RoundLabels::default()
    });
    // Resolved once per target and round: each request then only adds to atomics.
    let series = |name: &str, address: Option<std::net::IpAddr>| {
        metrics
            .as_ref()
            .map(|m| Arc::new(m.probes.target(labels.target_labels(name, address))))
    };
    let started = jiff::Timestamp::now();
    let sampler = Sampler::start_with(Duration::from_secs(1), plan.resources.clone());
    let mut failures = plan.setup_failures.clone();
    let mut set = JoinSet::new();
    let schedule = Plan::new(plan.load.qps, plan.load.duration, plan.load.timeout);
    match schedule {
        Err(e) => failures.push(format!("request: {e}")),
        Ok(schedule) => {
            for target in plan.http.clone() {
                let tls = match &plan.tls {
                    Some(tls) => Ok(tls.clone()),
                    None => client_config(ServerTrust::Any, None, client_alpn(target.spec.http2))
                        .map(Arc::new),
                };
                let prober = tls.map_err(|e| e.to_string()).and_then(|tls| {
                    HttpProber::new(target.spec.clone(), Some(tls)).map_err(|e| e.to_string())
                });
                match prober {
                    Ok(prober) => {
                        let series = series(&target.name, prober.ip());
                        let probing = observed(prober, schedule, metrics.clone(), series);
                        set.spawn(async move { Done::Http(target, probing.await) });
                    }
                    Err(e) => failures.push(format!("test {}: {e}", target.name)),
                }
            }
            for target in plan.tcp.clone() {
                let prober = TcpProber::new(target.addr);
                let series = series(&target.name, Some(target.addr.ip()));
                let probing = observed(prober, schedule, metrics.clone(), series);
                set.spawn(async move { Done::Socket(Protocol::Tcp, target, probing.await) });
            }
            for target in plan.udp.clone() {
                match UdpProber::new(target.addr, DEFAULT_PAYLOAD_BYTES) {
                    Ok(prober) => {
                        let series = series(&target.name, Some(target.addr.ip()));
                        let probing = observed(prober, schedule, metrics.clone(), series);
                        // After the run: its large packets would disturb the stream's figures.
                        let search = plan.path_mtu.then_some(plan.load.timeout);
                        set.spawn(async move {
                            let mut measurement = probing.await;
                            if let Some(timeout) = search {
                                search_path_mtu(&mut measurement, target.addr, timeout).await;
                            }
                            Done::Socket(Protocol::Udp, target, measurement)
                        });
                    }
                    Err(e) => failures.push(format!("test {}: {e}", target.name)),
                }
            }
            for target in plan.icmp.clone() {
                match IcmpProber::new(target.addr, DEFAULT_PAYLOAD_BYTES) {
                    Ok(prober) => {
                        let series = series(&target.name, Some(target.addr.ip()));
                        let probing = observed(prober, schedule, metrics.clone(), series);
                        set.spawn(
                            async move { Done::Socket(Protocol::Icmp, target, probing.await) },
                        );
                    }
                    Err(e) => failures.push(format!("test {}: {e}", target.name)),
                }
            }
            for target in plan.isolation.clone() {
                let timeout = plan.load.timeout;
                set.spawn(async move {
                    let tally = isolation::check(target.protocol, target.addr, timeout).await;
                    Done::Isolation(target, tally)
                });
            }
            for target in plan.dns.clone() {
                let tls = client_config(ServerTrust::Any, None, &[])
                    .map(Arc::new)
                    .ok();
                match DnsProber::new(target.spec.clone(), tls) {
                    Ok(prober) => {
                        let series = series(&target.name, Some(target.spec.server.ip()));
                        let probing = observed(prober, schedule, metrics.clone(), series);
                        set.spawn(async move { Done::Dns(target, probing.await) });
                    }
                    Err(e) => failures.push(format!("test {}: {e}", target.name)),
                }
            }
        }
    }
    let mut done = Vec::new();
    let collect = async {
        while let Some(result) = set.join_next().await {
            if let Ok(d) = result {
                done.push(d);
            }
        }
    };
    if tokio::time::timeout(plan.round_timeout, collect)
        .await
        .is_err()
    {
        set.abort_all();
        failures.push(format!(
            "the round timed out after {} with targets still running",
            kdoctor_api::go_duration::format(plan.round_timeout)
        ));
    }
    let usage = sampler.finish().await;
    let target_count = plan.target_count();
    // An isolation check makes a few tries, not the request rate.
    let paced = target_count - plan.isolation.len() as i64;
    let load = running_load(plan.kind, plan.load.qps, paced);
    let context = RoundContext {
        round: plan.round,
        node: plan.node.clone(),
        pod: plan.pod.clone(),
        started,
        ended: jiff::Timestamp::now(),
        resources: usage.system_resource(),
        load,
    };
    // Details in the order the targets were given, whatever order they finished in.
    let position = |name: &str| {
        plan.http
            .iter()
            .map(|t| t.name.as_str())
            .chain(plan.tcp.iter().map(|t| t.name.as_str()))
            .chain(plan.udp.iter().map(|t| t.name.as_str()))
            .chain(plan.icmp.iter().map(|t| t.name.as_str()))
            .chain(plan.isolation.iter().map(|t| t.name.as_str()))
            .chain(plan.dns.iter().map(|t| t.name.as_str()))
            .position(|n| n == name)
            .unwrap_or(usize::MAX)
    };
    done.sort_by_key(|d| match d {
        Done::Http(t, _) => position(&t.name),
        Done::Socket(_, t, _) => position(&t.name),
        Done::Dns(t, _) => position(&t.name),
        Done::Isolation(t, _) => position(&t.name),
    });
    let result = kind_result(&plan, &done, &context, &failures);
    round_report(&context, plan.task_uid.clone(), result)
}

/// The round's task result, of the plan's kind, from the targets probed (`done`, in the
/// order the plan gives them) and the round's failures.
fn kind_result(
    plan: &RoundPlan,
    done: &[Done],
    context: &RoundContext,
    failures: &[String],
) -> KindResult {
    let expect = plan.expect.as_ref();
    match plan.kind {
        TaskKind::NetReach => {
            let mut result = result_of(
                TARGET_TYPE_NETREACH,
                http_details(done, expect),
                context,
                failures,
            );
            result.target_number = plan.target_count();
            KindResult::NetReach(result)
        }
        TaskKind::AppHttpHealthy => KindResult::AppHttpHealthy(result_of(
            TARGET_TYPE_APP_HTTP_HEALTHY,
            http_details(done, expect),
            context,
            failures,
        )),
        TaskKind::Netdns => {
            let details = done
                .iter()
                .filter_map(|d| match d {
                    Done::Dns(t, m) => Some(dns_detail(
                        &t.name,
                        &t.spec.server.to_string(),
                        t.spec.protocol.as_str(),
                        &t.spec.domain,
                        m,
                        expect,
                    )),
                    Done::Http(..) | Done::Socket(..) | Done::Isolation(..) => None,
                })
                .collect();
            KindResult::Netdns(result_of(TARGET_TYPE_NETDNS, details, context, failures))
        }
    }
}

/// Searches the path MTU to the UDP echo port at `addr` and adds the finding to `measurement`.
async fn search_path_mtu(measurement: &mut Measurement, addr: SocketAddr, timeout: Duration) {
    let finding = match pmtu::discover(addr, timeout).await {
        Ok(Some(found)) => PathMtuFinding::Found(found),
        Ok(None) => PathMtuFinding::NothingPassed,
        Err(e) => PathMtuFinding::Failed(e.to_string()),
    };
    measurement
        .recorder
        .datagrams
        .get_or_insert_default()
        .path_mtu = Some(finding);
}

/// Probes with one prober at the plan's rate, its requests counted in `series`.
fn observed<P: Prober>(
    prober: P,
    schedule: Plan,
    metrics: Option<Metrics>,
    series: Option<Arc<TargetSeries>>,
) -> impl std::future::Future<Output = Measurement> + Send + 'static {
    run_observed(
        Arc::new(prober),
        schedule,
        Arc::new(Progress::default()),
        metrics,
        series,
    )
}

/// The load a round of `kind` runs: `qps` for each of `targets` (one target for AppHttpHealthy).
fn running_load(kind: TaskKind, qps: f64, targets: i64) -> TotalRunningLoad {
    let qps = qps.round() as i64;
    match kind {
        TaskKind::NetReach => TotalRunningLoad {
            net_reach_qps: qps * targets,
            ..Default::default()
        },
        TaskKind::AppHttpHealthy => TotalRunningLoad {
            app_http_healthy_qps: qps,
            ..Default::default()
        },
        TaskKind::Netdns => TotalRunningLoad {
            net_dns_qps: qps * targets,
            ..Default::default()
        },
    }
}

/// The task result of `details` with the round's setup failures and timeouts folded in; the
/// last reason wins (as upstream).
fn result_of<D: TargetOutcome>(
    target_type: &str,
    details: Vec<D>,
    context: &RoundContext,
    failures: &[String],
) -> TaskResult<D> {
    let mut result = task_result(target_type, details, context);
    if let Some(last) = failures.last() {
        result.round_succeed = false;
        result.failure_reason = Some(last.clone());
    }
    result
}

/// The details of the HTTP targets probed, in the shape of the task's kind.
fn http_details<D: From<HttpTargetResult>>(
    done: &[Done],
    expect: Option<&NetSuccessCondition>,
) -> Vec<D> {
    done.iter()
        .filter_map(|d| match d {
            Done::Http(t, m) => Some(http_detail(
                &t.name,
                &t.spec.url,
                t.spec.method.as_ref(),
                m,
                expect,
            )),
            Done::Socket(protocol, t, m) => {
                let (method, url) = protocol.method_and_url(t.addr)?;
                Some(http_detail(&t.name, &url, method, m, expect))
            }
            Done::Isolation(t, tally) => {
                let (method, url) = Protocol::from(t.protocol).method_and_url(t.addr)?;
                Some(isolation_detail(&t.name, &url, method, &t.check, tally).into())
            }
            Done::Dns(..) => None,
        })
        .collect()
}
