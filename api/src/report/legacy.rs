//! The report shape of upstream v0.1.0 to v0.2.1 (Go field names), read so that old report
//! files can be migrated; converted to the current shape by [`LegacyReport::into_report`].

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;

use super::{
    AppHttpHealthyTaskDetail, DnsMetrics, HttpMetrics, LatencyDistribution, NetDnsTaskDetail,
    NetReachTaskDetail, Report, RequestMetrics, SystemResource, TaskResult, TotalRunningLoad,
};

/// A legacy agent report.
#[derive(Deserialize, Clone, Debug)]
#[allow(missing_docs)]
pub struct LegacyReport {
    #[serde(rename = "RoundNumber")]
    pub round_number: i64,
    #[serde(rename = "RoundResult")]
    pub round_result: String,
    #[serde(rename = "NodeName")]
    pub node_name: String,
    #[serde(rename = "PodName", default)]
    pub pod_name: String,
    #[serde(rename = "FailedReason", default)]
    pub failed_reason: Option<String>,
    #[serde(rename = "StartTimeStamp")]
    pub start: Time,
    #[serde(rename = "EndTimeStamp")]
    pub end: Time,
    #[serde(rename = "RoundDuration", default)]
    pub round_duration: String,
    #[serde(rename = "NetReachTask", default)]
    pub net_reach: Option<LegacyTask<LegacyHttpDetail>>,
    #[serde(rename = "HttpAppHealthyTask", default)]
    pub app_http_healthy: Option<LegacyTask<LegacyHttpDetail>>,
    #[serde(rename = "netDNSTask", default)]
    pub net_dns: Option<LegacyDnsTask>,
}

/// Resources as v0.2.1 (`SystemResource`) or v0.2.0 (`MaxCPU`/`MaxMemory` in the task) wrote them.
#[derive(Deserialize, Clone, Debug, Default)]
#[allow(missing_docs)]
pub struct LegacyResources {
    #[serde(rename = "SystemResource", default)]
    pub system: Option<LegacySystemResource>,
    #[serde(rename = "MaxCPU", default)]
    pub max_cpu: Option<String>,
    #[serde(rename = "MaxMemory", default)]
    pub max_memory: Option<String>,
    #[serde(rename = "TotalRunningLoad", default)]
    pub load: Option<LegacyLoad>,
}

impl LegacyResources {
    fn system(&self) -> SystemResource {
        match &self.system {
            Some(s) => SystemResource {
                max_cpu: s.max_cpu.clone(),
                mean_cpu: s.mean_cpu.clone(),
                max_memory: s.max_memory.clone(),
            },
            None => SystemResource {
                max_cpu: self.max_cpu.clone().unwrap_or_default(),
                mean_cpu: String::new(),
                max_memory: self.max_memory.clone().unwrap_or_default(),
            },
        }
    }

    fn load(&self) -> TotalRunningLoad {
        self.load
            .as_ref()
            .map_or_else(TotalRunningLoad::default, |l| TotalRunningLoad {
                app_http_healthy_qps: l.app,
                net_reach_qps: l.net_reach,
                net_dns_qps: l.net_dns,
            })
    }
}

