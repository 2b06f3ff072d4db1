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
