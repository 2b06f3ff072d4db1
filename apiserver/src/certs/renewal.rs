//! Whether a serving certificate is still good: readable, signed by the install's CA, naming
//! every name the server is reached by, and not about to expire. Pure, so the rules are tested
//! without a cluster.

use x509_parser::extensions::GeneralName;
use x509_parser::pem::parse_x509_pem;

/// Why a serving certificate must be issued again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// There is none yet.
    Missing,
    /// It cannot be parsed.
    Unreadable(String),
    /// Another CA signed it (the CA was replaced).
    OtherCa,
    /// It expires within the renewal window (seconds since the epoch of `notAfter`).
    Expiring(i64),
    /// A name the server is reached by is not in it.
    MissingName(String),
}

impl std::fmt::Display for Renewal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Renewal::Missing => f.write_str("no serving certificate yet"),
            Renewal::Unreadable(e) => write!(f, "the serving certificate is unreadable: {e}"),
            Renewal::OtherCa => f.write_str("the serving certificate was signed by another CA"),
            Renewal::Expiring(at) => write!(f, "the serving certificate expires at {at} (unix)"),
            Renewal::MissingName(n) => write!(f, "the serving certificate does not name {n}"),
        }
    }
}

/// The names the controller's API server is reached by through its Service.
pub fn serving_names(service: &str, namespace: &str, cluster_domain: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc.{cluster_domain}"),
    ]
}

/// `None` when `cert_pem` is signed by `ca_pem`, names every one of `names` and is valid for
/// more than `renew_before_secs` after `now_unix`; otherwise why it must be issued again.
pub fn renewal(
    cert_pem: Option<&str>,
    ca_pem: &str,
    names: &[String],
    now_unix: i64,
    renew_before_secs: i64,
) -> Option<Renewal> {
    let Some(cert_pem) = cert_pem else {
        return Some(Renewal::Missing);
    };
    let unreadable = |e: String| Some(Renewal::Unreadable(e));
    let (_, cert_block) = match parse_x509_pem(cert_pem.as_bytes()) {
        Ok(parsed) => parsed,
        Err(e) => return unreadable(e.to_string()),
    };
    let cert = match cert_block.parse_x509() {
        Ok(c) => c,
        Err(e) => return unreadable(e.to_string()),
    };
    let (_, ca_block) = match parse_x509_pem(ca_pem.as_bytes()) {
        Ok(parsed) => parsed,
        Err(e) => return unreadable(format!("CA: {e}")),
    };
    let ca = match ca_block.parse_x509() {
        Ok(c) => c,
        Err(e) => return unreadable(format!("CA: {e}")),
    };
    if cert.issuer() != ca.subject() || cert.verify_signature(Some(ca.public_key())).is_err() {
        return Some(Renewal::OtherCa);
    }
    let not_after = cert.validity().not_after.timestamp();
    if not_after - now_unix <= renew_before_secs {
        return Some(Renewal::Expiring(not_after));
    }
    let mut present: Vec<String> = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => present.push(d.to_string()),
                GeneralName::IPAddress(bytes) => {
                    let ip = match bytes.len() {
                        4 => <[u8; 4]>::try_from(*bytes).ok().map(std::net::IpAddr::from),
                        16 => <[u8; 16]>::try_from(*bytes)
                            .ok()
                            .map(std::net::IpAddr::from),
                        _ => None,
                    };
                    present.extend(ip.map(|ip| ip.to_string()));
                }
                _ => {}
            }
        }
    }
    names
        .iter()
        .find(|n| !present.contains(n))
        .map(|n| Renewal::MissingName(n.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kdoctor_transport::pki::Ca;

    const DAY: i64 = 86_400;

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)
    }

    #[test]
    fn a_fresh_certificate_of_the_ca_naming_the_service_is_kept() {
        let ca = Ca::generate("test-ca").unwrap();
        let names = serving_names("kdoctor-controller", "kdoctor", "cluster.local");
        assert_eq!(names[0], "kdoctor-controller.kdoctor.svc");
        let serving = ca.serving(&names).unwrap();
        assert_eq!(
            renewal(Some(&serving.cert), &ca.pem.cert, &names, now(), 30 * DAY),
            None
        );
        // Issued for a year: due within the last 30 days of it.
        match renewal(
            Some(&serving.cert),
            &ca.pem.cert,
            &names,
            now() + 340 * DAY,
            30 * DAY,
        ) {
            Some(Renewal::Expiring(_)) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn another_ca_a_missing_name_or_no_certificate_means_issue_again() {
        let ca = Ca::generate("test-ca").unwrap();
        let other = Ca::generate("other-ca").unwrap();
        let names = serving_names("kdoctor-controller", "kdoctor", "cluster.local");
        let foreign = other.serving(&names).unwrap();
        assert_eq!(
            renewal(Some(&foreign.cert), &ca.pem.cert, &names, now(), DAY),
            Some(Renewal::OtherCa)
        );
        let narrow = ca.serving(&names[..1]).unwrap();
        assert_eq!(
            renewal(Some(&narrow.cert), &ca.pem.cert, &names, now(), DAY),
            Some(Renewal::MissingName("kdoctor-controller".into()))
        );
        let with_ip = ca
            .serving(&["kdoctor-controller".to_string(), "10.96.0.7".to_string()])
            .unwrap();
        assert_eq!(
            renewal(
                Some(&with_ip.cert),
                &ca.pem.cert,
                &["10.96.0.7".to_string()],
                now(),
                DAY
            ),
            None
        );
        assert_eq!(
            renewal(None, &ca.pem.cert, &names, now(), DAY),
            Some(Renewal::Missing)
        );
        assert!(matches!(
            renewal(Some("junk"), &ca.pem.cert, &names, now(), DAY),
            Some(Renewal::Unreadable(_))
        ));
    }
}
