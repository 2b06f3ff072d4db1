//! Accumulating the attempts of one target: histograms, counters, codes, bytes. Pure: the
//! engine hands it durations; nothing here reads a clock.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::histogram::{Latencies, new_latencies, record};
use crate::probe::datagram::tally::DatagramTally;
use crate::probe::outcome::{Attempt, Code};

/// Most distinct error-map keys with a detail; further details count under the bare class,
/// so that a flood of distinct messages cannot grow a report without end.
pub const MAX_ERROR_KEYS: usize = 16;
/// Longest error detail kept in a key.
pub const MAX_DETAIL_CHARS: usize = 120;

/// Everything measured for one target.
#[derive(Clone, Debug)]
pub struct Recorder {
    /// Response time of every request that got a result, from the pacer's wake time to the end
    /// (includes queueing in the prober: coordinated omission is not hidden).
    pub response: Latencies,
    /// Response time of successful requests only (the report's `latencies`).
    pub response_ok: Latencies,
    /// Service time of every request, from the actual send to the end.
    pub service: Latencies,
    /// How late the pacer woke for each slot.
    pub lateness: Latencies,
    /// Time to open connections, for requests that opened one.
    pub connect: Latencies,
    /// Requests sent.
    pub requests: u64,
    /// Requests that succeeded.
    pub successes: u64,
    /// Sum of the successful response times, for an exact mean.
    pub ok_micros_sum: u128,
    /// Failures by error key.
    pub errors: BTreeMap<String, i64>,
    /// HTTP status codes (0: no answer).
    pub http_status: BTreeMap<i64, i64>,
    /// DNS RCODE names.
    pub rcodes: BTreeMap<String, i64>,
    /// Answer bytes.
    pub bytes: u64,
    /// Planned requests not sent (in-flight cap, or the run overran its time).
    pub unsent: u64,
    /// Timeouts lost while the server's queue was full (probe::queueing): answers to requests
    /// sent next to them waited far longer than the median.
    pub lost_while_queued: u64,
    /// Loss, order, jitter and hops of a UDP echo target.
    pub datagrams: Option<DatagramTally>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            response: new_latencies(),
            response_ok: new_latencies(),
            service: new_latencies(),
            lateness: new_latencies(),
            connect: new_latencies(),
            requests: 0,
            successes: 0,
            ok_micros_sum: 0,
            errors: BTreeMap::new(),
            http_status: BTreeMap::new(),
            rcodes: BTreeMap::new(),
            bytes: 0,
            unsent: 0,
            lost_while_queued: 0,
            datagrams: None,
        }
    }
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

impl Recorder {
    /// Records one finished request.
    pub fn record(
        &mut self,
        attempt: &Attempt,
        service: Duration,
        response: Duration,
        lateness: Duration,
    ) {
        self.requests += 1;
        record(&mut self.response, micros(response));
        record(&mut self.service, micros(service));
        record(&mut self.lateness, micros(lateness));
        if let Some(connect) = attempt.connect {
            record(&mut self.connect, micros(connect));
        }
        self.bytes += attempt.bytes;
        if let Some(echo) = &attempt.echo {
            self.datagrams.get_or_insert_default().observe(echo);
        }
        match &attempt.code {
            Some(Code::Http(status)) => {
                *self.http_status.entry(i64::from(*status)).or_default() += 1
            }
            Some(Code::Dns(rcode)) => *self.rcodes.entry(rcode.clone()).or_default() += 1,
            None => {}
        }
        match &attempt.result {
            Ok(()) => {
                self.successes += 1;
                record(&mut self.response_ok, micros(response));
                self.ok_micros_sum += response.as_micros();
            }
            Err(error) => {
                if attempt.code.is_none() {
                    // Upstream records a transport error as status 0.
                    *self.http_status.entry(0).or_default() += 1;
                }
                let mut detail: String = error.detail.chars().take(MAX_DETAIL_CHARS).collect();
                if detail.len() < error.detail.len() {
                    detail.push('…');
                }
                let label = error.class.label();
                let key = if detail.is_empty() {
                    label.clone()
                } else {
                    format!("{label}: {detail}")
                };
                let known = self.errors.contains_key(&key);
                let key = if known || self.errors.len() < MAX_ERROR_KEYS {
                    key
                } else {
                    label
                };
                *self.errors.entry(key).or_default() += 1;
            }
        }
    }

