//! TLS: a serving certificate reloaded when its files change, and client certificates that are
//! requested but not required — verified per request by the authenticator against the client
//! CA or the front-proxy CA (as the Go server does), so token users and probes still connect.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};

use crate::auth::x509::parse_pem;

/// Why the serving certificate is unusable.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The PEM content is not a usable certificate and key.
    #[error("serving certificate: {0}")]
    Invalid(String),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Parses a PEM certificate chain and key into a signing identity.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let chain = parse_pem(cert_pem).map_err(|e| TlsError::Invalid(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| TlsError::Invalid(format!("private key: {e}")))?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|e| TlsError::Invalid(e.to_string()))
}

/// The serving certificate, swappable at run time.
#[derive(Debug)]
pub struct ServingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ServingCert {
    /// Serves `key` until replaced.
    pub fn new(key: CertifiedKey) -> Arc<ServingCert> {
        Arc::new(ServingCert {
            current: RwLock::new(Arc::new(key)),
        })
    }

    /// Replaces the certificate for new connections.
    pub fn set(&self, key: CertifiedKey) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
    }

    /// Reloads `cert` and `key` whenever their modification time changes, until dropped.
    pub async fn watch_files(self: Arc<Self>, cert: PathBuf, key: PathBuf, every: Duration) {
        let stamp = |p: &PathBuf| {
            std::fs::metadata(p)
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH)
        };
        let mut seen = (stamp(&cert), stamp(&key));
        loop {
            tokio::time::sleep(every).await;
            let now = (stamp(&cert), stamp(&key));
            if now == seen {
                continue;
            }
            seen = now;
            let loaded = std::fs::read(&cert)
                .and_then(|c| std::fs::read(&key).map(|k| (c, k)))
                .map_err(|e| TlsError::Io {
                    path: cert.clone(),
                    source: e,
                })
                .and_then(|(c, k)| certified_key(&c, &k));
            match loaded {
                Ok(k) => {
                    self.set(k);
                    tracing::info!(cert = %cert.display(), "serving certificate reloaded");
                }
                Err(e) => tracing::error!(error = %e, "keeping the previous serving certificate"),
            }
        }
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }
}

/// Asks for a client certificate, accepts the connection without one, and checks only that the
/// client holds the certificate's key; whose certificate it is, is decided per request.
#[derive(Debug)]
struct RequestClientCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The server's TLS configuration: HTTP/2 and HTTP/1.1 by ALPN, optional client certificates.
pub fn server_config(cert: Arc<ServingCert>) -> Result<ServerConfig, TlsError> {
    let provider = provider();
    let verifier = Arc::new(RequestClientCert {
        algorithms: provider.signature_verification_algorithms,
    });
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Invalid(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
