//! A router over a scratch store, a stand-in for the Kubernetes reviews, and request helpers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use futures::future::BoxFuture;
use http_body_util::BodyExt;
use jiff::Timestamp;
use kdoctor_api::fixtures::net_reach_report;
use kdoctor_api::task::TaskKind;
use kdoctor_apiserver::auth::Auth;
use kdoctor_apiserver::auth::config::AuthnConfig;
use kdoctor_apiserver::auth::review::{Attributes, Decision, Reviews};
use kdoctor_apiserver::auth::user::User;
use kdoctor_apiserver::metrics::ApiMetrics;
use kdoctor_apiserver::{AppState, router};
use kdoctor_store::{IncarnationId, RoundResult, RoundSummary, Store, StoreConfig, TaskRecord};
use tower::ServiceExt;

/// Tokens and access rules answered without a cluster; records every access review.
#[derive(Default)]
pub struct FakeReviews {
    /// token → user.
    pub tokens: HashMap<String, User>,
    /// (user, verb) pairs allowed.
    pub allowed: Vec<(String, String)>,
    /// Whether reviews fail (the Kubernetes API is down).
    pub down: bool,
    /// Whether only SubjectAccessReviews fail (tokens still reviewed).
    pub access_down: bool,
    /// Every access review asked.
    pub asked: Mutex<Vec<(String, Attributes)>>,
    /// The users of those reviews, in full.
    pub users: Mutex<Vec<User>>,
}

impl Reviews for FakeReviews {
    fn token_review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<User>, String>> {
        Box::pin(async move {
            if self.down {
                return Err("connection refused".into());
            }
            Ok(self.tokens.get(token).cloned())
        })
    }

    fn access_review<'a>(
        &'a self,
        user: &'a User,
        attributes: &'a Attributes,
    ) -> BoxFuture<'a, Result<Decision, String>> {
        Box::pin(async move {
            self.asked
                .lock()
                .expect("lock")
                .push((user.name.clone(), attributes.clone()));
            self.users.lock().expect("lock").push(user.clone());
            if self.down || self.access_down {
                return Err("connection refused".into());
            }
            // Non-resource paths need an explicit "path:<path>" grant.
            let verb = match attributes {
                Attributes::Resource { verb, .. } => verb.clone(),
                Attributes::NonResource { path, .. } => format!("path:{path}"),
            };
            // A user whose extra carries scopes (a scoped token), or whose uid is revoked, is
            // denied whatever its name: the answer depends on the whole user.
            let scoped =
                user.extra.contains_key("scopes") || user.uid.as_deref() == Some("revoked");
            let allowed = !scoped
                && self
                    .allowed
                    .iter()
                    .any(|(u, v)| *u == user.name && (*v == verb || v == "*"));
            // A refusal without a reason, as kube-apiserver's RBAC gives it when no rule
            // matches (real_rbac compares the message with kube-apiserver's own).
            Ok(Decision {
                allowed,
                reason: String::new(),
            })
        })
    }
}

/// The usual reviews: `admin-token` (user admin, every verb), `bob-token` (get and list), and
/// bob with a scoped token (`bob-scoped-token`) or a revoked uid (`bob-revoked-token`): denied everything.
pub fn reviews() -> FakeReviews {
    FakeReviews {
        tokens: HashMap::from([
            ("admin-token".to_string(), User::new("admin", vec![])),
            (
                "bob-token".to_string(),
                User::new("bob", vec!["dev".to_string()]),
            ),
            (
                "bob-scoped-token".to_string(),
                User {
                    extra: [("scopes".to_string(), vec!["user:info".to_string()])].into(),
                    ..User::new("bob", vec!["dev".to_string()])
                },
            ),
            (
                "bob-revoked-token".to_string(),
                User {
                    uid: Some("revoked".to_string()),
                    ..User::new("bob", vec!["dev".to_string()])
                },
            ),
            (
                "root-token".to_string(),
                User::new("root", vec!["system:masters".to_string()]),
            ),
        ]),
        allowed: vec![
            ("admin".into(), "*".into()),
            ("bob".into(), "get".into()),
            ("bob".into(), "list".into()),
        ],
        ..FakeReviews::default()
    }
}

/// A test server: router, its store, the reviews.
pub struct Server {
    pub router: Router,
    pub store: Arc<Store>,
    pub state: AppState,
    pub reviews: Arc<FakeReviews>,
    pub _dir: PathBuf,
}

pub fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kdoctor-apiserver-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A server over an empty store.
pub fn server(test: &str) -> Server {
    server_with(test, reviews())
}

pub fn server_with(test: &str, reviews: FakeReviews) -> Server {
    let dir = scratch(test);
    let store = Arc::new(Store::open(StoreConfig::new(&dir)).expect("store opens"));
    let reviews = Arc::new(reviews);
    let auth = Arc::new(Auth::delegated(AuthnConfig::default(), reviews.clone()));
    let (_tx, shutdown) = tokio::sync::watch::channel(false);
    std::mem::forget(_tx);
    let state = AppState::new(auth, Arc::new(ApiMetrics::new()), shutdown);
    state.set_store(store.clone());
    Server {
        router: router(state.clone()),
        store,
        state,
        reviews,
        _dir: dir,
    }
}

