//! Wall-clock timestamps in the API's RFC 3339 form (whole seconds, UTC), as metav1.Time has.

use jiff::{Timestamp, Unit};

/// Now, as `2026-01-02T03:04:05Z`.
pub fn now() -> String {
    format_ts(Timestamp::now())
}

/// A timestamp as the API prints it.
pub fn format_ts(ts: Timestamp) -> String {
    ts.round(Unit::Second)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| ts.to_string())
}

/// Now plus `secs` seconds.
pub fn now_plus(secs: i64) -> String {
    let ts = Timestamp::now();
    format_ts(
        ts.checked_add(jiff::SignedDuration::from_secs(secs))
            .unwrap_or(ts),
    )
}

/// Parses an RFC 3339 time.
pub fn parse(s: &str) -> Option<Timestamp> {
    s.parse().ok()
}

/// Seconds from `s` to now (negative when `s` is in the future).
pub fn age_secs(s: &str) -> Option<i64> {
    let t = parse(s)?;
    Some(Timestamp::now().duration_since(t).as_secs())
}
