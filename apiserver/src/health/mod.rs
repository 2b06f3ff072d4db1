//! `/healthz`, `/livez`, `/readyz` (with `?verbose`, `?exclude=` and per-check paths), in the Go
//! server's format. Ready only once the store is open and, with delegated authentication, the
//! `extension-apiserver-authentication` ConfigMap has been loaded.

use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::kube::query::Query;

pub mod routes;

/// The readiness facts the checks look at.
#[derive(Debug)]
pub struct Health {
    store_open: AtomicBool,
    authentication_loaded: AtomicBool,
    replica_ready: AtomicBool,
    stopping: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            store_open: AtomicBool::new(false),
            authentication_loaded: AtomicBool::new(true),
            replica_ready: AtomicBool::new(true),
            stopping: AtomicBool::new(false),
        }
    }
}

impl Health {
    /// The store opened (or closed).
    pub fn set_store_open(&self, open: bool) {
        self.store_open.store(open, Ordering::SeqCst);
    }

    /// Whether the authentication configuration is loaded (false while waiting for the ConfigMap).
    pub fn set_authentication_loaded(&self, loaded: bool) {
        self.authentication_loaded.store(loaded, Ordering::SeqCst);
    }

    /// Whether this replica of the replicated store can serve reads that see every
    /// acknowledged write (it reached the leader lately); true without replication.
    pub fn set_replica_ready(&self, ready: bool) {
        self.replica_ready.store(ready, Ordering::SeqCst);
    }

    /// The server is stopping: it leaves the Service's endpoints (not ready) while it still
    /// answers what comes meanwhile.
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Whether every readiness check passes.
    pub fn ready(&self) -> bool {
        self.checks("readyz", false).iter().all(|(_, ok)| *ok)
    }

    fn checks(&self, endpoint: &str, store_stopped: bool) -> Vec<(&'static str, bool)> {
        // A store stopped on an I/O error (a full disk) takes no write until reopened: the
        // process must restart, so liveness fails too.
        let mut checks = vec![
            ("ping", true),
            ("log", true),
            ("report-store-io", !store_stopped),
        ];
        if endpoint == "readyz" {
            checks.push(("report-store", self.store_open.load(Ordering::SeqCst)));
            checks.push((
                "authentication-configuration",
                self.authentication_loaded.load(Ordering::SeqCst),
            ));
            checks.push((
                "replicated-store",
                self.replica_ready.load(Ordering::SeqCst),
            ));
            checks.push(("shutdown", !self.stopping.load(Ordering::SeqCst)));
        }
        checks
    }
}

fn text(code: StatusCode, body: String) -> Response {
    let mut response = (code, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The answer of `endpoint` (with `only`: of that one check) given the readiness facts and
/// whether the store stopped on an I/O error.
pub fn answer(
    health: &Health,
    store_stopped: bool,
    endpoint: &str,
    raw: Option<&str>,
    only: Option<&str>,
) -> Response {
    let query = Query::parse(raw);
    let verbose = query.get("verbose").is_some();
    let excluded: Vec<&str> = query
        .get("exclude")
        .map(|e| e.split(',').collect())
        .unwrap_or_default();
    let checks = health.checks(endpoint, store_stopped);
    if let Some(name) = only {
        return match checks.iter().find(|(n, _)| *n == name) {
            Some((_, true)) => text(StatusCode::OK, "ok".into()),
            Some((_, false)) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal server error: {name} check failed\n"),
            ),
            None => text(StatusCode::NOT_FOUND, "404 page not found\n".into()),
        };
    }
    let mut lines = Vec::new();
    let mut failed = false;
    for (name, ok) in &checks {
        if excluded.contains(name) {
            lines.push(format!("[+]{name} excluded: ok"));
        } else if *ok {
            lines.push(format!("[+]{name} ok"));
        } else {
            failed = true;
            lines.push(format!("[-]{name} failed: reason withheld"));
        }
    }
    for name in excluded
        .iter()
        .filter(|e| !checks.iter().any(|(n, _)| n == *e))
    {
        lines.push(format!(
            "warn: some health checks cannot be excluded: no matches for \"{name}\""
        ));
    }
    if failed {
        lines.push(format!("{endpoint} check failed"));
        return text(StatusCode::INTERNAL_SERVER_ERROR, lines.join("\n") + "\n");
    }
    if verbose {
        lines.push(format!("{endpoint} check passed"));
        text(StatusCode::OK, lines.join("\n") + "\n")
    } else {
        text(StatusCode::OK, "ok".into())
    }
}

/// The health endpoints, as the Go server names them.
pub const ENDPOINTS: [&str; 3] = ["healthz", "livez", "readyz"];
