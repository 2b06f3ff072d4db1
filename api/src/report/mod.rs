//! `system.kdoctor.io/v1beta1` `KdoctorReport` and the agent round report, in the shape of
//! upstream v0.2.2 (lowerCamel keys), so that existing scripts keep working.
//!
//! Additions are optional fields that upstream readers ignore: serialized latency histograms
//! (so rounds and nodes can be merged exactly instead of averaging percentiles).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::task::{AppHttpHealthySpec, NetReachSpec, NetdnsSpec, TaskKind};

/// API group of the report.
pub const GROUP: &str = "system.kdoctor.io";
/// API version of the report.
pub const VERSION: &str = "v1beta1";
/// `apiVersion` of the report.
pub const API_VERSION: &str = "system.kdoctor.io/v1beta1";
/// Kind of the report.
pub const KIND: &str = "KdoctorReport";
/// Kind of a report list.
pub const LIST_KIND: &str = "KdoctorReportList";
/// Resource plural.
pub const PLURAL: &str = "kdoctorreports";
/// Resource singular.
pub const SINGULAR: &str = "kdoctorreport";

/// `status.status` of a report whose task has run all its rounds.
pub const STATUS_FINISHED: &str = "Finished";
/// `status.status` of a report whose task has rounds to go.
pub const STATUS_NOT_FINISHED: &str = "NotFinished";
/// `reportType` of upstream's legacy agent report (kept for scripts that filter on it).
pub const REPORT_TYPE_AGENT: &str = "agent test report";

/// Name of the report of a task's latest round: `<lowercase kind>-<task name>` (as v0.2.2).
pub fn report_name(kind: TaskKind, task: &str) -> String {
    format!("{}-{}", kind.lowercase(), task)
}

/// The aggregated report of a task.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KdoctorReport {
    /// `system.kdoctor.io/v1beta1`.
    pub api_version: String,
    /// `KdoctorReport`.
    pub kind: String,
    /// Name `<lowercase kind>-<task>`, labels, creation time of the task.
    pub metadata: ObjectMeta,
    /// The task the report is about.
    pub task: TaskInfo,
    /// Round counters.
    pub status: ReportStatus,
    /// The agents' reports.
    pub report: Reports,
}

impl KdoctorReport {
    /// A report object with `apiVersion` and `kind` set.
    pub fn new(
        metadata: ObjectMeta,
        task: TaskInfo,
        status: ReportStatus,
        report: Reports,
    ) -> Self {
        KdoctorReport {
            api_version: API_VERSION.to_string(),
            kind: KIND.to_string(),
            metadata,
            task,
            status,
            report,
        }
    }
}

impl k8s_openapi::Resource for KdoctorReport {
    const API_VERSION: &'static str = API_VERSION;
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = KIND;
    const VERSION: &'static str = VERSION;
    const URL_PATH_SEGMENT: &'static str = PLURAL;
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::ListableResource for KdoctorReport {
    const LIST_KIND: &'static str = LIST_KIND;
}

impl k8s_openapi::Metadata for KdoctorReport {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// `task`: which task, and its spec.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TaskInfo {
    /// Task name.
    pub name: String,
    /// Task kind.
    pub kind: String,
    /// Task spec, under the key of its kind.
    pub spec: TaskSpec,
}

/// `task.spec`: exactly one key is set.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    /// Spec of a NetReach task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_reach: Option<NetReachSpec>,
    /// Spec of an AppHttpHealthy task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_http_healthy: Option<AppHttpHealthySpec>,
    /// Spec of a Netdns task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_dns: Option<NetdnsSpec>,
}

/// `status` of a report.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReportStatus {
    /// Rounds planned (-1: forever).
    pub total_round_number: i64,
    /// Rounds finished.
    pub round_finished_number: i64,
    /// `Finished` or `NotFinished`.
    pub status: String,
    /// Round the reports are from (0 when there are none).
    pub round_number: i64,
    /// Result of that round: `succeed`, `fail` or `none` (beyond upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_result: Option<String>,
    /// Rounds still stored, each readable as `<name>.round-<N>` (beyond upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retained_rounds: Option<Vec<i64>>,
    /// `Present`, or `Deleted` once the task CR is gone (beyond upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_state: Option<String>,
    /// When the task CR was deleted (beyond upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_deleted_at: Option<Time>,
}

/// `report`: the agents' reports of one round.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Reports {
    /// One report per agent node; omitted when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_round_report: Option<Vec<Report>>,
}

