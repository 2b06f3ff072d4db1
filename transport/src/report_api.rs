//! The report API's contract: `GET /v1/reports` lists [`Entry`]s, `GET /v1/reports/{name}`
//! returns a report's JSON, `POST /v1/reports/{name}/ack` lets the agent drop it. Only a client
//! certificate named [`HARVESTER_NAME`] and signed by the install's CA is served.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The common name of the only client certificate the report API serves: the controller's
/// harvester. Other certificates of the install's CA (any that it issues later, or one leaked
/// from elsewhere) may not read or drop reports.
pub const HARVESTER_NAME: &str = "kdoctor-controller";

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
