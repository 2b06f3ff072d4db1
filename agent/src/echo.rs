//! The echo API every agent serves as a probe target (upstream §14.1): paths `/` and
//! `/kdoctoragent`, every method, `delay` and `task` query parameters, per-task counters.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde::Serialize;

use crate::metrics::Metrics;

/// Counter key when a request names no task.
pub const DEFAULT_TASK: &str = "default";
/// Most distinct `task` counters kept, so that arbitrary clients cannot grow memory without end.
pub const MAX_TASK_COUNTERS: usize = 10_000;
/// Longest `delay` accepted.
pub const MAX_DELAY: Duration = Duration::from_secs(600);
/// Largest request body read (and discarded).
pub const MAX_BODY_BYTES: usize = 16 << 20;
/// Methods the echo API lists as supported (upstream's list).
pub const SUPPORTED_METHODS: [&str; 7] =
    ["GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS"];

/// Which listener a request came through, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// Shared state of the echo API.
#[derive(Clone)]
pub struct Echo {
    server_name: Arc<str>,
    counters: Arc<Mutex<HashMap<String, u64>>>,
    metrics: Metrics,
}

impl Echo {
    /// An echo API answering as `server_name` (the pod name, or the host name).
    pub fn new(server_name: &str, metrics: Metrics) -> Echo {
        Echo {
            server_name: server_name.into(),
            counters: Arc::default(),
            metrics,
        }
    }

    /// The counter of `task` (0 when it has none).
    pub fn count(&self, task: &str) -> u64 {
        self.lock().get(task).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        // A panic while holding the lock cannot leave the map inconsistent (single inserts).
        self.counters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Increments the counter of `task`; `None` when a new counter would exceed the limit.
    fn increment(&self, task: &str) -> Option<u64> {
        let mut counters = self.lock();
        if let Some(count) = counters.get_mut(task) {
            *count += 1;
            return Some(*count);
        }
        if counters.len() >= MAX_TASK_COUNTERS {
            return None;
        }
        counters.insert(task.to_string(), 1);
        Some(1)
    }

    fn reset(&self, task: &str) {
        self.lock().remove(task);
    }

    /// The router serving `/` and `/kdoctoragent` for every method.
    pub fn router(self) -> Router {
        Router::new()
            .route("/", axum::routing::any(handle))
            .route("/kdoctoragent", axum::routing::any(handle))
            .with_state(self)
    }
}

/// The GET answer (upstream's keys, including its capitalised `TaskName`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EchoBody<'a> {
    server_name: &'a str,
    client_ip: String,
    request_url: String,
    request_method: &'a str,
    request_header: BTreeMap<String, String>,
    request_count: u64,
    #[serde(rename = "TaskName")]
    task_name: &'a str,
    #[serde(skip_serializing_if = "String::is_empty")]
    request_param: String,
    supported_method: [&'static str; 7],
    param_detail: BTreeMap<&'static str, &'static str>,
}

/// The query parameters of the echo API.
#[derive(Debug, Default, PartialEq)]
pub struct EchoQuery {
    /// Sleep this long before answering.
    pub delay: Option<Duration>,
    /// Counter key.
    pub task: String,
    /// The `delay` parameter as given, echoed back as `requestParam`.
    pub delay_text: Option<String>,
}

/// Parses `delay` and `task`; unknown parameters are ignored (as upstream).
pub fn parse_query(query: Option<&str>) -> Result<EchoQuery, String> {
    let mut parsed = EchoQuery {
        task: DEFAULT_TASK.to_string(),
        ..EchoQuery::default()
    };
    let Some(query) = query else {
        return Ok(parsed);
    };
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        let value = value.into_owned();
        match key.as_ref() {
            "delay" => {
                parsed.delay = Some(parse_delay(&value)?);
                parsed.delay_text = Some(value);
            }
            "task" if !value.is_empty() => parsed.task = value,
            _ => {}
        }
    }
    Ok(parsed)
}

/// `delay`: seconds as upstream (`2`), fractional seconds (`0.05`), or with a unit
/// (`50ms`, `500us`, `1.5s`) so that sub-second delays can be injected.
pub fn parse_delay(text: &str) -> Result<Duration, String> {
    let delay = crate::duration::parse(text).map_err(|e| format!("query parameter delay: {e}"))?;
    if delay > MAX_DELAY {
        return Err(format!(
            "query parameter delay: {text:?} is longer than the maximum of {}s",
            MAX_DELAY.as_secs()
        ));
    }
    Ok(delay)
}

