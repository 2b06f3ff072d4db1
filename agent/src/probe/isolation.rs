//! Isolation checks (NetReach `spec.isolation`): a few tries to reach a peer that must NOT be
//! reachable, each told apart as "got through" or "blocked". What counts as getting through is
//! any sign that the packet reached the peer's host, not only an answer: a TCP reset (nothing
//! listens, but the policy let the SYN pass) and an ICMP port unreachable for UDP say the same
//! as an accepted connection. Silence and a router's or policy's "unreachable" say blocked.
//!
//! A try that cannot even be sent (no socket, ping sockets refused) is neither: the check did
//! not happen, and the entry fails saying why rather than claiming the isolation holds.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use kdoctor_api::task::IsolationProtocol;
use tokio::net::UdpSocket;

use super::datagram::EchoCodec;
use super::datagram::icmp::IcmpEcho;
use super::datagram::socket::{connected, wall_ns};
use super::datagram::udp::UdpEcho;
use super::datagram::wire::{HEADER_BYTES, Request};
use super::tcp::resetting_socket;

/// Tries per peer and round: one lost packet on a working path does not pass for a policy.
pub const ATTEMPTS: u32 = 3;
/// Pause between two tries to one peer.
const GAP: Duration = Duration::from_millis(100);

/// What a try that got through can have seen.
pub const REACHED: [&str; 5] = [
    "established",
    "refused",
    "answered",
    "port unreachable",
    "echo reply",
];

/// What one try saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The packet reached the peer's host: how we know (`established`, `refused`,
    /// `answered`, `port unreachable`, `echo reply`).
    Reached(&'static str),
    /// Nothing got through: `timeout`, or the error a router or policy gave.
    Blocked(String),
}

/// Every try to one peer in a round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Tries made.
    pub attempts: u32,
    /// Tries that got through.
    pub reached: u32,
    /// Tries by what they saw.
    pub outcomes: BTreeMap<String, u32>,
    /// Why the check could not be made, when a try could not be sent.
    pub not_checked: Option<String>,
    /// When the first try began.
    pub started: Option<jiff::Timestamp>,
    /// From the first try to the end of the last.
    pub elapsed: Duration,
}

impl Tally {
    /// Adds one try.
    pub fn add(&mut self, verdict: &Verdict) {
        self.attempts += 1;
        let seen = match verdict {
            Verdict::Reached(how) => {
                self.reached += 1;
                (*how).to_string()
            }
            Verdict::Blocked(how) => how.clone(),
        };
        *self.outcomes.entry(seen).or_default() += 1;
    }

    /// The isolation held: every try was made and none got through.
    pub fn held(&self) -> bool {
        self.not_checked.is_none() && self.attempts > 0 && self.reached == 0
    }
}

/// [`ATTEMPTS`] tries to reach `addr` with `protocol`, each waiting at most `timeout`.
pub async fn check(protocol: IsolationProtocol, addr: SocketAddr, timeout: Duration) -> Tally {
    let mut tally = Tally {
        started: Some(jiff::Timestamp::now()),
        ..Tally::default()
    };
    let began = tokio::time::Instant::now();
    for i in 0..ATTEMPTS {
        if i > 0 {
            tokio::time::sleep(GAP).await;
        }
        match attempt(protocol, addr, timeout, u64::from(i)).await {
            Ok(verdict) => tally.add(&verdict),
            Err(e) => {
                tally.not_checked = Some(e.to_string());
                break;
            }
        }
    }
    tally.elapsed = began.elapsed();
    tally
}

/// One try; an error when it could not be sent.
pub async fn attempt(
    protocol: IsolationProtocol,
    addr: SocketAddr,
    timeout: Duration,
    seq: u64,
) -> io::Result<Verdict> {
    match protocol {
        IsolationProtocol::Tcp => tcp(addr, timeout).await,
        // Any answer from the port says the datagram got there, kdoctor's echo or not.
        IsolationProtocol::Udp => {
            datagram::<UdpEcho>(addr, timeout, seq, "answered", |_| true).await
        }
        // A raw socket also reads the peer's other ICMP messages, a policy's "prohibited"
        // among them: only the echo reply says the request arrived.
        IsolationProtocol::Icmp => {
            let reply = |read: &[u8]| IcmpEcho::decode(read).is_some();
            datagram::<IcmpEcho>(addr, timeout, seq, "echo reply", reply).await
        }
    }
}