/// One agent's report of one round (also the agent's spool file content).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// 1-based round number.
    pub round_number: i64,
    /// `succeed` or `fail`.
    pub round_result: String,
    /// Node of the agent.
    pub node_name: String,
    /// Agent pod.
    pub pod_name: String,
    /// Why the round failed on this node.
    #[serde(
        rename = "reasonsForFailure",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub failed_reason: Option<String>,
    /// When the agent started the round.
    pub round_start_time_stamp: Time,
    /// When the agent finished the round.
    pub round_end_time_stamp: Time,
    /// Go duration string.
    pub round_duration: String,
    /// UID of the task incarnation the round belongs to (beyond upstream): a task re-created
    /// under the same name never gets the old one's reports.
    #[serde(rename = "taskUID", default, skip_serializing_if = "Option::is_none")]
    pub task_uid: Option<String>,
    /// Result of a NetReach round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_net_reach: Option<TaskResult<NetReachTaskDetail>>,
    /// Result of an AppHttpHealthy round.
    #[serde(
        rename = "taskAppHealthy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub task_app_http_healthy: Option<TaskResult<AppHttpHealthyTaskDetail>>,
    /// Result of a Netdns round.
    #[serde(
        rename = "taskNetDns",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub task_net_dns: Option<TaskResult<NetDnsTaskDetail>>,
}

/// The per-kind result of one round on one agent (same keys for all kinds).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskResult<D> {
    /// `NetReach`, `HttpAppHealthy` or `kdoctor agent` (upstream's values).
    pub target_type: String,
    /// Number of targets probed.
    pub target_number: i64,
    /// Why the round failed.
    #[serde(
        rename = "reasonsForFailure",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub failure_reason: Option<String>,
    /// Every target met `expect`.
    pub round_succeed: bool,
    /// Resources the agent used during the round.
    pub system_resource: SystemResource,
    /// Load the agent was running when the round finished.
    pub running_load_total: TotalRunningLoad,
    /// One entry per target.
    pub round_task_detail: Vec<D>,
}

/// Resources the agent used during a round, formatted as upstream (`"26.203%"`, `"101.00MB"`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SystemResource {
    /// Highest CPU use.
    #[serde(rename = "maxCPU")]
    pub max_cpu: String,
    /// Mean CPU use.
    #[serde(rename = "meanCPU")]
    pub mean_cpu: String,
    /// Highest memory use.
    pub max_memory: String,
}

/// Sum of qps of the tasks an agent was running.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct TotalRunningLoad {
    /// AppHttpHealthy qps.
    #[serde(rename = "appHttpHealthyQPS")]
    pub app_http_healthy_qps: i64,
    /// NetReach qps.
    #[serde(rename = "netReachQPS")]
    pub net_reach_qps: i64,
    /// Netdns qps.
    #[serde(rename = "netDnsQPS")]
    pub net_dns_qps: i64,
}

/// What every per-target detail says, whatever the task kind.
pub trait TargetOutcome {
    /// The target's name, whether it met `expect`, and why not.
    fn outcome(&self) -> (&str, bool, Option<&str>);
}

macro_rules! target_outcome {
    ($($detail:ty),*) => {$(
        impl TargetOutcome for $detail {
            fn outcome(&self) -> (&str, bool, Option<&str>) {
                (&self.name, self.request_succeed, self.failure_reason.as_deref())
            }
        }
    )*};
}
target_outcome!(
    NetReachTaskDetail,
    AppHttpHealthyTaskDetail,
    NetDnsTaskDetail
);

impl Report {
    /// Every target of the report, whatever its kind: name, whether it met `expect`, why not.
    pub fn target_outcomes(&self) -> Vec<(&str, bool, Option<&str>)> {
        fn of<D: TargetOutcome>(r: &Option<TaskResult<D>>) -> Vec<(&str, bool, Option<&str>)> {
            r.iter()
                .flat_map(|r| r.round_task_detail.iter().map(TargetOutcome::outcome))
                .collect()
        }
        let mut all = of(&self.task_net_reach);
        all.extend(of(&self.task_app_http_healthy));
        all.extend(of(&self.task_net_dns));
        all
    }
}

/// What an HTTP target's detail says, the same for NetReach and AppHttpHealthy: the two
/// kinds differ only in the JSON name of the failure reason, so a prober builds this once and
/// converts it into its kind's detail.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpTargetResult {
    /// Target name.
    pub name: String,
    /// Probed URL.
    pub url: String,
    /// HTTP method.
    pub method: String,
    /// The target met `expect`.
    pub request_succeed: bool,
    /// Mean latency, milliseconds.
    pub request_mean_delay: f32,
    /// Share of successful requests.
    pub request_succeed_rate: f64,
    /// Why the target failed.
    pub failure_reason: Option<String>,
    /// Measurements.
    pub request_target_metrics: HttpMetrics,
}

