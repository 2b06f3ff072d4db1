//! How soon the controller's watches try again after an error. kube-runtime's default waits up
//! to 30 s (and keeps the long waits for two minutes): after kube-apiserver or etcd restarts, a
//! task applied meanwhile would wait that long for its first reconcile. The controller's own
//! watches are few (one per task kind and carrier kind), so retrying sooner costs little.

use std::time::Duration;

use kube::runtime::utils::Backoff;

/// The first wait.
const FIRST: Duration = Duration::from_millis(250);
/// The longest wait.
const MOST: Duration = Duration::from_secs(4);

/// Doubling waits from 250 ms up to 4 s, back to the first after a success.
#[derive(Debug, Clone)]
pub struct Prompt {
    next: Duration,
}

impl Default for Prompt {
    fn default() -> Self {
        Prompt { next: FIRST }
    }
}

impl Iterator for Prompt {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let wait = self.next;
        self.next = (self.next * 2).min(MOST);
        Some(wait)
    }
}

impl Backoff for Prompt {
    fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_four_seconds_and_start_over_after_a_success() {
        let mut backoff = Prompt::default();
        let waits: Vec<u128> = backoff.by_ref().take(7).map(|d| d.as_millis()).collect();
        assert_eq!(waits, [250, 500, 1000, 2000, 4000, 4000, 4000]);
        backoff.reset();
        assert_eq!(backoff.next(), Some(FIRST));
    }
}