#[derive(Deserialize, Clone, Debug, Default)]
#[allow(missing_docs)]
pub struct LegacySystemResource {
    #[serde(rename = "MaxCPU", default)]
    pub max_cpu: String,
    #[serde(rename = "MeanCPU", default)]
    pub mean_cpu: String,
    #[serde(rename = "MaxMemory", default)]
    pub max_memory: String,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[allow(missing_docs)]
pub struct LegacyLoad {
    #[serde(rename = "AppHttpHealthyQPS", default)]
    pub app: i64,
    #[serde(rename = "NetReachQPS", default)]
    pub net_reach: i64,
    #[serde(rename = "NetDnsQPS", default)]
    pub net_dns: i64,
}

/// A legacy NetReach or AppHttpHealthy task result.
#[derive(Deserialize, Clone, Debug)]
#[allow(missing_docs)]
pub struct LegacyTask<D> {
    #[serde(rename = "TargetType")]
    pub target_type: String,
    #[serde(rename = "TargetNumber")]
    pub target_number: i64,
    #[serde(rename = "FailureReason", default)]
    pub failure_reason: Option<String>,
    #[serde(rename = "Succeed")]
    pub succeed: bool,
    #[serde(flatten)]
    pub resources: LegacyResources,
    #[serde(rename = "Detail", default = "Vec::new")]
    pub detail: Vec<D>,
}

/// A legacy Netdns task result (lower-case keys in that version).
#[derive(Deserialize, Clone, Debug)]
#[allow(missing_docs)]
pub struct LegacyDnsTask {
    #[serde(rename = "targetType")]
    pub target_type: String,
    #[serde(rename = "targetNumber")]
    pub target_number: i64,
    #[serde(rename = "failureReason", default)]
    pub failure_reason: Option<String>,
    #[serde(rename = "succeed")]
    pub succeed: bool,
    #[serde(flatten)]
    pub resources: LegacyResources,
    #[serde(rename = "detail", default)]
    pub detail: Vec<LegacyDnsDetail>,
}

#[derive(Deserialize, Clone, Debug)]
#[allow(missing_docs)]
pub struct LegacyHttpDetail {
    #[serde(rename = "TargetName")]
    pub name: String,
    #[serde(rename = "TargetUrl", default)]
    pub url: String,
    #[serde(rename = "TargetMethod", default)]
    pub method: String,
    #[serde(rename = "Succeed")]
    pub succeed: bool,
    #[serde(rename = "MeanDelay", default)]
    pub mean_delay: f32,
    #[serde(rename = "SucceedRate", default)]
    pub succeed_rate: f64,
    #[serde(rename = "FailureReason", default)]
    pub failure_reason: Option<String>,
    #[serde(rename = "Metrics")]
    pub metrics: LegacyMetrics,
}

#[derive(Deserialize, Clone, Debug)]
#[allow(missing_docs)]
pub struct LegacyDnsDetail {
    #[serde(rename = "TargetName")]
    pub name: String,
    #[serde(rename = "TargetServer", default)]
    pub server: String,
    #[serde(rename = "TargetProtocol", default)]
    pub protocol: String,
    #[serde(rename = "Succeed")]
    pub succeed: bool,
    #[serde(rename = "FailureReason", default)]
    pub failure_reason: Option<String>,
    #[serde(rename = "MeanDelay", default)]
    pub mean_delay: f32,
    #[serde(rename = "SucceedRate", default)]
    pub succeed_rate: f64,
    #[serde(rename = "Metrics")]
    pub metrics: LegacyMetrics,
}

/// Legacy HTTP and DNS metrics share one shape (the DNS extras are optional).
#[derive(Deserialize, Clone, Debug)]
#[allow(missing_docs)]
pub struct LegacyMetrics {
    #[serde(rename = "StartTime")]
    pub start: Time,
    #[serde(rename = "EndTime")]
    pub end: Time,
    #[serde(rename = "Duration", default)]
    pub duration: String,
    #[serde(rename = "RequestCounts", default)]
    pub request_counts: i64,
    #[serde(rename = "SuccessCounts", default)]
    pub success_counts: i64,
    #[serde(rename = "TPS", default)]
    pub tps: f64,
    #[serde(rename = "Errors", default)]
    pub errors: Option<BTreeMap<String, i64>>,
    #[serde(rename = "Latencies", default)]
    pub latencies: LegacyLatencies,
    #[serde(rename = "ExistsNotSendRequests", default)]
    pub exists_not_send_requests: bool,
    #[serde(rename = "TotalDataSize", default)]
    pub total_data_size: String,
    #[serde(rename = "StatusCodes", default)]
    pub status_codes: Option<BTreeMap<i64, i64>>,
    #[serde(rename = "TargetDomain", default)]
    pub domain: String,
    #[serde(rename = "DNSServer", default)]
    pub dns_server: String,
    #[serde(rename = "DNSMethod", default)]
    pub dns_method: String,
    #[serde(rename = "FailedCounts", default)]
    pub failed_counts: i64,
    #[serde(rename = "ReplyCode", default)]
    pub reply_code: Option<BTreeMap<String, i64>>,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[allow(missing_docs)]
pub struct LegacyLatencies {
    #[serde(rename = "P50InMs", default)]
    pub p50: f32,
    #[serde(rename = "P90InMs", default)]
    pub p90: f32,
    #[serde(rename = "P95InMs", default)]
    pub p95: f32,
    #[serde(rename = "P99InMs", default)]
    pub p99: f32,
    #[serde(rename = "MaxInMs", default)]
    pub max: f32,
    #[serde(rename = "MinInMs", default)]
    pub min: f32,
    #[serde(rename = "MeanInMs", default)]
    pub mean: f32,
}

/// Upstream wrote empty strings where it meant "no reason".
fn reason(text: Option<String>) -> Option<String> {
    text.filter(|t| !t.is_empty())
}

impl LegacyMetrics {
    fn requests(&self) -> RequestMetrics {
        let l = &self.latencies;
        RequestMetrics {
            request_start_time: self.start.clone(),
            request_end_time: self.end.clone(),
            request_duration: self.duration.clone(),
            request_counts: self.request_counts,
            success_counts: self.success_counts,
            tps: self.tps,
            errors: self.errors.clone().unwrap_or_default(),
            latencies: LatencyDistribution {
                p50: l.p50,
                p90: l.p90,
                p95: l.p95,
                p99: l.p99,
                max: l.max,
                min: l.min,
                mean: l.mean,
            },
            exists_not_send_requests: self.exists_not_send_requests,
        }
    }

