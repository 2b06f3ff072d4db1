//! The JUnit XML of `kubectl kdoctor run --wait --junit FILE`: what a CI pipeline shows per
//! check rather than "the task failed". One `<testsuite>` per task; in it one test case per
//! finished round (the round's verdict and reason), one per source node and target of that
//! round (the agent's verdict on that target and its reason), and one per node that did not
//! report. A task still running when the wait ended is one failed case of its own.

use std::fmt::Write as _;

/// A task and what its rounds found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Suite {
    /// `NetReach`, `AppHttpHealthy`, `Netdns`.
    pub kind: String,
    /// The task's name.
    pub task: String,
    /// Finished rounds, oldest first.
    pub rounds: Vec<RoundCase>,
    /// Why the task is not finished, when the wait ended first.
    pub unfinished: Option<String>,
}

/// One finished round.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundCase {
    /// 1-based round number.
    pub number: i64,
    /// Why the round failed; None when it succeeded.
    pub failure: Option<String>,
    /// How long it took, when the status says.
    pub seconds: Option<f64>,
    /// Every source → target verdict of the round's agent reports.
    pub pairs: Vec<Pair>,
    /// Nodes whose agent did not report before the deadline.
    pub not_reported: Vec<String>,
}

/// What one source node found of one target.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pair {
    /// The source node.
    pub source: String,
    /// The target's name (`AgentPodV4IP_<pod>_<ip>`, `TCP_…`, `typeA_…`).
    pub target: String,
    /// Why the target failed; None when it met `expect`.
    pub failure: Option<String>,
}

/// A test case before it is written.
struct Case {
    class: String,
    name: String,
    seconds: Option<f64>,
    failure: Option<String>,
}

impl Suite {
    fn cases(&self) -> Vec<Case> {
        let task = format!("{}.{}", self.kind, self.task);
        let mut cases = Vec::new();
        for round in &self.rounds {
            cases.push(Case {
                class: task.clone(),
                name: format!("round {}", round.number),
                seconds: round.seconds,
                failure: round.failure.clone(),
            });
            let class = format!("{task}.round-{}", round.number);
            for pair in &round.pairs {
                cases.push(Case {
                    class: class.clone(),
                    name: format!("{} -> {}", pair.source, pair.target),
                    seconds: None,
                    failure: pair.failure.clone(),
                });
            }
            for node in &round.not_reported {
                cases.push(Case {
                    class: class.clone(),
                    name: format!("{node}: report"),
                    seconds: None,
                    failure: Some(format!(
                        "the agent on {node} did not report before the round's deadline"
                    )),
                });
            }
        }
        if let Some(why) = &self.unfinished {
            cases.push(Case {
                class: task,
                name: "finished".to_string(),
                seconds: None,
                failure: Some(why.clone()),
            });
        }
        cases
    }
}

