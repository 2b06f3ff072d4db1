//! Per-task series, so that alerts can name the task: the last round's result and duration, the
//! nodes that failed it, rounds by result. One series set per live task; a deleted task's series
//! are removed, so cardinality follows the number of tasks, never the number of rounds or nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use kdoctor_api::task::TaskKind;
use kdoctor_store::{RoundResult, RoundSummary};
use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use crate::streaks::Streak;

/// Metrics labelled by task kind and name.
#[derive(Clone)]
pub struct TaskMetrics {
    /// 1 when the task's last round succeeded, 0 when it failed.
    pub last_result: IntGaugeVec,
    /// Nodes that failed or did not report in the task's last round.
    pub failing_nodes: IntGaugeVec,
    /// Duration of the task's last round (planned start to finalisation), seconds.
    pub last_duration: GaugeVec,
    /// When the task's last round was finalised, unix seconds.
    pub last_finished: GaugeVec,
    /// Rounds finalised, by task and result.
    pub rounds: IntCounterVec,
    /// Consecutive failed rounds of each node currently failing a task (absent once it
    /// succeeds again, so the series count is bounded by failing nodes).
    pub node_failures: IntGaugeVec,
    failing: Arc<Mutex<FailingNodes>>,
}

/// The nodes with a failure series, per task.
type FailingNodes = BTreeMap<(TaskKind, String), BTreeSet<String>>;

const LABELS: [&str; 2] = ["kind", "task"];

impl TaskMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn new(registry: &Registry) -> TaskMetrics {
        let int_gauge = |name: &str, help: &str| {
            IntGaugeVec::new(Opts::new(name, help), &LABELS).expect("valid metric")
        };
        let gauge = |name: &str, help: &str| {
            GaugeVec::new(Opts::new(name, help), &LABELS).expect("valid metric")
        };
        let metrics = TaskMetrics {
            last_result: int_gauge(
                "kdoctor_task_last_round_success",
                "1 when the task's last finished round succeeded, 0 when it failed.",
            ),
            failing_nodes: int_gauge(
                "kdoctor_task_last_round_failing_nodes",
                "Nodes that failed or did not report in the task's last finished round.",
            ),
            last_duration: gauge(
                "kdoctor_task_last_round_duration_seconds",
                "From the task's last round's planned start to its finalisation.",
            ),
            last_finished: gauge(
                "kdoctor_task_last_round_timestamp_seconds",
                "When the task's last round was finalised (unix seconds).",
            ),
            rounds: IntCounterVec::new(
                Opts::new(
                    "kdoctor_task_rounds_total",
                    "Rounds finalised, by task and result (succeed, fail).",
                ),
                &["kind", "task", "result"],
            )
            .expect("valid metric"),
            node_failures: IntGaugeVec::new(
                Opts::new(
                    "kdoctor_task_node_consecutive_failures",
                    "Finished rounds in a row a node failed or did not report, for nodes failing now.",
                ),
                &["kind", "task", "node"],
            )
            .expect("valid metric"),
            failing: Arc::default(),
        };
        for collector in [
            Box::new(metrics.last_result.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(metrics.failing_nodes.clone()),
            Box::new(metrics.last_duration.clone()),
            Box::new(metrics.last_finished.clone()),
            Box::new(metrics.rounds.clone()),
            Box::new(metrics.node_failures.clone()),
        ] {
            let _ = registry.register(collector);
        }
        metrics
    }

    /// Records a finalised round of `kind`/`task`.
    pub fn round_finished(&self, kind: TaskKind, task: &str, summary: &RoundSummary) {
        let labels = [kind.as_str(), task];
        let succeeded = summary.result == RoundResult::Succeed;
        self.last_result
            .with_label_values(&labels)
            .set(i64::from(succeeded));
        self.failing_nodes
            .with_label_values(&labels)
            .set(i64::from(summary.failed_nodes) + summary.not_reported.len() as i64);
        if let Some(end) = summary.end {
            let seconds = end.duration_since(summary.start).as_secs_f64();
            self.last_duration.with_label_values(&labels).set(seconds);
            self.last_finished
                .with_label_values(&labels)
                .set(end.as_second() as f64);
        }
        self.rounds
            .with_label_values(&[kind.as_str(), task, summary.result.as_str()])
            .inc();
    }

