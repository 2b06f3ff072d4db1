//! Durations on the command line and in query parameters: plain seconds as upstream (`2`,
//! `0.5`) or with a unit (`500ms`, `250us`, `1.5s`, `2m`).

use std::time::Duration;

/// Parses a duration; the error says what was expected.
pub fn parse(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration (seconds, or a number with ms, us, s or m)");
    let text_trimmed = text.trim();
    let (number, scale) = if let Some(n) = text_trimmed.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = text_trimmed
        .strip_suffix("us")
        .or_else(|| text_trimmed.strip_suffix("µs"))
    {
        (n, 1e-6)
    } else if let Some(n) = text_trimmed.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text_trimmed.strip_suffix('m') {
        (n, 60.0)
    } else {
        (text_trimmed, 1.0)
    };
    let value: f64 = number.trim().parse().map_err(|_| bad())?;
    if !value.is_finite() || value < 0.0 {
        return Err(bad());
    }
    Duration::try_from_secs_f64(value * scale).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_plain_seconds() {
        assert_eq!(parse("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("0.05"), Ok(Duration::from_millis(50)));
        assert_eq!(parse("50ms"), Ok(Duration::from_millis(50)));
        assert_eq!(parse("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        for bad in ["", "x", "-1", "NaN", "inf", "1h", "ms"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
