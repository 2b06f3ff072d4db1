//! The DNS prober: one query per request, no caching resolver and no retries (a lost query is
//! a failure, not a hidden second try). UDP, TCP and DNS over TLS; hickory encodes and decodes
//! the messages, the exchange is ours (exchange.rs says why).

mod exchange;
mod question;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::Name;
pub use hickory_proto::rr::RecordType;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;

use super::Prober;
use super::outcome::{Attempt, Code, ErrorClass, ProbeError};
use question::Question;

/// Transport of the queries: the task's own type (upstream's names: `udp`, UDP on connected
/// sockets kept between queries as upstream's pool; `tcp` and `tcp-tls`, a new connection per
/// query, as upstream).
pub use kdoctor_api::task::DnsProtocol;

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
    question: Question,
    udp: exchange::UdpPool,
    tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
}

impl DnsProber {
    /// A prober for `spec`; `tls` is required for `tcp-tls`.
    pub fn new(
        spec: DnsRequestSpec,
        tls: Option<Arc<ClientConfig>>,
    ) -> Result<DnsProber, DnsSetupError> {
        let domain_error = |problem: String| DnsSetupError::Domain {
            domain: spec.domain.clone(),
            problem,
        };
        if spec.domain.is_empty() {
            return Err(domain_error("empty".to_string()));
        }
        let mut name = Name::from_ascii(&spec.domain).map_err(|e| domain_error(e.to_string()))?;
        name.set_fqdn(true);
        let question = Question::new(name.clone(), spec.record_type)
            .map_err(|e| domain_error(e.to_string()))?;
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
        Ok(DnsProber {
            udp: exchange::UdpPool::new(spec.server),
            spec,
            name,
            question,
            tls,
        })
    }

    /// The name queried (fully qualified).
    pub fn name(&self) -> &Name {
        &self.name
    }

    async fn attempt(&self) -> Attempt {
        let server = self.spec.server;
        let exchanged = match (self.spec.protocol, &self.tls) {
            (DnsProtocol::Udp, _) => self.udp.query(&self.question).await,
            (DnsProtocol::Tcp, _) => exchange::tcp(server, &self.question).await,
            (DnsProtocol::TcpTls, Some((config, name))) => {
                exchange::tls(server, &self.question, config.clone(), name.clone()).await
            }
            (DnsProtocol::TcpTls, None) => Err((
                ProbeError::new(ErrorClass::Other, "prober not set up for TLS"),
                None,
            )),
        };
        match exchanged {
            Ok(answered) => {
                let rcode = rcode_name(answered.rcode);
                let result = if answered.rcode == ResponseCode::NoError {
                    Ok(())
                } else {
                    Err(ProbeError::new(ErrorClass::Rcode(rcode.clone()), ""))
                };
                Attempt {
                    result,
                    code: Some(Code::Dns(rcode)),
                    bytes: answered.bytes,
                    connect: answered.connect,
                    queued: Duration::ZERO,
                    phases: Default::default(),
                    echo: None,
                }
            }
            Err((error, connect)) => {
                let mut attempt = Attempt::failed(error);
                attempt.connect = connect;
                attempt
            }
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

    /// A DNS answer takes tens of microseconds: queries of a group sent together wait for each
    /// other in the server (about 10 µs each against unbound), which would show as the target's
    /// latency. At 20,000/s, groups 250 µs apart put the p50 33 µs above dnsperf's mean, 100 µs
    /// apart 10 µs (docs/benchmarks.md#agent).
    fn wake_quantum(&self) -> std::time::Duration {
        DNS_WAKE_QUANTUM
    }
}

/// The DNS prober's shortest time between two wakes of its pacer ([`Prober::wake_quantum`]).
const DNS_WAKE_QUANTUM: std::time::Duration = std::time::Duration::from_micros(100);

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