    /// Sets the failing nodes' streaks of `kind`/`task` and removes nodes no longer failing.
    pub fn node_streaks(&self, kind: TaskKind, task: &str, streaks: &BTreeMap<String, Streak>) {
        let now: BTreeSet<String> = streaks
            .iter()
            .filter(|(_, s)| s.failures > 0)
            .map(|(node, _)| node.clone())
            .collect();
        let Ok(mut failing) = self.failing.lock() else {
            return;
        };
        let before = failing
            .insert((kind, task.to_string()), now.clone())
            .unwrap_or_default();
        for node in before.difference(&now) {
            let _ = self
                .node_failures
                .remove_label_values(&[kind.as_str(), task, node]);
        }
        for node in &now {
            self.node_failures
                .with_label_values(&[kind.as_str(), task, node])
                .set(i64::from(streaks[node].failures));
        }
    }

    /// Removes every series of a deleted task.
    pub fn forget(&self, kind: TaskKind, task: &str) {
        self.node_streaks(kind, task, &BTreeMap::new());
        if let Ok(mut failing) = self.failing.lock() {
            failing.remove(&(kind, task.to_string()));
        }
        let labels = [kind.as_str(), task];
        let _ = self.last_result.remove_label_values(&labels);
        let _ = self.failing_nodes.remove_label_values(&labels);
        let _ = self.last_duration.remove_label_values(&labels);
        let _ = self.last_finished.remove_label_values(&labels);
        for result in [RoundResult::Succeed, RoundResult::Fail] {
            let _ = self
                .rounds
                .remove_label_values(&[kind.as_str(), task, result.as_str()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;

    fn summary(round: u64, result: RoundResult, failed: u32, silent: &[&str]) -> RoundSummary {
        RoundSummary {
            round,
            result,
            start: Timestamp::from_second(1_800_000_000).unwrap(),
            end: Some(Timestamp::from_second(1_800_000_042).unwrap()),
            expected_nodes: 5,
            succeeded_nodes: 5 - failed - silent.len() as u32,
            failed_nodes: failed,
            not_reported: silent.iter().map(|s| s.to_string()).collect(),
            failure_reason: None,
        }
    }

    fn exposition(registry: &Registry) -> String {
        let mut out = Vec::new();
        prometheus::Encoder::encode(
            &prometheus::TextEncoder::new(),
            &registry.gather(),
            &mut out,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_last_round_per_task_and_removal_on_delete() {
        let registry = Registry::new();
        let m = TaskMetrics::new(&registry);
        m.round_finished(
            TaskKind::NetReach,
            "mesh",
            &summary(1, RoundResult::Succeed, 0, &[]),
        );
        m.round_finished(
            TaskKind::NetReach,
            "mesh",
            &summary(2, RoundResult::Fail, 1, &["n4"]),
        );
        m.round_finished(
            TaskKind::Netdns,
            "dns",
            &summary(1, RoundResult::Succeed, 0, &[]),
        );
        let text = exposition(&registry);
        for line in [
            r#"kdoctor_task_last_round_success{kind="NetReach",task="mesh"} 0"#,
            r#"kdoctor_task_last_round_success{kind="Netdns",task="dns"} 1"#,
            r#"kdoctor_task_last_round_failing_nodes{kind="NetReach",task="mesh"} 2"#,
            r#"kdoctor_task_last_round_duration_seconds{kind="NetReach",task="mesh"} 42"#,
            r#"kdoctor_task_rounds_total{kind="NetReach",result="fail",task="mesh"} 1"#,
            r#"kdoctor_task_rounds_total{kind="NetReach",result="succeed",task="mesh"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        let streak = |failures, successes| Streak {
            failures,
            successes,
        };
        let mut streaks = BTreeMap::from([
            ("n1".to_string(), streak(0, 3)),
            ("n4".to_string(), streak(2, 0)),
            ("n5".to_string(), streak(1, 0)),
        ]);
        m.node_streaks(TaskKind::NetReach, "mesh", &streaks);
        streaks.insert("n5".to_string(), streak(0, 1));
        m.node_streaks(TaskKind::NetReach, "mesh", &streaks);
        let text = exposition(&registry);
        assert!(text.contains(
            r#"kdoctor_task_node_consecutive_failures{kind="NetReach",node="n4",task="mesh"} 2"#
        ));
        assert!(!text.contains(r#"node="n5""#), "n5 recovered:\n{text}");
        assert!(!text.contains(r#"node="n1""#), "n1 never failed");
        m.forget(TaskKind::NetReach, "mesh");
        let text = exposition(&registry);
        assert!(!text.contains(r#"task="mesh""#), "{text}");
        assert!(text.contains(r#"task="dns""#));
    }
}
