//! Delivery: the store's export outbox (written with each report, kept across restarts) read
//! in order into a small in-memory queue, and workers that POST each event over HTTPS, signed,
//! retrying with exponential backoff until a 2xx (or the maximum number of attempts, when one
//! is set); only then is the entry removed from the outbox.
//!
//! - **Never blocks harvesting.** Storing a report writes its outbox entry in the same batch;
//!   [`ExportHook::stored`] only wakes the feeder.
//! - **Bounded.** The outbox holds at most [`ExportConfig::queue`] reports; when it is full
//!   the *oldest* is dropped (and counted by the store): the newest results are the ones an
//!   operator acts on. The in-memory queue holds a few events per worker.
//! - **At least once, once per id.** An entry leaves the outbox only when acknowledged, so a
//!   restart or a crash delivers it again at worst (receivers de-duplicate by the event id);
//!   within a process, an id already queued or sent (the last [`ExportConfig::remember`] ids)
//!   is not sent again.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use kdoctor_store::{Pending, Store, Writes};
use kdoctor_transport::connect::http1;
use kdoctor_transport::tls::{ServerTrust, client_config, parse_roots};
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use rustls::RootCertStore;
use rustls::pki_types::ServerName;
use tokio::sync::Notify;
use tokio_rustls::TlsConnector;

use super::event::{CONTENT_TYPE, Exported};
use super::sign::{SIGNATURE_HEADER, TIMESTAMP_HEADER, signature};

/// Default outbox capacity (reports, on disk).
pub const DEFAULT_QUEUE: usize = 10_000;
/// Default maximum attempts per event: 0, until acknowledged.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 0;
/// Events held in memory per worker.
const IN_MEMORY_PER_WORKER: usize = 4;
/// Default time allowed for one attempt (connect, TLS, request, response).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Ids remembered for de-duplication.
pub const DEFAULT_REMEMBER: usize = 100_000;

/// A configuration problem, reported at start.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The URL is not usable.
    #[error("--export-url {url:?}: {problem}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The secret is empty.
    #[error("the export secret is empty")]
    EmptySecret,
    /// TLS material could not be used.
    #[error("export TLS: {0}")]
    Tls(String),
}

/// Where and how reports are exported.
#[derive(Clone)]
pub struct ExportConfig {
    /// The receiver.
    pub url: Uri,
    /// The shared secret the requests are signed with.
    pub secret: Arc<[u8]>,
    /// Outbox capacity (reports waiting, on disk).
    pub queue: usize,
    /// Time allowed for one attempt.
    pub timeout: Duration,
    /// Attempts per event, the first included; 0: until acknowledged.
    pub max_attempts: u32,
    /// Wait after the first failed attempt; doubled after each further one.
    pub backoff_initial: Duration,
    /// Longest wait between attempts.
    pub backoff_max: Duration,
    /// Events sent at once.
    pub workers: usize,
    /// Ids remembered for de-duplication.
    pub remember: usize,
    tls: TlsConnector,
}

impl std::fmt::Debug for ExportConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportConfig")
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .field("queue", &self.queue)
            .field("timeout", &self.timeout)
            .field("max_attempts", &self.max_attempts)
            .finish_non_exhaustive()
    }
}

