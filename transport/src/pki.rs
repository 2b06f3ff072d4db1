//! Certificates without manual steps: a CA (created once and kept), serving certificates and
//! client certificates it signs, and a kubeconfig that uses them.

use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::tls::{Identity, TlsError, parse_identity};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// A certificate and its private key, PEM-encoded.
#[derive(Clone, Debug)]
pub struct Pem {
    /// Certificate chain, PEM.
    pub cert: String,
    /// Private key, PEM.
    pub key: String,
}

impl Pem {
    /// Writes the certificate to `cert` and the key to `key` (readable by its owner only),
    /// creating their folder.
    pub fn write(&self, cert: &Path, key: &Path) -> Result<(), PkiError> {
        if let Some(dir) = cert.parent() {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        write_private(key, self.key.as_bytes())?;
        std::fs::write(cert, &self.cert).map_err(io(cert))
    }

    /// The certificate and key as a TLS identity.
    pub fn identity(&self) -> Result<Identity, TlsError> {
        parse_identity(
            self.cert.as_bytes(),
            self.key.as_bytes(),
            "generated certificate",
        )
    }
}

/// Why certificates could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// rcgen refused.
    #[error("certificate: {0}")]
    Cert(#[from] rcgen::Error),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PkiError + '_ {
    move |source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A certificate authority able to sign.
pub struct Ca {
    /// The CA certificate and key.
    pub pem: Pem,
    issuer: Issuer<'static, KeyPair>,
}

fn validity(params: &mut CertificateParams, days: i64) {
    let now = std::time::SystemTime::now();
    params.not_before = (now - std::time::Duration::from_secs(3600)).into();
    params.not_after = (now + std::time::Duration::from_secs(days as u64 * 86_400)).into();
}

impl Ca {
    /// A new CA named `name`, valid ten years.
    pub fn generate(name: &str) -> Result<Ca, PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params, 3650);
        let cert = params.self_signed(&key)?;
        let pem = Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        };
        Ok(Ca {
            pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// A CA from its PEM certificate and key.
    pub fn from_pem(pem: Pem) -> Result<Ca, PkiError> {
        let key = KeyPair::from_pem(&pem.key)?;
        let issuer = Issuer::from_ca_cert_pem(&pem.cert, key)?;
        Ok(Ca { pem, issuer })
    }

    /// The CA kept in `dir` (`ca.crt`, `ca.key`), created on first use.
    pub fn load_or_create(dir: &Path, name: &str) -> Result<Ca, PkiError> {
        let (cert_path, key_path) = (dir.join("ca.crt"), dir.join("ca.key"));
        if cert_path.exists() && key_path.exists() {
            let cert = std::fs::read_to_string(&cert_path).map_err(io(&cert_path))?;
            let key = std::fs::read_to_string(&key_path).map_err(io(&key_path))?;
            return Ca::from_pem(Pem { cert, key });
        }
        let ca = Ca::generate(name)?;
        ca.pem.write(&cert_path, &key_path)?;
        Ok(ca)
    }

    /// A serving certificate for these DNS names and IP addresses.
    pub fn serving(&self, names: &[String]) -> Result<Pem, PkiError> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            names.first().map_or("kdoctor", String::as_str),
        );
        params.distinguished_name = dn;
        params.subject_alt_names = names
            .iter()
            .map(|n| match n.parse::<std::net::IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => n.clone().try_into().map(SanType::DnsName),
            })
            .collect::<Result<_, _>>()?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        validity(&mut params, 365);
        self.sign(params)
    }

    /// A client certificate for user `name` in `groups`.
    pub fn client(&self, name: &str, groups: &[&str]) -> Result<Pem, PkiError> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        for group in groups {
            dn.push(DnType::OrganizationName, *group);
        }
        params.distinguished_name = dn;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        validity(&mut params, 365);
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Result<Pem, PkiError> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

/// Writes a file only its owner can read. An existing file is narrowed to 0600 while still
/// empty (the creation mode applies only to a new file), before any secret is in it.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), PkiError> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io(path))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io(path))?;
    file.write_all(bytes).map_err(io(path))
}

/// A kubeconfig for `server` trusting `ca`, authenticating with `client`.
pub fn kubeconfig(server: &str, ca: &str, client: &Pem, name: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {name}
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: {name}
  context:
    cluster: {name}
    user: {name}
current-context: {name}
",
        ca = b64(ca),
        cert = b64(&client.cert),
        key = b64(&client.key),
    )
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::write_private;

    #[test]
    fn an_existing_world_readable_file_becomes_private() {
        let dir = std::env::temp_dir().join(format!("kdoctor-pki-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("kubeconfig");
        std::fs::write(&path, "old").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        write_private(&path, b"secret").expect("written");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read(&path).expect("read"), b"secret");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
