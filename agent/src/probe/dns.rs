//! The DNS prober: one query per request through hickory's client layer (no caching resolver,
//! no retries: a lost query is a failure, not a hidden second try). UDP, TCP and DNS over TLS.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_net::NetError;
use hickory_net::client::{Client, ClientHandle};
use hickory_net::proto::op::ResponseCode;
pub use hickory_net::proto::rr::RecordType;
use hickory_net::proto::rr::{DNSClass, Name};
use hickory_net::runtime::TokioRuntimeProvider;
use hickory_net::tcp::TcpClientStream;
use hickory_net::tls::tls_client_connect;
use hickory_net::udp::UdpClientStream;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::time::Instant;

use super::Prober;
use super::http::{classify_io, classify_tls};
use super::outcome::{Attempt, Code, ErrorClass, ProbeError};

/// Transport of the queries (upstream's names: `udp`, `tcp`, `tcp-tls`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DnsProtocol {
    /// UDP, a fresh socket (random port) per query.
    Udp,
    /// TCP, a new connection per query (as upstream).
    Tcp,
    /// DNS over TLS, a new connection per query.
    #[value(name = "tcp-tls")]
    TcpTls,
}

impl DnsProtocol {
    /// Upstream's name.
    pub fn as_str(self) -> &'static str {
        match self {
            DnsProtocol::Udp => "udp",
            DnsProtocol::Tcp => "tcp",
            DnsProtocol::TcpTls => "tcp-tls",
        }
    }
}

/// What to ask which server.
#[derive(Clone, Debug)]
pub struct DnsRequestSpec {
    /// Server address.
    pub server: SocketAddr,
    /// Name to resolve (made fully qualified).
    pub domain: String,
    /// `A` or `AAAA`.
    pub record_type: RecordType,
    /// Transport.
    pub protocol: DnsProtocol,
    /// Name checked in the server's certificate (DoT); default: the server's IP.
    pub tls_server_name: Option<String>,
    /// Timeout of one query (hickory's own timer; the engine's timeout also bounds it).
    pub timeout: Duration,
}

/// Why a DNS prober cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum DnsSetupError {
    /// The domain is not a DNS name.
    #[error("domain {domain:?}: {problem}")]
    Domain {
        /// The domain.
        domain: String,
        /// What is wrong.
        problem: String,
    },
    /// DoT without a TLS configuration or with a bad server name.
    #[error("tls: {0}")]
    Tls(String),
}

/// RCODE names as miekg/dns (and so upstream's `replyCode`) spells them.
pub fn rcode_name(code: ResponseCode) -> String {
    let name = match u16::from(code) {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        6 => "YXDOMAIN",
        7 => "YXRRSET",
        8 => "NXRRSET",
        9 => "NOTAUTH",
        10 => "NOTZONE",
        16 => "BADSIG",
        17 => "BADKEY",
        18 => "BADTIME",
        19 => "BADMODE",
        20 => "BADNAME",
        21 => "BADALG",
        22 => "BADTRUNC",
        23 => "BADCOOKIE",
        other => return format!("RCODE{other}"),
    };
    name.to_string()
}

/// Probes one DNS server.
pub struct DnsProber {
    spec: DnsRequestSpec,
    name: Name,
    tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    udp: Option<Client<TokioRuntimeProvider>>,
}

impl DnsProber {
    /// A prober for `spec`; `tls` is required for `tcp-tls`. Must be called inside a tokio
    /// runtime (the UDP client's background task is spawned here).
    pub fn new(
        spec: DnsRequestSpec,
        tls: Option<Arc<ClientConfig>>,
    ) -> Result<DnsProber, DnsSetupError> {
        let mut name = Name::from_ascii(&spec.domain).map_err(|e| DnsSetupError::Domain {
            domain: spec.domain.clone(),
            problem: e.to_string(),
        })?;
        if spec.domain.is_empty() {
            return Err(DnsSetupError::Domain {
                domain: String::new(),
                problem: "empty".to_string(),
            });
        }
        name.set_fqdn(true);
        let tls = match spec.protocol {
            DnsProtocol::TcpTls => {
                let config =
                    tls.ok_or_else(|| DnsSetupError::Tls("no client configuration".into()))?;
                let server_name = spec
                    .tls_server_name
                    .clone()
                    .unwrap_or_else(|| spec.server.ip().to_string());
                let server_name = ServerName::try_from(server_name.clone())
                    .map_err(|e| DnsSetupError::Tls(format!("server name {server_name:?}: {e}")))?;
                Some((config, server_name))
            }
            _ => None,
        };
        let udp = (spec.protocol == DnsProtocol::Udp).then(|| {
            let stream = UdpClientStream::builder(spec.server, TokioRuntimeProvider::new())
                .with_timeout(Some(spec.timeout))
                // One task in hickory's retry loop: the first send, no retry.
                .with_max_retries(1)
                .build();
            let (client, background) = Client::<TokioRuntimeProvider>::from_sender(stream);
            tokio::spawn(background);
            client
        });
        Ok(DnsProber {
            spec,
            name,
            tls,
            udp,
        })
    }

    /// The name queried (fully qualified).
    pub fn name(&self) -> &Name {
        &self.name
    }

