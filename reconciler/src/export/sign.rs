//! Signing an exported event: HMAC-SHA256, keyed with the shared secret, over the attempt's
//! Unix timestamp (decimal ASCII), a dot, and the exact request body:
//!
//! ```text
//! X-Kdoctor-Timestamp: 1767225600
//! X-Kdoctor-Signature: sha256=hex(HMAC-SHA256(secret, "1767225600" + "." + body))
//! ```
//!
//! The timestamp is part of the MAC, so a receiver that rejects timestamps too far from its
//! clock (e.g. more than five minutes) cannot be fed a recorded request again later.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Header carrying the signature, `sha256=<lowercase hex>`.
pub const SIGNATURE_HEADER: &str = "x-kdoctor-signature";
/// Header carrying the attempt's Unix time in seconds, covered by the signature.
pub const TIMESTAMP_HEADER: &str = "x-kdoctor-timestamp";
/// Prefix of the signature header's value.
pub const SIGNATURE_PREFIX: &str = "sha256=";

fn mac(secret: &[u8], timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The value of the signature header for `body` sent at `timestamp`.
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    format!(
        "{SIGNATURE_PREFIX}{}",
        hex(&mac(secret, timestamp, body).finalize().into_bytes())
    )
}

/// Whether `header` (the signature header's value) signs `body` sent at `timestamp` with
/// `secret`; compared in constant time. What a receiver does (it also checks the timestamp's
/// age).
pub fn verify(secret: &[u8], timestamp: i64, body: &[u8], header: &str) -> bool {
    let Some(expected) = header
        .strip_prefix(SIGNATURE_PREFIX)
        .and_then(|hex| unhex(hex.trim()))
    else {
        return false;
    };
    mac(secret, timestamp, body).verify_slice(&expected).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mac_is_hmac_sha256() {
        // RFC 4231, test case 2.
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn the_signature_covers_the_timestamp_a_dot_and_the_body() {
        // python3: hmac.new(b"kdoctor-shared-secret",
        //                   b'1767225600.{"id":"uid-1/1/node-1"}', hashlib.sha256).hexdigest()
        let body = br#"{"id":"uid-1/1/node-1"}"#;
        let expected = "sha256=a150e7c7b84c83c0da1160fc8468232b78c72503481a904a20dfffee99732903";
        assert_eq!(
            signature(b"kdoctor-shared-secret", 1_767_225_600, body),
            expected
        );
        assert!(verify(
            b"kdoctor-shared-secret",
            1_767_225_600,
            body,
            expected
        ));
    }

    #[test]
    fn verification_fails_for_another_secret_time_body_or_a_malformed_header() {
        let body = b"{}";
        let good = signature(b"s", 100, body);
        assert!(verify(b"s", 100, body, &good));
        assert!(!verify(b"t", 100, body, &good));
        assert!(!verify(b"s", 101, body, &good));
        assert!(!verify(b"s", 100, b"{ }", &good));
        assert!(!verify(b"s", 100, body, good.trim_start_matches("sha256=")));
        assert!(!verify(b"s", 100, body, "sha256=zz"));
        assert!(!verify(b"s", 100, body, "sha256=abc"));
    }
}