macro_rules! from_http_target_result {
    ($($detail:ident),*) => {$(
        impl From<HttpTargetResult> for $detail {
            fn from(r: HttpTargetResult) -> Self {
                $detail {
                    name: r.name,
                    url: r.url,
                    method: r.method,
                    request_succeed: r.request_succeed,
                    request_mean_delay: r.request_mean_delay,
                    request_succeed_rate: r.request_succeed_rate,
                    failure_reason: r.failure_reason,
                    request_target_metrics: r.request_target_metrics,
                }
            }
        }
    )*};
}
from_http_target_result!(NetReachTaskDetail, AppHttpHealthyTaskDetail);

/// Result for one NetReach target.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetReachTaskDetail {
    /// Target name, e.g. `AgentPodV4IP_<pod>_<ip>`.
    pub name: String,
    /// Probed URL.
    pub url: String,
    /// HTTP method.
    pub method: String,
    /// The target met `expect`.
    pub request_succeed: bool,
    /// Mean latency, milliseconds.
    pub request_mean_delay: f32,
    /// Share of successful requests.
    pub request_succeed_rate: f64,
    /// Why the target failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Measurements.
    pub request_target_metrics: HttpMetrics,
}

/// Result for the AppHttpHealthy target.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AppHttpHealthyTaskDetail {
    /// Target name.
    pub name: String,
    /// Probed URL.
    pub url: String,
    /// HTTP method.
    pub method: String,
    /// The target met `expect`.
    pub request_succeed: bool,
    /// Mean latency, milliseconds.
    pub request_mean_delay: f32,
    /// Share of successful requests.
    pub request_succeed_rate: f64,
    /// Why the target failed.
    #[serde(
        rename = "reasonsForFailure",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub failure_reason: Option<String>,
    /// Measurements.
    pub request_target_metrics: HttpMetrics,
}

/// Result for one Netdns target.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetDnsTaskDetail {
    /// Target name, e.g. `typeA_<server:port>_<domain>`.
    pub name: String,
    /// Server address.
    pub request_server: String,
    /// `udp`, `tcp` or `tcp-tls`.
    pub protocol: String,
    /// The target met `expect`.
    pub request_succeed: bool,
    /// Why the target failed (`null` when it did not: upstream does not omit it).
    #[serde(rename = "reasonsForFailure", default)]
    pub failure_reason: Option<String>,
    /// Mean latency, milliseconds.
    pub request_mean_delay: f32,
    /// Share of successful queries.
    pub request_succeed_rate: f64,
    /// Measurements.
    pub request_target_metrics: DnsMetrics,
}

/// Latency percentiles in milliseconds (fractional: measured in microseconds).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct LatencyDistribution {
    /// 50th percentile.
    #[serde(rename = "p50InMs")]
    pub p50: f32,
    /// 90th percentile.
    #[serde(rename = "p90InMs")]
    pub p90: f32,
    /// 95th percentile.
    #[serde(rename = "p95InMs")]
    pub p95: f32,
    /// 99th percentile.
    #[serde(rename = "p99InMs")]
    pub p99: f32,
    /// Maximum.
    #[serde(rename = "maxInMs")]
    pub max: f32,
    /// Minimum.
    #[serde(rename = "minInMs")]
    pub min: f32,
    /// Mean.
    #[serde(rename = "meanInMs")]
    pub mean: f32,
}

/// A serialized HDR histogram, so that rounds and nodes can be merged exactly.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EncodedHistogram {
    /// Encoding of `data`, e.g. `hdr-v2-deflate-base64`.
    pub encoding: String,
    /// Unit of the recorded values, e.g. `microseconds`.
    pub unit: String,
    /// The histogram.
    pub data: String,
}

/// Measurements every target has, HTTP or DNS (upstream's leading keys, in order).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RequestMetrics {
    /// First request.
    pub request_start_time: Time,
    /// Last response.
    pub request_end_time: Time,
    /// Go duration string.
    pub request_duration: String,
    /// Requests sent.
    pub request_counts: i64,
    /// Successful requests.
    pub success_counts: i64,
    /// Requests per second achieved.
    pub tps: f64,
    /// Failed requests by error.
    pub errors: BTreeMap<String, i64>,
    /// Latency percentiles.
    pub latencies: LatencyDistribution,
    /// Some planned requests were never sent.
    pub exists_not_send_requests: bool,
}