    /// Records one planned request that was not sent.
    pub fn record_unsent(&mut self) {
        self.unsent += 1;
    }

    /// Requests sent that did not succeed, in percent of those sent (0 when none was sent): a
    /// UDP echo target's loss.
    pub fn failed_percent(&self) -> f64 {
        if self.requests == 0 {
            return 0.0;
        }
        (self.requests - self.successes) as f64 * 100.0 / self.requests as f64
    }

    /// Mean response time of successful requests in microseconds (`None` without any).
    pub fn mean_ok_micros(&self) -> Option<f64> {
        (self.successes > 0).then(|| self.ok_micros_sum as f64 / self.successes as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::outcome::{ErrorClass, ProbeError};

    fn ok(status: u16) -> Attempt {
        Attempt {
            result: Ok(()),
            code: Some(Code::Http(status)),
            bytes: 10,
            connect: None,
            queued: Duration::ZERO,
            phases: Default::default(),
            echo: None,
        }
    }

    #[test]
    fn counts_and_histograms() {
        let mut r = Recorder::default();
        let ms = Duration::from_millis;
        r.record(&ok(200), ms(1), ms(2), ms(1));
        r.record(&ok(200), ms(3), ms(4), ms(1));
        r.record(
            &Attempt::failed(ProbeError::new(ErrorClass::Timeout, "")),
            ms(500),
            ms(501),
            ms(1),
        );
        assert_eq!(r.requests, 3);
        assert_eq!(r.successes, 2);
        assert_eq!(r.bytes, 20);
        assert_eq!(r.mean_ok_micros(), Some(3000.0));
        assert_eq!(r.response.len(), 3);
        assert_eq!(r.response_ok.len(), 2);
        assert_eq!(r.http_status, BTreeMap::from([(0, 1), (200, 2)]));
        assert_eq!(r.errors, BTreeMap::from([("timeout".to_string(), 1)]));
        assert!(r.response.max() >= 500_000);
    }

    #[test]
    fn no_mean_without_successes() {
        assert_eq!(Recorder::default().mean_ok_micros(), None);
    }

    #[test]
    fn error_keys_are_bounded_and_truncated() {
        let mut r = Recorder::default();
        for i in 0..100 {
            let e = ProbeError::new(ErrorClass::Other, format!("message {i}"));
            r.record(
                &Attempt::failed(e),
                Duration::ZERO,
                Duration::ZERO,
                Duration::ZERO,
            );
        }
        assert_eq!(r.errors.len(), MAX_ERROR_KEYS + 1);
        assert_eq!(r.errors["other"], 100 - MAX_ERROR_KEYS as i64);
        let long = "x".repeat(500);
        let mut r = Recorder::default();
        r.record(
            &Attempt::failed(ProbeError::new(ErrorClass::Tls, long)),
            Duration::ZERO,
            Duration::ZERO,
            Duration::ZERO,
        );
        let key = r.errors.keys().next().unwrap();
        assert_eq!(key.chars().count(), "tls: ".len() + MAX_DETAIL_CHARS + 1);
    }

    #[test]
    fn dns_answers_count_rcodes_not_status_zero() {
        let mut r = Recorder::default();
        let nx = Attempt {
            result: Err(ProbeError::new(ErrorClass::Rcode("NXDOMAIN".into()), "")),
            code: Some(Code::Dns("NXDOMAIN".into())),
            bytes: 40,
            connect: None,
            queued: Duration::ZERO,
            phases: Default::default(),
            echo: None,
        };
        r.record(&nx, Duration::ZERO, Duration::ZERO, Duration::ZERO);
        assert_eq!(r.rcodes, BTreeMap::from([("NXDOMAIN".to_string(), 1)]));
        assert!(r.http_status.is_empty());
        assert_eq!(
            r.errors,
            BTreeMap::from([("rcode NXDOMAIN".to_string(), 1)])
        );
    }
}
