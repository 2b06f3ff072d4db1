//! Which probe a NetReach target entry is. A target probed over HTTP keeps upstream's name
//! (`AgentPodV4IP_<pod>_<ip>`, …); with `spec.target.tcp` the same address is also timed as a
//! bare TCP connect and reported as a second entry, named `TCP_` and the HTTP entry's name. The
//! prefix rather than a new field keeps the report upstream's shape (readers that know nothing
//! of TCP see one more target) and every name unique, and a reader that strips it finds the
//! name it already parses (pod, family, Service kind). With `spec.target.udp` each agent pod
//! is also sent UDP echo datagrams, reported as `UDP_` and the pod's HTTP entry's name; with
//! `spec.target.icmp`, ICMP echo requests, reported as `ICMP_` and that name.

use serde::{Deserialize, Serialize};

/// What follows the protocol's prefix in the name of an isolation check's entry
/// (`TCP_Deny_<check>_<peer>_<ip>`): a peer that must not be reachable.
pub const DENY_PREFIX: &str = "Deny_";

/// The name prefix of a TCP connect entry.
pub const TCP_PREFIX: &str = "TCP_";
/// The `method` of a TCP connect entry (where an HTTP entry says `GET`).
pub const TCP_METHOD: &str = "TCP";
/// The name prefix of a UDP echo entry.
pub const UDP_PREFIX: &str = "UDP_";
/// The `method` of a UDP echo entry.
pub const UDP_METHOD: &str = "UDP";
/// The name prefix of an ICMP echo entry.
pub const ICMP_PREFIX: &str = "ICMP_";
/// The `method` of an ICMP echo entry.
pub const ICMP_METHOD: &str = "ICMP";

/// How a target entry was probed.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// An HTTP request (NetReach, AppHttpHealthy), upstream's only kind.
    #[default]
    Http,
    /// A TCP connect, SYN to established.
    Tcp,
    /// A UDP datagram echoed by an agent.
    Udp,
    /// An ICMP echo request and its reply.
    Icmp,
}

impl Protocol {
    /// Every protocol, in the order they are listed.
    pub const ALL: [Protocol; 4] = [Protocol::Http, Protocol::Tcp, Protocol::Udp, Protocol::Icmp];

    /// The lowercase name (`http`, `tcp`, `udp`, `icmp`): a metric label value and a query
    /// parameter's.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Icmp => "icmp",
        }
    }

    /// The name prefix of this protocol's entries (empty for HTTP, upstream's names).
    pub fn prefix(self) -> &'static str {
        match self {
            Protocol::Http => "",
            Protocol::Tcp => TCP_PREFIX,
            Protocol::Udp => UDP_PREFIX,
            Protocol::Icmp => ICMP_PREFIX,
        }
    }

    /// The protocol of an entry's name and the name without its prefix.
    pub fn split(name: &str) -> (Protocol, &str) {
        [Protocol::Tcp, Protocol::Udp, Protocol::Icmp]
            .into_iter()
            .find_map(|p| name.strip_prefix(p.prefix()).map(|base| (p, base)))
            .unwrap_or((Protocol::Http, name))
    }

    /// The `method` and `url` of an entry probing `addr` with this protocol: `TCP`
    /// `tcp://IP:PORT`, `UDP` `udp://IP:PORT`, `ICMP` `icmp://IP` (ICMP has no port). An HTTP
    /// entry's are its request's own: `None`.
    pub fn method_and_url(self, addr: std::net::SocketAddr) -> Option<(&'static str, String)> {
        match self {
            Protocol::Http => None,
            Protocol::Tcp => Some((TCP_METHOD, format!("tcp://{addr}"))),
            Protocol::Udp => Some((UDP_METHOD, format!("udp://{addr}"))),
            Protocol::Icmp => Some((ICMP_METHOD, format!("icmp://{}", addr.ip()))),
        }
    }

    /// The entry name of `base` (an HTTP entry's name) probed with this protocol.
    pub fn entry_name(self, base: &str) -> String {
        format!("{}{base}", self.prefix())
    }
}

