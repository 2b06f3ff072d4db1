//! The report API's contract: `GET /v1/reports` lists [`Entry`]s (held, with a [`RoundWait`],
//! until the agent has spooled a round's report), `GET /v1/reports/{name}`
//! returns a report's JSON, `POST /v1/reports/{name}/ack` lets the agent drop it, and
//! `GET /v1/identity` returns the agent's [`AgentIdentity`]: its pod-bound ServiceAccount token
//! for [`TOKEN_AUDIENCE`], which the harvester has the API server review to know it talks to
//! the pod it meant to reach. Only a client certificate named [`HARVESTER_NAME`] and signed by
//! the install's CA is served.

use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The common name of the only client certificate the report API serves: the controller's
/// harvester. Other certificates of the install's CA (any that it issues later, or one leaked
/// from elsewhere) may not read or drop reports.
pub const HARVESTER_NAME: &str = "kdoctor-controller";

/// The audience of the agents' identity tokens: a token for it is good for nothing else (the
/// API server refuses it as a credential), and nobody else's token is good for it.
pub const TOKEN_AUDIENCE: &str = "kdoctor-report-api";

/// Where the identity token volume (a projected ServiceAccount token) is mounted in agents.
pub const TOKEN_DIR: &str = "/var/run/secrets/kdoctor.io/report-api";

/// The token's file in [`TOKEN_DIR`].
pub const TOKEN_FILE: &str = "token";

/// Where agents find their identity token.
pub const DEFAULT_TOKEN_PATH: &str = "/var/run/secrets/kdoctor.io/report-api/token";

/// How long a token the kubelet issues for [`TOKEN_AUDIENCE`] lives (it renews it at 80%).
pub const TOKEN_SECONDS: i64 = 3600;

/// The largest identity token an agent sends or a harvester reads.
pub const MAX_TOKEN_BYTES: usize = 16 << 10;

/// `GET /v1/identity`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentIdentity {
    /// The agent pod's ServiceAccount token for [`TOKEN_AUDIENCE`], bound to the pod.
    pub token: String,
}

/// One spooled report as listed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// File name (the report's id in the report API).
    pub name: String,
    /// Task kind.
    pub kind: String,
    /// Task name.
    pub task: String,
    /// Round number.
    pub round: u64,
    /// Node.
    pub node: String,
    /// When it is removed if never acknowledged.
    pub expiry: Timestamp,
    /// Size in bytes.
    pub size: u64,
    /// When it was acknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged: Option<Timestamp>,
}

/// The longest an agent holds a list for a [`RoundWait`], whatever the harvester asks: a held
/// list keeps a connection and a task on the agent.
pub const MAX_LIST_WAIT: Duration = Duration::from_secs(30);

/// `GET /v1/reports?kind=…&task=…&round=…&waitMs=…`: the list is answered as soon as the agent
/// holds an unacknowledged report of task `kind`/`task` for round `round` or a later one, or
/// after `waitMs` (at most [`MAX_LIST_WAIT`]) with whatever it holds then. The harvester asks
/// so when a round's probing may just have ended: each agent answers the moment its report is
/// written, instead of being asked again a poll later. An agent that does not know the
/// parameters answers at once, as to a plain list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundWait {
    /// Task kind.
    pub kind: String,
    /// Task name.
    pub task: String,
    /// Round number.
    pub round: u64,
    /// How long the agent may hold the list.
    pub wait: Duration,
}

impl RoundWait {
    /// The query string (without `?`); task names are DNS names, kinds are words, so nothing
    /// needs escaping.
    pub fn query(&self) -> String {
        format!(
            "kind={}&task={}&round={}&waitMs={}",
            self.kind,
            self.task,
            self.round,
            self.wait.as_millis()
        )
    }

    /// Reads the query's parameters: `Ok(None)` without any, an error naming what is missing or
    /// malformed when only some are there.
    pub fn from_query(query: &[(String, String)]) -> Result<Option<RoundWait>, String> {
        let get = |key: &str| {
            query
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let keys = ["kind", "task", "round", "waitMs"];
        let given: Vec<&str> = keys.iter().copied().filter(|k| get(k).is_some()).collect();
        if given.is_empty() {
            return Ok(None);
        }
        if given.len() < keys.len() {
            return Err(format!(
                "kind, task, round and waitMs go together; given only {}",
                given.join(", ")
            ));
        }
        let number = |key: &str| -> Result<u64, String> {
            let text = get(key).unwrap_or_default();
            text.parse()
                .map_err(|_| format!("{key}: {text:?} is not a whole number"))
        };
        Ok(Some(RoundWait {
            kind: get("kind").unwrap_or_default().to_string(),
            task: get("task").unwrap_or_default().to_string(),
            round: number("round")?,
            wait: Duration::from_millis(number("waitMs")?).min(MAX_LIST_WAIT),
        }))
    }

    /// Whether `entries` hold what is waited for.
    pub fn met_by(&self, entries: &[Entry]) -> bool {
        entries.iter().any(|e| {
            e.acknowledged.is_none()
                && e.kind == self.kind
                && e.task == self.task
                && e.round >= self.round
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        text.split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_string(), v.to_string())
            })
            .collect()
    }

    fn entry(task: &str, round: u64, acknowledged: bool) -> Entry {
        Entry {
            name: format!("NetReach_{task}_round{round}_node-1_2026-01-01T00:00:00Z"),
            kind: "NetReach".to_string(),
            task: task.to_string(),
            round,
            node: "node-1".to_string(),
            expiry: Timestamp::UNIX_EPOCH,
            size: 1,
            acknowledged: acknowledged.then_some(Timestamp::UNIX_EPOCH),
        }
    }

    #[test]
    fn a_round_wait_goes_through_its_query_and_is_capped() {
        let wait = RoundWait {
            kind: "NetReach".to_string(),
            task: "reach".to_string(),
            round: 3,
            wait: Duration::from_millis(2500),
        };
        assert_eq!(
            RoundWait::from_query(&pairs(&wait.query())),
            Ok(Some(wait.clone()))
        );
        let long = RoundWait {
            wait: Duration::from_secs(3600),
            ..wait
        };
        assert_eq!(
            RoundWait::from_query(&pairs(&long.query())).map(|w| w.map(|w| w.wait)),
            Ok(Some(MAX_LIST_WAIT))
        );
        assert_eq!(RoundWait::from_query(&[]), Ok(None));
    }

    #[test]
    fn a_partial_or_malformed_round_wait_is_refused_with_what_is_wrong() {
        let partial = RoundWait::from_query(&pairs("kind=NetReach&round=2")).unwrap_err();
        assert!(partial.contains("given only kind, round"), "{partial}");
        let bad =
            RoundWait::from_query(&pairs("kind=NetReach&task=a&round=x&waitMs=5")).unwrap_err();
        assert!(bad.contains("round: \"x\""), "{bad}");
    }

    #[test]
    fn a_round_wait_is_met_by_an_unacknowledged_report_of_its_round_or_a_later_one() {
        let wait = RoundWait {
            kind: "NetReach".to_string(),
            task: "reach".to_string(),
            round: 3,
            wait: Duration::ZERO,
        };
        assert!(!wait.met_by(&[entry("reach", 2, false), entry("other", 3, false)]));
        assert!(!wait.met_by(&[entry("reach", 3, true)]));
        assert!(wait.met_by(&[entry("reach", 3, false)]));
        assert!(wait.met_by(&[entry("reach", 4, false)]));
    }
}
