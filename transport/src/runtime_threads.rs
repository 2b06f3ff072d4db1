//! Runtimes of one worker thread each, running whole connections or probe runs (nginx's worker
//! model). On a shared multi-threaded runtime a request's wake-ups went between its workers:
//! perf showed a fifth of a small GET's CPU and most of an idle prober's in the scheduler's
//! wake-up and switch paths, and an HTTP probe at 1,000/s measured 25 µs more at the median with
//! two workers than with one. Work placed on one of these threads is woken by that thread's own
//! poller and never handed to another.

use std::future::Future;
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// A set of runtimes of one worker thread each; work goes to the least busy one.
#[derive(Clone, Debug, Default)]
pub struct RuntimeThreads {
    handles: Arc<Vec<Handle>>,
    threads: Arc<Vec<std::thread::JoinHandle<()>>>,
}

impl RuntimeThreads {
    /// No threads of its own: work runs on the caller's runtime.
    pub fn none() -> RuntimeThreads {
        RuntimeThreads::default()
    }

    /// Starts `count` runtimes whose worker threads are named `name-N`, each kept by a thread of
    /// the same name until its `body()` returns (then the runtime, and whatever work is left on
    /// it, is dropped).
    pub fn start<F, Fut>(count: usize, name: &str, body: F) -> std::io::Result<RuntimeThreads>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let body = Arc::new(body);
        let mut handles = Vec::with_capacity(count);
        let mut threads = Vec::with_capacity(count);
        for index in 0..count {
            let thread = format!("{name}-{index}");
            // One worker, not a current-thread runtime: with the latter the DNS prober lost
            // answers from 120,000 queries/s (37% succeeded) where one worker held 140,000.
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .thread_name(&thread)
                .build()?;
            handles.push(runtime.handle().clone());
            let body = body.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(thread)
                    .spawn(move || runtime.block_on(body()))?,
            );
        }
        Ok(RuntimeThreads {
            handles: Arc::new(handles),
            threads: Arc::new(threads),
        })
    }

    /// How many threads there are (0: the caller's runtime).
    pub fn count(&self) -> usize {
        self.handles.len()
    }

    /// How many of the threads are still running.
    pub fn running(&self) -> usize {
        self.threads.iter().filter(|t| !t.is_finished()).count()
    }

    /// Runs `work` on the thread with the fewest tasks, or on the current runtime when there
    /// are no threads.
    pub fn spawn<F>(&self, work: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self
            .handles
            .iter()
            .min_by_key(|h| h.metrics().num_alive_tasks())
        {
            Some(handle) => handle.spawn(work),
            None => tokio::spawn(work),
        }
    }
}

/// One thread per core, at most `cap`.
pub fn per_core(cap: usize) -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_goes_to_the_least_busy_thread_and_runs_there() {
        let threads = RuntimeThreads::start(2, "test-rt", std::future::pending).expect("threads");
        // One long task on some thread: the next work goes to the other one.
        let (release, held) = tokio::sync::oneshot::channel::<()>();
        let first = threads.spawn(async move {
            let name = std::thread::current().name().map(str::to_string);
            let _ = held.await;
            name
        });
        tokio::task::yield_now().await;
        let second = threads
            .spawn(async { std::thread::current().name().map(str::to_string) })
            .await
            .expect("runs");
        let _ = release.send(());
        let first = first.await.expect("runs");
        assert!(
            second.as_deref().is_some_and(|n| n.starts_with("test-rt-")),
            "{second:?}"
        );
        assert!(
            first.as_deref().is_some_and(|n| n.starts_with("test-rt-")),
            "{first:?}"
        );
        assert_ne!(first, second);
        assert_eq!(threads.running(), 2);
    }

    #[tokio::test]
    async fn a_thread_ends_when_its_body_returns() {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let threads = RuntimeThreads::start(2, "test-end", move || {
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            }
        })
        .expect("threads");
        assert_eq!(threads.running(), 2);
        let _ = stop.send(true);
        for _ in 0..500 {
            if threads.running() == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("{} thread(s) still running after 5 s", threads.running());
    }

    #[tokio::test]
    async fn without_threads_work_runs_on_the_caller_s_runtime() {
        let threads = RuntimeThreads::none();
        assert_eq!(threads.count(), 0);
        assert_eq!(threads.spawn(async { 7 }).await.expect("runs"), 7);
    }
}
