//! The rule on an AppHttpHealthy TLS Secret, which needs the Secret itself: only the keys
//! `ca.crt`, `tls.crt` and `tls.key` (as upstream), none empty, and a certificate with its key.

use super::field::{ErrorList, FieldError, FieldPath};

/// Keys an AppHttpHealthy TLS Secret may hold.
pub const TLS_SECRET_KEYS: [&str; 3] = ["ca.crt", "tls.crt", "tls.key"];

/// Checks the keys of Secret `namespace/name` given as `(key, value length)` pairs. Errors are
/// reported on `spec.target.tlsSecretName`.
pub fn check_tls_secret<'a>(
    namespace: &str,
    name: &str,
    entries: impl IntoIterator<Item = (&'a str, usize)>,
) -> Result<(), ErrorList> {
    let path = FieldPath::new("spec")
        .child("target")
        .child("tlsSecretName");
    let mut errors = ErrorList::default();
    let entries: Vec<(&str, usize)> = entries.into_iter().collect();
    for (key, len) in &entries {
        if !TLS_SECRET_KEYS.contains(key) {
            errors.push(FieldError::invalid(
                path.clone(),
                name,
                format!(
                    "Secret {namespace}/{name} holds key {key:?}: only ca.crt, tls.crt and tls.key may be used"
                ),
            ));
        } else if *len == 0 {
            errors.push(FieldError::invalid(
                path.clone(),
                name,
                format!("Secret {namespace}/{name}: key {key:?} is empty"),
            ));
        }
    }
    let present = |key: &str| entries.iter().any(|(k, len)| *k == key && *len > 0);
    if present("tls.crt") != present("tls.key") {
        errors.push(FieldError::invalid(
            path,
            name,
            format!(
                "Secret {namespace}/{name}: a client certificate needs both tls.crt and tls.key"
            ),
        ));
    }
    errors.into_result()
}
