//! What every handler shares.

use std::sync::{Arc, RwLock};

use kdoctor_store::Store;

use crate::auth::Auth;
use crate::health::Health;
use crate::metrics::ApiMetrics;
use crate::status::ApiError;

/// Shared state of the server (cheap to clone).
#[derive(Clone)]
pub struct AppState {
    store: Arc<RwLock<Option<Arc<Store>>>>,
    /// Authentication and authorization.
    pub auth: Arc<Auth>,
    /// Request metrics.
    pub metrics: Arc<ApiMetrics>,
    /// Health checks.
    pub health: Arc<Health>,
    /// Closed when the server shuts down (ends watches).
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

impl AppState {
    /// State with the store not open yet.
    pub fn new(
        auth: Arc<Auth>,
        metrics: Arc<ApiMetrics>,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> AppState {
        AppState {
            store: Arc::new(RwLock::new(None)),
            auth,
            metrics,
            health: Arc::new(Health::default()),
            shutdown,
        }
    }

    /// Serves this store from now on.
    pub fn set_store(&self, store: Arc<Store>) {
        *self.store.write().unwrap_or_else(|p| p.into_inner()) = Some(store);
        self.health.set_store_open(true);
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
