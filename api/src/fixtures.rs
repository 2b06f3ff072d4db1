//! Realistic reports for tests and benchmarks of other crates (feature `fixtures`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::report::{
    HttpMetrics, LatencyDistribution, NetReachTaskDetail, Report, RequestMetrics, SystemResource,
    TaskResult, TotalRunningLoad,
};

/// A NetReach agent report of `round` from `node` with `targets` probed targets, whose numbers
/// vary with `seed` so that reports differ.
pub fn net_reach_report(node: &str, round: i64, targets: usize, seed: u64) -> Report {
    let at = |s: i64| Time(jiff::Timestamp::from_second(1_767_225_600 + s).unwrap_or_default());
    let details = (0..targets)
        .map(|i| {
            let n = seed.wrapping_mul(31).wrapping_add(i as u64);
            let ip = format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
            let mean = 0.2 + (n % 1000) as f32 / 1000.0;
            NetReachTaskDetail {
                name: format!("AgentPodV4IP_kdoctor-agent-{n:05x}_{ip}"),
                url: format!("http://{ip}:80"),
                method: "GET".to_string(),
                request_succeed: true,
                request_mean_delay: mean,
                request_succeed_rate: 1.0,
                failure_reason: None,
                request_target_metrics: HttpMetrics {
                    requests: RequestMetrics {
                        request_start_time: at(round * 60),
                        request_end_time: at(round * 60 + 10),
                        request_duration: "10.0123s".to_string(),
                        request_counts: 100,
                        success_counts: 100,
                        tps: 9.98 + (n % 7) as f64 / 100.0,
                        errors: BTreeMap::new(),
                        latencies: LatencyDistribution {
                            p50: mean,
                            p90: mean * 1.5,
                            p95: mean * 1.8,
                            p99: mean * 3.0,
                            max: mean * 5.0,
                            min: mean / 2.0,
                            mean,
                        },
                        exists_not_send_requests: false,
                    },
                    total_data_size: format!("{} byte", 36_000 + n % 1000),
                    status_codes: BTreeMap::from([(200, 100)]),
                    histograms: None,
                    datagrams: None,
                    isolation: None,
                },
            }
        })
        .collect();
    Report {
        round_number: round,
        round_result: "succeed".to_string(),
        node_name: node.to_string(),
        pod_name: format!("kdoctor-agent-{}", seed % 100_000),
        failed_reason: None,
        round_start_time_stamp: at(round * 60),
        round_end_time_stamp: at(round * 60 + 11),
        round_duration: "11.180813761s".to_string(),
        task_uid: None,
        task_net_reach: Some(TaskResult {
            target_type: "NetReach".to_string(),
            target_number: targets as i64,
            failure_reason: None,
            round_succeed: true,
            system_resource: SystemResource {
                max_cpu: "30.651%".to_string(),
                mean_cpu: "12.000%".to_string(),
                max_memory: "97.00MB".to_string(),
            },
            running_load_total: TotalRunningLoad {
                app_http_healthy_qps: 0,
                net_reach_qps: 60,
                net_dns_qps: 0,
            },
            round_task_detail: details,
        }),
        task_app_http_healthy: None,
        task_net_dns: None,
    }
}

/// The targets of a NetReach report, to edit (the fixture's names and numbers made what a test
/// needs). Panics on a report of another kind: a test's own mistake.
pub fn net_reach_details(report: &mut Report) -> &mut Vec<NetReachTaskDetail> {
    &mut report
        .task_net_reach
        .as_mut()
        .expect("a NetReach report")
        .round_task_detail
}

