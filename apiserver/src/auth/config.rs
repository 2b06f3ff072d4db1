//! Authentication settings from `kube-system/extension-apiserver-authentication`, which
//! kube-apiserver writes: the client CA and the front-proxy (requestheader) settings. List values
//! are JSON-encoded string arrays.

use std::collections::BTreeMap;

use super::requestheader::RequestHeader;
use super::x509::CaPool;

/// Namespace of the ConfigMap.
pub const NAMESPACE: &str = "kube-system";
/// Name of the ConfigMap.
pub const NAME: &str = "extension-apiserver-authentication";

/// What authenticates clients.
#[derive(Clone, Debug, Default)]
pub struct AuthnConfig {
    /// CA of ordinary client certificates (user = CN, groups = O).
    pub client_ca: Option<CaPool>,
    /// Front-proxy settings.
    pub requestheader: Option<RequestHeader>,
}

/// Why the ConfigMap cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigMapError {
    /// A key holds something unusable.
    #[error("{NAMESPACE}/{NAME}: key {key}: {problem}")]
    Key {
        /// The key.
        key: &'static str,
        /// What is wrong.
        problem: String,
    },
}

fn list(data: &BTreeMap<String, String>, key: &'static str) -> Result<Vec<String>, ConfigMapError> {
    match data.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(vec![]),
        Some(text) => serde_json::from_str(text).map_err(|e| ConfigMapError::Key {
            key,
            problem: format!("expected a JSON array of strings: {e}"),
        }),
    }
}

impl AuthnConfig {
    /// Reads the ConfigMap's data.
    pub fn from_configmap(data: &BTreeMap<String, String>) -> Result<AuthnConfig, ConfigMapError> {
        let pool =
            |key: &'static str| -> Result<Option<CaPool>, ConfigMapError> {
                match data.get(key).filter(|v| !v.trim().is_empty()) {
                    None => Ok(None),
                    Some(pem) => CaPool::from_pem(pem.as_bytes()).map(Some).map_err(|e| {
                        ConfigMapError::Key {
                            key,
                            problem: e.to_string(),
                        }
                    }),
                }
            };
        let client_ca = pool("client-ca-file")?;
        let requestheader = match pool("requestheader-client-ca-file")? {
            None => {
                tracing::warn!(
                    "{NAMESPACE}/{NAME} has no requestheader-client-ca-file: requests through the aggregator \
                     cannot be authenticated (kube-apiserver needs --requestheader-client-ca-file)"
                );
                None
            }
            Some(ca) => Some(RequestHeader {
                ca,
                allowed_names: list(data, "requestheader-allowed-names")?,
                username_headers: list(data, "requestheader-username-headers")?,
                group_headers: list(data, "requestheader-group-headers")?,
                extra_prefixes: list(data, "requestheader-extra-headers-prefix")?,
                uid_headers: list(data, "requestheader-uid-headers")?,
            }),
        };
        Ok(AuthnConfig {
            client_ca,
            requestheader,
        })
    }
}
