//! The summary of every report and the history of one task's rounds (pure), from the server's
//! Tables: the rows `kubectl get kdoctorreport` shows, read by column name.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

/// The rows of a `meta.k8s.io` Table: column name → cell text, and the row's object if any.
pub fn table_rows(table: &Value) -> Vec<(BTreeMap<String, String>, Value)> {
    let names: Vec<String> = table["columnDefinitions"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|d| d["name"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    table["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|row| {
                    let cells = row["cells"].as_array().cloned().unwrap_or_default();
                    let by_name = names
                        .iter()
                        .zip(cells)
                        .map(|(name, cell)| {
                            let text = match cell {
                                Value::String(s) => s,
                                other => other.to_string(),
                            };
                            (name.clone(), text)
                        })
                        .collect();
                    (by_name, row["object"].clone())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Nodes of a round: succeeded, failed, not reported (the Table's `a/b/c`).
pub fn nodes(cell: &str) -> Option<(u32, u32, u32)> {
    let mut parts = cell.split('/').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// One bar per value in 0..=1.
pub fn sparkline(values: &[f64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    values
        .iter()
        .map(|v| BARS[((v.clamp(0.0, 1.0) * 7.0).round()) as usize])
        .collect()
}

fn cell<'a>(row: &'a BTreeMap<String, String>, name: &str) -> &'a str {
    row.get(name).map_or("-", String::as_str)
}

/// Every report, failing ones first, and whether any task's last round failed.
pub fn summary(rows: &[BTreeMap<String, String>]) -> (String, bool) {
    let mut sorted: Vec<&BTreeMap<String, String>> = rows.iter().collect();
    sorted.sort_by_key(|r| {
        (
            cell(r, "Last Result") != "fail",
            cell(r, "Name").to_string(),
        )
    });
    let width = sorted
        .iter()
        .map(|r| cell(r, "Name").len())
        .max()
        .unwrap_or(0)
        .max(4);
    let mut out = format!(
        "{:<width$}  {:<8}  {:<7}  {:<20}  TASK CR\n",
        "NAME", "LAST", "ROUNDS", "NODES (ok/fail/none)"
    );
    for r in &sorted {
        let _ = writeln!(
            out,
            "{:<width$}  {:<8}  {:<7}  {:<20}  {}",
            cell(r, "Name"),
            cell(r, "Last Result"),
            cell(r, "Rounds"),
            cell(r, "Nodes"),
            cell(r, "Task CR")
        );
    }
    let failing: Vec<&str> = sorted
        .iter()
        .filter(|r| cell(r, "Last Result") == "fail")
        .map(|r| cell(r, "Name"))
        .collect();
    let succeeding = sorted
        .iter()
        .filter(|r| cell(r, "Last Result") == "succeed")
        .count();
    let _ = write!(out, "\n{} reports: {succeeding} succeeding", sorted.len());
    if failing.is_empty() {
        out.push_str(", none failing\n");
    } else {
        let _ = writeln!(out, ", {} failing ({})", failing.len(), failing.join(", "));
    }
    (out, !failing.is_empty())
}

/// One round of a task, as its Table row says.
#[derive(Clone, Debug, PartialEq)]
pub struct Round {
    /// Round number.
    pub number: u64,
    /// `succeed`, `fail` or `none`.
    pub result: String,
    /// Succeeded, failed and not reported nodes.
    pub nodes: Option<(u32, u32, u32)>,
}

/// The rounds of a task, oldest first, with a sparkline of the share of nodes that succeeded.
pub fn history(name: &str, rounds: &[Round]) -> String {
    let mut out = format!(
        "{name}: {}\n",
        crate::plural::count(rounds.len(), "retained round")
    );
    let share = |r: &Round| {
        r.nodes.map_or(0.0, |(ok, failed, silent)| {
            let all = ok + failed + silent;
            if all == 0 {
                0.0
            } else {
                f64::from(ok) / f64::from(all)
            }
        })
    };
    let shares: Vec<f64> = rounds.iter().map(share).collect();
    let _ = writeln!(out, "nodes succeeded per round: {}", sparkline(&shares));
    out.push_str("\nROUND  RESULT   NODES (ok/fail/none)\n");
    for r in rounds {
        let nodes = r
            .nodes
            .map_or("-".to_string(), |(a, b, c)| format!("{a}/{b}/{c}"));
        let _ = writeln!(out, "{:<5}  {:<7}  {nodes}", r.number, r.result);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_cells_are_read_by_column_name() {
        let table = serde_json::json!({
            "columnDefinitions": [{"name": "Name"}, {"name": "Round"}, {"name": "Nodes"}],
            "rows": [{"cells": ["netreach-a", 3, "2/1/0"], "object": {"kind": "X"}}]
        });
        let rows = table_rows(&table);
        assert_eq!(rows[0].0["Name"], "netreach-a");
        assert_eq!(rows[0].0["Round"], "3");
        assert_eq!(nodes(&rows[0].0["Nodes"]), Some((2, 1, 0)));
        assert_eq!(rows[0].1["kind"], "X");
        assert_eq!(nodes("-"), None);
    }

    #[test]
    fn the_sparkline_goes_from_the_lowest_to_the_highest_bar() {
        assert_eq!(sparkline(&[0.0, 0.5, 1.0, 2.0]), "▁▅██");
    }

    #[test]
    fn failing_reports_come_first_and_are_named() {
        let row = |name: &str, last: &str| {
            BTreeMap::from([
                ("Name".to_string(), name.to_string()),
                ("Last Result".to_string(), last.to_string()),
                ("Rounds".to_string(), "1/1".to_string()),
                ("Nodes".to_string(), "1/0/0".to_string()),
                ("Task CR".to_string(), "Present".to_string()),
            ])
        };
        let (text, failing) = summary(&[
            row("apphttphealthy-a", "succeed"),
            row("netreach-b", "fail"),
        ]);
        assert!(failing);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("netreach-b"), "{text}");
        assert!(
            text.ends_with("2 reports: 1 succeeding, 1 failing (netreach-b)\n"),
            "{text}"
        );
    }

    #[test]
    fn history_lists_rounds_under_a_sparkline() {
        let rounds = [
            Round {
                number: 1,
                result: "succeed".into(),
                nodes: Some((3, 0, 0)),
            },
            Round {
                number: 2,
                result: "fail".into(),
                nodes: Some((1, 1, 1)),
            },
        ];
        let text = history("netreach-a", &rounds);
        assert!(text.contains("nodes succeeded per round: █▃\n"), "{text}");
        assert!(text.contains("\n2      fail     1/1/1\n"), "{text}");
    }
}
