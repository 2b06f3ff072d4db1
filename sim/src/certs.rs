//! The simulated cluster's PKI: a serving CA, a client CA and a front-proxy (requestheader) CA,
//! generated per run with rcgen, like kube-apiserver's three trust roots.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// A PEM certificate with its PEM private key.
#[derive(Debug, Clone)]
pub struct CertPair {
    /// Certificate, PEM.
    pub cert_pem: String,
    /// Private key, PEM (PKCS#8).
    pub key_pem: String,
}

/// A certificate authority that can issue leaf certificates.
pub struct Ca {
    /// The CA certificate, PEM.
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("cert_pem", &self.cert_pem)
            .finish()
    }
}

/// Certificate errors (rcgen).
#[derive(Debug, thiserror::Error)]
#[error("certificate generation failed: {0}")]
pub struct CertError(#[from] rcgen::Error);

fn dn(cn: &str, orgs: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    for o in orgs {
        dn.push(DnType::OrganizationName, *o);
    }
    dn
}

impl Ca {
    /// A new self-signed CA with this common name.
    pub fn new(cn: &str) -> Result<Self, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = dn(cn, &[]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A client certificate (clientAuth) with user `cn` and groups `orgs`.
    pub fn client_cert(&self, cn: &str, orgs: &[&str]) -> Result<CertPair, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = dn(cn, orgs);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A serving certificate (serverAuth) for these DNS names and IP addresses.
    pub fn server_cert(&self, cn: &str, names: &[String]) -> Result<CertPair, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = dn(cn, &[]);
        for n in names {
            let san = match n.parse::<std::net::IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(n.clone().try_into()?),
            };
            params.subject_alt_names.push(san);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Every certificate of one simulated cluster.
#[derive(Debug)]
pub struct Pki {
    /// Signs the API server's serving certificate (the kubeconfig's certificate-authority-data).
    pub server_ca: Ca,
    /// Signs user client certificates (`client-ca-file` in the authentication ConfigMap).
    pub client_ca: Ca,
    /// Signs the aggregator's front-proxy certificate (`requestheader-client-ca-file`).
    pub front_proxy_ca: Ca,
    /// The API server's serving certificate.
    pub serving: CertPair,
    /// An admin client certificate: CN `kube-sim-admin`, O `system:masters`.
    pub admin: CertPair,
    /// The aggregator's client certificate: CN `front-proxy-client`, signed by the front-proxy CA.
    pub front_proxy_client: CertPair,
}

impl Pki {
    /// Generates the three CAs and the standard leaf certificates.
    pub fn generate() -> Result<Self, CertError> {
        let server_ca = Ca::new("kube-sim-ca")?;
        let client_ca = Ca::new("kube-sim-client-ca")?;
        let front_proxy_ca = Ca::new("kube-sim-front-proxy-ca")?;
        let names: Vec<String> = [
            "127.0.0.1",
            "::1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let serving = server_ca.server_cert("kube-apiserver", &names)?;
        let admin = client_ca.client_cert("kube-sim-admin", &["system:masters"])?;
        let front_proxy_client = front_proxy_ca.client_cert("front-proxy-client", &[])?;
        Ok(Pki {
            server_ca,
            client_ca,
            front_proxy_ca,
            serving,
            admin,
            front_proxy_client,
        })
    }
}
