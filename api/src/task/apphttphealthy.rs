//! AppHttpHealthy: every agent probes one HTTP(S) URL.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{AgentSpec, NetHttpRequest, NetSuccessCondition, SchedulePlan};
use super::status::TaskStatus;

/// Spec of an AppHttpHealthy task.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kdoctor.io",
    version = "v1beta1",
    kind = "AppHttpHealthy",
    plural = "apphttphealthies",
    singular = "apphttphealthy",
    shortname = "ahh",
    category = "kdoctor",
    status = "TaskStatus",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct AppHttpHealthySpec {
    /// Run on a dedicated carrier instead of the default agent DaemonSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_spec: Option<AgentSpec>,
    /// Mark Nodes with the results (a Node condition, labels, annotations); beyond upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marker_policy: Option<super::MarkerPolicy>,
    /// When rounds run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<SchedulePlan>,
    /// The URL to probe.
    pub target: AppHttpHealthyTarget,
    /// How hard to probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<NetHttpRequest>,
    /// When the target is healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<NetSuccessCondition>,
}

/// HTTP method of an AppHttpHealthy probe.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
#[allow(missing_docs)]
pub enum HttpMethod {
    Get,
    Post,
    Put,
    Delete,
    Connect,
    Options,
    Patch,
    Head,
}

impl HttpMethod {
    /// The method token.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Delete => "DELETE",
            HttpMethod::Connect => "CONNECT",
            HttpMethod::Options => "OPTIONS",
            HttpMethod::Patch => "PATCH",
            HttpMethod::Head => "HEAD",
        }
    }
}

/// `spec.target` of AppHttpHealthy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
// One rule per missing half, so that kube-apiserver names the field that is missing.
#[x_kube(validation = Rule::new("!has(self.tlsSecretName) || has(self.tlsSecretNamespace)")
    .message("tlsSecretName and tlsSecretNamespace must be set together")
    .field_path(".tlsSecretNamespace"))]
#[x_kube(validation = Rule::new("!has(self.tlsSecretNamespace) || has(self.tlsSecretName)")
    .message("tlsSecretName and tlsSecretNamespace must be set together")
    .field_path(".tlsSecretName"))]
#[x_kube(validation = Rule::new("!has(self.bodyConfigmapName) || has(self.bodyConfigmapNamespace)")
    .message("bodyConfigmapName and bodyConfigmapNamespace must be set together")
    .field_path(".bodyConfigmapNamespace"))]
#[x_kube(validation = Rule::new("!has(self.bodyConfigmapNamespace) || has(self.bodyConfigmapName)")
    .message("bodyConfigmapName and bodyConfigmapNamespace must be set together")
    .field_path(".bodyConfigmapName"))]
pub struct AppHttpHealthyTarget {
    /// URL to probe; `http://` is assumed when no scheme is given.
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new("!self.contains('://') || self.startsWith('http://') || self.startsWith('https://')")
        .message("scheme must be http or https"))]
    pub host: String,
    /// HTTP method.
    pub method: HttpMethod,
    /// Negotiate HTTP/2 over TLS (ALPN).
    #[serde(default)]
    pub http2: bool,
    /// ConfigMap whose `data`, as a JSON object, is the request body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_configmap_name: Option<String>,
    /// Namespace of `bodyConfigmapName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_configmap_namespace: Option<String>,
    /// Secret with `ca.crt` (verify the server) and/or `tls.crt` + `tls.key` (client certificate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_secret_name: Option<String>,
    /// Namespace of `tlsSecretName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_secret_namespace: Option<String>,
    /// Request headers, each `"Name: value"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(max = 8192)))]
    #[x_kube(validation = Rule::new("self.all(h, h.matches('^[^:\\\\s]+:'))").message("each header must be \"Name: value\""))]
    pub header: Option<Vec<String>>,
    /// Report the full latency distribution, not only the mean.
    #[serde(default)]
    pub enable_latency_metric: bool,
}

/// A `header` entry that is not `"Name: value"`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// No `:` at all (upstream panicked here).
    #[error("must be \"Name: value\"")]
    NoColon,
    /// The part before `:` is not a header name.
    #[error("{0:?} is not a valid header name")]
    BadName(String),
    /// The value holds characters a header cannot carry.
    #[error("the value holds characters a header cannot carry")]
    BadValue,
}

/// Splits a `header` entry at its first `:` into a name and a trimmed value. Unlike upstream,
/// text after a second `:` is kept (`Referer: http://x` keeps its URL).
pub fn parse_header(entry: &str) -> Result<(String, String), HeaderError> {
    let (name, value) = entry.split_once(':').ok_or(HeaderError::NoColon)?;
    let name = name.trim();
    if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(HeaderError::BadName(name.to_string()));
    }
    let value = value.trim();
    if http::HeaderValue::from_str(value).is_err() {
        return Err(HeaderError::BadValue);
    }
    Ok((name.to_string(), value.to_string()))
}
