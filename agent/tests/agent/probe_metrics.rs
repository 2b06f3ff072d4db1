//! Per-probe metrics: rounds against the agent's own echo targets (and a refused port), the
//! agent's `/metrics` scraped while the round runs and after it, the counters and histogram
//! counts checked against the round's report.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use kdoctor_agent::probe::http::HttpRequestSpec;
use kdoctor_agent::probe_metrics::{LATENCY_BUCKETS, RoundLabels};
use kdoctor_agent::round::execute::{RoundPlan, execute_with};
use kdoctor_agent::round::targets::{HttpTarget, Load};
use kdoctor_api::report::{HttpMetrics, Report};
use kdoctor_api::task::TaskKind;

use crate::support::{agent, fetch, http_spec, pick};

/// One sample of the text exposition: name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let (head, value) = line.rsplit_once(' ').expect("name and value");
            let (name, labels) = match head.split_once('{') {
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').expect("closing brace");
                    let labels = body
                        .split("\",")
                        .filter(|p| !p.is_empty())
                        .map(|pair| {
                            let (k, v) = pair.split_once("=\"").expect("label pair");
                            (k.to_string(), v.trim_end_matches('"').to_string())
                        })
                        .collect();
                    (name.to_string(), labels)
                }
                None => (head.to_string(), BTreeMap::new()),
            };
            Sample {
                name,
                labels,
                value: value.parse().expect("a number"),
            }
        })
        .collect()
}

async fn scrape(addr: SocketAddr) -> Vec<Sample> {
    let answer = fetch("GET", addr, "/metrics", false, false).await;
    assert_eq!(answer.status, 200);
    parse(&answer.body)
}

/// Sum of the samples named `name` whose labels include every pair of `want`.
fn sum(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            want.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

fn plan(kind: TaskKind, http: Vec<HttpTarget>, load: Load) -> RoundPlan {
    RoundPlan {
        kind,
        round: 1,
        task_uid: Some("uid-metrics".into()),
        node: "node-a".into(),
        pod: "kdoctor-agent-a".into(),
        http,
        tcp: vec![],
        udp: vec![],
        icmp: vec![],
        isolation: vec![],
        path_mtu: false,
        dns: vec![],
        load,
        expect: None,
        tls: None,
        round_timeout: Duration::from_secs(60),
        setup_failures: vec![],
        resources: kdoctor_agent::resource::Source::Process,
    }
}

fn target(name: String, spec: HttpRequestSpec) -> HttpTarget {
    HttpTarget { name, spec }
}

fn details(report: &Report) -> Vec<(String, HttpMetrics)> {
    if let Some(r) = &report.task_net_reach {
        return r
            .round_task_detail
            .iter()
            .map(|d| (d.name.clone(), d.request_target_metrics.clone()))
            .collect();
    }
    let r = report.task_app_http_healthy.as_ref().expect("an HTTP task");
    r.round_task_detail
        .iter()
        .map(|d| (d.name.clone(), d.request_target_metrics.clone()))
        .collect()
}

/// The labels of one target's series and `extra`.
fn with<'a>(task: &'a str, name: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut want = vec![("task", task), ("target", name)];
    want.extend_from_slice(extra);
    want
}

