//! The serving certificate, swappable at run time and reloaded when its files change.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::Identity;

/// The serving certificate, swappable at run time.
#[derive(Debug)]
pub struct ServingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ServingCert {
    /// Serves `key` until replaced.
    pub fn new(key: CertifiedKey) -> Arc<ServingCert> {
        Arc::new(ServingCert {
            current: RwLock::new(Arc::new(key)),
        })
    }

    /// Replaces the certificate for new connections.
    pub fn set(&self, key: CertifiedKey) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
    }

    /// Reloads `cert` and `key` whenever their modification time changes, until dropped.
    pub async fn watch_files(self: Arc<Self>, cert: PathBuf, key: PathBuf, every: Duration) {
        let stamp = |p: &PathBuf| {
            std::fs::metadata(p)
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH)
        };
        let mut seen = (stamp(&cert), stamp(&key));
        loop {
            tokio::time::sleep(every).await;
            let now = (stamp(&cert), stamp(&key));
            if now == seen {
                continue;
            }
            seen = now;
            let loaded = Identity::from_files(&cert, &key).and_then(Identity::certified_key);
            match loaded {
                Ok(k) => {
                    self.set(k);
                    tracing::info!(cert = %cert.display(), "serving certificate reloaded");
                }
                Err(e) => tracing::error!(error = %e, "keeping the previous serving certificate"),
            }
        }
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }
}
