//! TLS for every kdoctor server and client (rustls with ring: no OpenSSL): PEM material, the
//! serving certificate (reloadable), server configurations with required, requested or no client
//! certificates, and client configurations that trust given roots or (a prober's default) any
//! server.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

mod serving;
mod verifiers;

pub use serving::ServingCert;
use verifiers::{AcceptAny, RequestClientCert};

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
    /// The identity as rustls signs with it.
    pub fn certified_key(self) -> Result<CertifiedKey, TlsError> {
        CertifiedKey::from_der(self.certs, self.key, &provider()).map_err(|source| {
            TlsError::Rustls {
                what: "server certificate",
                source,
            }
        })
    }

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

/// Which client certificates a server asks for.
#[derive(Debug, Clone)]
pub enum ClientAuth {
    /// None.
    None,
    /// Required, and signed by these roots (replication, the report API).
    Required(RootCertStore),
    /// Asked for but not required; the handshake only checks that the client holds the key.
    /// Whose certificate it is, is decided per request (the API server's authenticator checks
    /// it against the client CA or the front-proxy CA, as the Go server does), so token users
    /// and probes still connect.
    Requested,
}

/// A verifier of client certificates signed by `roots`.
pub fn client_verifier(roots: RootCertStore) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| TlsError::Rustls {
            what: "client certificate verifier",
            source: rustls::Error::General(e.to_string()),
        })
}

/// A server configuration offering HTTP/2 and HTTP/1.1 by ALPN, serving `cert` (which may be
/// swapped at run time) and asking clients for certificates as `client` says.
pub fn serving_config(
    cert: Arc<ServingCert>,
    client: ClientAuth,
) -> Result<ServerConfig, TlsError> {
    let rustls = |what| move |source| TlsError::Rustls { what, source };
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls("server protocol versions"))?;
    let builder = match client {
        ClientAuth::Required(roots) => builder.with_client_cert_verifier(client_verifier(roots)?),
        ClientAuth::Requested => {
            builder.with_client_cert_verifier(Arc::new(RequestClientCert::new(provider())))
        }
        ClientAuth::None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(cert);
    config.alpn_protocols = SERVER_ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// [`serving_config`] for a fixed identity; with `client_ca`, clients must present a
/// certificate signed by it.
pub fn server_config(
    identity: Identity,
    client_ca: Option<RootCertStore>,
) -> Result<ServerConfig, TlsError> {
    let client = match client_ca {
        Some(roots) => ClientAuth::Required(roots),
        None => ClientAuth::None,
    };
    serving_config(ServingCert::new(identity.certified_key()?), client)
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
