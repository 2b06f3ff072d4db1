//! A small stand-in for the Kubernetes API: the extension-apiserver-authentication ConfigMap
//! (list and watch, so kube-rs's watcher can follow it), TokenReview and SubjectAccessReview.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// What the fake answers.
pub struct FakeKube {
    /// Data of the ConfigMap.
    pub configmap: Mutex<BTreeMap<String, String>>,
    rv: Mutex<u64>,
    changes: broadcast::Sender<Value>,
    /// token → (user, groups).
    pub tokens: BTreeMap<String, (String, Vec<String>)>,
    /// (user, verb) allowed.
    pub allowed: Vec<(String, String)>,
    /// Every SubjectAccessReview received.
    pub reviews: Mutex<Vec<Value>>,
}

impl FakeKube {
    fn configmap_object(&self) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system",
                         "resourceVersion": self.rv.lock().expect("lock").to_string()},
            "data": *self.configmap.lock().expect("lock"),
        })
    }

    /// Replaces the ConfigMap's data and tells watchers.
    pub fn update(&self, data: BTreeMap<String, String>) {
        *self.configmap.lock().expect("lock") = data;
        *self.rv.lock().expect("lock") += 1;
        let _ = self
            .changes
            .send(json!({"type": "MODIFIED", "object": self.configmap_object()}));
    }
}

async fn configmaps(
    State(fake): State<Arc<FakeKube>>,
    RawQuery(query): RawQuery,
) -> axum::response::Response {
    let query = query.unwrap_or_default();
    if query.contains("watch=true") || query.contains("watch=1") {
        let rx = fake.changes.subscribe();
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            let event = rx.recv().await.ok()?;
            let mut line = serde_json::to_vec(&event).unwrap_or_default();
            line.push(b'\n');
            Some((Ok::<_, std::io::Error>(Bytes::from(line)), rx))
        });
        return axum::response::Response::new(Body::from_stream(stream));
    }
    let list = json!({
        "apiVersion": "v1",
        "kind": "ConfigMapList",
        "metadata": {"resourceVersion": fake.rv.lock().expect("lock").to_string()},
        "items": [fake.configmap_object()],
    });
    axum::Json(list).into_response()
}

async fn token_review(
    State(fake): State<Arc<FakeKube>>,
    axum::Json(review): axum::Json<Value>,
) -> axum::Json<Value> {
    let token = review["spec"]["token"].as_str().unwrap_or("");
    let status = match fake.tokens.get(token) {
        Some((user, groups)) => {
            json!({"authenticated": true, "user": {"username": user, "groups": groups}})
        }
        None => json!({"authenticated": false}),
    };
    axum::Json(
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": review["spec"], "status": status}),
    )
}

async fn access_review(
    State(fake): State<Arc<FakeKube>>,
    axum::Json(review): axum::Json<Value>,
) -> axum::Json<Value> {
    fake.reviews.lock().expect("lock").push(review.clone());
    let user = review["spec"]["user"].as_str().unwrap_or("");
    let verb = review["spec"]["resourceAttributes"]["verb"]
        .as_str()
        .or(review["spec"]["nonResourceAttributes"]["verb"].as_str())
        .unwrap_or("");
    let allowed = fake
        .allowed
        .iter()
        .any(|(u, v)| u == user && (v == verb || v == "*"));
    let reason = if allowed { "" } else { "denied by the test" };
    axum::Json(json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": review["spec"],
        "status": {"allowed": allowed, "reason": reason},
    }))
}

/// Serves the fake on 127.0.0.1 (plain HTTP) and returns its URL.
pub async fn start(
    configmap: BTreeMap<String, String>,
    tokens: BTreeMap<String, (String, Vec<String>)>,
    allowed: Vec<(String, String)>,
) -> (String, Arc<FakeKube>) {
    let (changes, _) = broadcast::channel(16);
    let fake = Arc::new(FakeKube {
        configmap: Mutex::new(configmap),
        rv: Mutex::new(1),
        changes,
        tokens,
        allowed,
        reviews: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/api/v1/namespaces/kube-system/configmaps", get(configmaps))
        .route(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            post(token_review),
        )
        .route(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            post(access_review),
        )
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), fake)
}