pub fn record(kind: TaskKind, name: &str, uid: &str) -> TaskRecord {
    TaskRecord {
        kind,
        name: name.to_string(),
        uid: uid.to_string(),
        created: Timestamp::now() - jiff::SignedDuration::from_mins(5),
        spec: serde_json::json!({"request": {"qps": 10, "durationInSecond": 10, "perRequestTimeoutInMS": 1000}}),
        status: Some(serde_json::json!({"expectedRound": 3, "doneRound": 2, "finish": false})),
        deleted: None,
    }
}

/// Fills the store: netreach/task (two incarnations: an old deleted one, a new one with rounds 1
/// and 2 on two nodes, round 2 failed on node-b) and netdns/dns (no rounds).
pub fn fill(store: &Store) -> (IncarnationId, IncarnationId) {
    let (old, _) = store
        .record_task(&record(
            TaskKind::NetReach,
            "task",
            "0ld1ncar-0000-0000-0000-000000000001",
        ))
        .expect("old");
    store
        .put_report(old, &net_reach_report("node-a", 1, 3, 1))
        .expect("put");
    store.mark_deleted(old, Timestamp::now()).expect("deleted");
    let (new, _) = store
        .record_task(&record(
            TaskKind::NetReach,
            "task",
            "c0ffee00-1111-2222-3333-444444444444",
        ))
        .expect("new");
    for round in 1..=2 {
        store
            .put_report(
                new,
                &net_reach_report("node-a", round, 3, round as u64 * 10),
            )
            .expect("put");
        let mut b = net_reach_report("node-b", round, 3, round as u64 * 10 + 1);
        if round == 2 {
            b.round_result = "fail".into();
        }
        store.put_report(new, &b).expect("put");
    }
    store
        .put_round(
            new,
            &RoundSummary {
                round: 2,
                result: RoundResult::Fail,
                start: Timestamp::now(),
                end: Some(Timestamp::now()),
                expected_nodes: 3,
                succeeded_nodes: 1,
                failed_nodes: 1,
                not_reported: vec!["node-c".into()],
                failure_reason: Some("some agents failed".into()),
            },
        )
        .expect("summary");
    store
        .record_task(&record(
            TaskKind::Netdns,
            "dns",
            "d0d0d0d0-0000-0000-0000-000000000000",
        ))
        .expect("dns");
    (old, new)
}

pub const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

/// A response, read whole.
pub struct Reply {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends a request as the user of `token` (none: anonymous).
pub async fn send(
    router: &Router,
    method: Method,
    uri: &str,
    token: Option<&str>,
    accept: Option<&str>,
) -> Reply {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::empty()).expect("request"))
        .await
        .expect("answered");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .to_vec();
    Reply {
        status,
        headers,
        body,
    }
}

/// GET as admin.
pub async fn get(router: &Router, uri: &str) -> Reply {
    send(router, Method::GET, uri, Some("admin-token"), None).await
}

/// The value of the sample on `/metrics` whose line starts with `sample` (name and labels).
pub async fn metric(router: &Router, sample: &str) -> String {
    let metrics = get(router, "/metrics").await.text();
    metrics
        .lines()
        .find(|l| l.starts_with(sample))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no {sample} in:\n{metrics}"))
        .to_string()
}

pub const BASE: &str = "/apis/system.kdoctor.io/v1beta1/kdoctorreports";

/// A GET as kubectl sends it (`Accept-Encoding: gzip`) with the admin token: asserts the answer
/// is gzip-encoded and returns it decoded.
pub async fn get_gzip(router: &Router, uri: &str) -> Vec<u8> {
    let request = Request::builder()
        .uri(uri)
        .header("authorization", "Bearer admin-token")
        .header("accept-encoding", "gzip")
        .body(Body::empty())
        .expect("request");
    let response = tower::ServiceExt::oneshot(router.clone(), request)
        .await
        .expect("answered");
    assert_eq!(response.headers()["content-encoding"], "gzip", "{uri}");
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let mut decoded = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&body[..]), &mut decoded)
        .expect("gzip");
    decoded
}

/// `curl` GET with an optional client certificate and headers; returns (HTTP code, body).
pub fn curl(url: &str, ca: &Path, cert: Option<(&Path, &Path)>, headers: &[&str]) -> (u16, String) {
    curl_method("GET", url, ca, cert, headers)
}

/// `curl -X METHOD` with an optional client certificate and headers; returns (HTTP code, body).
pub fn curl_method(
    method: &str,
    url: &str,
    ca: &Path,
    cert: Option<(&Path, &Path)>,
    headers: &[&str],
) -> (u16, String) {
    let mut command = Command::new("curl");
    command
        .args([
            "-s",
            "-X",
            method,
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "--cacert",
        ])
        .arg(ca);
    if let Some((c, k)) = cert {
        command.arg("--cert").arg(c).arg("--key").arg(k);
    }
    for h in headers {
        command.args(["-H", h]);
    }
    let out = command.arg(url).output().expect("curl runs (install curl)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A real control plane of its own with the install's namespace `kdoctor` (no nodes: only the
/// API is used), and its admin client.
pub async fn control_plane() -> (kube_sim::testcluster::TestCluster, kube::Client) {
    let sim =
        kube_sim::testcluster::TestCluster::start(&kube_sim::testcluster::TestClusterOptions {
            nodes: 0,
            ..Default::default()
        })
        .expect("a test cluster (hack/test.sh builds what it needs)");
    let client = sim.client().await.expect("client");
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "kdoctor"}})).unwrap();
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&kube::api::PostParams::default(), &ns)
        .await
        .expect("namespace");
    (sim, client)
}