impl ExportConfig {
    /// Export to `url` (HTTPS; plain HTTP only with `allow_http`), signing with `secret`,
    /// trusting the receiver's certificate when it chains to `ca_pem` (PEM) or, without it,
    /// to the system's roots. Defaults for the rest.
    pub fn new(
        url: &str,
        secret: impl Into<Vec<u8>>,
        ca_pem: Option<&[u8]>,
        allow_http: bool,
    ) -> Result<ExportConfig, ExportError> {
        let bad = |problem: &str| ExportError::Url {
            url: url.to_string(),
            problem: problem.to_string(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        match uri.scheme_str() {
            Some("https") => {}
            Some("http") if allow_http => {}
            Some("http") => {
                return Err(bad(
                    "plain HTTP is refused (reports would travel unencrypted); use https:// or, for tests, --export-allow-http",
                ));
            }
            _ => return Err(bad("expected an https:// URL")),
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(bad("no host"));
        }
        let secret: Vec<u8> = secret.into();
        if secret.is_empty() {
            return Err(ExportError::EmptySecret);
        }
        let roots = match ca_pem {
            Some(pem) => {
                parse_roots(pem, "--export-ca").map_err(|e| ExportError::Tls(e.to_string()))?
            }
            None => system_roots()?,
        };
        let config = client_config(ServerTrust::Roots(roots), None, &[b"http/1.1"])
            .map_err(|e| ExportError::Tls(e.to_string()))?;
        Ok(ExportConfig {
            url: uri,
            secret: secret.into(),
            queue: DEFAULT_QUEUE,
            timeout: DEFAULT_TIMEOUT,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            workers: 4,
            remember: DEFAULT_REMEMBER,
            tls: TlsConnector::from(Arc::new(config)),
        })
    }

    /// The wait after failed attempt number `attempt` (1-based): `backoff_initial`, doubled per
    /// further attempt, at most `backoff_max`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(31));
        self.backoff_initial
            .saturating_mul(factor)
            .min(self.backoff_max)
    }
}

fn system_roots() -> Result<RootCertStore, ExportError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(ExportError::Tls(
            "no trusted CA certificates in the system store; give the receiver's CA with --export-ca"
                .to_string(),
        ));
    }
    Ok(roots)
}

/// The exporter's metrics.
#[derive(Clone)]
pub struct ExportMetrics {
    /// Events acknowledged by the receiver (2xx).
    pub sent: IntCounter,
    /// Failed attempts, by reason (connect, tls, http, timeout, status).
    pub failed_attempts: IntCounterVec,
    /// Events given up, by reason (queue_full, attempts, rejected, encode, removed, read).
    pub dropped: IntCounterVec,
    /// Events skipped because their id was already queued or sent.
    pub duplicates: IntCounter,
    /// Events waiting in the queue.
    pub queue_length: IntGauge,
}

impl ExportMetrics {
    /// Creates the metrics and registers them in `registry` (a second registration, of a
    /// second controller in one process, is ignored).
    pub fn new(registry: &Registry) -> ExportMetrics {
        let metrics = ExportMetrics {
            sent: IntCounter::new(
                "kdoctor_controller_export_sent_total",
                "Exported report events acknowledged by the receiver with a 2xx.",
            )
            .expect("valid metric"),
            failed_attempts: IntCounterVec::new(
                Opts::new(
                    "kdoctor_controller_export_failed_attempts_total",
                    "Failed export attempts, by reason (connect, tls, http, timeout, status).",
                ),
                &["reason"],
            )
            .expect("valid metric"),
            dropped: IntCounterVec::new(
                Opts::new(
                    "kdoctor_controller_export_dropped_total",
                    "Report events never acknowledged, by reason (queue_full, attempts, rejected, encode, removed, read).",
                ),
                &["reason"],
            )
            .expect("valid metric"),
            duplicates: IntCounter::new(
                "kdoctor_controller_export_duplicates_total",
                "Report events not queued because their id was already queued or sent.",
            )
            .expect("valid metric"),
            queue_length: IntGauge::new(
                "kdoctor_controller_export_queue_length",
                "Report events waiting to be exported.",
            )
            .expect("valid metric"),
        };
        for collector in [
            Box::new(metrics.sent.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(metrics.failed_attempts.clone()),
            Box::new(metrics.dropped.clone()),
            Box::new(metrics.duplicates.clone()),
            Box::new(metrics.queue_length.clone()),
        ] {
            let _ = registry.register(collector);
        }
        metrics
    }
}

/// What [`ExportHook::offer`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offered {
    /// Queued.
    Queued,
    /// Queued; the oldest queued event was dropped to make room.
    QueuedDroppingOldest,
    /// Already queued or sent: not queued again.
    Duplicate,
}

