//! The leader's lease, on the monotonic clock: proven each time a majority acknowledges a round
//! of heartbeats, valid until the time that round was *sent* plus the lease. A follower that
//! acknowledged a heartbeat refuses to vote for anyone else for the election timeout's maximum
//! after *receiving* it (openraft's leader lease), which is later; the lease is shorter than
//! that, so while it is valid no other replica can have been elected. Every Kubernetes write
//! and every acknowledgement to an agent checks it first: a leader that cannot prove its
//! leadership (cut off, paused) stops acting before another can start.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// Why an action was not allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("this replica cannot prove it leads (its leader lease {0}); it does not act")]
pub struct Fenced(&'static str);

impl Fenced {
    /// The lease ran out.
    pub fn expired() -> Fenced {
        Fenced("expired")
    }
}

/// The lease of one replica.
#[derive(Debug)]
pub struct Fence {
    until: watch::Sender<Option<Instant>>,
}

impl Default for Fence {
    fn default() -> Self {
        Fence {
            until: watch::Sender::new(None),
        }
    }
}

impl Fence {
    /// A majority acknowledged heartbeats sent at `sent`: leadership holds until `sent + lease`
    /// (a later proof extends it, an earlier one changes nothing).
    pub fn proven(&self, sent: Instant, lease: Duration) {
        let until = sent + lease;
        self.until.send_if_modified(|old| {
            if old.is_none_or(|o| o < until) {
                *old = Some(until);
                true
            } else {
                false
            }
        });
    }

    /// Leadership ended (another leader, a step down): nothing is allowed from now on.
    pub fn revoke(&self) {
        self.until.send_if_modified(|old| old.take().is_some());
    }

    /// Whether the lease holds at `now`.
    pub fn valid_at(&self, now: Instant) -> bool {
        self.until.borrow().is_some_and(|until| now < until)
    }

    /// Whether the lease holds now.
    pub fn valid(&self) -> bool {
        self.valid_at(Instant::now())
    }

    /// Allows an action that takes effect within `margin` from now: the lease must hold until
    /// then.
    pub fn check(&self, margin: Duration) -> Result<(), Fenced> {
        match *self.until.borrow() {
            None => Err(Fenced("is not held")),
            Some(until) if Instant::now() + margin < until => Ok(()),
            Some(_) => Err(Fenced("expired")),
        }
    }

    /// Changes of the lease.
    pub fn watch(&self) -> watch::Receiver<Option<Instant>> {
        self.until.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_runs_from_when_the_heartbeats_were_sent() {
        let fence = Fence::default();
        let t0 = Instant::now();
        let lease = Duration::from_millis(1500);
        assert!(!fence.valid_at(t0));
        assert_eq!(fence.check(Duration::ZERO), Err(Fenced("is not held")));
        fence.proven(t0, lease);
        assert!(fence.valid_at(t0 + Duration::from_millis(1499)));
        assert!(!fence.valid_at(t0 + lease));
        // An older proof arriving late does not shorten it; a newer one extends it.
        fence.proven(t0 - Duration::from_secs(1), lease);
        assert!(fence.valid_at(t0 + Duration::from_millis(1499)));
        fence.proven(t0 + Duration::from_secs(1), lease);
        assert!(fence.valid_at(t0 + Duration::from_millis(2499)));
        fence.revoke();
        assert!(!fence.valid_at(t0));
    }

    #[test]
    fn an_action_needs_the_lease_to_outlast_it() {
        let fence = Fence::default();
        fence.proven(Instant::now(), Duration::from_millis(500));
        assert_eq!(fence.check(Duration::from_millis(100)), Ok(()));
        assert_eq!(
            fence.check(Duration::from_millis(600)),
            Err(Fenced("expired"))
        );
    }
}
