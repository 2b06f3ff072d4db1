//! The report keeps upstream v0.2.2's shape: a report in that shape reads and writes back to
//! the same JSON, key for key.

use kdoctor_api::go_duration;
use kdoctor_api::report::{KdoctorReport, Report, report_name};
use kdoctor_api::task::TaskKind;
use serde_json::{Value, json};

/// A NetReach report as upstream v0.2.2 serves it (one node, one target).
fn upstream_net_reach_report() -> Value {
    json!({
        "apiVersion": "system.kdoctor.io/v1beta1",
        "kind": "KdoctorReport",
        "metadata": {"name": "netreach-task", "creationTimestamp": "2023-08-01T08:36:50Z"},
        "task": {
            "name": "task",
            "kind": "NetReach",
            "spec": {"netReach": {
                "schedule": {"schedule": "0 1", "roundTimeoutMinute": 1, "roundNumber": 1},
                "request": {"durationInSecond": 10, "qps": 10, "perRequestTimeoutInMS": 1000},
                "expect": {"successRate": 1.0, "meanAccessDelayInMs": 1500},
                "target": {"ipv4": true, "ipv6": false, "endpoint": true, "multusInterface": false,
                           "clusterIP": true, "nodePort": true, "loadBalancer": true,
                           "ingress": true, "enableLatencyMetric": false}
            }}
        },
        "status": {"totalRoundNumber": 1, "roundFinishedNumber": 1, "status": "Finished", "roundNumber": 1},
        "report": {"latestRoundReport": [{
            "roundNumber": 1,
            "roundResult": "succeed",
            "nodeName": "kdoctor-worker",
            "podName": "kdoctor-agent-krrnp",
            "roundStartTimeStamp": "2023-08-01T08:36:56Z",
            "roundEndTimeStamp": "2023-08-01T08:37:07Z",
            "roundDuration": "11.180813761s",
            "taskNetReach": {
                "targetType": "NetReach",
                "targetNumber": 1,
                "roundSucceed": true,
                "systemResource": {"maxCPU": "30.651%", "meanCPU": "12.500%", "maxMemory": "97.00MB"},
                "runningLoadTotal": {"appHttpHealthyQPS": 0, "netReachQPS": 60, "netDnsQPS": 0},
                "roundTaskDetail": [{
                    "name": "AgentClusterV4IP_172.41.249.6:80",
                    "url": "http://172.41.249.6:80",
                    "method": "GET",
                    "requestSucceed": true,
                    "requestMeanDelay": 47.25,
                    "requestSucceedRate": 1.0,
                    "requestTargetMetrics": {
                        "requestStartTime": "2023-08-01T08:36:56Z",
                        "requestEndTime": "2023-08-01T08:37:06Z",
                        "requestDuration": "10.032286878s",
                        "requestCounts": 100,
                        "successCounts": 100,
                        "tps": 9.967817030760152,
                        "errors": {},
                        "latencies": {"p50InMs": 0.0, "p90InMs": 0.0, "p95InMs": 0.0, "p99InMs": 0.0,
                                      "maxInMs": 0.0, "minInMs": 0.0, "meanInMs": 47.25},
                        "existsNotSendRequests": false,
                        "totalDataSize": "36968 byte",
                        "statusCodes": {"200": 100}
                    }
                }]
            }
        }]}
    })
}

#[test]
fn an_upstream_net_reach_report_round_trips_key_for_key() {
    let upstream = upstream_net_reach_report();
    let report: KdoctorReport = serde_json::from_value(upstream.clone()).expect("reads");
    assert_eq!(serde_json::to_value(&report).expect("writes"), upstream);
    assert_eq!(
        report.metadata.name.as_deref(),
        Some(report_name(TaskKind::NetReach, "task").as_str())
    );
}

