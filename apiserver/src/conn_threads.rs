//! Connection threads: each accepted connection lives, for its whole life, on one of a few
//! threads that each run a single-threaded runtime (nginx's worker model). On the shared
//! multi-threaded runtime a small GET's wake-ups went between its workers (perf: a fifth of
//! the CPU in the scheduler's wake-up and switch paths); a connection pinned to one thread is
//! woken by that thread's own poller and never handed to another.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;

/// After shutdown, how long a thread keeps running its connections (watches end at once;
/// requests in flight finish) before its runtime and what is left on it are dropped.
const DRAIN: Duration = Duration::from_secs(5);

/// How often a draining thread looks whether its connections have all ended.
const DRAIN_CHECK: Duration = Duration::from_millis(20);

/// Where connections run: the caller's runtime, or a set of dedicated threads in turn.
#[derive(Clone, Debug, Default)]
pub struct ConnectionThreads {
    handles: Arc<Vec<Handle>>,
    next: Arc<AtomicUsize>,
}

impl ConnectionThreads {
    /// Connections run as tasks of the runtime that accepts them.
    pub fn shared() -> ConnectionThreads {
        ConnectionThreads::default()
    }

    /// Starts `count` threads (none when 0: connections run on the caller's runtime) that
    /// serve until `shutdown` turns true, then drain for a few seconds.
    pub fn start(count: usize, shutdown: watch::Receiver<bool>) -> std::io::Result<Self> {
        let mut handles = Vec::with_capacity(count);
        for index in 0..count {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name(format!("kdoctor-api-{index}"))
                .build()?;
            handles.push(runtime.handle().clone());
            let mut shutdown = shutdown.clone();
            std::thread::Builder::new()
                .name(format!("kdoctor-api-{index}"))
                .spawn(move || {
                    runtime.block_on(async {
                        let _ = shutdown.wait_for(|stop| *stop).await;
                        let handle = Handle::current();
                        let _ = tokio::time::timeout(DRAIN, async {
                            while handle.metrics().num_alive_tasks() > 0 {
                                tokio::time::sleep(DRAIN_CHECK).await;
                            }
                        })
                        .await;
                    });
                })?;
        }
        Ok(ConnectionThreads {
            handles: Arc::new(handles),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// How many dedicated threads there are (0: the caller's runtime).
    pub fn count(&self) -> usize {
        self.handles.len()
    }

    /// Runs `connection` on the next thread in turn, or on the current runtime when there are
    /// no threads.
    pub fn spawn<F>(&self, connection: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if self.handles.is_empty() {
            tokio::spawn(connection);
            return;
        }
        let turn = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        self.handles[turn].spawn(connection);
    }
}

/// One thread per core, at most `cap` (the API server shares the machine with the controller).
pub fn per_core(cap: usize) -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(cap)
}
