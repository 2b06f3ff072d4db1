//! Counting API requests by user, verb and resource (like the real server's
//! `apiserver_request_total`), so tests and benchmarks can say how many requests a client made.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// One kind of request.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    /// Authenticated user name.
    pub user: String,
    /// Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: String,
    /// `<plural>[/<subresource>]`, or the path for non-resource requests.
    pub resource: String,
}

/// Request counters.
#[derive(Default)]
pub struct RequestLog {
    counts: Mutex<BTreeMap<RequestKey, u64>>,
}

impl RequestLog {
    /// Counts one request.
    pub fn record(&self, key: RequestKey) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default() += 1;
    }

    /// Every counter so far.
    pub fn snapshot(&self) -> BTreeMap<RequestKey, u64> {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Requests by `user` so far.
    pub fn total_for(&self, user: &str) -> u64 {
        self.snapshot()
            .iter()
            .filter(|(k, _)| k.user == user)
            .map(|(_, n)| n)
            .sum()
    }
}

/// The verb of a request to a resource path, as Kubernetes names it.
pub fn verb(method: &str, named: bool, watch: bool) -> &'static str {
    match (method, named, watch) {
        (_, _, true) => "watch",
        ("GET", true, _) => "get",
        ("GET", false, _) => "list",
        ("POST", _, _) => "create",
        ("PUT", _, _) => "update",
        ("PATCH", _, _) => "patch",
        ("DELETE", true, _) => "delete",
        ("DELETE", false, _) => "deletecollection",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_and_totals() {
        assert_eq!(verb("GET", false, true), "watch");
        assert_eq!(verb("GET", true, false), "get");
        assert_eq!(verb("DELETE", false, false), "deletecollection");
        let log = RequestLog::default();
        for user in ["a", "a", "b"] {
            log.record(RequestKey {
                user: user.into(),
                verb: "get".into(),
                resource: "pods".into(),
            });
        }
        assert_eq!(log.total_for("a"), 2);
        assert_eq!(log.total_for("b"), 1);
    }
}