async fn tcp(addr: SocketAddr, timeout: Duration) -> io::Result<Verdict> {
    let socket = resetting_socket(addr)?;
    match tokio::time::timeout(timeout, socket.connect(addr)).await {
        Err(_) => Ok(Verdict::Blocked("timeout".into())),
        Ok(Ok(_stream)) => Ok(Verdict::Reached("established")),
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
            Ok(Verdict::Reached("refused"))
        }
        Ok(Err(e)) => blocked_or_local(e),
    }
}

/// A datagram kdoctor's echo port answers (UDP) or an echo request (ICMP), and the first
/// datagram `is_answer` takes, or error, back. The socket is connected, so only `addr` can
/// answer it.
async fn datagram<C: EchoCodec>(
    addr: SocketAddr,
    timeout: Duration,
    seq: u64,
    answered: &'static str,
    is_answer: impl Fn(&[u8]) -> bool,
) -> io::Result<Verdict> {
    let socket = connected(C::open(addr)?, addr)?;
    let socket = UdpSocket::from_std(socket.into())?;
    let request = Request {
        stream: u64::from(std::process::id()),
        seq,
        sent_ns: wall_ns(),
    };
    let payload = C::encode(&request, HEADER_BYTES + C::OVERHEAD, addr.is_ipv6());
    if let Err(e) = socket.send(&payload).await {
        return sent_error(e);
    }
    let mut buf = [0u8; 2048];
    let answer = async {
        loop {
            match socket.recv(&mut buf).await {
                Ok(len) if is_answer(&buf[..len]) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
    };
    match tokio::time::timeout(timeout, answer).await {
        Err(_) => Ok(Verdict::Blocked("timeout".into())),
        Ok(Ok(())) => Ok(Verdict::Reached(answered)),
        Ok(Err(e)) => sent_error(e),
    }
}

/// An error after the datagram left: an ICMP port unreachable means it reached the host.
fn sent_error(e: io::Error) -> io::Result<Verdict> {
    if e.kind() == io::ErrorKind::ConnectionRefused {
        return Ok(Verdict::Reached("port unreachable"));
    }
    blocked_or_local(e)
}

/// Errors a router or a policy gives mean blocked; any other is this side's own failure.
fn blocked_or_local(e: io::Error) -> io::Result<Verdict> {
    let blocked = match e.raw_os_error() {
        Some(libc::EHOSTUNREACH) => "host unreachable",
        Some(libc::ENETUNREACH) => "network unreachable",
        // An ICMP "administratively prohibited" (a REJECT rule) arrives as EACCES on a
        // connected socket, and a local firewall's REJECT as EPERM.
        Some(libc::EACCES) | Some(libc::EPERM) => "prohibited",
        Some(libc::ETIMEDOUT) => "timeout",
        _ => return Err(e),
    };
    Ok(Verdict::Blocked(blocked.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_holds_only_when_every_try_was_made_and_none_got_through() {
        let mut tally = Tally::default();
        assert!(!tally.held(), "no try made: nothing is known");
        tally.add(&Verdict::Blocked("timeout".into()));
        tally.add(&Verdict::Blocked("timeout".into()));
        assert!(tally.held());
        tally.add(&Verdict::Reached("refused"));
        assert!(!tally.held());
        assert_eq!(tally.attempts, 3);
        assert_eq!(tally.reached, 1);
        assert_eq!(tally.outcomes.get("timeout"), Some(&2));
        assert_eq!(tally.outcomes.get("refused"), Some(&1));
        let mut unsent = Tally::default();
        unsent.add(&Verdict::Blocked("timeout".into()));
        unsent.not_checked = Some("ping sockets refused".into());
        assert!(!unsent.held(), "a check that stopped early proves nothing");
    }

    #[test]
    fn local_errors_are_not_taken_for_a_blocking_policy() {
        let local = io::Error::from_raw_os_error(libc::EMFILE);
        assert!(blocked_or_local(local).is_err());
        let router = io::Error::from_raw_os_error(libc::EHOSTUNREACH);
        assert_eq!(
            blocked_or_local(router).expect("a verdict"),
            Verdict::Blocked("host unreachable".into())
        );
        let reset = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(
            sent_error(reset).expect("a verdict"),
            Verdict::Reached("port unreachable")
        );
    }

    #[tokio::test]
    async fn a_listening_port_and_a_closed_one_both_count_as_reached() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let open = listener.local_addr().expect("addr");
        let tally = check(IsolationProtocol::Tcp, open, Duration::from_secs(2)).await;
        assert_eq!(tally.reached, ATTEMPTS, "{tally:?}");
        assert_eq!(tally.outcomes.get("established"), Some(&ATTEMPTS));
        drop(listener);
        // The port just closed: the kernel answers the SYN with a reset.
        let tally = check(IsolationProtocol::Tcp, open, Duration::from_secs(2)).await;
        assert_eq!(tally.outcomes.get("refused"), Some(&ATTEMPTS), "{tally:?}");
        assert!(!tally.held());
    }

    #[tokio::test]
    async fn a_udp_port_that_answers_and_a_closed_one_both_count_as_reached() {
        let echo = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let addr = echo.local_addr().expect("addr");
        let server = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            for _ in 0..ATTEMPTS {
                let (n, from) = echo.recv_from(&mut buf).expect("recv");
                echo.send_to(&buf[..n], from).expect("send");
            }
        });
        let tally = check(IsolationProtocol::Udp, addr, Duration::from_secs(2)).await;
        server.join().expect("echo server");
        assert_eq!(tally.outcomes.get("answered"), Some(&ATTEMPTS), "{tally:?}");
        // Nothing listens there any more: loopback answers with a port unreachable.
        let tally = check(IsolationProtocol::Udp, addr, Duration::from_secs(2)).await;
        assert_eq!(
            tally.outcomes.get("port unreachable"),
            Some(&ATTEMPTS),
            "{tally:?}"
        );
    }

    #[test]
    fn an_echo_reply_counts_as_reached_on_a_raw_socket_and_an_unreachable_as_blocked() {
        use crate::probe::datagram::tests::in_namespace;
        // No group may open a ping socket there: the tries go out on raw sockets, which also
        // read the peer's other ICMP messages.
        let (open, unreachable) = in_namespace("1 0", || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
            let timeout = Duration::from_secs(1);
            let open = runtime.block_on(check(IsolationProtocol::Icmp, loopback, timeout));
            // A host unreachable is no error on the socket (Linux holds it not fatal): the raw
            // socket only reads it, among the peer's messages, and must not take it for the
            // reply.
            let reject = std::process::Command::new("iptables")
                .args(["-A", "INPUT", "-p", "icmp", "--icmp-type", "echo-request"])
                .args(["-j", "REJECT", "--reject-with", "icmp-host-unreachable"])
                .status()
                .expect("iptables");
            assert!(reject.success());
            let unreachable = runtime.block_on(check(IsolationProtocol::Icmp, loopback, timeout));
            (open, unreachable)
        });
        assert_eq!(open.outcomes.get("echo reply"), Some(&ATTEMPTS), "{open:?}");
        assert_eq!(unreachable.reached, 0, "{unreachable:?}");
        assert!(unreachable.held(), "{unreachable:?}");
    }

    #[tokio::test]
    async fn silence_counts_as_blocked() {
        // A bound socket that never answers: the datagram arrives and nothing comes back,
        // as when a policy drops it on the way.
        let silent = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let addr = silent.local_addr().expect("addr");
        let tally = check(IsolationProtocol::Udp, addr, Duration::from_millis(200)).await;
        assert_eq!(tally.outcomes.get("timeout"), Some(&ATTEMPTS), "{tally:?}");
        assert!(tally.held());
        drop(silent);
    }
}
