//! Consecutive results per node, read off a task's round history (newest first): how many
//! finished rounds in a row each node failed (failed or did not report) or succeeded. Pure; the
//! history survives controller restarts, so streaks need no state of their own.

use std::collections::BTreeMap;

use kdoctor_api::task::StatusHistoryRecord;

/// A node's current run of equal results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streak {
    /// Finished rounds in a row the node failed or did not report (0 when its last succeeded).
    pub failures: u32,
    /// Finished rounds in a row the node succeeded (0 when its last failed).
    pub successes: u32,
}

/// The streak of every node that took part in a finished round of `history` (newest first).
/// A round a node was not expected in does not break its streak.
pub fn streaks(history: &[StatusHistoryRecord]) -> BTreeMap<String, Streak> {
    let mut out: BTreeMap<String, Streak> = BTreeMap::new();
    let mut closed: std::collections::BTreeSet<String> = Default::default();
    for record in history.iter().filter(|r| r.status.is_finished()) {
        let failed = record
            .failed_agent_node_list
            .iter()
            .chain(&record.not_report_agent_node_list);
        for (node, ok) in failed
            .map(|n| (n, false))
            .chain(record.succeed_agent_node_list.iter().map(|n| (n, true)))
        {
            if closed.contains(node) {
                continue;
            }
            let streak = out.entry(node.clone()).or_default();
            match ok {
                true if streak.failures == 0 => streak.successes += 1,
                false if streak.successes == 0 => streak.failures += 1,
                // The run of equal results ended here.
                _ => {
                    closed.insert(node.clone());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kdoctor_api::task::RoundStatus;

    use super::*;

    fn round(
        n: i64,
        status: RoundStatus,
        ok: &[&str],
        failed: &[&str],
        silent: &[&str],
    ) -> StatusHistoryRecord {
        let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        StatusHistoryRecord {
            status,
            failure_reason: None,
            round_number: n,
            start_time_stamp: Time(jiff::Timestamp::from_second(1_800_000_000).unwrap()),
            end_time_stamp: None,
            duration: None,
            dead_line_time_stamp: Time(jiff::Timestamp::from_second(1_800_000_060).unwrap()),
            expected_actor_number: None,
            succeed_agent_node_list: list(ok),
            failed_agent_node_list: list(failed),
            not_report_agent_node_list: list(silent),
        }
    }

    #[test]
    fn runs_of_equal_results_newest_first() {
        use RoundStatus::*;
        let history = vec![
            round(5, Ongoing, &[], &[], &["a", "b", "c"]),
            round(4, Fail, &["b"], &["a"], &["c"]),
            round(3, Fail, &["b"], &[], &["a"]),
            round(2, Succeed, &["a", "b", "c"], &[], &[]),
            round(1, Fail, &["b"], &["a", "c"], &[]),
        ];
        let s = streaks(&history);
        assert_eq!(
            s["a"],
            Streak {
                failures: 2,
                successes: 0
            },
            "failed, silent, then ok"
        );
        assert_eq!(
            s["b"],
            Streak {
                failures: 0,
                successes: 4
            }
        );
        assert_eq!(
            s["c"],
            Streak {
                failures: 1,
                successes: 0
            },
            "round 3 did not expect c"
        );
        // Alternating results never build a streak beyond one.
        let flapping = vec![
            round(4, Fail, &[], &["a"], &[]),
            round(3, Succeed, &["a"], &[], &[]),
            round(2, Fail, &[], &["a"], &[]),
            round(1, Succeed, &["a"], &[], &[]),
        ];
        assert_eq!(
            streaks(&flapping)["a"],
            Streak {
                failures: 1,
                successes: 0
            }
        );
        assert!(streaks(&[]).is_empty());
    }
}