/// Sleeps for `delay` to within about 0.1 ms. tokio's timer rounds up to the next millisecond
/// and wakes late under load, which would add 1–2 ms to every injected delay; the last few
/// milliseconds are slept by an OS thread instead, whose sleep is precise.
pub async fn precise_sleep(delay: Duration) {
    const COARSE_MARGIN: Duration = Duration::from_millis(5);
    let deadline = std::time::Instant::now() + delay;
    if delay > COARSE_MARGIN {
        tokio::time::sleep(delay - COARSE_MARGIN).await;
    }
    if std::time::Instant::now() < deadline {
        // The thread computes what is left itself, so its start-up time is not added.
        let slept = tokio::task::spawn_blocking(move || {
            std::thread::sleep(deadline.saturating_duration_since(std::time::Instant::now()))
        })
        .await;
        if slept.is_err() {
            // The blocking pool is shutting down: fall back to the coarse timer.
            tokio::time::sleep_until(deadline.into()).await;
        }
    }
}

fn headers_map(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let entry = map.entry(name.as_str().to_string()).or_default();
        if !entry.is_empty() {
            entry.push_str(", ");
        }
        entry.push_str(&String::from_utf8_lossy(value.as_bytes()));
    }
    map
}

fn text(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message + "\n",
    )
        .into_response()
}

async fn handle(State(echo): State<Echo>, request: Request) -> Response {
    let scheme = request
        .extensions()
        .get::<Scheme>()
        .copied()
        .unwrap_or(Scheme::Http);
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.to_string())
        .unwrap_or_default();
    let method = request.method().clone();
    echo.metrics
        .echo_requests
        .with_label_values(&[method.as_str(), scheme.as_str()])
        .inc();
    let query = match parse_query(request.uri().query()) {
        Ok(q) => q,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    let url = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".to_string());
    let headers = headers_map(request.headers());
    // The body is read so that keep-alive connections stay usable; its content is not echoed.
    let mut body: Body = request.into_body();
    let mut read = 0usize;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    read += data.len();
                    if read > MAX_BODY_BYTES {
                        return text(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            format!("request body: larger than {MAX_BODY_BYTES} bytes"),
                        );
                    }
                }
            }
            Err(e) => return text(StatusCode::BAD_REQUEST, format!("request body: {e}")),
        }
    }
    if let Some(delay) = query.delay {
        precise_sleep(delay).await;
    }
    if method == Method::DELETE {
        echo.reset(&query.task);
        return StatusCode::OK.into_response();
    }
    let Some(count) = echo.increment(&query.task) else {
        return text(
            StatusCode::TOO_MANY_REQUESTS,
            format!("query parameter task: more than {MAX_TASK_COUNTERS} task counters"),
        );
    };
    if method != Method::GET {
        return StatusCode::OK.into_response();
    }
    let answer = EchoBody {
        server_name: &echo.server_name,
        client_ip: client,
        request_url: url,
        request_method: method.as_str(),
        request_header: headers,
        request_count: count,
        task_name: &query.task,
        request_param: query
            .delay_text
            .map(|d| format!("delay={d}"))
            .unwrap_or_default(),
        supported_method: SUPPORTED_METHODS,
        param_detail: BTreeMap::from([("delay", "in query, delay some second return response")]),
    };
    axum::Json(answer).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_accepts_upstream_seconds_and_units() {
        assert_eq!(parse_delay("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_delay("0.05"), Ok(Duration::from_millis(50)));
        assert_eq!(parse_delay("50ms"), Ok(Duration::from_millis(50)));
        assert_eq!(parse_delay("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_delay("1.5s"), Ok(Duration::from_millis(1500)));
    }

    #[test]
    fn delay_rejects_garbage_naming_the_parameter() {
        for bad in ["", "x", "-1", "NaN", "inf", "1h"] {
            let err = parse_delay(bad).unwrap_err();
            assert!(err.starts_with("query parameter delay:"), "{bad}: {err}");
        }
        assert!(parse_delay("601").unwrap_err().contains("maximum"));
    }

    #[test]
    fn query_defaults_and_decoding() {
        let q = parse_query(None).unwrap();
        assert_eq!(q.task, DEFAULT_TASK);
        assert_eq!(q.delay, None);
        let q = parse_query(Some("task=my%20task&delay=1&other=x")).unwrap();
        assert_eq!(q.task, "my task");
        assert_eq!(q.delay, Some(Duration::from_secs(1)));
        assert_eq!(q.delay_text.as_deref(), Some("1"));
        assert_eq!(parse_query(Some("task=")).unwrap().task, DEFAULT_TASK);
        assert_eq!(parse_query(Some("task=a%2")).unwrap().task, "a%2");
        assert_eq!(parse_query(Some("ta%73k=b+c")).unwrap().task, "b c");
        assert_eq!(parse_query(Some("task=%zz")).unwrap().task, "%zz");
    }

    #[test]
    fn counters_are_bounded() {
        let echo = Echo::new("x", Metrics::new());
        for i in 0..MAX_TASK_COUNTERS {
            assert!(echo.increment(&i.to_string()).is_some());
        }
        assert_eq!(echo.increment("one more"), None);
        assert_eq!(echo.increment("0"), Some(2));
        echo.reset("0");
        assert_eq!(echo.count("0"), 0);
    }
}
