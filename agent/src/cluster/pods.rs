//! The carrier's pods as a watched cache: one watch per carrier selector, opened by the first
//! round that needs it and kept for the agent's life, so a round reads the pods from memory.
//! Listing them every round instead costs every agent a list of every carrier pod per round —
//! O(nodes²) bytes across a cluster each round, and what the Kubernetes API server feels most.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::task::JoinHandle;

/// The least a round waits for a new watch's first list (a round with more time to spare
/// waits longer: see `peer_list_wait` in the round's plan).
pub const FIRST_LIST: Duration = Duration::from_secs(10);

/// Watched pods by label selector.
pub struct PodCaches {
    client: Client,
    namespace: String,
    caches: Mutex<HashMap<String, Watched>>,
}

/// A selector's cache and the task that keeps it current.
type Watched = (Store<Pod>, JoinHandle<()>);

impl PodCaches {
    /// No watch yet; each selector's starts when first asked for.
    pub fn new(client: Client, namespace: String) -> PodCaches {
        PodCaches {
            client,
            namespace,
            caches: Mutex::new(HashMap::new()),
        }
    }

    fn store(&self, selector: &str) -> Store<Pod> {
        let mut caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((store, _)) = caches.get(selector) {
            return store.clone();
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let (reader, writer) = reflector::store();
        let config = watcher::Config::default().labels(selector);
        let stream = reflector::reflector(writer, watcher(api, config))
            .default_backoff()
            .touched_objects();
        let selector_text = selector.to_string();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                if let Err(error) = item {
                    tracing::debug!(selector = %selector_text, %error, "carrier pod watch (retrying)");
                }
            }
        });
        caches.insert(selector.to_string(), (reader.clone(), task));
        reader
    }

    /// The pods matching `selector` (waiting up to `wait` for the watch's first list the first
    /// time).
    pub async fn pods(&self, selector: &str, wait: Duration) -> Result<Vec<Pod>, String> {
        let store = self.store(selector);
        match tokio::time::timeout(wait, store.wait_until_ready()).await {
            Ok(Ok(())) => Ok(store.state().iter().map(|p| (**p).clone()).collect()),
            Ok(Err(_)) => Err(format!("the watch of carrier pods {selector} ended")),
            Err(_) => Err(format!(
                "cannot list carrier pods {selector} within {}s",
                wait.as_secs()
            )),
        }
    }

    /// How many selectors are watched.
    pub fn watched(&self) -> usize {
        self.caches.lock().map(|c| c.len()).unwrap_or(0)
    }
}

impl Drop for PodCaches {
    fn drop(&mut self) {
        if let Ok(caches) = self.caches.lock() {
            for (_, task) in caches.values() {
                task.abort();
            }
        }
    }
}
