//! TLS material for the agent's servers and the prober's clients (rustls with ring: no OpenSSL).

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

/// ALPN protocols a server offers: HTTP/2 first, so that clients which can speak it do.
pub const SERVER_ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// What went wrong with TLS material; names the file or the part.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds no usable item.
    #[error("{path}: {problem}")]
    File {
        /// The file.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// rustls refused the material.
    #[error("{what}: {source}")]
    Rustls {
        /// Which configuration was being built.
        what: &'static str,
        /// rustls' reason.
        source: rustls::Error,
    },
    /// A certificate could not be generated.
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// The process-wide crypto provider (ring).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate chain and its private key.
#[derive(Debug)]
pub struct Identity {
    /// Leaf first.
    pub certs: Vec<CertificateDer<'static>>,
    /// The leaf's key.
    pub key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity {
            certs: self.certs.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl Identity {
    /// Reads a PEM certificate chain and a PEM private key.
    pub fn from_files(cert: &Path, key: &Path) -> Result<Identity, TlsError> {
        let certs = read_certs(cert)?;
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::File {
            path: key.display().to_string(),
            problem: format!("no PEM private key: {e}"),
        })?;
        Ok(Identity { certs, key })
    }

    /// A self-signed certificate for `names` (DNS names or IP addresses), valid for a long time,
    /// used when no certificate is configured so that HTTPS targets always exist.
    pub fn self_signed(names: &[String]) -> Result<Identity, TlsError> {
        let certified = rcgen::generate_simple_self_signed(names.to_vec())?;
        let key = PrivateKeyDer::try_from(certified.signing_key.serialize_der()).map_err(|e| {
            TlsError::File {
                path: "<generated key>".to_string(),
                problem: e.to_string(),
            }
        })?;
        Ok(Identity {
            certs: vec![certified.cert.der().clone()],
            key,
        })
    }
}

/// Reads every certificate of a PEM file; an empty file is an error.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let fail = |problem: String| TlsError::File {
        path: path.display().to_string(),
        problem,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| fail(format!("cannot read: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(format!("bad PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(fail("no PEM certificate in the file".to_string()));
    }
    Ok(certs)
}

/// A root store holding the certificates of a PEM file.
pub fn read_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    roots_of(read_certs(path)?, &path.display().to_string())
}

fn roots_of(certs: Vec<CertificateDer<'static>>, source: &str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| TlsError::File {
            path: source.to_string(),
            problem: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

/// Every certificate of PEM text; `source` names where it came from (e.g. `Secret ns/name
/// key ca.crt`) in errors.
pub fn parse_certs(pem: &[u8], source: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let fail = |problem: String| TlsError::File {
        path: source.to_string(),
        problem,
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(format!("bad PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(fail("no PEM certificate".to_string()));
    }
    Ok(certs)
}

/// A root store from PEM text.
pub fn parse_roots(pem: &[u8], source: &str) -> Result<RootCertStore, TlsError> {
    roots_of(parse_certs(pem, source)?, source)
}

/// An identity from PEM text: a certificate chain and its key.
pub fn parse_identity(cert: &[u8], key: &[u8], source: &str) -> Result<Identity, TlsError> {
    let certs = parse_certs(cert, source)?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| TlsError::File {
        path: source.to_string(),
        problem: format!("no PEM private key: {e}"),
    })?;
    Ok(Identity { certs, key })
}

/// Common name and organizations of a certificate's subject (a verified client's user and
/// groups).
pub fn subject(cert: &CertificateDer<'_>) -> Option<(String, Vec<String>)> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    let cn = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let orgs = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some((cn, orgs))
}

/// The subject common name of a certificate (a verified client's identity).
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    subject(cert).map(|(cn, _)| cn)
}

/// A server configuration offering HTTP/2 and HTTP/1.1 by ALPN; with `client_ca`, clients must
/// present a certificate signed by it.
pub fn server_config(
    identity: Identity,
    client_ca: Option<RootCertStore>,
) -> Result<ServerConfig, TlsError> {
    let rustls = |what| move |source| TlsError::Rustls { what, source };
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls("server protocol versions"))?;
    let builder = match client_ca {
        Some(roots) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| TlsError::Rustls {
                    what: "client certificate verifier",
                    source: rustls::Error::General(e.to_string()),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(identity.certs, identity.key)
        .map_err(rustls("server certificate"))?;
    config.alpn_protocols = SERVER_ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// How a client checks the server.
#[derive(Debug, Clone)]
pub enum ServerTrust {
    /// Any certificate (upstream's default when no CA is given: the probe measures the network,
    /// not the PKI).
    Any,
    /// Certificates signed by these roots, for the probed host name.
    Roots(RootCertStore),
}

/// A client configuration with the given trust, optional client certificate and ALPN list.
pub fn client_config(
    trust: ServerTrust,
    identity: Option<Identity>,
    alpn: &[&[u8]],
) -> Result<ClientConfig, TlsError> {
    let rustls = |what| move |source| TlsError::Rustls { what, source };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls("client protocol versions"))?;
    let builder = match trust {
        ServerTrust::Roots(roots) => builder.with_root_certificates(roots),
        ServerTrust::Any => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny(provider()))),
    };
    let mut config = match identity {
        Some(identity) => builder
            .with_client_auth_cert(identity.certs, identity.key)
            .map_err(rustls("client certificate"))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// Accepts any server certificate but still checks the handshake signatures, so a broken TLS
/// stack is noticed even when the PKI is not checked.
#[derive(Debug)]
struct AcceptAny(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