/// Measurements of one HTTP target.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpMetrics {
    /// Counts, rate and latencies.
    #[serde(flatten)]
    pub requests: RequestMetrics,
    /// Bytes received, as `"<n> byte"`.
    pub total_data_size: String,
    /// Responses by status code (0: transport error).
    pub status_codes: BTreeMap<i64, i64>,
    /// Serialized latency histograms by name (e.g. `serviceTime`), beyond upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histograms: Option<BTreeMap<String, EncodedHistogram>>,
    /// What only a stream of datagrams shows (UDP echo entries, beyond upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datagrams: Option<DatagramMetrics>,
    /// The tries of an isolation check (`spec.isolation`, beyond upstream): the entry
    /// succeeds only when none got through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<IsolationMetrics>,
}

impl HttpMetrics {
    /// What the target's requests met, in one line — sent and succeeded, errors, status codes,
    /// latencies — for reading why a target failed (its failure reason gives only the rate).
    pub fn met(&self) -> String {
        let r = &self.requests;
        format!(
            "{} of {} requests succeeded; errors {:?}, status codes {:?}, latencies {:?}",
            r.success_counts, r.request_counts, r.errors, self.status_codes, r.latencies
        )
    }
}

/// What an isolation check saw of a peer that must not be reachable.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IsolationMetrics {
    /// The `spec.isolation` entry.
    pub check: String,
    /// What the task expects: `unreachable`.
    pub expected: String,
    /// What the tries saw: `unreachable`, `reachable`, or `not checked`.
    pub observed: String,
    /// Tries made.
    pub attempts: i64,
    /// Tries that got through.
    pub reached: i64,
    /// Tries by what they saw (`timeout`, `established`, `refused`, `port unreachable`, …).
    pub outcomes: BTreeMap<String, i64>,
}

/// Loss, order, jitter and path length of a UDP echo target's datagrams.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DatagramMetrics {
    /// Bytes of each datagram (UDP payload).
    pub payload_bytes: i64,
    /// Datagrams with no echo within the per-request timeout, in percent of those sent.
    pub loss_percent: f64,
    /// Echoes that came after their timeout (counted as lost).
    pub late: i64,
    /// Echoes of a datagram already echoed (a duplicating path).
    pub duplicates: i64,
    /// Echoes that came after the echo of a later datagram.
    pub reordered: i64,
    /// Interarrival jitter of the path to the target (RFC 3550 §6.4.1, from the target's
    /// receive times), milliseconds.
    pub jitter_ms: f64,
    /// Routers on the path to the target (64 less the TTL or hop limit the target read), the
    /// value most datagrams saw; absent when the target could not read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_hops: Option<i64>,
    /// Routers on the way back, read the same way by the prober.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_hops: Option<i64>,
    /// The largest IP packet (header included) that reached the target with don't-fragment
    /// set, bytes (`spec.target.pathMTU`); absent when not searched or nothing passed.
    #[serde(default, rename = "pathMTU", skip_serializing_if = "Option::is_none")]
    pub path_mtu: Option<i64>,
    /// Why larger packets did not pass: `interface` (the route's own MTU passed),
    /// `fragmentation-needed` (a router said so), `black-hole` (they vanished without an
    /// error), `nothing-passed`, or the error that stopped the search.
    #[serde(
        default,
        rename = "pathMTULimit",
        skip_serializing_if = "Option::is_none"
    )]
    pub path_mtu_limit: Option<String>,
}

/// Measurements of one DNS target.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DnsMetrics {
    /// Counts, rate and latencies.
    #[serde(flatten)]
    pub requests: RequestMetrics,
    /// Queried name (FQDN).
    pub domain: String,
    /// Server address.
    pub server: String,
    /// Protocol.
    pub method: String,
    /// Failed queries.
    pub failed_counts: i64,
    /// Answers by RCODE name (`NOERROR`, `NXDOMAIN`, …).
    pub reply_code: BTreeMap<String, i64>,
    /// Serialized latency histograms by name, beyond upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histograms: Option<BTreeMap<String, EncodedHistogram>>,
}

pub mod files;
pub mod legacy;
pub mod protocol;

#[cfg(test)]
mod tests {
    #[test]
    fn what_a_failed_target_s_requests_met_names_counts_errors_and_status_codes() {
        let mut report = crate::fixtures::net_reach_report("node-1", 1, 1, 1);
        let detail = &mut crate::fixtures::net_reach_details(&mut report)[0];
        let metrics = &mut detail.request_target_metrics;
        metrics.requests.request_counts = 2;
        metrics.requests.success_counts = 1;
        metrics.requests.errors = [("timeout".to_string(), 1)].into();
        metrics.status_codes = [(0, 1), (200, 1)].into();
        let met = metrics.met();
        assert!(met.starts_with("1 of 2 requests succeeded; "), "{met}");
        assert!(met.contains(r#"errors {"timeout": 1}"#), "{met}");
        assert!(met.contains("status codes {0: 1, 200: 1}"), "{met}");
    }
}
