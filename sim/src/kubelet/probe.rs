//! Container probes as the kubelet runs them: httpGet (HTTP, or HTTPS without verifying the
//! certificate; 200–399 succeeds), tcpSocket (a connection opens), against the pod's address
//! with named ports resolved from the container's ports, each within timeoutSeconds; and the
//! thresholds that turn results into ready, started or "restart it".

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// What a probe does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// GET `path` at `addr`, over TLS when `https`.
    Http {
        /// Where.
        addr: SocketAddr,
        /// Path and query.
        path: String,
        /// Scheme HTTPS.
        https: bool,
    },
    /// Open a TCP connection.
    Tcp(SocketAddr),
    /// A kind kube-sim cannot run (exec, grpc): always fails, with this message.
    Unsupported(String),
}

/// One probe of a container with its timing and thresholds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// What it does.
    pub action: Action,
    /// initialDelaySeconds.
    pub initial_delay: Duration,
    /// periodSeconds.
    pub period: Duration,
    /// timeoutSeconds.
    pub timeout: Duration,
    /// successThreshold.
    pub success_threshold: u32,
    /// failureThreshold.
    pub failure_threshold: u32,
}

fn port_of(container: &Value, port: &Value) -> Option<u16> {
    match port {
        Value::Number(n) => n.as_u64().and_then(|p| u16::try_from(p).ok()),
        Value::String(name) => container
            .get("ports")
            .and_then(Value::as_array)?
            .iter()
            .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
            .and_then(|p| p.get("containerPort").and_then(Value::as_u64))
            .and_then(|p| u16::try_from(p).ok()),
        _ => None,
    }
}

fn seconds(probe: &Value, field: &str, default: u64) -> Duration {
    Duration::from_secs(probe.get(field).and_then(Value::as_u64).unwrap_or(default))
}

/// The probe `kind` (`readinessProbe`, `livenessProbe`, `startupProbe`) of `container`, aimed at
/// the pod's address `ip`.
pub fn parse(container: &Value, kind: &str, ip: IpAddr) -> Option<Probe> {
    let p = container.get(kind)?;
    let action = if let Some(h) = p.get("httpGet") {
        match h.get("port").and_then(|port| port_of(container, port)) {
            Some(port) => {
                let host: IpAddr = h
                    .get("host")
                    .and_then(Value::as_str)
                    .and_then(|h| h.parse().ok())
                    .unwrap_or(ip);
                Action::Http {
                    addr: SocketAddr::new(host, port),
                    path: match h.get("path").and_then(Value::as_str) {
                        Some(p) if p.starts_with('/') => p.to_string(),
                        Some(p) => format!("/{p}"),
                        None => "/".into(),
                    },
                    https: h.get("scheme").and_then(Value::as_str) == Some("HTTPS"),
                }
            }
            None => Action::Unsupported(format!(
                "{kind}: port {} is not a port of the container",
                h["port"]
            )),
        }
    } else if let Some(t) = p.get("tcpSocket") {
        match t.get("port").and_then(|port| port_of(container, port)) {
            Some(port) => Action::Tcp(SocketAddr::new(ip, port)),
            None => Action::Unsupported(format!(
                "{kind}: port {} is not a port of the container",
                t["port"]
            )),
        }
    } else {
        Action::Unsupported(format!(
            "{kind}: only httpGet and tcpSocket probes run under kube-sim"
        ))
    };
    let success_threshold = p
        .get("successThreshold")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let failure_threshold = p
        .get("failureThreshold")
        .and_then(Value::as_u64)
        .unwrap_or(3);
    Some(Probe {
        action,
        initial_delay: seconds(p, "initialDelaySeconds", 0),
        period: seconds(p, "periodSeconds", 10).max(Duration::from_secs(1)),
        timeout: seconds(p, "timeoutSeconds", 1).max(Duration::from_secs(1)),
        success_threshold: u32::try_from(success_threshold).unwrap_or(1).max(1),
        failure_threshold: u32::try_from(failure_threshold).unwrap_or(3).max(1),
    })
}

/// Counts consecutive results against a probe's thresholds.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    successes: u32,
    failures: u32,
}

/// What a result means, after the thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// successThreshold consecutive successes.
    Passing,
    /// failureThreshold consecutive failures.
    Failing,
    /// Neither yet: keep the last verdict.
    Undecided,
}

impl Tally {
    /// Records one result.
    pub fn record(&mut self, probe: &Probe, ok: bool) -> Verdict {
        if ok {
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
            if self.successes >= probe.success_threshold {
                return Verdict::Passing;
            }
        } else {
            self.successes = 0;
            self.failures = self.failures.saturating_add(1);
            if self.failures >= probe.failure_threshold {
                return Verdict::Failing;
            }
        }
        Verdict::Undecided
    }
}

/// Runs the probe once: Ok on success, Err with the kubelet-style reason otherwise.
pub async fn run(probe: &Probe) -> Result<(), String> {
    match tokio::time::timeout(probe.timeout, attempt(&probe.action)).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "Get \"{}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
            describe(&probe.action)
        )),
    }
}

fn describe(a: &Action) -> String {
    match a {
        Action::Http { addr, path, https } => {
            format!("{}://{addr}{path}", if *https { "https" } else { "http" })
        }
        Action::Tcp(addr) => addr.to_string(),
        Action::Unsupported(m) => m.clone(),
    }
}