/// A report of `kind` of `round` from `node`: the NetReach fixture's numbers in the shape of
/// that kind (`taskAppHttpHealthy` or `taskNetDns`), so that stand-in agents report what a
/// real agent of the task would.
pub fn report_of(
    kind: crate::task::TaskKind,
    node: &str,
    round: i64,
    targets: usize,
    seed: u64,
) -> Report {
    use crate::report::{AppHttpHealthyTaskDetail, DnsMetrics, NetDnsTaskDetail};
    use crate::task::TaskKind;
    let mut report = net_reach_report(node, round, targets, seed);
    let Some(result) = report.task_net_reach.take() else {
        return report;
    };
    fn reshape<D>(result: &TaskResult<NetReachTaskDetail>, target_type: &str) -> TaskResult<D> {
        TaskResult {
            target_type: target_type.to_string(),
            target_number: result.target_number,
            failure_reason: result.failure_reason.clone(),
            round_succeed: result.round_succeed,
            system_resource: result.system_resource.clone(),
            running_load_total: result.running_load_total.clone(),
            round_task_detail: Vec::new(),
        }
    }
    match kind {
        TaskKind::NetReach => report.task_net_reach = Some(result),
        TaskKind::AppHttpHealthy => {
            let mut r = reshape(&result, "AppHttpHealthy");
            r.round_task_detail = result
                .round_task_detail
                .iter()
                .map(|d| AppHttpHealthyTaskDetail {
                    name: format!("AppHttpHealthy_{}", d.url),
                    url: d.url.clone(),
                    method: d.method.clone(),
                    request_succeed: d.request_succeed,
                    request_mean_delay: d.request_mean_delay,
                    request_succeed_rate: d.request_succeed_rate,
                    failure_reason: d.failure_reason.clone(),
                    request_target_metrics: d.request_target_metrics.clone(),
                })
                .collect();
            report.task_app_http_healthy = Some(r);
        }
        TaskKind::Netdns => {
            let mut r = reshape(&result, "Netdns");
            r.round_task_detail = result
                .round_task_detail
                .iter()
                .map(|d| {
                    let server = d.url.trim_start_matches("http://").replace(":80", ":53");
                    NetDnsTaskDetail {
                        name: format!("typeA_{server}_kubernetes.default.svc.cluster.local"),
                        request_server: server.clone(),
                        protocol: "udp".to_string(),
                        request_succeed: d.request_succeed,
                        failure_reason: d.failure_reason.clone(),
                        request_mean_delay: d.request_mean_delay,
                        request_succeed_rate: d.request_succeed_rate,
                        request_target_metrics: DnsMetrics {
                            requests: d.request_target_metrics.requests.clone(),
                            domain: "kubernetes.default.svc.cluster.local".to_string(),
                            server,
                            method: "A".to_string(),
                            failed_counts: 0,
                            reply_code: BTreeMap::from([("NOERROR".to_string(), 100)]),
                            histograms: None,
                        },
                    }
                })
                .collect();
            report.task_net_dns = Some(r);
        }
    }
    report
}

/// An AppHttpHealthy task `name` whose inputs are the Secret `secret` (namespace, name) and the
/// ConfigMap `body` (namespace, name).
pub fn app_http_with_inputs(
    name: &str,
    secret: (&str, &str),
    body: (&str, &str),
) -> crate::task::AppHttpHealthy {
    let yaml = format!(
        "apiVersion: kdoctor.io/v1beta1
kind: AppHttpHealthy
metadata: {{name: {name}}}
spec:
  target:
    host: https://example.test
    method: GET
    tlsSecretNamespace: {}
    tlsSecretName: {}
    bodyConfigmapNamespace: {}
    bodyConfigmapName: {}
",
        secret.0, secret.1, body.0, body.1
    );
    match crate::document::parse_tasks(&yaml).remove(0).task {
        Ok(crate::task::Task::AppHttpHealthy(task)) => task,
        other => panic!("the fixture is an AppHttpHealthy task: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::TaskKind;

    #[test]
    fn each_kind_reports_in_its_own_shape() {
        let http = report_of(TaskKind::AppHttpHealthy, "node-1", 2, 3, 7);
        assert!(http.task_net_reach.is_none() && http.task_net_dns.is_none());
        let result = http
            .task_app_http_healthy
            .expect("an AppHttpHealthy result");
        assert_eq!(
            (result.target_type.as_str(), result.round_task_detail.len()),
            ("AppHttpHealthy", 3)
        );
        let dns = report_of(TaskKind::Netdns, "node-1", 2, 1, 7);
        let result = dns.task_net_dns.expect("a Netdns result");
        assert_eq!(
            result.round_task_detail[0].request_target_metrics.method,
            "A"
        );
        assert!(
            report_of(TaskKind::NetReach, "node-1", 2, 1, 7)
                .task_net_reach
                .is_some()
        );
    }
}
