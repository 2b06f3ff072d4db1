//! HDR histograms of latencies in microseconds, and their serialized form in reports
//! (`hdr-v2-deflate-base64`), so that rounds and nodes can be merged exactly.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use kdoctor_api::report::EncodedHistogram;

/// `encoding` of a serialized histogram.
pub const ENCODING: &str = "hdr-v2-deflate-base64";
/// `unit` of every recorded value.
pub const UNIT: &str = "microseconds";
/// Significant digits: 0.1% resolution (1 µs below 1 ms, 1 ms at one second).
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// Latencies in microseconds. u32 counters halve the memory of u64 ones; a bucket would need
/// four billion requests to overflow.
pub type Latencies = Histogram<u32>;

/// An empty histogram that grows to the largest value recorded (so a target whose latencies
/// stay under a millisecond costs a few KiB, not the 100+ KiB of a fixed one-hour range).
pub fn new_latencies() -> Latencies {
    // 3 significant digits is a valid precision: creation cannot fail.
    Histogram::new(SIGNIFICANT_DIGITS).unwrap_or_else(|e| panic!("histogram precision: {e}"))
}

/// Largest value recorded (a day); larger ones are clamped, bounding the histogram's size.
pub const MAX_MICROS: u64 = 86_400_000_000;

/// Records `micros`, growing the histogram when needed (`saturating_record` would clamp to the
/// current range instead of growing).
pub fn record(histogram: &mut Latencies, micros: u64) {
    let value = micros.min(MAX_MICROS);
    if histogram.record(value).is_err() {
        histogram.saturating_record(value);
    }
}

/// Why a serialized histogram cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Unknown `encoding` or `unit`.
    #[error("histogram: unsupported encoding {encoding:?} / unit {unit:?}")]
    Unsupported {
        /// The encoding found.
        encoding: String,
        /// The unit found.
        unit: String,
    },
    /// `data` is not base64.
    #[error("histogram data: not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    /// `data` is not an HDR V2 histogram.
    #[error("histogram data: {0}")]
    Hdr(String),
}

/// Serializes a histogram for a report.
pub fn encode(histogram: &Latencies) -> EncodedHistogram {
    let mut bytes = Vec::new();
    // Writing to a Vec cannot fail; a failing compressor would leave `data` empty, which
    // `decode` reports instead of inventing values.
    if let Err(e) = V2DeflateSerializer::new().serialize(histogram, &mut bytes) {
        tracing::warn!(error = ?e, "cannot serialize a histogram");
        bytes.clear();
    }
    EncodedHistogram {
        encoding: ENCODING.to_string(),
        unit: UNIT.to_string(),
        data: STANDARD.encode(bytes),
    }
}

/// Reads a serialized histogram.
pub fn decode(encoded: &EncodedHistogram) -> Result<Latencies, DecodeError> {
    if encoded.encoding != ENCODING || encoded.unit != UNIT {
        return Err(DecodeError::Unsupported {
            encoding: encoded.encoding.clone(),
            unit: encoded.unit.clone(),
        });
    }
    let bytes = STANDARD.decode(&encoded.data)?;
    let mut histogram: Latencies = Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| DecodeError::Hdr(format!("{e:?}")))?;
    histogram.auto(true);
    Ok(histogram)
}

/// Microseconds as fractional milliseconds, as reports carry them.
pub fn micros_to_ms(micros: f64) -> f32 {
    (micros / 1000.0) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_merges_exactly() {
        let mut a = new_latencies();
        let mut b = new_latencies();
        for v in 1..=1000u64 {
            record(&mut a, v * 10);
            record(&mut b, v * 1000);
        }
        let a2 = decode(&encode(&a)).unwrap();
        assert_eq!(a2, a);
        let mut merged = decode(&encode(&a)).unwrap();
        merged.add(decode(&encode(&b)).unwrap()).unwrap();
        assert_eq!(merged.len(), 2000);
        assert_eq!(merged.max(), b.max());
        assert_eq!(merged.min(), a.min());
        // A recorded value of one hour still fits (auto-resize).
        record(&mut merged, 3_600_000_000);
        assert!(merged.max() >= 3_600_000_000 - 3_600_000);
    }

    #[test]
    fn small_when_latencies_are_small() {
        let mut h = new_latencies();
        for v in 0..10_000u64 {
            record(&mut h, 50 + v % 900);
        }
        let encoded = encode(&h);
        assert!(encoded.data.len() < 4096, "{} bytes", encoded.data.len());
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        let mut e = encode(&new_latencies());
        e.unit = "milliseconds".to_string();
        assert!(matches!(decode(&e), Err(DecodeError::Unsupported { .. })));
        let mut e = encode(&new_latencies());
        e.data = "***".to_string();
        assert!(matches!(decode(&e), Err(DecodeError::Base64(_))));
        let mut e = encode(&new_latencies());
        e.data = STANDARD.encode(b"not a histogram");
        assert!(matches!(decode(&e), Err(DecodeError::Hdr(_))));
    }

    #[test]
    fn milliseconds_are_fractional() {
        assert_eq!(micros_to_ms(1500.0), 1.5);
        assert_eq!(micros_to_ms(250.0), 0.25);
    }
}