/// Every target's counters and total-latency count equal the report's numbers.
fn check_against_report(samples: &[Sample], task: &str, report: &Report) {
    for (name, metrics) in details(report) {
        let of = |extra: &[(&'static str, &'static str)]| with(task, &name, extra);
        let requests = metrics.requests.request_counts as f64;
        let ok = metrics.requests.success_counts as f64;
        let counted_ok = sum(
            samples,
            "kdoctor_agent_probe_target_requests_total",
            &of(&[("result", "succeed"), ("error_class", "")]),
        );
        let counted_fail = sum(
            samples,
            "kdoctor_agent_probe_target_requests_total",
            &of(&[("result", "fail")]),
        );
        assert_eq!(counted_ok, ok, "{name}: succeeded requests");
        assert_eq!(counted_fail, requests - ok, "{name}: failed requests");
        // Failures by class, as the report's error keys (`<class>` or `<class>: <detail>`).
        let mut by_class: HashMap<String, i64> = HashMap::new();
        for (key, n) in &metrics.requests.errors {
            let class = key.split(": ").next().unwrap_or_default().to_string();
            *by_class.entry(class).or_default() += n;
        }
        for (class, n) in by_class {
            let counted = sum(
                samples,
                "kdoctor_agent_probe_target_requests_total",
                &with(task, &name, &[("result", "fail"), ("error_class", &class)]),
            );
            assert_eq!(counted, n as f64, "{name}: failures of class {class}");
        }
        let total = sum(
            samples,
            "kdoctor_agent_probe_latency_seconds_count",
            &of(&[("phase", "total")]),
        );
        assert_eq!(total, requests, "{name}: total-latency observations");
        let inf = sum(
            samples,
            "kdoctor_agent_probe_latency_seconds_bucket",
            &of(&[("phase", "total"), ("le", "+Inf")]),
        );
        assert_eq!(inf, requests, "{name}: the +Inf bucket");
        // Nothing was refused: the cap is far away.
        assert_eq!(
            sum(
                samples,
                "kdoctor_agent_probe_observations_dropped_total",
                &[]
            ),
            0.0
        );
    }
}