struct State {
    queue: VecDeque<(u64, Exported)>,
    seen: HashSet<String>,
    seen_order: VecDeque<String>,
}

struct Shared {
    state: Mutex<State>,
    ready: Notify,
    /// Wakes the feeder: a report was stored, or the queue has room again.
    wanted: Notify,
    capacity: usize,
    remember: usize,
    metrics: ExportMetrics,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The harvester's side of the queue: cheap to clone, never waits.
#[derive(Clone)]
pub struct ExportHook {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ExportHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportHook")
            .field("queued", &self.len())
            .finish()
    }
}

/// The workers' side of the queue.
#[derive(Clone)]
pub struct ExportQueue {
    shared: Arc<Shared>,
}

/// A queue of `capacity` events remembering the last `remember` ids.
pub fn queue(
    capacity: usize,
    remember: usize,
    metrics: ExportMetrics,
) -> (ExportHook, ExportQueue) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            seen: HashSet::new(),
            seen_order: VecDeque::new(),
        }),
        ready: Notify::new(),
        wanted: Notify::new(),
        capacity: capacity.max(1),
        remember: remember.max(capacity.max(1)),
        metrics,
    });
    (
        ExportHook {
            shared: shared.clone(),
        },
        ExportQueue { shared },
    )
}

impl ExportHook {
    /// Tells the exporter that reports were stored (their outbox entries are written).
    pub fn stored(&self) {
        self.shared.wanted.notify_one();
    }

    /// Room left in the in-memory queue.
    fn room(&self) -> usize {
        self.shared.capacity.saturating_sub(self.len())
    }

