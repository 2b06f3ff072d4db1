//! Who is calling: the client certificate's CN and O (the sim's client CA verified it during
//! the TLS handshake), else a bearer token from the TokenReview table.

use crate::reviews::{Reviews, UserInfo};
use axum::http::HeaderMap;

/// The identity of a TLS connection's client certificate, attached to each of its requests.
#[derive(Debug, Clone, Default)]
pub struct PeerIdentity(pub Option<UserInfo>);

/// User (CN) and groups (O) of a DER certificate.
pub fn from_der(der: &[u8]) -> Option<UserInfo> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let cn = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups: Vec<String> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(String::from))
        .collect();
    Some(UserInfo {
        username: cn,
        groups,
        ..Default::default()
    })
}

/// The caller: certificate first, then a bearer token known to the TokenReview table.
pub fn authenticate(
    reviews: &Reviews,
    peer: Option<&PeerIdentity>,
    headers: &HeaderMap,
) -> Option<UserInfo> {
    let mut user = peer.and_then(|p| p.0.clone()).or_else(|| {
        let auth = headers.get("authorization")?.to_str().ok()?;
        let token = auth.strip_prefix("Bearer ")?;
        let review = reviews.peek_token(token)?;
        Some(review)
    })?;
    if !user.groups.iter().any(|g| g == "system:authenticated") {
        user.groups.push("system:authenticated".into());
    }
    Some(user)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    #[test]
    fn reads_cn_and_o_from_client_certificates() {
        let pki = crate::certs::Pki::generate().expect("pki");
        let der = CertificateDer::from_pem_slice(pki.admin.cert_pem.as_bytes()).expect("der");
        let user = from_der(der.as_ref()).expect("identity");
        assert_eq!(user.username, "kube-sim-admin");
        assert_eq!(user.groups, ["system:masters"]);
    }
}