#[tokio::test]
async fn netreach_round_metrics_match_the_report_during_and_after_the_round() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    let v4 = pick(&agent.http, false);
    let v6 = pick(&agent.http, true);
    // A port nothing listens on: every request is refused.
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let targets = vec![
        target(
            format!("AgentPodV4IP_kdoctor-agent-b_{}", v4.ip()),
            http_spec(&format!("http://{v4}/?delay=1ms")),
        ),
        target(
            format!("AgentClusterV6IP_{v6}"),
            http_spec(&format!("http://{v6}/kdoctoragent")),
        ),
        target(
            format!("AgentPodV4IP_kdoctor-agent-gone_{}", refused.ip()),
            http_spec(&format!("http://{refused}/")),
        ),
    ];
    let load = Load {
        qps: 20.0,
        duration: Duration::from_secs(3),
        timeout: Duration::from_secs(1),
    };
    let p = plan(TaskKind::NetReach, targets, load);
    let labels = RoundLabels {
        task_kind: "NetReach".into(),
        task: "reach".into(),
        source_node: "node-a".into(),
        source_zone: "zone-1".into(),
        pod_zones: HashMap::from([("kdoctor-agent-b".to_string(), "zone-2".to_string())]),
        per_target: true,
        extra: vec![("label_team".into(), "net".into())],
    };
    let round = tokio::spawn(execute_with(p, Some(agent.registry.clone()), Some(labels)));
    let metrics = agent.metrics[0];
    // While the round runs, the counters move (not only at its end).
    let pod_ok = [
        ("task", "reach"),
        ("target_type", "pod"),
        ("target_zone", "zone-2"),
        ("result", "succeed"),
    ];
    let mut seen_during = None;
    while !round.is_finished() {
        let samples = scrape(metrics).await;
        let n = sum(
            &samples,
            "kdoctor_agent_probe_target_requests_total",
            &pod_ok,
        );
        if n > 0.0 && !round.is_finished() {
            seen_during = Some(n);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let during = seen_during.expect("a scrape during the round saw requests counted");
    let report = round.await.unwrap();
    let samples = scrape(metrics).await;
    let after = sum(
        &samples,
        "kdoctor_agent_probe_target_requests_total",
        &pod_ok,
    );
    assert!(
        during <= after,
        "counters only grow: {during} during, {after} after"
    );
    check_against_report(&samples, "reach", &report);

    // Labels of the pod target's series.
    let series: Vec<&Sample> = samples
        .iter()
        .filter(|s| {
            s.name == "kdoctor_agent_probe_target_requests_total"
                && s.labels.get("target_zone").map(String::as_str) == Some("zone-2")
                && s.labels.get("result").map(String::as_str) == Some("succeed")
        })
        .collect();
    assert_eq!(series.len(), 1, "{series:?}");
    let labels = &series[0].labels;
    let expected: BTreeMap<String, String> = [
        ("task_kind", "NetReach"),
        ("task", "reach"),
        ("target_type", "pod"),
        ("protocol", "http"),
        ("ip_family", "ipv4"),
        ("source_node", "node-a"),
        ("source_zone", "zone-1"),
        ("target_zone", "zone-2"),
        ("result", "succeed"),
        ("error_class", ""),
        ("label_team", "net"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .chain([(
        "target".to_string(),
        format!("AgentPodV4IP_kdoctor-agent-b_{}", v4.ip()),
    )])
    .collect();
    assert_eq!(labels, &expected);
    // The IPv6 ClusterIP target: its family, no target zone.
    assert!(
        sum(
            &samples,
            "kdoctor_agent_probe_target_requests_total",
            &[
                ("target_type", "cluster_ip"),
                ("ip_family", "ipv6"),
                ("target_zone", ""),
                ("result", "succeed")
            ]
        ) > 0.0
    );
    // The refused target: failures of class `refused`, and connect attempts are no phase.
    let refused_total = sum(
        &samples,
        "kdoctor_agent_probe_target_requests_total",
        &[("error_class", "refused"), ("result", "fail")],
    );
    assert!(refused_total > 0.0);
    // Phases: the pod target opened at least one connection and timed its first bytes.
    let pod = [("target_type", "pod"), ("target_zone", "zone-2")];
    let connect = sum(
        &samples,
        "kdoctor_agent_probe_latency_seconds_count",
        &[pod[0], pod[1], ("phase", "connect")],
    );
    let first_byte = sum(
        &samples,
        "kdoctor_agent_probe_latency_seconds_count",
        &[pod[0], pod[1], ("phase", "first_byte")],
    );
    let total = sum(
        &samples,
        "kdoctor_agent_probe_latency_seconds_count",
        &[pod[0], pod[1], ("phase", "total")],
    );
    assert!(connect >= 1.0 && connect <= total, "{connect} of {total}");
    assert_eq!(first_byte, total);
    // The buckets are the documented ones, and a 1 ms delay lands above 1 ms.
    let buckets: Vec<String> = samples
        .iter()
        .filter(|s| {
            s.name == "kdoctor_agent_probe_latency_seconds_bucket"
                && s.labels.get("phase").map(String::as_str) == Some("total")
                && s.labels.get("target_zone").map(String::as_str) == Some("zone-2")
        })
        .map(|s| s.labels["le"].clone())
        .collect();
    assert_eq!(buckets.len(), LATENCY_BUCKETS.len() + 1);
    assert_eq!(buckets[0], "0.0001");
    assert_eq!(buckets.last().map(String::as_str), Some("+Inf"));
    let under_1ms = sum(
        &samples,
        "kdoctor_agent_probe_latency_seconds_bucket",
        &[pod[0], pod[1], ("phase", "total"), ("le", "0.001")],
    );
    assert_eq!(under_1ms, 0.0, "a 1 ms delay answered under 1 ms");
    // The bookkeeping.
    let held = sum(&samples, "kdoctor_agent_metric_series", &[]);
    assert!(held > 0.0);
    assert_eq!(
        sum(&samples, "kdoctor_agent_metric_series_limit", &[]),
        kdoctor_agent::probe_metrics::DEFAULT_MAX_SERIES as f64
    );
    assert_eq!(
        sum(&samples, "kdoctor_agent_metric_series_dropped_total", &[]),
        0.0
    );
    // The exposed per-probe lines are exactly the series the gauge counts.
    let exposed = samples
        .iter()
        .filter(|s| {
            s.name.starts_with("kdoctor_agent_probe_target_")
                || s.name.starts_with("kdoctor_agent_probe_latency_seconds")
        })
        .count();
    assert_eq!(exposed as f64, held);
}

#[tokio::test]
async fn https_app_round_times_tls_and_aggregates_without_per_target_series() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    let https = pick(&agent.https, false);
    let mut spec = http_spec(&format!("https://{https}/"));
    // One connection per request: every request has a connect and a TLS phase.
    spec.keep_alive = false;
    let targets = vec![target(
        kdoctor_agent::report::APP_HTTP_HEALTHY_TARGET_NAME.to_string(),
        spec,
    )];
    let load = Load {
        qps: 20.0,
        duration: Duration::from_secs(1),
        timeout: Duration::from_secs(2),
    };
    let p = plan(TaskKind::AppHttpHealthy, targets, load);
    let labels = RoundLabels {
        task_kind: "AppHttpHealthy".into(),
        task: "web".into(),
        source_node: "node-a".into(),
        ..RoundLabels::default()
    };
    let report = execute_with(p, Some(agent.registry.clone()), Some(labels)).await;
    let samples = scrape(agent.metrics[0]).await;
    let detail = &details(&report)[0].1;
    let requests = detail.requests.request_counts as f64;
    assert!(requests > 0.0);
    assert_eq!(
        detail.requests.success_counts, detail.requests.request_counts,
        "{:?}",
        detail.requests.errors
    );
    let app = [
        ("task", "web"),
        ("target_type", "app"),
        ("ip_family", "ipv4"),
    ];
    assert!(
        samples
            .iter()
            .filter(|s| s.labels.get("task").map(String::as_str) == Some("web"))
            .all(|s| !s.labels.contains_key("target")),
        "no per-target series unless the task asks"
    );
    assert_eq!(
        sum(
            &samples,
            "kdoctor_agent_probe_target_requests_total",
            &[app[0], app[1], app[2], ("result", "succeed")]
        ),
        detail.requests.success_counts as f64
    );
    for phase in ["connect", "tls", "first_byte", "total"] {
        let count = sum(
            &samples,
            "kdoctor_agent_probe_latency_seconds_count",
            &[app[0], app[1], ("phase", phase)],
        );
        assert_eq!(count, requests, "phase {phase}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_series_cap_holds_with_a_thousand_per_target_series() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    let v4 = pick(&agent.http, false);
    const TARGETS: usize = 1000;
    const CAP: usize = 400;
    let targets = (0..TARGETS)
        .map(|i| {
            target(
                format!("AgentPodV4IP_kdoctor-agent-{i}_{}", v4.ip()),
                http_spec(&format!("http://{v4}/")),
            )
        })
        .collect();
    let load = Load {
        qps: 2.0,
        duration: Duration::from_secs(1),
        timeout: Duration::from_secs(5),
    };
    let labels = RoundLabels {
        task_kind: "NetReach".into(),
        task: "wide".into(),
        source_node: "node-a".into(),
        per_target: true,
        ..RoundLabels::default()
    };
    let metrics = kdoctor_agent::metrics::Metrics::with_max_series(CAP);
    let report = execute_with(
        plan(TaskKind::NetReach, targets, load),
        Some(metrics.clone()),
        Some(labels),
    )
    .await;
    // The report is not capped: every target, every request.
    let details = details(&report);
    assert_eq!(details.len(), TARGETS);
    assert!(details.iter().all(|(_, m)| m.requests.request_counts == 2));

    let samples = parse(&metrics.render());
    let per_probe = samples
        .iter()
        .filter(|s| {
            s.name.starts_with("kdoctor_agent_probe_target_")
                || s.name.starts_with("kdoctor_agent_probe_latency_seconds")
        })
        .count();
    let value = |name: &str| sum(&samples, name, &[]);
    assert!(per_probe <= CAP, "{per_probe} series exposed, cap {CAP}");
    assert!(
        per_probe > CAP / 2,
        "the cap is used, not avoided: {per_probe}"
    );
    assert_eq!(value("kdoctor_agent_metric_series") as usize, per_probe);
    assert_eq!(value("kdoctor_agent_metric_series_limit") as usize, CAP);
    // Refusals are reported, and so is every request that found no series.
    assert!(value("kdoctor_agent_metric_series_dropped_total") > 0.0);
    let recorded = sum(
        &samples,
        "kdoctor_agent_probe_target_requests_total",
        &[("task", "wide")],
    );
    let dropped = value("kdoctor_agent_probe_observations_dropped_total");
    // Targets whose series fit have both requests counted; every other request is counted as
    // dropped (as are requests of fitting targets whose later phase series did not fit).
    let fitting = samples
        .iter()
        .filter(|s| s.name == "kdoctor_agent_probe_target_requests_total")
        .filter_map(|s| s.labels.get("target"))
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert!(
        fitting > 0 && fitting < TARGETS,
        "{fitting} targets have series"
    );
    assert_eq!(recorded, (fitting * 2) as f64);
    assert!(
        dropped >= ((TARGETS - fitting) * 2) as f64,
        "{dropped} dropped for {} requests without a series",
        (TARGETS - fitting) * 2
    );
}
