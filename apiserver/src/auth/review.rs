//! Delegated decisions: TokenReview for bearer tokens and SubjectAccessReview for authorization,
//! each cached for 10 seconds (allowed and denied alike), as the Go server does.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use super::user::User;

/// How long a review's answer is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// The most answers a cache keeps (a bound on memory whatever clients send).
pub const CACHE_CAPACITY: usize = 10_000;

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

    /// Keeps an answer. Stale ones are dropped when the cache is full, and when fresh ones alone
    /// fill it (a client sending a new token each time) the oldest goes: the cache never holds
    /// more than [`CACHE_CAPACITY`] answers.
    pub fn put(&self, key: K, value: V) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= CACHE_CAPACITY && !entries.contains_key(&key) {
            entries.retain(|_, (at, _)| at.elapsed() < CACHE_TTL);
            if entries.len() >= CACHE_CAPACITY {
                let oldest = entries
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    entries.remove(&oldest);
                }
            }
        }
        entries.insert(key, (Instant::now(), value));
    }

    /// How many answers are kept.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no answer is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: std::hash::Hash + Eq + Clone, V: Clone> Default for TtlCache<K, V> {
    fn default() -> Self {
        TtlCache::new()
    }
}

#[cfg(test)]
mod tests {
    use super::{CACHE_CAPACITY, TtlCache};

    #[test]
    fn a_cache_never_grows_past_its_capacity() {
        let cache = TtlCache::new();
        for i in 0..CACHE_CAPACITY + 500 {
            cache.put(format!("token-{i}"), i);
        }
        assert_eq!(cache.len(), CACHE_CAPACITY);
        // The newest answer is kept.
        assert_eq!(
            cache.get(&format!("token-{}", CACHE_CAPACITY + 499)),
            Some(CACHE_CAPACITY + 499)
        );
        // Replacing a kept answer evicts nothing.
        cache.put(format!("token-{}", CACHE_CAPACITY + 499), 1);
        assert_eq!(cache.len(), CACHE_CAPACITY);
    }
}
