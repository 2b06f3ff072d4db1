//! Per-target judgement (upstream §10.3, first matching rule), with upstream's bugs fixed: a
//! target with no request fails instead of producing NaN, the mean is over successful requests
//! only, and a mean limit cannot be met by a target where nothing succeeded.

use kdoctor_api::task::NetSuccessCondition;

use crate::probe::datagram::tally::PathMtuFinding;

/// What a target's judgement is made from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Counts {
    /// Requests sent.
    pub requests: u64,
    /// Requests that succeeded.
    pub successes: u64,
    /// Mean response time of successful requests, milliseconds.
    pub mean_ok_ms: Option<f64>,
    /// Planned requests were not sent.
    pub unsent: bool,
    /// Requests that timed out while the server's queue was full (probe::queueing).
    pub lost_while_queued: u64,
}

/// The verdict on one target.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The target met `expect`.
    pub succeed: bool,
    /// Why not.
    pub reason: Option<String>,
    /// successes / requests (0 without requests).
    pub success_rate: f64,
}

/// Share of successful requests; 0 when nothing was sent (upstream divided by zero).
pub fn success_rate(requests: u64, successes: u64) -> f64 {
    if requests == 0 {
        0.0
    } else {
        successes as f64 / requests as f64
    }
}

/// Judges one target against `expect` (absent: every request must succeed, as the CRD's
/// default `successRate: 1`).
pub fn judge(expect: Option<&NetSuccessCondition>, counts: Counts) -> Verdict {
    let rate = success_rate(counts.requests, counts.successes);
    let fail = |reason: String| Verdict {
        succeed: false,
        reason: Some(reason),
        success_rate: rate,
    };
    if counts.requests == 0 {
        return fail("no request was sent".to_string());
    }
    let want_rate = match expect {
        Some(e) => e.success_rate,
        None => Some(kdoctor_api::task::common::DEFAULT_SUCCESS_RATE),
    };
    if let Some(want) = want_rate
        && rate < want
    {
        let mut reason = format!("Success Rate {rate} is lower than request {want}");
        if counts.lost_while_queued > 0 {
            // Upstream's sentence first, unchanged: what is added says where the loss was.
            reason.push_str(&format!(
                "; {} of the {} failed requests timed out while the server's queue was full \
                 (answers to requests sent next to them waited {}× the fastest answer or more): the \
                 server fell behind the rate and dropped them",
                counts.lost_while_queued,
                counts.requests - counts.successes,
                crate::probe::queueing::SLOWER
            ));
        }
        return fail(reason);
    }
    if let Some(limit) = expect.and_then(|e| e.mean_access_delay_in_ms) {
        match counts.mean_ok_ms {
            Some(mean) if mean > limit as f64 => {
                return fail(format!(
                    "mean delay {} ms is bigger than request {limit} ms",
                    mean as f32
                ));
            }
            Some(_) => {}
            None => return fail("mean delay cannot be measured: no request succeeded".to_string()),
        }
    }
    if counts.unsent {
        return fail(
            "There are unsent requests after the execution time has been reached".to_string(),
        );
    }
    Verdict {
        succeed: true,
        reason: None,
        success_rate: rate,
    }
}

/// A verdict that also holds a UDP echo target's jitter (`jitter_ms`) to `expect`'s
/// `maxJitterInMs`: a target that passed fails when its jitter is above the bound (a target
/// that failed keeps its first reason, as upstream's first matching rule).
pub fn judge_jitter(
    verdict: Verdict,
    expect: Option<&NetSuccessCondition>,
    jitter_ms: f64,
) -> Verdict {
    match expect.and_then(|e| e.max_jitter_in_ms) {
        Some(limit) if verdict.succeed && jitter_ms > limit => Verdict {
            succeed: false,
            reason: Some(format!(
                "jitter {jitter_ms:.3} ms is bigger than request {limit} ms"
            )),
            ..verdict
        },
        _ => verdict,
    }
}

