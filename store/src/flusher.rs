//! Flushes with a deadline. sled's flush can wait forever after an I/O error in its own
//! writer threads: on a full disk a flush was seen blocked on a condition variable that no
//! thread would signal again (CI, 2026-11-26: the `full_disk` test's writer sat in
//! `Tree::flush` for 11 minutes). The store's flushes therefore run on a thread of their own
//! and a caller waits at most a deadline; past it the store stops as on any I/O error, so the
//! controller's health check fails and the pod restarts instead of hanging with a green probe.

use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::thread::JoinHandle;
use std::time::Duration;

/// Why a flush did not succeed.
#[derive(Debug, PartialEq, Eq)]
pub enum FlushError<E> {
    /// The flush itself failed.
    Failed(E),
    /// It did not finish within the deadline (it may still be blocked).
    TimedOut(Duration),
}

type Reply<E> = SyncSender<Result<(), E>>;

/// A thread that runs one flush job on request; requests that arrive while a flush runs are
/// answered together by the next one (a flush covers every write made before it started).
pub struct Flusher<E> {
    requests: Option<Sender<Reply<E>>>,
    /// Behind a mutex only so that the store stays `Sync` (read in `drop` alone).
    done: Mutex<Receiver<()>>,
    thread: Option<JoinHandle<()>>,
}

impl<E: Clone + Send + 'static> Flusher<E> {
    /// Starts the thread that runs `job`.
    pub fn spawn(job: impl Fn() -> Result<(), E> + Send + 'static) -> std::io::Result<Self> {
        let (requests, incoming) = mpsc::channel::<Reply<E>>();
        let (finished, done) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("store-flush".into())
            .spawn(move || {
                while let Ok(first) = incoming.recv() {
                    let mut waiting = vec![first];
                    waiting.extend(incoming.try_iter());
                    let result = job();
                    for reply in waiting {
                        // A caller past its deadline no longer listens.
                        let _ = reply.send(result.clone());
                    }
                }
                // Drops `job` (and the database it holds) before saying so.
                drop(job);
                let _ = finished.send(());
            })?;
        Ok(Flusher {
            requests: Some(requests),
            done: Mutex::new(done),
            thread: Some(thread),
        })
    }

    /// Runs a flush (or joins the next one) and waits at most `deadline` for it.
    pub fn flush(&self, deadline: Duration) -> Result<(), FlushError<E>> {
        let (reply, answer) = mpsc::sync_channel(1);
        let sent = self.requests.as_ref().map(|r| r.send(reply));
        if !matches!(sent, Some(Ok(()))) {
            // The thread is gone (it cannot be, short of a panic in the job): as stuck.
            return Err(FlushError::TimedOut(Duration::ZERO));
        }
        match answer.recv_timeout(deadline) {
            Ok(result) => result.map_err(FlushError::Failed),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                Err(FlushError::TimedOut(deadline))
            }
        }
    }
}

impl<E> Drop for Flusher<E> {
    /// Stops the thread and waits for it to let the database go (a reopen in the same process
    /// needs its lock), but not for a flush that is stuck: that thread is left behind.
    fn drop(&mut self) {
        self.requests = None;
        let done = self.done.get_mut().unwrap_or_else(|p| p.into_inner());
        if done.recv_timeout(Duration::from_secs(5)).is_ok()
            && let Some(thread) = self.thread.take()
        {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_flush_answers_with_the_job_s_result() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let flusher = Flusher::spawn(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>("disk full".to_string())
        })
        .unwrap();
        assert_eq!(
            flusher.flush(Duration::from_secs(10)),
            Err(FlushError::Failed("disk full".to_string()))
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let ok = Flusher::spawn(|| Ok::<(), String>(())).unwrap();
        assert_eq!(ok.flush(Duration::from_secs(10)), Ok(()));
    }

    #[test]
    fn a_flush_that_never_returns_times_out() {
        let (never, blocked) = mpsc::channel::<()>();
        let blocked = std::sync::Mutex::new(blocked);
        let flusher = Flusher::spawn(move || {
            let _ = blocked.lock().unwrap().recv();
            Ok::<(), String>(())
        })
        .unwrap();
        let started = std::time::Instant::now();
        assert_eq!(
            flusher.flush(Duration::from_millis(200)),
            Err(FlushError::TimedOut(Duration::from_millis(200)))
        );
        // Later flushes queue behind the stuck one and time out too.
        assert_eq!(
            flusher.flush(Duration::from_millis(100)),
            Err(FlushError::TimedOut(Duration::from_millis(100)))
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        // Unblocked, the thread ends and the flusher drops at once.
        drop(never);
        drop(flusher);
    }

    #[test]
    fn dropping_the_flusher_releases_what_the_job_holds() {
        let held = Arc::new(());
        let inside = held.clone();
        let flusher = Flusher::spawn(move || {
            let _ = &inside;
            Ok::<(), String>(())
        })
        .unwrap();
        flusher.flush(Duration::from_secs(10)).unwrap();
        drop(flusher);
        assert_eq!(
            Arc::strong_count(&held),
            1,
            "the job was dropped with the flusher"
        );
    }
}
