//! Building report fields (upstream v0.2.2 shape, `kdoctor_api::report`) from measurements.
//! Pure: latencies in fractional milliseconds from microsecond histograms, serialized
//! histograms beside them, and the judgement of each target.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kdoctor_api::go_duration;
use kdoctor_api::report::{
    AppHttpHealthyTaskDetail, DatagramMetrics, DnsMetrics, EncodedHistogram, HttpMetrics,
    HttpTargetResult, IsolationMetrics, LatencyDistribution, NetDnsTaskDetail, NetReachTaskDetail,
    Report, RequestMetrics, SystemResource, TargetOutcome, TaskResult, TotalRunningLoad,
};
use kdoctor_api::task::NetSuccessCondition;

use crate::histogram::{Latencies, encode, micros_to_ms};
use crate::judge::{Counts, Verdict, judge, judge_jitter, judge_path_mtu};
use crate::probe::Measurement;
use crate::probe::datagram::tally::{DatagramTally, PathMtuFinding};
use crate::probe::isolation::{REACHED, Tally};

pub mod names;
pub use names::*;

/// `latencies` from a histogram: percentiles, min and max in fractional milliseconds; `mean`
/// the exact mean when given (all zero for an empty histogram, never NaN).
pub fn latency_distribution(h: &Latencies, exact_mean_micros: Option<f64>) -> LatencyDistribution {
    if h.is_empty() {
        return LatencyDistribution::default();
    }
    let q = |p: f64| micros_to_ms(h.value_at_quantile(p) as f64);
    LatencyDistribution {
        p50: q(0.50),
        p90: q(0.90),
        p95: q(0.95),
        p99: q(0.99),
        max: micros_to_ms(h.max() as f64),
        min: micros_to_ms(h.min() as f64),
        mean: micros_to_ms(exact_mean_micros.unwrap_or_else(|| h.mean())),
    }
}

fn time(t: jiff::Timestamp) -> Time {
    Time(t)
}

/// `count` over `elapsed` (0 over no time).
fn per_second(count: f64, elapsed: std::time::Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { count / secs } else { 0.0 }
}

/// The fields every target has.
pub fn request_metrics(m: &Measurement) -> RequestMetrics {
    let r = &m.recorder;
    RequestMetrics {
        request_start_time: time(m.started),
        request_end_time: time(m.ended()),
        request_duration: go_duration::format(m.elapsed),
        request_counts: r.requests as i64,
        success_counts: r.successes as i64,
        tps: per_second(r.requests as f64, m.elapsed),
        errors: r.errors.clone(),
        latencies: latency_distribution(&r.response_ok, r.mean_ok_micros()),
        exists_not_send_requests: r.unsent > 0,
    }
}

/// Every histogram of a measurement, serialized.
pub fn histograms(m: &Measurement) -> BTreeMap<String, EncodedHistogram> {
    use histogram_names::*;
    let r = &m.recorder;
    let mut out = BTreeMap::from([
        (RESPONSE_TIME.to_string(), encode(&r.response)),
        (SUCCEEDED_RESPONSE_TIME.to_string(), encode(&r.response_ok)),
        (SERVICE_TIME.to_string(), encode(&r.service)),
        (PACER_LATENESS.to_string(), encode(&r.lateness)),
    ]);
    if !r.connect.is_empty() {
        out.insert(CONNECT_TIME.to_string(), encode(&r.connect));
    }
    out
}

/// Measurements of an HTTP target.
pub fn http_metrics(m: &Measurement) -> HttpMetrics {
    HttpMetrics {
        requests: request_metrics(m),
        total_data_size: format!("{} byte", m.recorder.bytes),
        status_codes: m.recorder.http_status.clone(),
        histograms: Some(histograms(m)),
        datagrams: m
            .recorder
            .datagrams
            .as_ref()
            .map(|d| datagram_metrics(m, d)),
        isolation: None,
    }
}

