//! `/metrics`: the Go API server's request metrics (verb, resource, code), watches, and the
//! store's own figures.

use std::time::Instant;

use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

use crate::auth::user::User;

/// Request metrics, registered in one registry with everything else the process exports.
pub struct ApiMetrics {
    /// The registry `/metrics` renders.
    pub registry: Registry,
    requests: IntCounterVec,
    durations: HistogramVec,
    /// Open watches.
    pub watches: IntGauge,
    /// Front-proxy certificates rejected, by reason.
    pub rejected_front_proxy: IntCounterVec,
}

impl ApiMetrics {
    /// Creates and registers the metrics.
    pub fn new() -> ApiMetrics {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "apiserver_request_total",
                "Requests by verb, resource and HTTP code.",
            ),
            &["verb", "group", "version", "resource", "code"],
        )
        .expect("valid metric");
        let durations = HistogramVec::new(
            HistogramOpts::new(
                "apiserver_request_duration_seconds",
                "Time to the response headers, by verb and resource.",
            )
            .buckets(vec![
                0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0,
                6.0, 8.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
            ]),
            &["verb", "group", "version", "resource"],
        )
        .expect("valid metric");
        let watches =
            IntGauge::new("apiserver_longrunning_requests", "Open watches.").expect("valid metric");
        let rejected_front_proxy = IntCounterVec::new(
            Opts::new(
                "kdoctor_apiserver_front_proxy_rejected_total",
                "Front-proxy client certificates rejected, by reason (unknown_ca, cn_not_allowed, no_user).",
            ),
            &["reason"],
        )
        .expect("valid metric");
        for metric in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(durations.clone()),
            Box::new(watches.clone()),
            Box::new(rejected_front_proxy.clone()),
        ] {
            let _ = registry.register(metric);
        }
        ApiMetrics {
            registry,
            requests,
            durations,
            watches,
            rejected_front_proxy,
        }
    }
}

impl Default for ApiMetrics {
    fn default() -> Self {
        ApiMetrics::new()
    }
}

/// What a request does, for metrics, logs and authorization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestInfo {
    /// Kubernetes verb (`get`, `list`, `watch`, `delete`, …) or the lower-case method for
    /// non-resource paths.
    pub verb: &'static str,
    /// Whether the path is a resource (vs. discovery, health, metrics).
    pub is_resource: bool,
    /// Object name, if any.
    pub name: Option<String>,
    /// The path.
    pub path: String,
}

impl RequestInfo {
    /// Derives the verb the way the Go server's RequestInfo does.
    pub fn of(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
        let Some(rest) = resource_rest(path) else {
            return RequestInfo {
                verb: method_verb(method),
                is_resource: false,
                name: None,
                path: path.to_string(),
            };
        };
        // The name as the handler sees it (axum's Path decodes it): the review must be about
        // the object that will be served, not its encoding.
        let name = rest
            .trim_start_matches('/')
            .split('/')
            .next()
            .filter(|n| !n.is_empty())
            .map(|n| {
                percent_encoding::percent_decode_str(n)
                    .decode_utf8_lossy()
                    .into_owned()
            });
        let verb = match (method.as_str(), name.is_some()) {
            ("GET" | "HEAD", true) => "get",
            ("GET" | "HEAD", false) if crate::kube::query::Query::parse(query).watching() => {
                "watch"
            }
            ("GET" | "HEAD", false) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            _ => "unknown",
        };
        RequestInfo {
            verb,
            is_resource: true,
            name,
            path: path.to_string(),
        }
    }

    /// The verb in upper case, as the request metrics label it.
    pub fn verb_label(&self) -> &'static str {
        match self.verb {
            "get" => "GET",
            "watch" => "WATCH",
            "list" => "LIST",
            "create" => "CREATE",
            "update" => "UPDATE",
            "patch" => "PATCH",
            "delete" => "DELETE",
            "deletecollection" => "DELETECOLLECTION",
            "head" => "HEAD",
            "post" => "POST",
            "put" => "PUT",
            "options" => "OPTIONS",
            "connect" => "CONNECT",
            "trace" => "TRACE",
            "other" => "OTHER",
            _ => "UNKNOWN",
        }
    }
}