#[test]
fn dns_and_app_reports_use_upstream_keys() {
    let dns = json!({
        "roundNumber": 2, "roundResult": "fail", "nodeName": "n1", "podName": "p1",
        "reasonsForFailure": "test typeA_10.96.0.10:53_kubernetes.default.svc.cluster.local: Success Rate 0.5 is lower than request 1",
        "roundStartTimeStamp": "2023-08-01T08:36:56Z", "roundEndTimeStamp": "2023-08-01T08:37:07Z",
        "roundDuration": "11s",
        "taskNetDns": {
            "targetType": "kdoctor agent", "targetNumber": 1, "roundSucceed": false,
            "systemResource": {"maxCPU": "1.000%", "meanCPU": "0.500%", "maxMemory": "20.00MB"},
            "runningLoadTotal": {"appHttpHealthyQPS": 0, "netReachQPS": 0, "netDnsQPS": 10},
            "roundTaskDetail": [{
                "name": "typeA_10.96.0.10:53_kubernetes.default.svc.cluster.local",
                "requestServer": "10.96.0.10:53", "protocol": "udp", "requestSucceed": true,
                "reasonsForFailure": null,
                "requestMeanDelay": 0.5, "requestSucceedRate": 1.0,
                "requestTargetMetrics": {
                    "requestStartTime": "2023-08-01T08:36:56Z", "requestEndTime": "2023-08-01T08:37:06Z",
                    "requestDuration": "10s", "requestCounts": 100, "successCounts": 100, "tps": 10.0,
                    "errors": {}, "latencies": {"p50InMs": 0.25, "p90InMs": 0.5, "p95InMs": 0.75,
                    "p99InMs": 1.0, "maxInMs": 2.0, "minInMs": 0.125, "meanInMs": 0.5},
                    "existsNotSendRequests": false,
                    "domain": "kubernetes.default.svc.cluster.local.", "server": "10.96.0.10:53",
                    "method": "udp", "failedCounts": 0, "replyCode": {"NOERROR": 100}
                }
            }]
        }
    });
    let report: Report = serde_json::from_value(dns.clone()).expect("reads");
    let written = serde_json::to_value(&report).expect("writes");
    assert_eq!(written, dns);
    // Upstream writes a null failure reason for DNS targets instead of omitting it.
    assert!(written["taskNetDns"]["roundTaskDetail"][0]["reasonsForFailure"].is_null());

    let app = json!({
        "roundNumber": 1, "roundResult": "succeed", "nodeName": "n1", "podName": "p1",
        "roundStartTimeStamp": "2023-08-01T08:36:56Z", "roundEndTimeStamp": "2023-08-01T08:37:07Z",
        "roundDuration": "11s",
        "taskAppHealthy": {
            "targetType": "HttpAppHealthy", "targetNumber": 1, "roundSucceed": true,
            "systemResource": {"maxCPU": "1.000%", "meanCPU": "0.500%", "maxMemory": "20.00MB"},
            "runningLoadTotal": {"appHttpHealthyQPS": 10, "netReachQPS": 0, "netDnsQPS": 0},
            "roundTaskDetail": [{
                "name": "HttpAppHealthy target", "url": "http://a.example.com", "method": "GET",
                "requestSucceed": true, "requestMeanDelay": 3.5, "requestSucceedRate": 1.0,
                "requestTargetMetrics": {
                    "requestStartTime": "2023-08-01T08:36:56Z", "requestEndTime": "2023-08-01T08:37:06Z",
                    "requestDuration": "10s", "requestCounts": 100, "successCounts": 100, "tps": 10.0,
                    "errors": {}, "latencies": {"p50InMs": 3.0, "p90InMs": 4.0, "p95InMs": 5.0,
                    "p99InMs": 6.0, "maxInMs": 7.0, "minInMs": 1.0, "meanInMs": 3.5},
                    "existsNotSendRequests": false, "totalDataSize": "1200 byte",
                    "statusCodes": {"200": 99, "0": 1},
                    "histograms": {"serviceTime": {"encoding": "hdr-v2-deflate-base64", "unit": "microseconds", "data": "HISTFAAAAB54nJNpmSzMwMDAyAAGzFAKRgMAEKEBHw=="}}
                }
            }]
        }
    });
    let report: Report = serde_json::from_value(app.clone()).expect("reads");
    assert_eq!(serde_json::to_value(&report).expect("writes"), app);
    let codes = &report
        .task_app_http_healthy
        .expect("app task")
        .round_task_detail[0]
        .request_target_metrics
        .status_codes;
    assert_eq!(codes.get(&0), Some(&1));
}

