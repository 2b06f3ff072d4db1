//! The report API's contract: `GET /v1/reports` lists [`Entry`]s, `GET /v1/reports/{name}`
//! returns a report's JSON, `POST /v1/reports/{name}/ack` lets the agent drop it, and
//! `GET /v1/identity` returns the agent's [`AgentIdentity`]: its pod-bound ServiceAccount token
//! for [`TOKEN_AUDIENCE`], which the harvester has the API server review to know it talks to
//! the pod it meant to reach. Only a client certificate named [`HARVESTER_NAME`] and signed by
//! the install's CA is served.

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