/// The datagram side of a UDP echo target: loss is every datagram not echoed in time.
fn datagram_metrics(m: &Measurement, d: &DatagramTally) -> DatagramMetrics {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    DatagramMetrics {
        payload_bytes: count(d.payload_bytes),
        loss_percent: m.recorder.failed_percent(),
        late: count(d.late),
        duplicates: count(d.duplicates),
        reordered: count(d.reordered),
        jitter_ms: d.jitter_ms(),
        forward_hops: d.forward_hops.most_seen().map(i64::from),
        return_hops: d.return_hops.most_seen().map(i64::from),
        path_mtu: match &d.path_mtu {
            Some(PathMtuFinding::Found(found)) => Some(i64::from(found.bytes)),
            _ => None,
        },
        path_mtu_limit: d.path_mtu.as_ref().map(|finding| match finding {
            PathMtuFinding::Found(found) => found.limit.as_str().to_string(),
            PathMtuFinding::NothingPassed => "nothing-passed".to_string(),
            PathMtuFinding::Failed(error) => format!("error: {error}"),
        }),
    }
}

/// Measurements of a DNS target.
pub fn dns_metrics(m: &Measurement, domain: &str, server: &str, protocol: &str) -> DnsMetrics {
    DnsMetrics {
        requests: request_metrics(m),
        domain: domain.to_string(),
        server: server.to_string(),
        method: protocol.to_string(),
        failed_counts: (m.recorder.requests - m.recorder.successes) as i64,
        reply_code: m.recorder.rcodes.clone(),
        histograms: Some(histograms(m)),
    }
}

/// Judges a measurement against `expect` (a UDP echo target's jitter too).
pub fn verdict(m: &Measurement, expect: Option<&NetSuccessCondition>) -> Verdict {
    let verdict = judge(
        expect,
        Counts {
            requests: m.recorder.requests,
            successes: m.recorder.successes,
            mean_ok_ms: m.recorder.mean_ok_micros().map(|us| us / 1000.0),
            unsent: m.recorder.unsent > 0,
            lost_while_queued: m.recorder.lost_while_queued,
        },
    );
    match &m.recorder.datagrams {
        Some(d) => judge_path_mtu(
            judge_jitter(verdict, expect, d.jitter_ms()),
            expect,
            d.path_mtu.as_ref(),
        ),
        None => verdict,
    }
}

/// The detail of an HTTP target, in its kind's shape (NetReach's or AppHttpHealthy's).
pub fn http_detail<D: From<HttpTargetResult>>(
    name: &str,
    url: &str,
    method: &str,
    m: &Measurement,
    expect: Option<&NetSuccessCondition>,
) -> D {
    let v = verdict(m, expect);
    let metrics = http_metrics(m);
    HttpTargetResult {
        name: name.to_string(),
        url: url.to_string(),
        method: method.to_string(),
        request_succeed: v.succeed,
        request_mean_delay: metrics.requests.latencies.mean,
        request_succeed_rate: v.success_rate,
        failure_reason: v.reason,
        request_target_metrics: metrics,
    }
    .into()
}