    fn http(self) -> HttpMetrics {
        HttpMetrics {
            requests: self.requests(),
            total_data_size: self.total_data_size,
            status_codes: self.status_codes.unwrap_or_default(),
            histograms: None,
            datagrams: None,
            isolation: None,
        }
    }

    fn dns(self) -> DnsMetrics {
        DnsMetrics {
            requests: self.requests(),
            domain: self.domain,
            server: self.dns_server,
            method: self.dns_method,
            failed_counts: self.failed_counts,
            reply_code: self.reply_code.unwrap_or_default(),
            histograms: None,
        }
    }
}

impl<D> LegacyTask<D> {
    fn convert<T>(self, detail: impl Fn(D) -> T) -> TaskResult<T> {
        TaskResult {
            target_type: self.target_type,
            target_number: self.target_number,
            failure_reason: reason(self.failure_reason),
            round_succeed: self.succeed,
            system_resource: self.resources.system(),
            running_load_total: self.resources.load(),
            round_task_detail: self.detail.into_iter().map(detail).collect(),
        }
    }
}

impl LegacyReport {
    /// The same report in the current (v0.2.2) shape.
    pub fn into_report(self) -> Report {
        let net_reach = self.net_reach.map(|t| {
            t.convert(|d| NetReachTaskDetail {
                name: d.name,
                url: d.url,
                method: d.method,
                request_succeed: d.succeed,
                request_mean_delay: d.mean_delay,
                request_succeed_rate: d.succeed_rate,
                failure_reason: reason(d.failure_reason),
                request_target_metrics: d.metrics.http(),
            })
        });
        let app = self.app_http_healthy.map(|t| {
            t.convert(|d| AppHttpHealthyTaskDetail {
                name: d.name,
                url: d.url,
                method: d.method,
                request_succeed: d.succeed,
                request_mean_delay: d.mean_delay,
                request_succeed_rate: d.succeed_rate,
                failure_reason: reason(d.failure_reason),
                request_target_metrics: d.metrics.http(),
            })
        });
        let dns = self.net_dns.map(|t| TaskResult {
            target_type: t.target_type,
            target_number: t.target_number,
            failure_reason: reason(t.failure_reason),
            round_succeed: t.succeed,
            system_resource: t.resources.system(),
            running_load_total: t.resources.load(),
            round_task_detail: t
                .detail
                .into_iter()
                .map(|d| NetDnsTaskDetail {
                    name: d.name,
                    request_server: d.server,
                    protocol: d.protocol,
                    request_succeed: d.succeed,
                    failure_reason: reason(d.failure_reason),
                    request_mean_delay: d.mean_delay,
                    request_succeed_rate: d.succeed_rate,
                    request_target_metrics: d.metrics.dns(),
                })
                .collect(),
        });
        Report {
            round_number: self.round_number,
            round_result: self.round_result,
            node_name: self.node_name,
            pod_name: self.pod_name,
            failed_reason: reason(self.failed_reason),
            round_start_time_stamp: self.start,
            round_end_time_stamp: self.end,
            round_duration: self.round_duration,
            task_uid: None,
            task_net_reach: net_reach,
            task_app_http_healthy: app,
            task_net_dns: dns,
        }
    }
}

/// Reads an agent report file in either shape: v0.2.2 (lowerCamel) or v0.1.0–v0.2.1 (Go names).
pub fn parse_any_report(json: &[u8]) -> Result<Report, serde_json::Error> {
    let value: serde_json::Value = serde_json::from_slice(json)?;
    if value.get("RoundNumber").is_some() {
        serde_json::from_value::<LegacyReport>(value).map(LegacyReport::into_report)
    } else {
        serde_json::from_value::<Report>(value)
    }
}
