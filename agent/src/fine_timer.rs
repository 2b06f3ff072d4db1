//! A sleep with microsecond precision for the pacer. tokio's timer wheel rounds every deadline
//! up to the next millisecond, so above 1,000 requests per second the pacer woke once a
//! millisecond and handed out all the slots due in it at once; the requests of such a burst
//! then waited for each other on the runtime, and that wait showed as latency of the target
//! (docs/benchmarks.md#agent). A timerfd wakes the pacer through the same event loop at the
//! microsecond, so requests go out one by one on their schedule.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

/// Longer waits start on tokio's timer and finish on the timerfd: the wheel is cheaper and
/// follows tokio's paused clock, the timerfd is exact.
const COARSE_ABOVE: Duration = Duration::from_millis(2);

/// A one-shot timer on CLOCK_MONOTONIC, re-armed for each wait.
pub struct FineTimer {
    fd: AsyncFd<OwnedFd>,
}

impl FineTimer {
    /// A new timer; must be called inside a tokio runtime with IO enabled.
    pub fn new() -> io::Result<FineTimer> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        // SAFETY: the descriptor is owned here and moved into the AsyncFd, which closes it
        // when dropped; nothing else can replace or close it while it is registered.
        let fd = unsafe { AsyncFd::register(fd)? };
        Ok(FineTimer { fd })
    }

    /// Returns at `due` (or at once when it has passed).
    pub async fn sleep_until(&self, due: Instant) -> io::Result<()> {
        let now = Instant::now();
        if due <= now {
            return Ok(());
        }
        if due - now > COARSE_ABOVE {
            tokio::time::sleep_until(due - COARSE_ABOVE / 2).await;
        }
        let left = due.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        let value = Timespec::try_from(left).map_err(|_| io::Error::other("wait too long"))?;
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        timerfd_settime(
            self.fd.get_ref(),
            TimerfdTimerFlags::empty(),
            &Itimerspec {
                it_interval: zero,
                it_value: value,
            },
        )?;
        loop {
            let mut ready = self.fd.readable().await?;
            let mut expirations = [0u8; 8];
            match ready.try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut expirations)?)) {
                Ok(_) => {
                    // A one-shot timer just read cannot fire again until it is re-armed; left
                    // set, the readiness cost the next wait a read that finds nothing.
                    ready.clear_ready();
                    return Ok(());
                }
                // Readiness left over from an earlier wait: the new deadline is still ahead.
                Err(_would_block) => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wakes_at_the_deadline_not_at_the_next_millisecond() {
        let timer = FineTimer::new().unwrap();
        let mut late = Vec::new();
        for i in 0..20u64 {
            let due = Instant::now() + Duration::from_micros(100 + 15 * i);
            timer.sleep_until(due).await.unwrap();
            let woke = Instant::now();
            assert!(woke >= due, "woke before the deadline");
            late.push(woke - due);
        }
        // tokio's wheel would wake these 600-900 µs late; a loaded machine may delay a few.
        late.sort();
        assert!(
            late[late.len() / 2] < Duration::from_micros(300),
            "lateness {late:?}"
        );
        // A deadline in the past returns at once; a long one goes through the wheel first.
        timer.sleep_until(Instant::now()).await.unwrap();
        let due = Instant::now() + Duration::from_millis(5);
        timer.sleep_until(due).await.unwrap();
        assert!(Instant::now() >= due);
    }
}
