//! Client certificates: a CA bundle that verifies them for client authentication, and the
//! subject fields that name a user (CN = user, O = groups).

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

/// A bundle of CA certificates trusted for client certificates.
#[derive(Clone, Debug)]
pub struct CaPool {
    verifier: Arc<dyn ClientCertVerifier>,
    /// How many CA certificates the bundle holds.
    pub len: usize,
}

/// Why a PEM bundle is not usable.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    /// Not PEM, or no certificate in it.
    #[error("no certificate found in the PEM bundle")]
    Empty,
    /// A certificate is malformed.
    #[error("invalid certificate in the PEM bundle: {0}")]
    Invalid(String),
}

/// Parses every certificate of a PEM bundle.
pub fn parse_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, PemError> {
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| PemError::Invalid(e.to_string()))?;
    if certs.is_empty() {
        return Err(PemError::Empty);
    }
    Ok(certs)
}

impl CaPool {
    /// A pool from a PEM bundle.
    pub fn from_pem(pem: &[u8]) -> Result<CaPool, PemError> {
        let certs = parse_pem(pem)?;
        let mut roots = RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(certs.iter().cloned());
        if added == 0 {
            return Err(PemError::Invalid("no usable CA certificate".into()));
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .map_err(|e| PemError::Invalid(e.to_string()))?;
        Ok(CaPool {
            verifier,
            len: added,
        })
    }

    /// Whether `chain` (leaf first) is a valid client certificate issued by this pool.
    pub fn verify(&self, chain: &[CertificateDer<'static>]) -> Result<(), String> {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Err("no certificate".into());
        };
        self.verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// Common name and organizations of a certificate's subject (the same reading as the agent's
/// report API).
pub use kdoctor_transport::tls::subject;
