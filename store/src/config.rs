//! Settings of the store.

use std::path::PathBuf;
use std::time::Duration;

/// Default sled page cache: small, because sled's real memory use is a multiple of it.
pub const DEFAULT_CACHE_CAPACITY: u64 = 64 * 1024 * 1024;
/// Default number of recent change events kept for watchers that resume.
pub const DEFAULT_EVENT_WINDOW: usize = 10_000;
/// Default age after which rounds are removed (upstream kept reports 30 days).
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Default limit of stored bytes (compressed) before the oldest rounds are removed.
pub const DEFAULT_MAX_BYTES: u64 = 8 * 1024 * 1024 * 1024;

/// How long and how much the store keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Rounds last written longer ago than this are removed, and so are deleted tasks that
    /// have no rounds left.
    pub max_age: Duration,
    /// Above this many stored bytes the oldest rounds are removed.
    pub max_bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_age: DEFAULT_MAX_AGE,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// Where the store lives and how it behaves.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Directory of the store (created if missing).
    pub path: PathBuf,
    /// sled's page cache, in bytes.
    pub cache_capacity: u64,
    /// Recent change events kept for resuming watchers.
    pub event_window: usize,
    /// What retention removes.
    pub retention: Retention,
}

impl StoreConfig {
    /// Defaults for a store at `path`.
    pub fn new(path: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            path: path.into(),
            cache_capacity: DEFAULT_CACHE_CAPACITY,
            event_window: DEFAULT_EVENT_WINDOW,
            retention: Retention::default(),
        }
    }
}