/// What follows `/apis/<group>/<version>/<plural>` in `path`, when the path is the resource's
/// (the plural itself, or a path below it).
fn resource_rest(path: &str) -> Option<&str> {
    let rest = path
        .strip_prefix("/apis/")?
        .strip_prefix(crate::kube::group::GROUP)?
        .strip_prefix('/')?
        .strip_prefix(crate::kube::group::VERSION)?
        .strip_prefix('/')?
        .strip_prefix(crate::kube::group::PLURAL)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// The verb of a non-resource request: the lower-case method, or `other` for a method outside
/// HTTP's own, so that no client can mint label values (metrics count requests before they are
/// authenticated).
fn method_verb(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::HEAD => "head",
        Method::POST => "post",
        Method::PUT => "put",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        Method::OPTIONS => "options",
        Method::CONNECT => "connect",
        Method::TRACE => "trace",
        _ => "other",
    }
}

/// Counts, times and logs every request.
pub async fn track<F, Fut>(metrics: &ApiMetrics, mut request: Request, next: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    let started = Instant::now();
    let info = RequestInfo::of(
        request.method(),
        request.uri().path(),
        request.uri().query(),
    );
    // Derived once per request: authorization reads the same one.
    request.extensions_mut().insert(info.clone());
    let response = next(request).await;
    let elapsed = started.elapsed();
    let code = response.status();
    let code = code.as_str();
    let (group, version, resource) = if info.is_resource {
        (
            crate::kube::group::GROUP,
            crate::kube::group::VERSION,
            crate::kube::group::PLURAL,
        )
    } else {
        ("", "", "")
    };
    let verb = info.verb_label();
    metrics
        .requests
        .with_label_values(&[verb, group, version, resource, code])
        .inc();
    metrics
        .durations
        .with_label_values(&[verb, group, version, resource])
        .observe(elapsed.as_secs_f64());
    // Set by the authentication step inside this one (crate::pipeline).
    let user = response
        .extensions()
        .get::<User>()
        .map_or("", |u| u.name.as_str());
    tracing::info!(
        user = %user,
        verb = %info.verb,
        path = %info.path,
        name = info.name.as_deref().unwrap_or(""),
        code = response.status().as_u16(),
        duration_ms = elapsed.as_secs_f64() * 1e3,
        "request"
    );
    response
}

/// `/metrics` in the Prometheus text format.
pub fn render(metrics: &ApiMetrics) -> Response {
    let mut families = metrics.registry.gather();
    families.extend(prometheus::gather());
    let mut body = Vec::new();
    if TextEncoder::new().encode(&families, &mut body).is_err() {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLLECTION: &str = "/apis/system.kdoctor.io/v1beta1/kdoctorreports";

    #[test]
    fn resource_requests_get_the_kubernetes_verb_and_the_decoded_name() {
        let named = RequestInfo::of(&Method::GET, &format!("{COLLECTION}/netreach-a%2Eb"), None);
        assert_eq!(
            (named.verb, named.is_resource, named.name.as_deref()),
            ("get", true, Some("netreach-a.b"))
        );
        let list = RequestInfo::of(&Method::GET, COLLECTION, Some("limit=5"));
        assert_eq!((list.verb, list.name), ("list", None));
        let watch = RequestInfo::of(&Method::GET, COLLECTION, Some("watch=true"));
        assert_eq!(watch.verb, "watch");
        assert_eq!(
            RequestInfo::of(&Method::DELETE, COLLECTION, None).verb,
            "deletecollection"
        );
        assert_eq!(
            RequestInfo::of(&Method::DELETE, &format!("{COLLECTION}/x"), None).verb,
            "delete"
        );
    }

    #[test]
    fn other_paths_are_non_resource_with_the_method_as_verb() {
        for path in [
            "/healthz",
            "/apis/system.kdoctor.io/v1beta1",
            &format!("{COLLECTION}x/y"),
            "/apis/other/v1beta1/kdoctorreports",
        ] {
            let info = RequestInfo::of(&Method::GET, path, None);
            assert_eq!(
                (info.verb, info.is_resource, info.path.as_str()),
                ("get", false, path)
            );
        }
        let odd = Method::from_bytes(b"BREW").expect("method");
        assert_eq!(RequestInfo::of(&odd, "/x", None).verb, "other");
    }

    #[test]
    fn the_metric_label_is_the_verb_in_upper_case() {
        let verbs = [
            "get",
            "watch",
            "list",
            "create",
            "update",
            "patch",
            "delete",
            "deletecollection",
            "unknown",
        ]
        .into_iter()
        .chain([
            "head", "post", "put", "options", "connect", "trace", "other",
        ]);
        for verb in verbs {
            let info = RequestInfo {
                verb,
                is_resource: true,
                name: None,
                path: String::new(),
            };
            assert_eq!(info.verb_label(), verb.to_ascii_uppercase());
        }
    }
}
