//! Serialized objects kept for repeated GETs. A stored round never changes and every change
//! to a task bumps its resource version, so an object's bytes are fully determined by its
//! name, its incarnation and that version: nothing ever needs invalidating, old entries simply
//! stop being asked for and age out. Serving a hit skips reading and decompressing the round
//! from the store, which is most of the cost of a GET of a large report.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use bytes::Bytes;
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// Bytes the cache holds at most by default.
pub const DEFAULT_CAPACITY: usize = 32 * 1024 * 1024;
/// Objects larger than this are streamed and never cached (memory must not grow with them).
pub const DEFAULT_MAX_OBJECT: usize = 4 * 1024 * 1024;

/// What identifies an object's bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    /// The object's name as served (names of one incarnation differ in `metadata.name`).
    pub name: String,
    /// The store's id of the incarnation.
    pub incarnation: u64,
    /// The task's resource version when the object was written.
    pub resource_version: u64,
    /// The store's generation (a follower's snapshot may reuse resource versions).
    pub generation: u64,
    /// Whether these are the gzip-encoded bytes.
    pub gzip: bool,
}

impl ObjectKey {
    /// The key of the identity-encoded object `target` names, as it is now, in a store of
    /// `generation`.
    pub fn of(target: &super::names::Target, generation: u64) -> ObjectKey {
        ObjectKey {
            name: target.name.clone(),
            incarnation: target.task.id.0,
            resource_version: target.task.resource_version,
            generation,
            gzip: false,
        }
    }

    /// The key of the same object, gzip-encoded.
    pub fn gzipped(&self) -> ObjectKey {
        ObjectKey {
            gzip: true,
            ..self.clone()
        }
    }
}

struct Entry {
    bytes: Bytes,
    used: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<ObjectKey, Entry>,
    /// Last use → key: the oldest is evicted first.
    by_use: BTreeMap<u64, ObjectKey>,
    clock: u64,
    size: usize,
}

/// A least-recently-used cache of serialized objects, bounded in bytes.
pub struct ObjectCache {
    capacity: usize,
    max_object: usize,
    inner: Mutex<Inner>,
    lookups: IntCounterVec,
    encodings: IntCounter,
    bytes: IntGauge,
}

impl ObjectCache {
    /// A cache of at most `capacity` bytes that keeps objects up to `max_object` bytes.
    pub fn new(capacity: usize, max_object: usize) -> ObjectCache {
        ObjectCache {
            capacity,
            max_object: max_object.min(capacity),
            inner: Mutex::new(Inner::default()),
            lookups: IntCounterVec::new(
                Opts::new(
                    "kdoctor_apiserver_object_cache_lookups_total",
                    "GETs of report objects answered from the serialized-object cache (hit) or from the store (miss).",
                ),
                &["result"],
            )
            .expect("valid metric"),
            encodings: IntCounter::new(
                "kdoctor_apiserver_object_cache_gzip_encodings_total",
                "Cached objects gzip-encoded for a client that takes gzip (once per object version).",
            )
            .expect("valid metric"),
            bytes: IntGauge::new(
                "kdoctor_apiserver_object_cache_bytes",
                "Bytes of serialized objects held by the cache.",
            )
            .expect("valid metric"),
        }
    }

    /// Registers the cache's metrics.
    pub fn register(&self, registry: &Registry) {
        let _ = registry.register(Box::new(self.lookups.clone()));
        let _ = registry.register(Box::new(self.encodings.clone()));
        let _ = registry.register(Box::new(self.bytes.clone()));
    }

    /// The largest object kept.
    pub fn max_object(&self) -> usize {
        self.max_object
    }

    /// The bytes of `key`, if cached (counts a hit).
    pub fn get(&self, key: &ObjectKey) -> Option<Bytes> {
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        let found = match inner.entries.get_mut(key) {
            Some(entry) => {
                let before = std::mem::replace(&mut entry.used, now);
                let bytes = entry.bytes.clone();
                inner.by_use.remove(&before);
                inner.by_use.insert(now, key.clone());
                Some(bytes)
            }
            None => None,
        };
        drop(inner);
        if found.is_some() {
            self.lookups.with_label_values(&["hit"]).inc();
        }
        found
    }

