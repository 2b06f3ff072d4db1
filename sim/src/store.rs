//! The in-memory object store: objects by storage key, namespace and name; one monotonic
//! resourceVersion for the whole cluster; a bounded event history that watches read from.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::watch;

use crate::error::ApiResult;

/// What a watch event says happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// The object was created.
    Added,
    /// The object was changed.
    Modified,
    /// The object was removed.
    Deleted,
}

impl EventType {
    /// The wire name: ADDED, MODIFIED, DELETED.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change in the store.
#[derive(Debug)]
pub struct StoreEvent {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Storage key of the resource (`core/pods`).
    pub storage: Arc<str>,
    /// Namespace ("" when cluster-scoped).
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// Added, modified or deleted.
    pub kind: EventType,
    /// The object after the change (the last state for a deletion).
    pub object: Arc<Value>,
    /// The object before the change, for selector transitions.
    pub prev: Option<Arc<Value>>,
    /// The object's JSON per served version, encoded once for every watcher (fan-out).
    pub encoded: Mutex<Vec<(String, bytes::Bytes)>>,
}

impl StoreEvent {
    /// The JSON of the object as `version_key` shows it, encoding it on first use.
    pub fn encoded(
        &self,
        version_key: &str,
        encode: impl FnOnce(&Value) -> Vec<u8>,
    ) -> bytes::Bytes {
        let mut cache = self.encoded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, b)) = cache.iter().find(|(k, _)| k == version_key) {
            return b.clone();
        }
        let b = bytes::Bytes::from(encode(&self.object));
        cache.push((version_key.to_string(), b.clone()));
        b
    }
}

/// A stored object's address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// Storage key.
    pub storage: String,
    /// Namespace ("" when cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// What a mutation does with the object it looked at.
pub enum Write {
    /// Store this object (creating or replacing).
    Put(Value),
    /// Remove the object; the value is its final state, reported in the DELETED event.
    Delete(Value),
    /// Leave the store unchanged.
    Keep,
}

/// The history of a watch request is gone: the RV asked for and the oldest still known.
#[derive(Debug, Clone, Copy)]
pub struct TooOld {
    /// The oldest resourceVersion a watch can start from.
    pub oldest: u64,
}

/// One resource's objects by (namespace, name).
type Objects = BTreeMap<(String, String), Arc<Value>>;

#[derive(Default)]
struct Inner {
    rv: u64,
    objects: HashMap<Arc<str>, Objects>,
    history: VecDeque<Arc<StoreEvent>>,
    // Events with rv <= compacted have been dropped from the history.
    compacted: u64,
    owners: HashMap<String, HashSet<ObjectRef>>,
    uids: HashMap<String, ObjectRef>,
}

/// The object store shared by the HTTP server and the in-process controllers.
pub struct Store {
    inner: Mutex<Inner>,
    notify: watch::Sender<u64>,
    history_limit: usize,
}

fn uid_of(v: &Value) -> Option<&str> {
    v.pointer("/metadata/uid").and_then(Value::as_str)
}

fn owner_uids(v: &Value) -> Vec<String> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

