//! The threads the API server's connections run on: a runtime of one worker per core
//! (`kdoctor_transport::runtime_threads`), each connection on one of them for its whole life,
//! drained when the server stops.

use std::time::Duration;

use kdoctor_transport::runtime_threads::RuntimeThreads;
use tokio::runtime::Handle;
use tokio::sync::watch;

/// After shutdown, how long a thread keeps running its connections (watches end at once;
/// requests in flight finish) before its runtime and what is left on it are dropped.
const DRAIN: Duration = Duration::from_secs(5);

/// How often a draining thread looks whether its connections have all ended.
const DRAIN_CHECK: Duration = Duration::from_millis(20);

/// Starts `count` connection threads (none when 0: connections run on the caller's runtime)
/// that serve until `shutdown` turns true, then drain.
pub fn start(count: usize, shutdown: watch::Receiver<bool>) -> std::io::Result<RuntimeThreads> {
    RuntimeThreads::start(count, "kdoctor-api", move || {
        let mut shutdown = shutdown.clone();
        async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
            let handle = Handle::current();
            let _ = tokio::time::timeout(DRAIN, async {
                while handle.metrics().num_alive_tasks() > 0 {
                    tokio::time::sleep(DRAIN_CHECK).await;
                }
            })
            .await;
        }
    })
}