    /// Counts a gzip encoding of a cached object.
    pub fn count_encoding(&self) {
        self.encodings.inc();
    }

    /// Counts an object served from the store because the cache did not have it.
    pub fn count_miss(&self) {
        self.lookups.with_label_values(&["miss"]).inc();
    }

    /// Keeps `bytes` as the object `key`, evicting the least recently used to make room.
    pub fn insert(&self, key: ObjectKey, bytes: Bytes) {
        if bytes.len() > self.max_object {
            return;
        }
        let mut inner = self.lock();
        if let Some(old) = inner.entries.remove(&key) {
            inner.by_use.remove(&old.used);
            inner.size -= old.bytes.len();
        }
        while inner.size + bytes.len() > self.capacity {
            let Some((_, oldest)) = inner.by_use.pop_first() else {
                break;
            };
            if let Some(gone) = inner.entries.remove(&oldest) {
                inner.size -= gone.bytes.len();
            }
        }
        inner.clock += 1;
        let used = inner.clock;
        inner.size += bytes.len();
        inner.by_use.insert(used, key.clone());
        inner.entries.insert(key, Entry { bytes, used });
        self.bytes.set(inner.size as i64);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The cache holds no invariant a panicking holder could break halfway that matters
        // more than serving: recover the guard.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `bytes` gzip-encoded (default level: done once per object version, then served many times).
pub fn gzip(bytes: &[u8]) -> std::io::Result<Bytes> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 8),
        flate2::Compression::default(),
    );
    encoder.write_all(bytes)?;
    Ok(Bytes::from(encoder.finish()?))
}

impl Default for ObjectCache {
    fn default() -> Self {
        ObjectCache::new(DEFAULT_CAPACITY, DEFAULT_MAX_OBJECT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, rv: u64) -> ObjectKey {
        ObjectKey {
            name: name.to_string(),
            incarnation: 1,
            resource_version: rv,
            generation: 0,
            gzip: false,
        }
    }

    #[test]
    fn a_new_resource_version_is_a_different_object() {
        let cache = ObjectCache::new(1024, 512);
        cache.insert(key("a", 1), Bytes::from_static(b"one"));
        assert_eq!(cache.get(&key("a", 1)).as_deref(), Some(&b"one"[..]));
        assert_eq!(cache.get(&key("a", 2)), None);
        assert_eq!(cache.get(&key("a", 1).gzipped()), None);
        assert_eq!(cache.lookups.with_label_values(&["hit"]).get(), 1);
    }

    #[test]
    fn the_least_recently_used_goes_first_and_size_stays_bounded() {
        let cache = ObjectCache::new(300, 300);
        cache.insert(key("a", 1), Bytes::from(vec![0; 100]));
        cache.insert(key("b", 1), Bytes::from(vec![0; 100]));
        cache.insert(key("c", 1), Bytes::from(vec![0; 100]));
        // `a` used last: `b` is now the oldest.
        assert!(cache.get(&key("a", 1)).is_some());
        cache.insert(key("d", 1), Bytes::from(vec![0; 100]));
        assert!(cache.get(&key("b", 1)).is_none());
        assert!(cache.get(&key("a", 1)).is_some());
        assert!(cache.get(&key("c", 1)).is_some());
        assert!(cache.get(&key("d", 1)).is_some());
        assert_eq!(cache.bytes.get(), 300);
    }

    #[test]
    fn objects_over_the_limit_are_not_kept() {
        let cache = ObjectCache::new(1000, 100);
        cache.insert(key("big", 1), Bytes::from(vec![0; 101]));
        assert!(cache.get(&key("big", 1)).is_none());
        assert_eq!(cache.bytes.get(), 0);
    }

    #[test]
    fn inserting_a_key_again_replaces_it_without_counting_it_twice() {
        let cache = ObjectCache::new(1000, 1000);
        cache.insert(key("a", 1), Bytes::from(vec![0; 100]));
        cache.insert(key("a", 1), Bytes::from(vec![1; 50]));
        assert_eq!(cache.bytes.get(), 50);
        assert_eq!(cache.get(&key("a", 1)).map(|b| b[0]), Some(1));
    }
}