#[test]
fn report_names_are_the_lowercase_kind_and_the_task() {
    assert_eq!(
        report_name(TaskKind::AppHttpHealthy, "web"),
        "apphttphealthy-web"
    );
    assert_eq!(
        report_name(TaskKind::Netdns, "dns.check"),
        "netdns-dns.check"
    );
}

#[test]
fn durations_print_like_go() {
    let cases: [(i128, &str); 9] = [
        (0, "0s"),
        (999, "999ns"),
        (1_500, "1.5µs"),
        (1_500_000, "1.5ms"),
        (15_462_579_243, "15.462579243s"),
        (60_000_000_000, "1m0s"),
        (3_661_000_000_000, "1h1m1s"),
        (90_061_500_000_000, "25h1m1.5s"),
        (-2_000_000_000, "-2s"),
    ];
    for (nanos, want) in cases {
        assert_eq!(go_duration::format_nanos(nanos), want);
    }
}

#[test]
fn legacy_reports_convert_to_the_current_shape() {
    use kdoctor_api::report::legacy::parse_any_report;
    // v0.2.1: Go field names, SystemResource and TotalRunningLoad objects.
    let v021 = json!({
        "TaskName": "netreach.task", "TaskType": "NetReach", "RoundNumber": 2, "RoundResult": "fail",
        "NodeName": "kdoctor-worker", "PodName": "kdoctor-agent-krrnp", "FailedReason": "test x: y",
        "StartTimeStamp": "2023-08-01T08:36:56Z", "EndTimeStamp": "2023-08-01T08:37:07Z",
        "RoundDuration": "11.18s", "ReportType": "agent test report",
        "NetReachTask": {
            "TargetType": "NetReach", "TargetNumber": 1, "FailureReason": "test x: y", "Succeed": false,
            "SystemResource": {"MaxCPU": "30.651%", "MeanCPU": "10.000%", "MaxMemory": "97.00MB"},
            "TotalRunningLoad": {"AppHttpHealthyQPS": 0, "NetReachQPS": 60, "NetDnsQPS": 0},
            "Detail": [{
                "TargetName": "AgentPodV4IP_kdoctor-agent-ntp9l_172.40.0.6", "TargetUrl": "http://172.40.0.6:80",
                "TargetMethod": "GET", "Succeed": false, "MeanDelay": 44.05, "SucceedRate": 0.5,
                "FailureReason": "Success Rate 0.5 is lower than request 1",
                "Metrics": {"StartTime": "2023-08-01T08:36:56Z", "EndTime": "2023-08-01T08:37:06Z",
                    "Duration": "10.03s", "RequestCounts": 100, "SuccessCounts": 50, "TPS": 9.97,
                    "Errors": {"timeout": 50},
                    "Latencies": {"P50InMs": 0, "P90InMs": 0, "P95InMs": 0, "P99InMs": 0, "MaxInMs": 0, "MinInMs": 0, "MeanInMs": 44.05},
                    "ExistsNotSendRequests": false, "TotalDataSize": "18484 byte", "StatusCodes": {"200": 50, "0": 50}}
            }]
        }
    });
    let report = parse_any_report(&serde_json::to_vec(&v021).expect("json")).expect("reads");
    assert_eq!(
        (
            report.round_number,
            report.round_result.as_str(),
            report.node_name.as_str()
        ),
        (2, "fail", "kdoctor-worker")
    );
    let task = report.task_net_reach.as_ref().expect("NetReach task");
    assert_eq!(task.system_resource.max_cpu, "30.651%");
    assert_eq!(task.running_load_total.net_reach_qps, 60);
    let detail = &task.round_task_detail[0];
    assert_eq!(detail.request_succeed_rate, 0.5);
    assert_eq!(
        detail.request_target_metrics.status_codes.get(&0),
        Some(&50)
    );
    assert_eq!(
        detail.request_target_metrics.requests.errors.get("timeout"),
        Some(&50)
    );
    // The converted report serializes with the v0.2.2 keys.
    let written = serde_json::to_value(&report).expect("writes");
    assert_eq!(
        written["taskNetReach"]["roundTaskDetail"][0]["requestTargetMetrics"]["successCounts"],
        50
    );

    // v0.2.0: MaxCPU and MaxMemory directly in the task; Netdns with lower-case task keys.
    let v020 = json!({
        "RoundNumber": 1, "RoundResult": "succeed", "NodeName": "n1", "PodName": "p1",
        "StartTimeStamp": "2023-07-01T00:00:00Z", "EndTimeStamp": "2023-07-01T00:00:12Z", "RoundDuration": "12s",
        "netDNSTask": {
            "targetType": "kdoctor agent", "targetNumber": 1, "succeed": true,
            "MaxCPU": "5.000%", "MaxMemory": "30.00MB",
            "detail": [{"TargetName": "typeA_10.96.0.10:53_kubernetes.default.svc.cluster.local",
                "TargetServer": "10.96.0.10:53", "TargetProtocol": "udp", "Succeed": true, "FailureReason": null,
                "MeanDelay": 1.5, "SucceedRate": 1,
                "Metrics": {"StartTime": "2023-07-01T00:00:00Z", "EndTime": "2023-07-01T00:00:10Z", "Duration": "10s",
                    "RequestCounts": 50, "SuccessCounts": 50, "TPS": 5, "Errors": {},
                    "Latencies": {"MeanInMs": 1.5}, "ExistsNotSendRequests": false,
                    "TargetDomain": "kubernetes.default.svc.cluster.local.", "DNSServer": "10.96.0.10:53",
                    "DNSMethod": "udp", "FailedCounts": 0, "ReplyCode": {"NOERROR": 50}}}]
        }
    });
    let report = parse_any_report(&serde_json::to_vec(&v020).expect("json")).expect("reads");
    let dns = report.task_net_dns.expect("Netdns task");
    assert_eq!(dns.system_resource.max_memory, "30.00MB");
    assert_eq!(
        dns.round_task_detail[0]
            .request_target_metrics
            .reply_code
            .get("NOERROR"),
        Some(&50)
    );
    assert_eq!(
        dns.round_task_detail[0].request_target_metrics.domain,
        "kubernetes.default.svc.cluster.local."
    );

    // The current shape passes through unchanged.
    let current = upstream_net_reach_report()["report"]["latestRoundReport"][0].clone();
    let report = parse_any_report(&serde_json::to_vec(&current).expect("json")).expect("reads");
    assert_eq!(serde_json::to_value(&report).expect("writes"), current);
}

#[test]
fn upstream_report_file_names_parse() {
    use kdoctor_api::report::files::parse_file_name;
    let agent = parse_file_name("NetReach_task_round1_kdoctor-worker_2023-08-01T08:43:07Z")
        .expect("parses");
    assert_eq!(agent.kind, TaskKind::NetReach);
    assert_eq!(
        (agent.task.as_str(), agent.round, agent.node.as_deref()),
        ("task", 1, Some("kdoctor-worker"))
    );
    let summary =
        parse_file_name("Netdns_dns_round12_summary_2023-08-31T08:43:07Z").expect("parses");
    assert_eq!((summary.round, summary.node), (12, None));
    for bad in [
        "NetReach_task_round1_node",
        "Pod_task_round1_node_2023-08-01T08:43:07Z",
        "NetReach_task_r1_node_2023-08-01T08:43:07Z",
        "NetReach_task_round1_node_yesterday",
        "NetReach_task_round0_node_2023-08-01T08:43:07Z",
    ] {
        assert!(parse_file_name(bad).is_err(), "{bad}");
    }
}