/// The detail of an isolation check's peer (`spec.isolation`): it succeeds only when every
/// try was made and none got through; its requests are the tries and its successes the tries
/// that were blocked.
pub fn isolation_detail(
    name: &str,
    url: &str,
    method: &str,
    check: &str,
    tally: &Tally,
) -> HttpTargetResult {
    let count = |n: u32| i64::from(n);
    let blocked = tally.attempts - tally.reached;
    let held = tally.held();
    let observed = match (&tally.not_checked, tally.reached) {
        (Some(_), 0) => "not checked",
        (_, 0) => "unreachable",
        _ => "reachable",
    };
    let failure_reason = if held {
        None
    } else if tally.reached > 0 {
        let how: Vec<String> = tally
            .outcomes
            .iter()
            .filter(|(seen, _)| REACHED.contains(&seen.as_str()))
            .map(|(seen, n)| format!("{seen} {n}"))
            .collect();
        Some(format!(
            "isolation {check} broken: {} of {} tries reached {url} ({}); it must be unreachable",
            tally.reached,
            tally.attempts,
            how.join(", ")
        ))
    } else {
        Some(format!(
            "isolation {check} not checked: {}",
            tally.not_checked.as_deref().unwrap_or("no try was made")
        ))
    };
    let started = tally.started.unwrap_or_else(jiff::Timestamp::now);
    let ended = started.checked_add(tally.elapsed).unwrap_or(started);
    HttpTargetResult {
        name: name.to_string(),
        url: url.to_string(),
        method: method.to_string(),
        request_succeed: held,
        request_mean_delay: 0.0,
        request_succeed_rate: if tally.attempts > 0 {
            f64::from(blocked) / f64::from(tally.attempts)
        } else {
            0.0
        },
        failure_reason,
        request_target_metrics: HttpMetrics {
            requests: RequestMetrics {
                request_start_time: time(started),
                request_end_time: time(ended),
                request_duration: go_duration::format(tally.elapsed),
                request_counts: count(tally.attempts),
                success_counts: count(blocked),
                tps: per_second(f64::from(tally.attempts), tally.elapsed),
                errors: BTreeMap::new(),
                latencies: LatencyDistribution::default(),
                exists_not_send_requests: tally.not_checked.is_some(),
            },
            total_data_size: "0 byte".to_string(),
            status_codes: BTreeMap::new(),
            histograms: None,
            datagrams: None,
            isolation: Some(IsolationMetrics {
                check: check.to_string(),
                expected: "unreachable".to_string(),
                observed: observed.to_string(),
                attempts: count(tally.attempts),
                reached: count(tally.reached),
                outcomes: tally
                    .outcomes
                    .iter()
                    .map(|(seen, n)| (seen.clone(), count(*n)))
                    .collect(),
            }),
        },
    }
}

/// The detail of a DNS target.
pub fn dns_detail(
    name: &str,
    server: &str,
    protocol: &str,
    domain: &str,
    m: &Measurement,
    expect: Option<&NetSuccessCondition>,
) -> NetDnsTaskDetail {
    let v = verdict(m, expect);
    let metrics = dns_metrics(m, domain, server, protocol);
    NetDnsTaskDetail {
        name: name.to_string(),
        request_server: server.to_string(),
        protocol: protocol.to_string(),
        request_succeed: v.succeed,
        failure_reason: v.reason,
        request_mean_delay: metrics.requests.latencies.mean,
        request_succeed_rate: v.success_rate,
        request_target_metrics: metrics,
    }
}

/// Who ran a round and with what.
#[derive(Clone, Debug)]
pub struct RoundContext {
    /// Round number (1-based).
    pub round: i64,
    /// Node name.
    pub node: String,
    /// Pod (or process) name.
    pub pod: String,
    /// When the round started.
    pub started: jiff::Timestamp,
    /// When it ended.
    pub ended: jiff::Timestamp,
    /// Resources used meanwhile.
    pub resources: SystemResource,
    /// Load running when it ended.
    pub load: TotalRunningLoad,
}

/// A task result from target details: the round succeeds when every target did; the failure
/// reason is `test <name>: <reason>` of the last failing target (upstream's wording).
pub fn task_result<D: TargetOutcome>(
    target_type: &str,
    details: Vec<D>,
    context: &RoundContext,
) -> TaskResult<D> {
    let mut reason = None;
    let mut all = true;
    for d in &details {
        let (name, succeed, why) = d.outcome();
        if !succeed {
            all = false;
            reason = Some(format!("test {name}: {}", why.unwrap_or("failed")));
        }
    }
    if details.is_empty() {
        all = false;
        reason = Some("no target to probe".to_string());
    }
    TaskResult {
        target_type: target_type.to_string(),
        target_number: details.len() as i64,
        failure_reason: reason,
        round_succeed: all,
        system_resource: context.resources.clone(),
        running_load_total: context.load.clone(),
        round_task_detail: details,
    }
}