async fn attempt(a: &Action) -> Result<(), String> {
    match a {
        Action::Unsupported(m) => Err(m.clone()),
        Action::Tcp(addr) => TcpStream::connect(addr)
            .await
            .map(drop)
            .map_err(|e| format!("dial tcp {addr}: {e}")),
        Action::Http { addr, path, https } => {
            let stream = TcpStream::connect(addr)
                .await
                .map_err(|e| format!("Get \"{}\": dial tcp {addr}: {e}", describe(a)))?;
            let code = if *https {
                let tls = tokio_rustls::TlsConnector::from(insecure_tls());
                let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
                let stream = tls
                    .connect(name, stream)
                    .await
                    .map_err(|e| format!("Get \"{}\": {e}", describe(a)))?;
                get(stream, *addr, path).await
            } else {
                get(stream, *addr, path).await
            }
            .map_err(|e| format!("Get \"{}\": {e}", describe(a)))?;
            if (200..400).contains(&code) {
                Ok(())
            } else {
                Err(format!("HTTP probe failed with statuscode: {code}"))
            }
        }
    }
}

async fn get<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    addr: SocketAddr,
    path: &str,
) -> std::io::Result<u16> {
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.34\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).await?;
    // "HTTP/1.1 200"
    std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("malformed HTTP response"))
}

/// The kubelet does not verify a probed container's certificate.
fn insecure_tls() -> Arc<rustls::ClientConfig> {
    #[derive(Debug)]
    struct AnyCert(Arc<rustls::crypto::CryptoProvider>);
    impl rustls::client::danger::ServerCertVerifier for AnyCert {
        fn verify_server_cert(
            &self,
            _: &rustls::pki_types::CertificateDer<'_>,
            _: &[rustls::pki_types::CertificateDer<'_>],
            _: &rustls::pki_types::ServerName<'_>,
            _: &[u8],
            _: rustls::pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            m: &[u8],
            c: &rustls::pki_types::CertificateDer<'_>,
            d: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                m,
                c,
                d,
                &self.0.signature_verification_algorithms,
            )
        }
        fn verify_tls13_signature(
            &self,
            m: &[u8],
            c: &rustls::pki_types::CertificateDer<'_>,
            d: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                m,
                c,
                d,
                &self.0.signature_verification_algorithms,
            )
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
                .with_no_client_auth()
        });
    Arc::new(config.unwrap_or_else(|_| {
        rustls::ClientConfig::builder()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn probes_parse_named_ports_and_defaults() {
        let ip: IpAddr = "198.19.0.7".parse().expect("ip");
        let c = json!({"ports": [{"name": "health", "containerPort": 5710}],
            "readinessProbe": {"httpGet": {"path": "/healthy/readiness", "port": "health"}, "periodSeconds": 5},
            "livenessProbe": {"tcpSocket": {"port": 80}, "failureThreshold": 6},
            "startupProbe": {"exec": {"command": ["true"]}}});
        let r = parse(&c, "readinessProbe", ip).expect("readiness");
        assert_eq!(
            r.action,
            Action::Http {
                addr: "198.19.0.7:5710".parse().expect("addr"),
                path: "/healthy/readiness".into(),
                https: false
            }
        );
        assert_eq!(
            (r.period, r.timeout, r.failure_threshold),
            (Duration::from_secs(5), Duration::from_secs(1), 3)
        );
        let l = parse(&c, "livenessProbe", ip).expect("liveness");
        assert_eq!(
            l.action,
            Action::Tcp("198.19.0.7:80".parse().expect("addr"))
        );
        assert_eq!(l.failure_threshold, 6);
        assert!(matches!(
            parse(&c, "startupProbe", ip).expect("startup").action,
            Action::Unsupported(_)
        ));
        assert!(parse(&c, "nope", ip).is_none());
    }

    #[test]
    fn thresholds_need_consecutive_results() {
        let p = Probe {
            action: Action::Tcp("127.0.0.1:1".parse().expect("addr")),
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: 2,
            failure_threshold: 3,
        };
        let mut t = Tally::default();
        assert_eq!(t.record(&p, true), Verdict::Undecided);
        assert_eq!(t.record(&p, true), Verdict::Passing);
        assert_eq!(t.record(&p, false), Verdict::Undecided);
        assert_eq!(t.record(&p, false), Verdict::Undecided);
        assert_eq!(t.record(&p, true), Verdict::Undecided);
        for _ in 0..2 {
            assert_eq!(t.record(&p, false), Verdict::Undecided);
        }
        assert_eq!(t.record(&p, false), Verdict::Failing);
    }

    #[tokio::test]
    async fn http_probes_judge_the_status_code() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            for code in [200, 503] {
                let (mut s, _) = listener.accept().await.expect("accept");
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(format!("HTTP/1.1 {code} X\r\ncontent-length: 0\r\n\r\n").as_bytes())
                    .await;
            }
        });
        let probe = |path: &str| Probe {
            action: Action::Http {
                addr,
                path: path.into(),
                https: false,
            },
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
            success_threshold: 1,
            failure_threshold: 1,
        };
        assert_eq!(run(&probe("/ok")).await, Ok(()));
        assert_eq!(
            run(&probe("/bad")).await,
            Err("HTTP probe failed with statuscode: 503".into())
        );
    }
}
