//! The progress lines local mode prints on standard error: one when a round starts, one when it
//! ends (with what the report says), one when a task has run all its rounds.

use jiff::Timestamp;
use kdoctor_api::report::Report;
use kdoctor_api::task::{StatusHistoryRecord, TaskKind};
use kdoctor_local::events::Event;

use crate::plural::count;

/// What a round's report adds up to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    /// Targets probed.
    pub targets: usize,
    /// Requests sent.
    pub requests: i64,
    /// Requests that failed.
    pub failed: i64,
    /// Mean latency of the successful requests over all targets, in milliseconds.
    pub mean_ms: Option<f64>,
    /// The most frequent error class of the failed requests, and how many had it.
    pub top_error: Option<(String, i64)>,
}

/// Adds up the targets of a report.
pub fn totals(report: &Report) -> Totals {
    // (requests, successes, mean ms, errors by class) per target, whatever the kind.
    let mut rows: Vec<(i64, i64, f64, &std::collections::BTreeMap<String, i64>)> = Vec::new();
    if let Some(r) = &report.task_net_reach {
        rows.extend(r.round_task_detail.iter().map(|d| {
            let m = &d.request_target_metrics.requests;
            (
                m.request_counts,
                m.success_counts,
                f64::from(m.latencies.mean),
                &m.errors,
            )
        }));
    }
    if let Some(r) = &report.task_app_http_healthy {
        rows.extend(r.round_task_detail.iter().map(|d| {
            let m = &d.request_target_metrics.requests;
            (
                m.request_counts,
                m.success_counts,
                f64::from(m.latencies.mean),
                &m.errors,
            )
        }));
    }
    if let Some(r) = &report.task_net_dns {
        rows.extend(r.round_task_detail.iter().map(|d| {
            let m = &d.request_target_metrics.requests;
            (
                m.request_counts,
                m.success_counts,
                f64::from(m.latencies.mean),
                &m.errors,
            )
        }));
    }
    let requests = rows.iter().map(|r| r.0).sum();
    let successes: i64 = rows.iter().map(|r| r.1).sum();
    let weighted: f64 = rows.iter().map(|r| r.1 as f64 * r.2).sum();
    let mut classes: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
    for (class, n) in rows.iter().flat_map(|r| r.3.iter()) {
        *classes.entry(class).or_default() += n;
    }
    // The most frequent; of equals, the first by name (stable across runs).
    let top_error = classes
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .fold(None::<(&str, i64)>, |best, (class, n)| match best {
            Some((_, m)) if m >= n => best,
            _ => Some((class, n)),
        })
        .map(|(class, n)| (class.to_string(), n));
    Totals {
        targets: rows.len(),
        requests,
        failed: requests - successes,
        mean_ms: (successes > 0).then(|| weighted / successes as f64),
        top_error,
    }
}

fn rounds(expected: i64) -> String {
    if expected < 0 {
        "∞".to_string()
    } else {
        expected.to_string()
    }
}

/// `NetReach "task": round 1/3 started (4 targets, 10 requests/s each for 10s)`.
pub fn started(
    kind: TaskKind,
    name: &str,
    round: i64,
    expected: i64,
    targets: usize,
    qps: f64,
    seconds: u64,
) -> String {
    format!(
        "{kind} {name:?}: round {round}/{} started ({}, {qps} requests/s each for {seconds}s)",
        rounds(expected),
        count(targets, "target")
    )
}

/// `NetReach "task": round 1/3 succeed: 4 targets, 400 requests, 0 failed, mean 0.412 ms`, or
/// `… fail (reason): …`.
pub fn ended(
    kind: TaskKind,
    name: &str,
    record: &StatusHistoryRecord,
    expected: i64,
    report: Option<&Report>,
) -> String {
    let result = match record.status {
        kdoctor_api::task::RoundStatus::Succeed => "succeed",
        _ => "fail",
    };
    let mut line = format!(
        "{kind} {name:?}: round {}/{} {result}",
        record.round_number,
        rounds(expected)
    );
    // The agent's own reason says more than the round's ("some agents failed").
    let reason = report
        .and_then(|r| r.failed_reason.clone())
        .or_else(|| record.failure_reason.clone());
    if let Some(reason) = reason.filter(|_| result == "fail") {
        line.push_str(&format!(" ({reason})"));
    }
    if let Some(report) = report.filter(|r| r.round_number == record.round_number) {
        let t = totals(report);
        line.push_str(&format!(
            ": {}, {}, {} failed",
            count(t.targets, "target"),
            count(t.requests, "request"),
            t.failed
        ));
        if let Some((class, n)) = &t.top_error {
            line.push_str(&format!(" ({n} {class})"));
        }
        if let Some(mean) = t.mean_ms {
            line.push_str(&format!(", mean {mean:.3} ms"));
        }
    }
    line
}