/// A verdict that also holds a UDP echo target's path MTU (`finding`, when a search ran) to
/// `expect`'s `minPathMTU`: a target that passed fails when its path takes less, or when the
/// search found nothing.
pub fn judge_path_mtu(
    verdict: Verdict,
    expect: Option<&NetSuccessCondition>,
    finding: Option<&PathMtuFinding>,
) -> Verdict {
    let (Some(min), Some(finding), true) = (
        expect.and_then(|e| e.min_path_mtu),
        finding,
        verdict.succeed,
    ) else {
        return verdict;
    };
    let reason = match finding {
        PathMtuFinding::Found(found) if i64::from(found.bytes) >= min => return verdict,
        PathMtuFinding::Found(found) => format!(
            "path MTU {} bytes ({}) is below request {min} bytes",
            found.bytes,
            found.limit.as_str()
        ),
        PathMtuFinding::NothingPassed => {
            format!(
                "path MTU unknown: no packet of the smallest size searched passed (request {min} bytes)"
            )
        }
        PathMtuFinding::Failed(error) => format!("path MTU not searched: {error}"),
    };
    Verdict {
        succeed: false,
        reason: Some(reason),
        ..verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::datagram::pmtu::{Limit, PathMtu};

    #[test]
    fn a_path_mtu_below_the_bound_fails_a_target_that_passed() {
        let passed = judge(None, counts(10, 10, Some(1.0)));
        let bound = NetSuccessCondition {
            min_path_mtu: Some(1500),
            ..expect(Some(1.0), None)
        };
        let found = |bytes, limit| PathMtuFinding::Found(PathMtu { bytes, limit });
        let low = judge_path_mtu(
            passed.clone(),
            Some(&bound),
            Some(&found(1400, Limit::FragmentationNeeded)),
        );
        assert_eq!(
            low.reason.as_deref(),
            Some("path MTU 1400 bytes (fragmentation-needed) is below request 1500 bytes")
        );
        assert!(!low.succeed);
        let enough = found(1500, Limit::Interface);
        assert_eq!(
            judge_path_mtu(passed.clone(), Some(&bound), Some(&enough)),
            passed
        );
        assert_eq!(
            judge_path_mtu(passed.clone(), None, Some(&found(600, Limit::BlackHole))),
            passed
        );
        assert!(
            !judge_path_mtu(
                passed.clone(),
                Some(&bound),
                Some(&PathMtuFinding::NothingPassed)
            )
            .succeed
        );
        assert_eq!(
            judge_path_mtu(passed.clone(), Some(&bound), None),
            passed,
            "not searched"
        );
    }

    #[test]
    fn jitter_above_the_bound_fails_a_target_that_passed_and_nothing_else() {
        let passed = judge(None, counts(10, 10, Some(1.0)));
        let bound = NetSuccessCondition {
            max_jitter_in_ms: Some(0.5),
            ..expect(Some(1.0), None)
        };
        let over = judge_jitter(passed.clone(), Some(&bound), 0.75);
        assert!(!over.succeed);
        assert_eq!(
            over.reason.as_deref(),
            Some("jitter 0.750 ms is bigger than request 0.5 ms")
        );
        assert_eq!(over.success_rate, 1.0);
        assert_eq!(judge_jitter(passed.clone(), Some(&bound), 0.5), passed);
        assert_eq!(judge_jitter(passed.clone(), None, 99.0), passed);
        let failed = judge(None, counts(10, 5, Some(1.0)));
        assert_eq!(judge_jitter(failed.clone(), Some(&bound), 9.0), failed);
    }

    fn counts(requests: u64, successes: u64, mean: Option<f64>) -> Counts {
        Counts {
            requests,
            successes,
            mean_ok_ms: mean,
            unsent: false,
            lost_while_queued: 0,
        }
    }

    fn expect(rate: Option<f64>, mean: Option<i64>) -> NetSuccessCondition {
        NetSuccessCondition {
            success_rate: rate,
            mean_access_delay_in_ms: mean,
            status_code: None,
            max_jitter_in_ms: None,
            min_path_mtu: None,
        }
    }

    #[test]
    fn zero_requests_fail_without_nan() {
        let v = judge(None, counts(0, 0, None));
        assert!(!v.succeed);
        assert_eq!(v.success_rate, 0.0);
        assert_eq!(v.reason.as_deref(), Some("no request was sent"));
    }

    #[test]
    fn rules_in_upstream_order_with_upstream_messages() {
        let e = expect(Some(0.9), Some(10));
        let v = judge(Some(&e), counts(10, 8, Some(50.0)));
        assert_eq!(
            v.reason.as_deref(),
            Some("Success Rate 0.8 is lower than request 0.9")
        );
        let v = judge(Some(&e), counts(10, 10, Some(12.5)));
        assert_eq!(
            v.reason.as_deref(),
            Some("mean delay 12.5 ms is bigger than request 10 ms")
        );
        let v = judge(
            Some(&e),
            Counts {
                unsent: true,
                ..counts(10, 10, Some(1.0))
            },
        );
        assert_eq!(
            v.reason.as_deref(),
            Some("There are unsent requests after the execution time has been reached")
        );
        let v = judge(Some(&e), counts(10, 9, Some(10.0)));
        assert!(v.succeed, "{v:?}");
        assert_eq!(v.success_rate, 0.9);
    }

    #[test]
    fn a_loss_to_the_servers_queue_is_said_after_upstreams_sentence() {
        let v = judge(
            None,
            Counts {
                lost_while_queued: 3,
                ..counts(1000, 996, Some(0.2))
            },
        );
        let reason = v.reason.expect("failed");
        assert!(
            reason.starts_with("Success Rate 0.996 is lower than request 1; 3 of the 4 failed"),
            "{reason}"
        );
        assert!(reason.contains("the server fell behind"), "{reason}");
    }

    #[test]
    fn default_expectation_is_every_request_succeeds() {
        assert!(judge(None, counts(5, 5, Some(1.0))).succeed);
        assert!(!judge(None, counts(5, 4, Some(1.0))).succeed);
    }

    #[test]
    fn mean_limit_needs_a_successful_request() {
        let e = expect(None, Some(100));
        let v = judge(Some(&e), counts(5, 0, None));
        assert_eq!(
            v.reason.as_deref(),
            Some("mean delay cannot be measured: no request succeeded")
        );
        let e = expect(Some(0.0), None);
        assert!(
            judge(Some(&e), counts(5, 0, None)).succeed,
            "successRate 0 accepts failures"
        );
    }
}
