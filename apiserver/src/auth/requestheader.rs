//! The front-proxy (request header) authenticator: the aggregator presents a client certificate
//! signed by the requestheader CA (with an allowed CN) and names the user in headers.

use std::collections::BTreeMap;

use axum::http::HeaderMap;

use super::user::User;
use super::x509::{CaPool, PeerCertificates};

/// The requestheader settings of `extension-apiserver-authentication`.
#[derive(Clone, Debug)]
pub struct RequestHeader {
    /// CA of the front-proxy client certificate.
    pub ca: CaPool,
    /// Allowed common names (empty: any).
    pub allowed_names: Vec<String>,
    /// Headers naming the user (first non-empty wins).
    pub username_headers: Vec<String>,
    /// Headers naming the groups (all values of all of them).
    pub group_headers: Vec<String>,
    /// Prefixes of headers carrying extra attributes.
    pub extra_prefixes: Vec<String>,
    /// Headers naming the UID.
    pub uid_headers: Vec<String>,
}

/// Why a front-proxy request was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// The certificate is not from the requestheader CA.
    UnknownCa,
    /// The certificate's CN is not among the allowed names.
    CnNotAllowed,
    /// The certificate is fine but no username header is set.
    NoUser,
}

impl Rejection {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::UnknownCa => "unknown_ca",
            Rejection::CnNotAllowed => "cn_not_allowed",
            Rejection::NoUser => "no_user",
        }
    }
}

impl RequestHeader {
    /// Whether the request carries one of the username headers (looks like a front-proxy request).
    pub fn names_a_user(&self, headers: &HeaderMap) -> bool {
        self.username_headers
            .iter()
            .any(|h| headers.get(h.as_str()).is_some())
    }

    /// The user, if the connection's certificate is a valid front-proxy certificate.
    pub fn authenticate(
        &self,
        peer: &PeerCertificates,
        headers: &HeaderMap,
    ) -> Result<User, (Rejection, String)> {
        self.ca
            .verify_once(peer)
            .map_err(|e| (Rejection::UnknownCa, e))?;
        if !self.allowed_names.is_empty() {
            let cn = peer.subject().map(|(cn, _)| cn).unwrap_or_default();
            if !self.allowed_names.iter().any(|allowed| allowed == cn) {
                return Err((
                    Rejection::CnNotAllowed,
                    format!("x509: subject with cn={cn} is not in the allowed list"),
                ));
            }
        }
        let value = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_string)
                .collect()
        };
        let name = self
            .username_headers
            .iter()
            .flat_map(|h| value(h))
            .find(|v| !v.is_empty())
            .ok_or((Rejection::NoUser, "no username header".to_string()))?;
        let groups: Vec<String> = self.group_headers.iter().flat_map(|h| value(h)).collect();
        let uid = self
            .uid_headers
            .iter()
            .flat_map(|h| value(h))
            .find(|v| !v.is_empty());
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (header, v) in headers {
            for prefix in &self.extra_prefixes {
                if let Some(key) = strip_prefix_ignoring_case(header.as_str(), prefix)
                    && let Ok(v) = v.to_str()
                {
                    extra
                        .entry(percent_decode(key))
                        .or_default()
                        .push(v.to_string());
                }
            }
        }
        let mut user = User {
            name,
            uid,
            groups,
            extra,
        };
        user.add_authenticated();
        Ok(user)
    }

    /// Removes every header this authenticator reads, so that later code never trusts them.
    pub fn strip(&self, headers: &mut HeaderMap) {
        for name in self
            .username_headers
            .iter()
            .chain(&self.group_headers)
            .chain(&self.uid_headers)
        {
            headers.remove(name.as_str());
        }
        let prefixed: Vec<_> = headers
            .keys()
            .filter(|k| {
                self.extra_prefixes
                    .iter()
                    .any(|p| strip_prefix_ignoring_case(k.as_str(), p).is_some())
            })
            .cloned()
            .collect();
        for name in prefixed {
            headers.remove(name);
        }
    }
}

/// `name` after `prefix`, compared without case (header names are case-insensitive; the
/// `http` crate keeps them in lower case, the ConfigMap's prefixes may be in any), without
/// allocating on every request.
fn strip_prefix_ignoring_case<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let head = name.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &name[prefix.len()..])
}

/// Extra keys arrive percent-escaped (kube-aggregator escapes them as `url.PathEscape` does).
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}