/// `NetReach "task": next round 2 at 12:05:00 UTC (in 4m58s)`.
pub fn planned(kind: TaskKind, name: &str, round: i64, start: Timestamp, now: Timestamp) -> String {
    let wait = start.duration_since(now).max(jiff::SignedDuration::ZERO);
    format!(
        "{kind} {name:?}: round {round} starts at {} UTC (in {})",
        start.strftime("%H:%M:%S"),
        kdoctor_apiserver::kube::table::human_duration(wait)
    )
}

/// `NetReach "task": finished, 3 rounds done, last round succeed`.
pub fn finished(kind: TaskKind, name: &str, done: i64, last: Option<&str>) -> String {
    format!(
        "{kind} {name:?}: finished, {} done, last round {}",
        count(done, "round"),
        last.unwrap_or("none")
    )
}

/// The line that says `event` on the terminal.
pub fn line(event: &Event) -> String {
    match event {
        Event::RoundStarted {
            kind,
            name,
            round,
            expected,
            targets,
            qps,
            seconds,
        } => started(*kind, name, *round, *expected, *targets, *qps, *seconds),
        Event::RoundEnded {
            kind,
            name,
            record,
            expected,
            report,
        } => ended(*kind, name, record, *expected, report.as_deref()),
        Event::RoundPlanned {
            kind,
            name,
            round,
            start,
            now,
        } => planned(*kind, name, *round, *start, *now),
        Event::TaskFinished {
            kind,
            name,
            done,
            last,
        } => finished(*kind, name, *done, *last),
        Event::TaskDeleted { kind, name } => format!("{kind} {name:?}: deleted; its reports stay"),
        Event::CannotRun { kind, name, why } => format!("{kind} {name:?}: cannot run: {why}"),
        Event::Stopped { kind, name, why } => format!("{kind} {name:?}: stopped: {why}"),
        Event::DidNotStop { kind, name } => format!("{kind} {name:?}: did not stop in time"),
        Event::LoopFailed(why) => format!("a task loop failed: {why}"),
        Event::AllFinished => "kdoctor local: every task finished; serving the reports until \
                               Ctrl-C (kubectl apply -f adds tasks)"
            .to_string(),
        Event::Stopping => "kdoctor local: stopping".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kdoctor_api::task::RoundStatus;

    use super::*;

    fn report() -> Report {
        Report {
            round_number: 2,
            round_result: "fail".into(),
            node_name: "n".into(),
            pod_name: "p".into(),
            failed_reason: None,
            round_start_time_stamp: Time(Timestamp::UNIX_EPOCH),
            round_end_time_stamp: Time(Timestamp::UNIX_EPOCH),
            round_duration: "2s".into(),
            task_uid: None,
            task_net_reach: None,
            task_app_http_healthy: None,
            task_net_dns: None,
        }
    }

    #[test]
    fn lines_say_round_result_and_counts() {
        let now: Timestamp = "2025-01-01T12:00:00Z".parse().unwrap();
        assert_eq!(
            started(TaskKind::NetReach, "t", 1, -1, 4, 10.0, 2),
            "NetReach \"t\": round 1/∞ started (4 targets, 10 requests/s each for 2s)"
        );
        let record = StatusHistoryRecord {
            status: RoundStatus::Fail,
            failure_reason: Some("some agents failed".into()),
            round_number: 2,
            start_time_stamp: Time(now),
            end_time_stamp: None,
            duration: None,
            dead_line_time_stamp: Time(now),
            expected_actor_number: None,
            failed_agent_node_list: vec![],
            succeed_agent_node_list: vec![],
            not_report_agent_node_list: vec![],
        };
        let mut failed = report();
        failed.failed_reason = Some("test x: timeout".into());
        assert_eq!(
            ended(TaskKind::Netdns, "d", &record, 3, Some(&failed)),
            "Netdns \"d\": round 2/3 fail (test x: timeout): 0 targets, 0 requests, 0 failed"
        );
        assert_eq!(
            ended(TaskKind::Netdns, "d", &record, 3, None),
            "Netdns \"d\": round 2/3 fail (some agents failed)"
        );
        assert_eq!(
            planned(
                TaskKind::AppHttpHealthy,
                "a",
                2,
                "2025-01-01T12:05:00Z".parse().unwrap(),
                now
            ),
            "AppHttpHealthy \"a\": round 2 starts at 12:05:00 UTC (in 5m)"
        );
        assert_eq!(
            finished(TaskKind::NetReach, "t", 3, Some("succeed")),
            "NetReach \"t\": finished, 3 rounds done, last round succeed"
        );
        assert_eq!(
            finished(TaskKind::NetReach, "t", 1, Some("fail")),
            "NetReach \"t\": finished, 1 round done, last round fail"
        );
    }

    #[tokio::test]
    async fn totals_add_up_every_target_of_a_real_round() {
        use std::net::{IpAddr, Ipv4Addr};

        use kdoctor_agent::config::AgentArgs;

        use kdoctor_local::plan::{StandIns, local_plan, loopback_carrier};

        let agent = kdoctor_agent::agent::start(&AgentArgs::ephemeral(vec![IpAddr::V4(
            Ipv4Addr::LOCALHOST,
        )]))
        .await
        .unwrap();
        let task = kdoctor_api::document::parse_tasks(
            "apiVersion: kdoctor.io/v1beta1\nkind: NetReach\nmetadata: {name: nr}\nspec:\n  \
             target: {endpoint: true, clusterIP: true, nodePort: false, \
             loadBalancer: false, ingress: false, ipv4: true}\n  \
             request: {qps: 10, durationInSecond: 1, perRequestTimeoutInMS: 1000}\n",
        )
        .remove(0)
        .task
        .unwrap();
        let stand_ins = StandIns {
            local: None,
            carrier: Some(loopback_carrier(
                "p",
                agent.http[0].port(),
                agent.udp_echo[0].port(),
                false,
            )),
            resolvers: None,
        };
        let plan = local_plan(
            &task,
            &kdoctor_api::config::Config::default(),
            "n",
            "p",
            &stand_ins,
        )
        .unwrap();
        let report = kdoctor_agent::round::execute::execute(plan, None).await;
        let t = totals(&report);
        assert_eq!((t.targets, t.requests, t.failed), (2, 20, 0), "{report:?}");
        assert!(t.mean_ms.is_some_and(|m| m > 0.0));
        assert_eq!(totals(&self::report()), Totals::default());
    }

    /// Issue 19: a failed round's line names the error most of its failed requests had.
    #[test]
    fn a_failed_round_names_its_top_error_class() {
        let mut report = kdoctor_api::fixtures::report_of(TaskKind::AppHttpHealthy, "n", 1, 2, 7);
        let details = &mut report
            .task_app_http_healthy
            .as_mut()
            .expect("an AppHttpHealthy report")
            .round_task_detail;
        let classes = [
            [("dns: failed to lookup address", 6_i64), ("timeout", 3)],
            [
                ("dns: failed to lookup address", 2),
                ("connection refused", 1),
            ],
        ];
        for (detail, errors) in details.iter_mut().zip(classes) {
            let m = &mut detail.request_target_metrics.requests;
            m.errors = errors.iter().map(|(c, n)| (c.to_string(), *n)).collect();
            m.success_counts = m.request_counts - errors.iter().map(|(_, n)| n).sum::<i64>();
        }
        let t = totals(&report);
        assert_eq!(
            t.top_error,
            Some(("dns: failed to lookup address".to_string(), 8))
        );
        let record = StatusHistoryRecord {
            status: RoundStatus::Fail,
            failure_reason: None,
            round_number: 1,
            start_time_stamp: Time(Timestamp::UNIX_EPOCH),
            end_time_stamp: None,
            duration: None,
            dead_line_time_stamp: Time(Timestamp::UNIX_EPOCH),
            expected_actor_number: None,
            failed_agent_node_list: vec![],
            succeed_agent_node_list: vec![],
            not_report_agent_node_list: vec![],
        };
        let line = ended(TaskKind::AppHttpHealthy, "app", &record, 1, Some(&report));
        assert!(
            line.contains(&format!(
                "{} failed (8 dns: failed to lookup address)",
                t.failed
            )),
            "{line}"
        );
    }
}
