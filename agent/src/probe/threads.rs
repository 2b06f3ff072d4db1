//! The threads probe runs are paced from: a runtime of one worker per core, shared by the
//! process. A run (one target's pacer and its requests) lives on one of them from start to end.
//! On the shared two-worker runtime each request's wake-ups went between the workers: one
//! worker instead of two gave, at 1,000 HTTP requests/s, a p50 of 51 µs instead of 75 µs and
//! 35% less CPU per request, and let the DNS prober hold 140,000 instead of 100,000 queries/s
//! (docs/benchmarks.md#agent). Targets still spread over every core: each run goes to the
//! thread with the fewest tasks.

use std::collections::HashMap;
use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::sync::{Mutex, OnceLock};

use kdoctor_transport::runtime_threads::{RuntimeThreads, per_core};
use tokio::task::JoinHandle;

/// Prober threads at most (one per core up to this).
pub const PROBER_THREADS_CAP: usize = 16;

/// The prober threads of each network namespace, by the namespace's inode. A thread lives in
/// the namespace of the thread that made it: a process that runs agents for several namespaces
/// (the tests do, a thread per cluster) must not probe one cluster's addresses from another's.
static THREADS: OnceLock<Mutex<HashMap<u64, RuntimeThreads>>> = OnceLock::new();

/// The calling thread's network namespace (0 when it cannot be read: one set for all).
fn network_namespace() -> u64 {
    std::fs::metadata("/proc/thread-self/ns/net")
        .map(|m| m.ino())
        .unwrap_or(0)
}

/// The prober threads of the caller's network namespace, started on first use there; the
/// caller's runtime when no thread can be started.
fn threads() -> RuntimeThreads {
    let namespace = network_namespace();
    let mut all = THREADS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    all.entry(namespace)
        .or_insert_with(|| {
            RuntimeThreads::start(per_core(PROBER_THREADS_CAP), "kdoctor-probe", || {
                std::future::pending()
            })
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot start prober threads; probing on the shared runtime");
                RuntimeThreads::none()
            })
        })
        .clone()
}

/// A run on a prober thread, stopped when this is dropped (a round that times out takes its
/// runs with it instead of leaving them sending).
pub struct Run<T>(JoinHandle<T>);

impl<T> Drop for Run<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Run<T> {
    /// Waits for the run's end.
    pub async fn finished(&mut self) -> Result<T, tokio::task::JoinError> {
        (&mut self.0).await
    }
}

/// Starts `run` on the least busy prober thread.
pub fn spawn<F>(run: F) -> Run<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Run(threads().spawn(run))
}