/// The XML document.
pub fn render(suites: &[Suite]) -> String {
    let all: Vec<(&Suite, Vec<Case>)> = suites.iter().map(|s| (s, s.cases())).collect();
    let tests: usize = all.iter().map(|(_, c)| c.len()).sum();
    let failures: usize = all
        .iter()
        .map(|(_, c)| c.iter().filter(|c| c.failure.is_some()).count())
        .sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"kdoctor\" tests=\"{tests}\" failures=\"{failures}\">"
    );
    for (suite, cases) in &all {
        let failed = cases.iter().filter(|c| c.failure.is_some()).count();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failed}\">",
            escape(&format!("{} {}", suite.kind, suite.task)),
            cases.len()
        );
        for case in cases {
            let time = case
                .seconds
                .map(|s| format!(" time=\"{s:.3}\""))
                .unwrap_or_default();
            let _ = write!(
                out,
                "    <testcase classname=\"{}\" name=\"{}\"{time}",
                escape(&case.class),
                escape(&case.name)
            );
            match &case.failure {
                None => out.push_str("/>\n"),
                Some(why) => {
                    let why = escape(why);
                    let _ = writeln!(
                        out,
                        ">\n      <failure message=\"{why}\">{why}</failure>\n    </testcase>"
                    );
                }
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

/// Text as XML character data or an attribute value: the five markup characters as entities,
/// and the characters XML 1.0 cannot carry at all (most C0 controls) as U+FFFD, since a
/// failure reason may quote whatever a server answered.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suites() -> Vec<Suite> {
        vec![
            Suite {
                kind: "NetReach".into(),
                task: "mesh".into(),
                rounds: vec![
                    RoundCase {
                        number: 1,
                        failure: None,
                        seconds: Some(12.5),
                        pairs: vec![Pair {
                            source: "node-1".into(),
                            target: "AgentPodV4IP_a_10.0.0.1".into(),
                            failure: None,
                        }],
                        not_reported: vec![],
                    },
                    RoundCase {
                        number: 2,
                        failure: Some("some agents failed".into()),
                        seconds: None,
                        pairs: vec![Pair {
                            source: "node-1".into(),
                            target: "TCP_AgentPodV4IP_a_10.0.0.1".into(),
                            failure: Some(
                                "Success Rate 0 is lower than request 1 <&\"\u{1}>".into(),
                            ),
                        }],
                        not_reported: vec!["node-2".into()],
                    },
                ],
                unfinished: None,
            },
            Suite {
                kind: "Netdns".into(),
                task: "dns".into(),
                rounds: vec![],
                unfinished: Some("still running after 60 s".into()),
            },
        ]
    }

    #[test]
    fn every_round_pair_and_missing_report_is_a_case_and_failures_say_why() {
        let xml = render(&suites());
        // 2 rounds + 2 pairs + 1 missing report, and the unfinished task.
        assert!(
            xml.contains("<testsuites name=\"kdoctor\" tests=\"6\" failures=\"4\">"),
            "{xml}"
        );
        assert!(
            xml.contains("<testsuite name=\"NetReach mesh\" tests=\"5\" failures=\"3\">"),
            "{xml}"
        );
        assert!(
            xml.contains(
                "<testcase classname=\"NetReach.mesh\" name=\"round 1\" time=\"12.500\"/>"
            )
        );
        assert!(xml.contains(
            "<testcase classname=\"NetReach.mesh.round-1\" name=\"node-1 -&gt; AgentPodV4IP_a_10.0.0.1\"/>"
        ), "{xml}");
        assert!(xml.contains(
            "<failure message=\"Success Rate 0 is lower than request 1 &lt;&amp;&quot;\u{FFFD}&gt;\">"
        ), "{xml}");
        assert!(xml.contains("name=\"node-2: report\">"), "{xml}");
        assert!(xml.contains("the agent on node-2 did not report"), "{xml}");
        assert!(xml.contains(
            "<testcase classname=\"Netdns.dns\" name=\"finished\">\n      <failure message=\"still running after 60 s\">"
        ), "{xml}");
    }

    #[test]
    fn an_xml_parser_reads_every_case_and_reason_back() {
        let xml = render(&suites());
        let doc = roxmltree::Document::parse(&xml).expect("well-formed XML");
        let cases: Vec<_> = doc
            .descendants()
            .filter(|n| n.has_tag_name("testcase"))
            .collect();
        assert_eq!(cases.len(), 6);
        let failure = cases
            .iter()
            .find(|c| c.attribute("name") == Some("node-1 -> TCP_AgentPodV4IP_a_10.0.0.1"))
            .and_then(|c| c.children().find(|n| n.has_tag_name("failure")))
            .expect("the TCP pair's failure");
        assert_eq!(
            failure.attribute("message"),
            Some("Success Rate 0 is lower than request 1 <&\"\u{FFFD}>")
        );
        assert_eq!(failure.text(), failure.attribute("message"));
    }
}