/// A round's task result, of its task's kind.
#[derive(Clone, Debug)]
pub enum KindResult {
    /// NetReach's targets.
    NetReach(TaskResult<NetReachTaskDetail>),
    /// AppHttpHealthy's target.
    AppHttpHealthy(TaskResult<AppHttpHealthyTaskDetail>),
    /// Netdns's targets.
    Netdns(TaskResult<NetDnsTaskDetail>),
}

impl KindResult {
    /// Whether the round succeeded, and why not (the task result's own verdict).
    fn verdict(&self) -> (bool, Option<String>) {
        let (succeed, reason) = match self {
            KindResult::NetReach(r) => (r.round_succeed, &r.failure_reason),
            KindResult::AppHttpHealthy(r) => (r.round_succeed, &r.failure_reason),
            KindResult::Netdns(r) => (r.round_succeed, &r.failure_reason),
        };
        (succeed, reason.clone())
    }
}

/// The agent report of one round: it succeeded when its task result did, and fails with that
/// result's reason.
pub fn round_report(
    context: &RoundContext,
    task_uid: Option<String>,
    result: KindResult,
) -> Report {
    let span = context.ended.duration_since(context.started);
    let (succeed, reason) = result.verdict();
    let mut report = Report {
        round_number: context.round,
        round_result: if succeed { ROUND_SUCCEED } else { ROUND_FAIL }.to_string(),
        node_name: context.node.clone(),
        pod_name: context.pod.clone(),
        failed_reason: reason,
        round_start_time_stamp: time(context.started),
        round_end_time_stamp: time(context.ended),
        round_duration: go_duration::format_signed(span),
        task_uid,
        task_net_reach: None,
        task_app_http_healthy: None,
        task_net_dns: None,
    };
    match result {
        KindResult::NetReach(r) => report.task_net_reach = Some(r),
        KindResult::AppHttpHealthy(r) => report.task_app_http_healthy = Some(r),
        KindResult::Netdns(r) => report.task_net_dns = Some(r),
    }
    report
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::histogram::{decode, record};
    use crate::probe::outcome::{Attempt, Code};
    use crate::probe::record::Recorder;
    use crate::probe::{Measurement, Plan};

    fn measurement(recorder: Recorder) -> Measurement {
        Measurement {
            recorder,
            started: jiff::Timestamp::from_second(1_767_225_600).unwrap(),
            elapsed: Duration::from_millis(2500),
            send_span: Duration::from_secs(2),
            planned: 4,
            plan: Plan::new(2.0, Duration::from_secs(2), Duration::from_secs(1)).unwrap(),
        }
    }

    fn ok(r: &mut Recorder, micros: u64) {
        let a = Attempt {
            result: Ok(()),
            code: Some(Code::Http(200)),
            bytes: 100,
            connect: None,
            queued: Duration::ZERO,
            phases: Default::default(),
            echo: None,
        };
        let d = Duration::from_micros(micros);
        r.record(&a, d, d, Duration::ZERO);
    }

    #[test]
    fn latencies_are_fractional_milliseconds() {
        let mut h = crate::histogram::new_latencies();
        for v in [250u64, 500, 750, 1000] {
            record(&mut h, v);
        }
        let l = latency_distribution(&h, Some(625.0));
        assert_eq!(l.min, 0.25);
        assert_eq!(l.max, 1.0);
        assert_eq!(l.p50, 0.5);
        assert_eq!(l.mean, 0.625);
        assert_eq!(
            latency_distribution(&crate::histogram::new_latencies(), None),
            LatencyDistribution::default()
        );
    }

    #[test]
    fn http_metrics_in_upstream_shape_with_histograms() {
        let mut r = Recorder::default();
        ok(&mut r, 1500);
        ok(&mut r, 2500);
        r.record(
            &Attempt::failed(crate::probe::outcome::ProbeError::new(
                crate::probe::outcome::ErrorClass::Refused,
                "",
            )),
            Duration::ZERO,
            Duration::from_micros(100),
            Duration::ZERO,
        );
        r.record_unsent();
        let m = measurement(r);
        let metrics = http_metrics(&m);
        let json = serde_json::to_value(&metrics).unwrap();
        assert_eq!(json["requestCounts"], 3);
        assert_eq!(json["successCounts"], 2);
        assert_eq!(json["tps"], 1.2);
        assert_eq!(json["requestDuration"], "2.5s");
        assert_eq!(json["totalDataSize"], "200 byte");
        assert_eq!(json["statusCodes"]["200"], 2);
        assert_eq!(json["statusCodes"]["0"], 1);
        assert_eq!(json["errors"]["refused"], 1);
        assert_eq!(json["existsNotSendRequests"], true);
        assert_eq!(
            json["latencies"]["meanInMs"], 2.0,
            "mean of the successful requests only"
        );
        assert_eq!(
            json["requestEndTime"], "2026-01-01T00:00:02Z",
            "metav1.Time: whole seconds"
        );
        let h = metrics.histograms.unwrap();
        assert_eq!(decode(&h[histogram_names::RESPONSE_TIME]).unwrap().len(), 3);
        assert_eq!(
            decode(&h[histogram_names::SUCCEEDED_RESPONSE_TIME])
                .unwrap()
                .len(),
            2
        );
        assert!(!h.contains_key(histogram_names::CONNECT_TIME));
        let d: AppHttpHealthyTaskDetail =
            http_detail(APP_HTTP_HEALTHY_TARGET_NAME, "http://x", "GET", &m, None);
        assert!(!d.request_succeed);
        assert_eq!(d.request_mean_delay, 2.0);
        assert_eq!(
            d.failure_reason.as_deref(),
            Some("Success Rate 0.6666666666666666 is lower than request 1")
        );
    }

    #[test]
    fn zero_requests_serialize_without_nan() {
        let m = measurement(Recorder::default());
        let d = dns_detail("typeA_x", "127.0.0.1:53", "udp", "a.test.", &m, None);
        let text = serde_json::to_string(&d).expect("serializes");
        assert!(!text.contains("NaN"));
        assert_eq!(d.request_succeed_rate, 0.0);
        assert_eq!(d.failure_reason.as_deref(), Some("no request was sent"));
    }

    #[test]
    fn round_result_names_the_last_failing_target() {
        let context = RoundContext {
            round: 1,
            node: "n".into(),
            pod: "p".into(),
            started: jiff::Timestamp::from_second(0).unwrap(),
            ended: jiff::Timestamp::from_second(3).unwrap(),
            resources: SystemResource::default(),
            load: TotalRunningLoad::default(),
        };
        struct Target(&'static str, bool, Option<&'static str>);
        impl TargetOutcome for Target {
            fn outcome(&self) -> (&str, bool, Option<&str>) {
                (self.0, self.1, self.2)
            }
        }
        let details = vec![
            Target("a", true, None),
            Target("b", false, Some("x")),
            Target("c", false, Some("y")),
        ];
        let t = task_result("kdoctor agent", details, &context);
        assert!(!t.round_succeed);
        assert_eq!(t.failure_reason.as_deref(), Some("test c: y"));
        assert_eq!(t.target_number, 3);
        // The report's verdict is its task result's, whatever the kind of its details.
        let result = TaskResult::<NetDnsTaskDetail> {
            target_type: t.target_type,
            target_number: t.target_number,
            failure_reason: t.failure_reason,
            round_succeed: t.round_succeed,
            system_resource: t.system_resource,
            running_load_total: t.running_load_total,
            round_task_detail: Vec::new(),
        };
        let r = round_report(&context, None, KindResult::Netdns(result));
        assert_eq!(r.round_duration, "3s");
        assert_eq!(r.round_result, ROUND_FAIL);
        assert_eq!(r.failed_reason.as_deref(), Some("test c: y"));
        assert!(r.task_net_dns.is_some() && r.task_net_reach.is_none());
    }
}