    async fn client(&self) -> Result<(Client<TokioRuntimeProvider>, Option<Duration>), ProbeError> {
        let began = Instant::now();
        let provider = TokioRuntimeProvider::new();
        match (self.spec.protocol, &self.udp, &self.tls) {
            (DnsProtocol::Udp, Some(client), _) => Ok((client.clone(), None)),
            (DnsProtocol::Tcp, _, _) => {
                let (connect, handle) =
                    TcpClientStream::new(self.spec.server, None, Some(self.spec.timeout), provider);
                let stream = connect.await.map_err(|e| classify_net(&e, false))?;
                let (client, background) =
                    Client::<TokioRuntimeProvider>::with_timeout(stream, handle, self.spec.timeout);
                tokio::spawn(background);
                Ok((client, Some(began.elapsed())))
            }
            (DnsProtocol::TcpTls, _, Some((config, name))) => {
                let (connect, handle) =
                    tls_client_connect(self.spec.server, name.clone(), config.clone(), provider);
                let stream = connect.await.map_err(|e| classify_net(&e, true))?;
                let (client, background) =
                    Client::<TokioRuntimeProvider>::with_timeout(stream, handle, self.spec.timeout);
                tokio::spawn(background);
                Ok((client, Some(began.elapsed())))
            }
            _ => Err(ProbeError::new(
                ErrorClass::Other,
                "prober not set up for this protocol",
            )),
        }
    }

    async fn attempt(&self) -> Attempt {
        let (mut client, connect) = match self.client().await {
            Ok(c) => c,
            Err(e) => return Attempt::failed(e),
        };
        let answer = client
            .query(self.name.clone(), DNSClass::IN, self.spec.record_type)
            .await;
        match answer {
            Ok(response) => {
                let rcode = rcode_name(response.response_code);
                let bytes = response.as_buffer().len() as u64;
                let result = if rcode == "NOERROR" {
                    Ok(())
                } else {
                    Err(ProbeError::new(ErrorClass::Rcode(rcode.clone()), ""))
                };
                Attempt {
                    result,
                    code: Some(Code::Dns(rcode)),
                    bytes,
                    connect,
                    queued: Duration::ZERO,
                    phases: Default::default(),
                }
            }
            Err(e) => {
                let mut attempt = Attempt::failed(classify_net(&e, self.tls.is_some()));
                attempt.connect = connect;
                attempt
            }
        }
    }
}

/// Classifies an error of hickory's client layer.
pub fn classify_net(e: &NetError, tls: bool) -> ProbeError {
    match e {
        NetError::Timeout => ProbeError::new(ErrorClass::Timeout, ""),
        NetError::Io(io) if tls => classify_tls(io),
        NetError::Io(io) => classify_io(io),
        NetError::Proto(p) => ProbeError::new(ErrorClass::Protocol, p.to_string()),
        NetError::Dns(hickory_net::DnsError::ResponseCode(code)) => {
            ProbeError::new(ErrorClass::Rcode(rcode_name(*code)), "")
        }
        other => {
            let text = other.to_string();
            // hickory reports a closed stream as a message, not an io error.
            let class = if text.contains("closed") || text.contains("reset") {
                ErrorClass::Reset
            } else {
                ErrorClass::Other
            };
            ProbeError::new(class, text)
        }
    }
}

impl Prober for DnsProber {
    fn kind(&self) -> &'static str {
        "dns"
    }

    fn probe(&self) -> impl std::future::Future<Output = Attempt> + Send {
        self.attempt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rcode_names_as_upstream() {
        assert_eq!(rcode_name(ResponseCode::NoError), "NOERROR");
        assert_eq!(rcode_name(ResponseCode::NXDomain), "NXDOMAIN");
        assert_eq!(rcode_name(ResponseCode::ServFail), "SERVFAIL");
        assert_eq!(rcode_name(ResponseCode::Refused), "REFUSED");
        assert_eq!(rcode_name(ResponseCode::Unknown(3000)), "RCODE3000");
    }

    #[tokio::test]
    async fn bad_domains_and_missing_tls_are_setup_errors() {
        let spec = |domain: &str, protocol| DnsRequestSpec {
            server: "127.0.0.1:53".parse().unwrap(),
            domain: domain.to_string(),
            record_type: RecordType::A,
            protocol,
            tls_server_name: None,
            timeout: Duration::from_secs(1),
        };
        let err = DnsProber::new(spec("", DnsProtocol::Udp), None)
            .err()
            .unwrap();
        assert!(err.to_string().starts_with("domain \"\""), "{err}");
        let err = DnsProber::new(spec("a..b", DnsProtocol::Udp), None)
            .err()
            .unwrap();
        assert!(err.to_string().starts_with("domain \"a..b\""), "{err}");
        let err = DnsProber::new(spec("x.test", DnsProtocol::TcpTls), None)
            .err()
            .unwrap();
        assert!(matches!(err, DnsSetupError::Tls(_)));
        let ok = DnsProber::new(
            spec("kubernetes.default.svc.cluster.local", DnsProtocol::Udp),
            None,
        )
        .unwrap();
        assert!(ok.name().is_fqdn());
    }
}
