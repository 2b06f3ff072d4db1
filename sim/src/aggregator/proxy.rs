//! The aggregator's side of a proxied request: HTTPS to the extension server with the
//! front-proxy client certificate, the caller in `X-Remote-User`/`X-Remote-Group`/
//! `X-Remote-Extra-*`, the backend verified with the APIService's caBundle (or not at all with
//! insecureSkipTLSVerify), and the answer streamed back (watches included).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use bytes::Bytes;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::certs::CertPair;
use crate::reviews::UserInfo;

/// Where and how to reach one extension server.
#[derive(Debug, Clone)]
pub struct Target {
    /// Address of a Ready endpoint of the APIService's Service.
    pub addr: SocketAddr,
    /// TLS server name: `<service>.<namespace>.svc`, as kube-aggregator uses.
    pub server_name: String,
    /// PEM of the APIService's caBundle (None: insecureSkipTLSVerify).
    pub ca_pem: Option<String>,
}

#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
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

/// Proxy errors (reported to the caller as 503, as kube-aggregator does).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProxyError(pub String);

fn client_config(target: &Target, cert: &CertPair) -> Result<rustls::ClientConfig, ProxyError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let e = |x: &dyn std::fmt::Display| ProxyError(x.to_string());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|x| e(&x))?;
    let builder = match &target.ca_pem {
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(c.map_err(|x| e(&x))?).map_err(|x| e(&x))?;
            }
            builder.with_root_certificates(roots)
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny(provider))),
    };
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|x| e(&x))?;
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).map_err(|x| e(&x))?;
    let mut cfg = builder
        .with_client_auth_cert(chain, key)
        .map_err(|x| e(&x))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

const PASSED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "user-agent",
    "accept-encoding",
    "if-none-match",
];

/// Sends one request to the extension server as `user` and returns its answer, body streamed.
pub async fn forward(
    target: &Target,
    front_proxy: &CertPair,
    user: &UserInfo,
    method: &Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response<Body>, ProxyError> {
    let cfg = client_config(target, front_proxy)?;
    let name =
        ServerName::try_from(target.server_name.clone()).map_err(|x| ProxyError(x.to_string()))?;
    let tcp = tokio::net::TcpStream::connect(target.addr)
        .await
        .map_err(|x| ProxyError(format!("dial {}: {x}", target.addr)))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .map_err(|x| ProxyError(format!("TLS to {}: {x}", target.addr)))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(tls))
        .await
        .map_err(|x| ProxyError(x.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = Request::builder()
        .method(method.clone())
        .uri(path_and_query)
        .header("host", target.server_name.as_str());
    for h in PASSED_HEADERS {
        if let Some(v) = headers.get(*h) {
            req = req.header(*h, v.clone());
        }
    }
    req = req.header("x-remote-user", user.username.as_str());
    for g in &user.groups {
        req = req.header("x-remote-group", g.as_str());
    }
    for (k, vs) in &user.extra {
        for v in vs {
            req = req.header(format!("x-remote-extra-{}", k.to_lowercase()), v.as_str());
        }
    }
    let req = req
        .body(Body::from(body))
        .map_err(|x| ProxyError(x.to_string()))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|x| ProxyError(x.to_string()))?;
    let (parts, incoming) = resp.into_parts();
    Ok(Response::from_parts(parts, Body::new(incoming)))
}

/// kube-aggregator's answer when the backend cannot be reached: plain-text 503.
pub fn unavailable() -> Response<Body> {
    let mut r = Response::new(Body::from("service unavailable\n"));
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    r.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