impl From<crate::task::IsolationProtocol> for Protocol {
    fn from(p: crate::task::IsolationProtocol) -> Protocol {
        match p {
            crate::task::IsolationProtocol::Tcp => Protocol::Tcp,
            crate::task::IsolationProtocol::Udp => Protocol::Udp,
            crate::task::IsolationProtocol::Icmp => Protocol::Icmp,
        }
    }
}

/// The entry name of an isolation check's peer: `TCP_Deny_db_db-0_10.0.0.5`.
pub fn deny_entry_name(
    protocol: Protocol,
    check: &str,
    peer: &str,
    ip: std::net::IpAddr,
) -> String {
    protocol.entry_name(&format!("{DENY_PREFIX}{check}_{peer}_{ip}"))
}

/// The check and peer of an isolation entry's name (without its protocol prefix).
pub fn split_deny(base: &str) -> Option<(&str, &str)> {
    let rest = base.strip_prefix(DENY_PREFIX)?;
    let (check, peer_ip) = rest.split_once('_')?;
    let (peer, _ip) = peer_ip.rsplit_once('_')?;
    Some((check, peer))
}

impl std::str::FromStr for Protocol {
    type Err = String;

    fn from_str(text: &str) -> Result<Protocol, String> {
        Protocol::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(text))
            .ok_or_else(|| format!("{text:?} is not a protocol (http, tcp, udp, icmp)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tcp_entry_is_its_http_entry_s_name_behind_a_prefix() {
        let base = "AgentPodV4IP_kdoctor-agent-x_10.0.0.1";
        let tcp = Protocol::Tcp.entry_name(base);
        assert_eq!(tcp, "TCP_AgentPodV4IP_kdoctor-agent-x_10.0.0.1");
        assert_eq!(Protocol::split(&tcp), (Protocol::Tcp, base));
        assert_eq!(Protocol::split(base), (Protocol::Http, base));
        assert_eq!(Protocol::Http.entry_name(base), base);
        assert_eq!("TCP".parse::<Protocol>(), Ok(Protocol::Tcp));
        assert!(
            "sctp"
                .parse::<Protocol>()
                .unwrap_err()
                .contains("http, tcp, udp, icmp")
        );
        let icmp = Protocol::Icmp.entry_name(base);
        assert_eq!(Protocol::split(&icmp), (Protocol::Icmp, base));
        let addr = "[fd00::1]:5712".parse().expect("addr");
        assert_eq!(Protocol::Http.method_and_url(addr), None);
        assert_eq!(
            Protocol::Udp.method_and_url(addr),
            Some(("UDP", "udp://[fd00::1]:5712".to_string()))
        );
        assert_eq!(
            Protocol::Icmp.method_and_url(addr),
            Some(("ICMP", "icmp://fd00::1".to_string()))
        );
        let udp = Protocol::Udp.entry_name(base);
        assert_eq!(udp, "UDP_AgentPodV4IP_kdoctor-agent-x_10.0.0.1");
        assert_eq!(Protocol::split(&udp), (Protocol::Udp, base));
    }

    #[test]
    fn an_isolation_entry_names_its_check_and_peer() {
        let ip = "10.0.0.5".parse().expect("ip");
        let name = deny_entry_name(Protocol::Tcp, "db", "svc-db-0", ip);
        assert_eq!(name, "TCP_Deny_db_svc-db-0_10.0.0.5");
        let (protocol, base) = Protocol::split(&name);
        assert_eq!(protocol, Protocol::Tcp);
        assert_eq!(split_deny(base), Some(("db", "svc-db-0")));
        assert_eq!(split_deny("AgentPodV4IP_x_10.0.0.1"), None);
        let v6 = deny_entry_name(
            Protocol::Icmp,
            "web",
            "web-1",
            "fd00::5".parse().expect("ip"),
        );
        assert_eq!(split_deny(Protocol::split(&v6).1), Some(("web", "web-1")));
    }
}
