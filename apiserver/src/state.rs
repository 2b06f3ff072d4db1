//! What every handler shares.

use std::sync::{Arc, OnceLock, RwLock};

use kdoctor_store::{Store, Writes};

use crate::auth::Auth;
use crate::health::Health;
use crate::kube::status::ApiError;
use crate::metrics::ApiMetrics;
use crate::resource::cache::ObjectCache;

/// Shared state of the server: one reference-counted pointer, since axum clones the state of
/// every handler and middleware for every request (its fields behind [`Shared`]).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct Shared {
    store: Arc<RwLock<Option<Arc<Store>>>>,
    opened: Arc<tokio::sync::Notify>,
    /// Authentication and authorization.
    pub auth: Arc<Auth>,
    /// Request metrics.
    pub metrics: Arc<ApiMetrics>,
    /// Health checks.
    pub health: Arc<Health>,
    /// Closed when the server shuts down (ends watches).
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// Serialized report objects for repeated GETs.
    pub objects: Arc<ObjectCache>,
    /// Task objects served read-only under `kdoctor.io` (local mode only; `None`: not served).
    pub tasks: Option<crate::tasks::objects::TaskObjects>,
    /// Where writes go, once the store is replicated (a process that owns its store writes
    /// to it directly).
    writes: Arc<OnceLock<Writes>>,
}

impl AppState {
    /// State with the store not open yet.
    pub fn new(
        auth: Arc<Auth>,
        metrics: Arc<ApiMetrics>,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> AppState {
        let objects = Arc::new(ObjectCache::default());
        objects.register(&metrics.registry);
        AppState(Arc::new(Shared {
            objects,
            store: Arc::new(RwLock::new(None)),
            opened: Arc::new(tokio::sync::Notify::new()),
            auth,
            metrics,
            health: Arc::new(Health::default()),
            shutdown,
            tasks: None,
            writes: Arc::new(OnceLock::new()),
        }))
    }

    /// Writes go through `writes` from now on (the replicated store).
    pub fn set_writes(&self, writes: Writes) {
        let _ = self.writes.set(writes);
    }

    /// Where writes go: the replicated store once set, else the store itself (or a 503 while
    /// it is not open).
    pub fn writes(&self) -> Result<Writes, ApiError> {
        match self.writes.get() {
            Some(writes) => Ok(writes.clone()),
            None => self.store().map(Writes::Local),
        }
    }

    /// The same state, showing `tasks` (local mode) or not.
    pub fn with_tasks(self, tasks: Option<crate::tasks::objects::TaskObjects>) -> AppState {
        let mut shared = (*self.0).clone();
        shared.tasks = tasks;
        AppState(Arc::new(shared))
    }

    /// Serves this store from now on.
    pub fn set_store(&self, store: Arc<Store>) {
        *self.store.write().unwrap_or_else(|p| p.into_inner()) = Some(store);
        self.health.set_store_open(true);
        self.opened.notify_waiters();
    }

    /// The store once it is open (the server opens it in the background, retrying while
    /// another process still holds it).
    pub async fn wait_store(&self) -> Arc<Store> {
        loop {
            let opened = self.opened.notified();
            tokio::pin!(opened);
            // Registered before the check, so an open in between is not missed.
            opened.as_mut().enable();
            if let Ok(store) = self.store() {
                return store;
            }
            opened.await;
        }
    }

    /// The store, or a 503 while it is not open.
    pub fn store(&self) -> Result<Arc<Store>, ApiError> {
        self.store
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| {
                ApiError::unavailable("the report store is not open yet; retry in a few seconds")
            })
    }
}
