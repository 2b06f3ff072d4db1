//! Go's `time.Duration.String()` format (`15.462579243s`, `1m0s`, `1.5ms`), which upstream
//! reports carry in `duration`, `roundDuration` and `requestDuration`; scripts parse it.

use std::fmt::Write as _;

/// Formats a duration given in nanoseconds exactly as Go's `Duration.String()` does.
pub fn format_nanos(nanos: i128) -> String {
    if nanos == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    if nanos < 0 {
        out.push('-');
    }
    let abs = nanos.unsigned_abs();
    if abs < 1_000 {
        let _ = write!(out, "{abs}ns");
    } else if abs < 1_000_000 {
        out.push_str(&fraction(abs, 1_000));
        out.push_str("µs");
    } else if abs < 1_000_000_000 {
        out.push_str(&fraction(abs, 1_000_000));
        out.push_str("ms");
    } else {
        let total_secs = abs / 1_000_000_000;
        let hours = total_secs / 3600;
        let minutes = (total_secs / 60) % 60;
        let sub_minute = abs % 60_000_000_000;
        if hours > 0 {
            let _ = write!(out, "{hours}h");
        }
        if hours > 0 || minutes > 0 {
            let _ = write!(out, "{minutes}m");
        }
        out.push_str(&fraction(sub_minute, 1_000_000_000));
        out.push('s');
    }
    out
}

/// Formats a `std::time::Duration` as Go does.
pub fn format(duration: std::time::Duration) -> String {
    format_nanos(duration.as_nanos() as i128)
}

/// Formats a `jiff::SignedDuration` as Go does.
pub fn format_signed(duration: jiff::SignedDuration) -> String {
    format_nanos(duration.as_nanos())
}

/// `value / unit` with the fractional digits Go prints (trailing zeros trimmed).
fn fraction(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let rest = value % unit;
    if rest == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{rest:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}
