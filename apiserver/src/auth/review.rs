//! Delegated decisions: TokenReview for bearer tokens and SubjectAccessReview for authorization,
//! each cached for 10 seconds (allowed and denied alike), as the Go server does.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use super::user::User;

/// How long a review's answer is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(10);

/// What a request wants to do, for a SubjectAccessReview.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Attributes {
    /// A verb on the resource.
    Resource {
        /// Verb.
        verb: String,
        /// Object name, if any.
        name: Option<String>,
    },
    /// A verb on a path.
    NonResource {
        /// Lower-case HTTP method.
        verb: String,
        /// The path.
        path: String,
    },
}

/// An authorization answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether it is allowed.
    pub allowed: bool,
    /// The authorizer's reason (appended to the 403 message).
    pub reason: String,
}

/// Reviews delegated to the Kubernetes API (a seam: tests use their own).
pub trait Reviews: Send + Sync {
    /// Authenticates a bearer token; `None` when it is not valid.
    fn token_review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<User>, String>>;
    /// Authorizes a request.
    fn access_review<'a>(
        &'a self,
        user: &'a User,
        attributes: &'a Attributes,
    ) -> BoxFuture<'a, Result<Decision, String>>;
}

/// A time-limited cache of answers.
pub struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: std::hash::Hash + Eq + Clone, V: Clone> TtlCache<K, V> {
    /// An empty cache.
    pub fn new() -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// A fresh answer, if any.
    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(key)
            .filter(|(at, _)| at.elapsed() < CACHE_TTL)
            .map(|(_, v)| v.clone())
    }

    /// Keeps an answer (dropping stale ones now and then so the cache stays small).
    pub fn put(&self, key: K, value: V) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() > 10_000 {
            entries.retain(|_, (at, _)| at.elapsed() < CACHE_TTL);
        }
        entries.insert(key, (Instant::now(), value));
    }
}

impl<K: std::hash::Hash + Eq + Clone, V: Clone> Default for TtlCache<K, V> {
    fn default() -> Self {
        TtlCache::new()
    }
}