impl Store {
    /// A store keeping at most `history_limit` events for watches to resume from.
    pub fn new(history_limit: usize) -> Self {
        let (notify, _) = watch::channel(0);
        Store {
            inner: Mutex::new(Inner::default()),
            notify,
            history_limit: history_limit.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current (latest) resourceVersion.
    pub fn rv(&self) -> u64 {
        self.lock().rv
    }

    /// One object.
    pub fn get(&self, storage: &str, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.lock()
            .objects
            .get(storage)
            .and_then(|m| m.get(&(namespace.to_string(), name.to_string())))
            .cloned()
    }

    /// Every object of a resource (in one namespace when given), sorted by namespace and name,
    /// with the resourceVersion they are consistent with.
    pub fn list(&self, storage: &str, namespace: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let inner = self.lock();
        let items = match inner.objects.get(storage) {
            None => Vec::new(),
            Some(m) => match namespace {
                None => m.values().cloned().collect(),
                Some(ns) => m
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|(_, v)| v.clone())
                    .collect(),
            },
        };
        (items, inner.rv)
    }

    /// Number of objects of a resource.
    pub fn count(&self, storage: &str) -> usize {
        self.lock().objects.get(storage).map_or(0, BTreeMap::len)
    }

    /// The address of the object with this uid, if it exists.
    pub fn by_uid(&self, uid: &str) -> Option<ObjectRef> {
        self.lock().uids.get(uid).cloned()
    }

    /// Objects whose ownerReferences name this uid.
    pub fn dependents(&self, owner_uid: &str) -> Vec<ObjectRef> {
        let mut v: Vec<ObjectRef> = self
            .lock()
            .owners
            .get(owner_uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Reads the object and writes what `f` decides, atomically. `f` gets the current object
    /// and the resourceVersion a write would get.
    pub fn mutate<R>(
        &self,
        storage: &str,
        namespace: &str,
        name: &str,
        f: impl FnOnce(Option<&Arc<Value>>, u64) -> ApiResult<(Write, R)>,
    ) -> ApiResult<R> {
        let mut inner = self.lock();
        let key = (namespace.to_string(), name.to_string());
        let current = inner
            .objects
            .get(storage)
            .and_then(|m| m.get(&key))
            .cloned();
        let next_rv = inner.rv + 1;
        let (write, out) = f(current.as_ref(), next_rv)?;
        let (kind, mut object) = match write {
            Write::Keep => return Ok(out),
            Write::Put(v) => (
                if current.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                },
                v,
            ),
            Write::Delete(v) => (EventType::Deleted, v),
        };
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(next_rv.to_string()));
        }
        let object = Arc::new(object);
        inner.rv = next_rv;
        let oref = ObjectRef {
            storage: storage.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        if let Some(prev) = &current {
            for owner in owner_uids(prev) {
                if let Some(set) = inner.owners.get_mut(&owner) {
                    set.remove(&oref);
                    if set.is_empty() {
                        inner.owners.remove(&owner);
                    }
                }
            }
            if let Some(uid) = uid_of(prev) {
                let uid = uid.to_string();
                inner.uids.remove(&uid);
            }
        }
        let storage_key: Arc<str> = match inner.objects.get_key_value(storage) {
            Some((k, _)) => k.clone(),
            None => Arc::from(storage),
        };
        if kind == EventType::Deleted {
            if let Some(m) = inner.objects.get_mut(storage) {
                m.remove(&key);
            }
        } else {
            for owner in owner_uids(&object) {
                inner.owners.entry(owner).or_default().insert(oref.clone());
            }
            if let Some(uid) = uid_of(&object) {
                inner.uids.insert(uid.to_string(), oref.clone());
            }
            inner
                .objects
                .entry(storage_key.clone())
                .or_default()
                .insert(key, object.clone());
        }
        let event = Arc::new(StoreEvent {
            rv: next_rv,
            storage: storage_key,
            namespace: namespace.to_string(),
            name: name.to_string(),
            kind,
            object,
            prev: current,
            encoded: Mutex::new(Vec::new()),
        });
        inner.history.push_back(event);
        while inner.history.len() > self.history_limit {
            if let Some(old) = inner.history.pop_front() {
                inner.compacted = old.rv;
            }
        }
        drop(inner);
        self.notify.send_replace(next_rv);
        Ok(out)
    }

    /// Events after `rv`, or TooOld when the history no longer reaches back that far.
    pub fn events_since(&self, rv: u64) -> Result<Vec<Arc<StoreEvent>>, TooOld> {
        let inner = self.lock();
        if rv < inner.compacted {
            return Err(TooOld {
                oldest: inner.compacted,
            });
        }
        let start = inner.history.partition_point(|e| e.rv <= rv);
        Ok(inner.history.range(start..).cloned().collect())
    }

    /// A receiver that changes whenever the store does (it carries the latest resourceVersion).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.notify.subscribe()
    }

    /// The oldest resourceVersion a watch can resume from.
    pub fn compacted(&self) -> u64 {
        self.lock().compacted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn put(store: &Store, name: &str, v: Value) -> u64 {
        store
            .mutate("core/configmaps", "default", name, |_, rv| {
                Ok((Write::Put(v), rv))
            })
            .expect("put")
    }

    #[test]
    fn resource_versions_grow_and_history_is_bounded() {
        let store = Store::new(3);
        let a = put(&store, "a", json!({"metadata": {"name": "a"}}));
        let b = put(&store, "b", json!({"metadata": {"name": "b"}}));
        assert!(b > a);
        assert_eq!(
            store.get("core/configmaps", "default", "b").expect("b")["metadata"]["resourceVersion"],
            json!(b.to_string())
        );
        for i in 0..5 {
            put(&store, "c", json!({"metadata": {"name": "c", "i": i}}));
        }
        assert!(store.events_since(a).is_err());
        let recent = store.events_since(store.rv() - 2).expect("recent");
        assert_eq!(recent.len(), 2);
        assert_eq!(recent[0].kind, EventType::Modified);
    }

    #[test]
    fn owner_index_follows_writes() {
        let store = Store::new(10);
        put(
            &store,
            "child",
            json!({"metadata": {"name": "child", "uid": "c1", "ownerReferences": [{"uid": "p1"}]}}),
        );
        assert_eq!(store.dependents("p1").len(), 1);
        assert!(store.by_uid("c1").is_some());
        store
            .mutate("core/configmaps", "default", "child", |cur, _| {
                Ok((
                    Write::Delete(cur.map(|v| (**v).clone()).unwrap_or_default()),
                    (),
                ))
            })
            .expect("delete");
        assert!(store.dependents("p1").is_empty());
        assert!(store.by_uid("c1").is_none());
    }
}
