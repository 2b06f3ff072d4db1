//! Delegated decisions: TokenReview for bearer tokens and SubjectAccessReview for authorization,
//! each cached for 10 seconds (allowed and denied alike), as the Go server does.

use std::hash::{Hash, RandomState};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use hashbrown::{Equivalent, HashMap};

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

/// A cached decision's key, `(User, Attributes)`, as a request has it at hand: found without
/// cloning the user.
pub struct DecisionQuery<'a>(pub &'a User, pub &'a Attributes);

/// Hashes as the tuple does (each field in turn), so that it finds the tuple's entry.
impl Hash for DecisionQuery<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
        self.1.hash(state);
    }
}

impl Equivalent<(User, Attributes)> for DecisionQuery<'_> {
    fn equivalent(&self, key: &(User, Attributes)) -> bool {
        *self.0 == key.0 && *self.1 == key.1
    }
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

/// A time-limited cache of answers. Keyed by what clients send (tokens, user names): hashed
/// with std's randomly seeded SipHash, so that they cannot choose colliding keys.
pub struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V), RandomState>>,
}

impl<K: Hash + Eq + Clone, V: Clone> TtlCache<K, V> {
    /// An empty cache.
    pub fn new() -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::with_hasher(RandomState::new())),
        }
    }

    /// A fresh answer, if any: `key` is the key or a borrowed form of it that hashes and
    /// compares alike.
    pub fn get<Q: Hash + Equivalent<K> + ?Sized>(&self, key: &Q) -> Option<V> {
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

impl<K: Hash + Eq + Clone, V: Clone> Default for TtlCache<K, V> {
    fn default() -> Self {
        TtlCache::new()
    }
}

#[cfg(test)]
mod tests {
    use super::{Attributes, CACHE_CAPACITY, Decision, DecisionQuery, TtlCache};
    use crate::auth::user::User;

    #[test]
    fn a_decision_is_found_by_its_borrowed_key_and_only_by_its_own() {
        let cache = TtlCache::new();
        let alice = User::new("alice", ["dev".to_string()]);
        let get = Attributes::Resource {
            verb: "get".into(),
            name: Some("netreach-a".into()),
        };
        let allowed = Decision {
            allowed: true,
            reason: String::new(),
        };
        cache.put((alice.clone(), get.clone()), allowed.clone());
        assert_eq!(cache.get(&DecisionQuery(&alice, &get)), Some(allowed));
        // Another group, another verb: another decision.
        let other = User::new("alice", ["ops".to_string()]);
        assert_eq!(cache.get(&DecisionQuery(&other, &get)), None);
        let list = Attributes::Resource {
            verb: "list".into(),
            name: None,
        };
        assert_eq!(cache.get(&DecisionQuery(&alice, &list)), None);
    }

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