    /// Queues `item` (outbox entry `seq`) unless its id was seen; drops the oldest queued
    /// event when full.
    pub fn offer(&self, seq: u64, item: Exported) -> Offered {
        let shared = &self.shared;
        let id = item.id();
        let offered = {
            let mut state = shared.lock();
            if state.seen.contains(&id) {
                shared.metrics.duplicates.inc();
                return Offered::Duplicate;
            }
            state.seen.insert(id.clone());
            state.seen_order.push_back(id);
            while state.seen_order.len() > shared.remember {
                if let Some(old) = state.seen_order.pop_front() {
                    state.seen.remove(&old);
                }
            }
            let mut offered = Offered::Queued;
            while state.queue.len() >= shared.capacity {
                if let Some((_, old)) = state.queue.pop_front() {
                    shared
                        .metrics
                        .dropped
                        .with_label_values(&["queue_full"])
                        .inc();
                    tracing::warn!(id = %old.id(), "export queue full: dropped the oldest report event");
                }
                offered = Offered::QueuedDroppingOldest;
            }
            state.queue.push_back((seq, item));
            shared.metrics.queue_length.set(state.queue.len() as i64);
            offered
        };
        shared.ready.notify_one();
        offered
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ExportQueue {
    /// The oldest queued event and its outbox entry, waiting for one.
    pub async fn next(&self) -> (u64, Exported) {
        loop {
            // Registered before looking, so an offer in between is not missed.
            let ready = self.shared.ready.notified();
            {
                let mut state = self.shared.lock();
                if let Some(item) = state.queue.pop_front() {
                    self.shared
                        .metrics
                        .queue_length
                        .set(state.queue.len() as i64);
                    if !state.queue.is_empty() {
                        // Wake another worker for the rest.
                        self.shared.ready.notify_one();
                    }
                    self.shared.wanted.notify_one();
                    return item;
                }
            }
            ready.await;
        }
    }
}

/// Why one attempt failed.
#[derive(Debug)]
enum Failure {
    /// Worth another attempt, with the metric reason.
    Retry(&'static str, String),
    /// The receiver refused the event for good (a 4xx other than 408, 425 and 429, or a
    /// redirect, which is not followed).
    Rejected(StatusCode, String),
}

/// Whether a non-2xx status is worth retrying.
pub fn retryable(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_EARLY
        || status == StatusCode::TOO_MANY_REQUESTS
}

/// One worker's connection to the receiver, reused while it stays open.
struct Worker {
    config: Arc<ExportConfig>,
    connection: Option<SendRequest<Full<Bytes>>>,
}

impl Worker {
    fn target(&self) -> (String, u16, bool) {
        let url = &self.config.url;
        let tls = url.scheme_str() == Some("https");
        let host = url
            .host()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = url.port_u16().unwrap_or(if tls { 443 } else { 80 });
        (host, port, tls)
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, Failure> {
        let (host, port, tls) = self.target();
        let name = match tls {
            true => Some(
                ServerName::try_from(host.clone())
                    .map_err(|e| Failure::Retry("tls", format!("{host}: {e}")))?,
            ),
            false => None,
        };
        let tls = name.map(|name| (&self.config.tls, name));
        http1((host.as_str(), port), tls)
            .await
            .map_err(|e| Failure::Retry(e.step(), format!("{host}:{port}: {e}")))
    }

    async fn exchange(&mut self, body: &Bytes) -> Result<(), Failure> {
        let http = |e: hyper::Error| Failure::Retry("http", e.to_string());
        // A kept connection the receiver closed meanwhile is replaced, not counted as a failure.
        let mut kept = self.connection.take().filter(|s| !s.is_closed());
        if let Some(sender) = kept.as_mut()
            && sender.ready().await.is_err()
        {
            kept = None;
        }
        let mut sender = match kept {
            Some(sender) => sender,
            None => {
                let mut sender = self.connect().await?;
                sender.ready().await.map_err(http)?;
                sender
            }
        };
        let url = &self.config.url;
        let timestamp = jiff::Timestamp::now().as_second();
        let authority = url.authority().map(|a| a.as_str()).unwrap_or_default();
        let path = url.path_and_query().map_or("/", |p| p.as_str());
        let request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(http::header::HOST, authority)
            .header(http::header::CONTENT_TYPE, CONTENT_TYPE)
            .header(
                http::header::USER_AGENT,
                concat!("kdoctor/", env!("CARGO_PKG_VERSION")),
            )
            .header(TIMESTAMP_HEADER, timestamp.to_string())
            .header(
                SIGNATURE_HEADER,
                signature(&self.config.secret, timestamp, body),
            )
            .body(Full::new(body.clone()))
            .map_err(|e| Failure::Retry("http", e.to_string()))?;
        let response = sender.send_request(request).await.map_err(http)?;
        let status = response.status();
        // Read the (small) answer so the connection can be reused.
        let answer = response
            .into_body()
            .collect()
            .await
            .map_err(http)?
            .to_bytes();
        if status.is_success() {
            self.connection = Some(sender);
            return Ok(());
        }
        self.connection = Some(sender);
        let answer: String = String::from_utf8_lossy(&answer).chars().take(200).collect();
        if retryable(status) {
            Err(Failure::Retry("status", format!("{status}: {answer}")))
        } else {
            Err(Failure::Rejected(status, answer))
        }
    }

    async fn attempt(&mut self, body: &Bytes) -> Result<(), Failure> {
        let timeout = self.config.timeout;
        match tokio::time::timeout(timeout, self.exchange(body)).await {
            Ok(result) => result,
            Err(_) => {
                self.connection = None;
                Err(Failure::Retry(
                    "timeout",
                    format!("no answer within {timeout:?}"),
                ))
            }
        }
    }

    /// Sends `item` until acknowledged, refused for good, or out of attempts.
    async fn deliver(&mut self, item: Exported, metrics: &ExportMetrics) {
        let id = item.id();
        let body = match item.body() {
            Ok(body) => Bytes::from(body),
            Err(e) => {
                metrics.dropped.with_label_values(&["encode"]).inc();
                tracing::error!(%id, error = %e, "cannot encode a report event");
                return;
            }
        };
        drop(item);
        let max = match self.config.max_attempts {
            0 => u32::MAX,
            n => n,
        };
        for attempt in 1..=max {
            match self.attempt(&body).await {
                Ok(()) => {
                    metrics.sent.inc();
                    tracing::debug!(%id, attempt, "report event exported");
                    return;
                }
                Err(Failure::Rejected(status, answer)) => {
                    self.connection = None;
                    metrics.failed_attempts.with_label_values(&["status"]).inc();
                    metrics.dropped.with_label_values(&["rejected"]).inc();
                    tracing::warn!(%id, %status, %answer, "the receiver refused a report event; not retried");
                    return;
                }
                Err(Failure::Retry(reason, error)) => {
                    self.connection = None;
                    metrics.failed_attempts.with_label_values(&[reason]).inc();
                    if attempt == max {
                        metrics.dropped.with_label_values(&["attempts"]).inc();
                        tracing::warn!(%id, attempts = max, %error, "giving up exporting a report event");
                        return;
                    }
                    let wait = self.config.backoff(attempt);
                    tracing::debug!(%id, attempt, reason, %error, ?wait, "export attempt failed; retrying");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

/// The event of an outbox entry, read from the store; `None` when its task or report is gone
/// (removed by retention meanwhile).
fn exported(store: &Store, entry: &Pending) -> Result<Option<Exported>, kdoctor_store::StoreError> {
    let Some(task) = store.task(entry.task) else {
        return Ok(None);
    };
    let Some(report) = store.report(entry.task, entry.round, &entry.node)? else {
        return Ok(None);
    };
    Ok(Some(Exported {
        kind: task.kind,
        name: task.name,
        uid: report.task_uid.clone().unwrap_or(task.uid),
        report,
        stored_at: entry.stored_at,
    }))
}

/// Reads the outbox in order into the in-memory queue while it has room. Entries whose report
/// is gone, or whose id was already sent, are removed at once.
async fn feed(store: Arc<Store>, hook: ExportHook, metrics: ExportMetrics, finished: Done) {
    let mut after: Option<u64> = None;
    loop {
        // Registered before looking, so a report stored in between is not missed.
        let wanted = hook.shared.wanted.notified();
        let room = hook.room();
        let pending = if room > 0 {
            store.outbox(after, room)
        } else {
            Vec::new()
        };
        if pending.is_empty() {
            // Also looked at now and then: a wake-up lost to a race costs at most this.
            let _ = tokio::time::timeout(Duration::from_secs(5), wanted).await;
            continue;
        }
        let reading = store.clone();
        let read = tokio::task::spawn_blocking(move || {
            pending
                .into_iter()
                .map(|entry| {
                    let item = exported(&reading, &entry);
                    (entry.seq, item)
                })
                .collect::<Vec<_>>()
        })
        .await;
        let Ok(read) = read else {
            continue;
        };
        for (seq, item) in read {
            after = Some(seq);
            let done = match item {
                Ok(Some(item)) => hook.offer(seq, item) == Offered::Duplicate,
                Ok(None) => {
                    metrics.dropped.with_label_values(&["removed"]).inc();
                    true
                }
                Err(e) => {
                    metrics.dropped.with_label_values(&["read"]).inc();
                    tracing::error!(seq, error = %e, "cannot read a report to export");
                    true
                }
            };
            if done {
                let _ = finished.send(seq);
            }
        }
    }
}

/// Where delivered (or given up) entries go to be removed from the outbox.
type Done = tokio::sync::mpsc::UnboundedSender<u64>;

/// Removes delivered entries from the outbox, many in one write: with replicas each write is
/// an entry of the replicated log. Not waited for by the senders: an entry whose removal is
/// lost is delivered once more, and receivers de-duplicate by event id.
async fn finish(writes: Writes, mut done: tokio::sync::mpsc::UnboundedReceiver<u64>) {
    while let Some(first) = done.recv().await {
        let mut seqs = vec![first];
        while seqs.len() < 1000
            && let Ok(seq) = done.try_recv()
        {
            seqs.push(seq);
        }
        if let Err(e) = writes.outbox_done(seqs).await {
            tracing::error!(error = %e, "cannot remove exported reports from the outbox");
        }
    }
}

/// Starts exporting the reports `store` keeps from now on, and those it kept from before:
/// returns the harvester's hook and the future that sends (run it as a task; dropping it
/// stops sending, and what was not acknowledged stays in the outbox).
pub fn start(
    config: ExportConfig,
    registry: &Registry,
    writes: Writes,
) -> (ExportHook, impl Future<Output = ()> + Send + 'static) {
    let store = writes.store().clone();
    let metrics = ExportMetrics::new(registry);
    let workers = config.workers.max(1);
    store.enable_outbox(config.queue as u64);
    let (hook, queue) = queue(
        workers * IN_MEMORY_PER_WORKER,
        config.remember,
        metrics.clone(),
    );
    let config = Arc::new(config);
    tracing::info!(url = %config.url, outbox = config.queue, "exporting reports");
    let (done_tx, done) = tokio::sync::mpsc::unbounded_channel();
    let feeder = feed(store, hook.clone(), metrics.clone(), done_tx.clone());
    let run = async move {
        let mut set = tokio::task::JoinSet::new();
        set.spawn(feeder);
        set.spawn(finish(writes, done));
        for _ in 0..workers {
            let queue = queue.clone();
            let metrics = metrics.clone();
            let done = done_tx.clone();
            let mut worker = Worker {
                config: config.clone(),
                connection: None,
            };
            set.spawn(async move {
                loop {
                    let (seq, item) = queue.next().await;
                    worker.deliver(item, &metrics).await;
                    let _ = done.send(seq);
                }
            });
        }
        while set.join_next().await.is_some() {}
    };
    (hook, run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kdoctor_api::task::TaskKind;

    fn item(node: &str, round: i64) -> Exported {
        Exported {
            kind: TaskKind::NetReach,
            name: "reach".into(),
            uid: "uid".into(),
            report: kdoctor_api::fixtures::net_reach_report(node, round, 1, 1),
            stored_at: jiff::Timestamp::UNIX_EPOCH,
        }
    }

    fn value(text: &str, name: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    fn scrape(registry: &Registry) -> String {
        let mut out = Vec::new();
        prometheus::Encoder::encode(
            &prometheus::TextEncoder::new(),
            &registry.gather(),
            &mut out,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn a_full_queue_drops_the_oldest_event_and_counts_it() {
        let registry = Registry::new();
        let (hook, queue) = queue(3, 100, ExportMetrics::new(&registry));
        for node in ["n1", "n2", "n3"] {
            assert_eq!(hook.offer(0, item(node, 1)), Offered::Queued);
        }
        assert_eq!(hook.offer(0, item("n4", 1)), Offered::QueuedDroppingOldest);
        assert_eq!(hook.offer(0, item("n5", 1)), Offered::QueuedDroppingOldest);
        assert_eq!(hook.len(), 3);
        let text = scrape(&registry);
        assert_eq!(
            value(
                &text,
                "kdoctor_controller_export_dropped_total{reason=\"queue_full\"}"
            ),
            2.0,
            "{text}"
        );
        assert_eq!(value(&text, "kdoctor_controller_export_queue_length"), 3.0);
        // The newest three remain, oldest first.
        let mut left = Vec::new();
        for _ in 0..3 {
            left.push(queue.next().await.1.report.node_name);
        }
        assert_eq!(left, ["n3", "n4", "n5"]);
        assert!(hook.is_empty());
        assert_eq!(
            value(&scrape(&registry), "kdoctor_controller_export_queue_length"),
            0.0
        );
    }

    #[tokio::test]
    async fn a_report_offered_twice_is_queued_once() {
        let registry = Registry::new();
        let (hook, queue) = queue(10, 100, ExportMetrics::new(&registry));
        assert_eq!(hook.offer(0, item("n1", 1)), Offered::Queued);
        assert_eq!(hook.offer(0, item("n1", 1)), Offered::Duplicate);
        let _ = queue.next().await;
        // Also after it left the queue (sent).
        assert_eq!(hook.offer(0, item("n1", 1)), Offered::Duplicate);
        assert_eq!(hook.offer(0, item("n1", 2)), Offered::Queued);
        assert_eq!(
            value(
                &scrape(&registry),
                "kdoctor_controller_export_duplicates_total"
            ),
            2.0
        );
    }

    #[tokio::test]
    async fn only_the_last_remembered_ids_are_deduplicated() {
        let (hook, _queue) = queue(10, 2, ExportMetrics::new(&Registry::new()));
        // `remember` is at least the capacity: 10 here.
        for n in 0..11 {
            hook.offer(0, item(&format!("n{n}"), 1));
        }
        // n0 was forgotten (n1..n10 are the last ten): queued again, the queue being full.
        assert_eq!(hook.offer(0, item("n0", 1)), Offered::QueuedDroppingOldest);
        assert_eq!(hook.offer(0, item("n10", 1)), Offered::Duplicate);
    }

    #[tokio::test]
    async fn a_waiting_worker_is_woken_by_an_offer() {
        let (hook, queue) = queue(10, 100, ExportMetrics::new(&Registry::new()));
        let waiter = tokio::spawn(async move { queue.next().await.1.report.node_name });
        tokio::task::yield_now().await;
        hook.offer(0, item("n1", 1));
        let got = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(got, "n1");
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        let ca = test_ca();
        let mut config =
            ExportConfig::new("https://example.test/r", "s", Some(ca.as_bytes()), false).unwrap();
        config.backoff_initial = Duration::from_millis(100);
        config.backoff_max = Duration::from_secs(1);
        let waits: Vec<u128> = (1..=7).map(|a| config.backoff(a).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(config.backoff(u32::MAX), Duration::from_secs(1));
    }

    /// A CA certificate in PEM, for configurations that need one.
    fn test_ca() -> String {
        kdoctor_transport::pki::Ca::generate("export-test")
            .unwrap()
            .pem
            .cert
    }

    #[test]
    fn only_https_unless_plain_http_is_allowed_and_a_secret_is_required() {
        let ca = test_ca();
        let ca = Some(ca.as_bytes());
        let error = ExportConfig::new("http://r.test/x", "s", ca, false).unwrap_err();
        assert!(
            error.to_string().contains("plain HTTP is refused"),
            "{error}"
        );
        assert!(ExportConfig::new("http://r.test/x", "s", ca, true).is_ok());
        assert!(ExportConfig::new("https://r.test/x", "s", ca, false).is_ok());
        let error = ExportConfig::new("ftp://r.test/x", "s", ca, false).unwrap_err();
        assert!(error.to_string().contains("https://"), "{error}");
        let error = ExportConfig::new("https://r.test/x", "", ca, false).unwrap_err();
        assert!(matches!(error, ExportError::EmptySecret), "{error}");
        let error =
            ExportConfig::new("https://r.test/x", "s", Some(b"not a PEM"), false).unwrap_err();
        assert!(error.to_string().contains("--export-ca"), "{error}");
    }

    #[test]
    fn server_errors_and_throttling_are_retried_other_refusals_are_not() {
        for code in [500, 502, 503, 504, 408, 425, 429] {
            assert!(retryable(StatusCode::from_u16(code).unwrap()), "{code}");
        }
        for code in [400, 401, 403, 404, 413, 301, 302] {
            assert!(!retryable(StatusCode::from_u16(code).unwrap()), "{code}");
        }
    }
}
