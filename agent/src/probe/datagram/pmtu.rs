//! Path MTU discovery to an agent's UDP echo port: the largest IP packet that reaches it with
//! don't-fragment set, found by sending echo requests of chosen sizes, and why larger ones do
//! not pass — the link's own MTU, a router's "fragmentation needed", or a black hole (no answer
//! and no error: the classic overlay fault that small probes never see).
//!
//! The socket sends with `IP_PMTUDISC_PROBE`: don't-fragment set, and the kernel's cached path
//! MTU not applied, so every size asked for leaves as one packet. A router's "fragmentation
//! needed" (ICMPv6 "packet too big") comes back on the connected socket as `EMSGSIZE`. The
//! search itself ([`Search`]) is pure.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::UdpSocket;

use super::wire::{self, HEADER_BYTES, Request};
use super::{EchoCodec, UdpEcho};

/// Why packets above the path MTU do not pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The largest packet the prober's own route takes passed: the path is not the limit.
    Interface,
    /// A router said the packet was too big.
    FragmentationNeeded,
    /// Larger packets vanished with no error: something drops them silently.
    BlackHole,
}

impl Limit {
    /// The report's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Interface => "interface",
            Limit::FragmentationNeeded => "fragmentation-needed",
            Limit::BlackHole => "black-hole",
        }
    }
}

/// What the search found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathMtu {
    /// The largest IP packet (header included) that passed, bytes.
    pub bytes: u32,
    /// Why larger ones did not.
    pub limit: Limit,
}

/// What became of the packets of one size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// An echo came back.
    Echoed,
    /// A router said it was too big; the MTU it named, if any.
    TooBig(Option<u32>),
    /// Neither an echo nor an error, every try.
    Silent,
}

/// A binary search for the path MTU between `floor` and `ceiling` (IP packet bytes): the
/// ceiling first (most paths take it), then the floor, then halves; a size a router names as
/// its MTU is tried next.
#[derive(Clone, Debug)]
pub struct Search {
    floor: u32,
    ceiling: u32,
    passing: Option<u32>,
    failing: Option<u32>,
    named: Option<u32>,
    too_big: bool,
}

impl Search {
    /// A search between `floor` and `ceiling` (a ceiling below the floor searches the
    /// ceiling alone).
    pub fn new(floor: u32, ceiling: u32) -> Search {
        Search {
            floor: floor.min(ceiling),
            ceiling,
            passing: None,
            failing: None,
            named: None,
            too_big: false,
        }
    }

    /// The next size to try; `None` when the search is over.
    pub fn next(&self) -> Option<u32> {
        let (Some(passing), Some(failing)) = (self.passing, self.failing) else {
            return match (self.passing, self.failing) {
                (None, None) => Some(self.ceiling),
                // The ceiling failed: does anything pass?
                (None, Some(failing)) if self.floor < failing => Some(self.floor),
                _ => None,
            };
        };
        if failing <= passing + 1 {
            return None;
        }
        match self.named {
            Some(named) if named > passing && named < failing => Some(named),
            _ => Some(passing + (failing - passing) / 2),
        }
    }

    /// Records what became of `size`.
    pub fn record(&mut self, size: u32, probe: Probe) {
        match probe {
            Probe::Echoed => self.passing = Some(self.passing.map_or(size, |p| p.max(size))),
            Probe::TooBig(named) => {
                self.too_big = true;
                self.named = named;
                self.failing = Some(self.failing.map_or(size, |f| f.min(size)));
            }
            Probe::Silent => self.failing = Some(self.failing.map_or(size, |f| f.min(size))),
        }
    }

    /// The result once [`Search::next`] is `None`: `None` when not even the floor passed.
    pub fn result(&self) -> Option<PathMtu> {
        let bytes = self.passing?;
        let limit = if bytes >= self.ceiling {
            Limit::Interface
        } else if self.too_big {
            Limit::FragmentationNeeded
        } else {
            Limit::BlackHole
        };
        Some(PathMtu { bytes, limit })
    }
}

/// The smallest packet searched: what every IPv4 host must take (RFC 791), IPv6's minimum MTU.
pub fn floor(addr: SocketAddr) -> u32 {
    if addr.is_ipv4() { 576 } else { 1280 }
}

/// IP and UDP header bytes in front of a UDP payload.
pub fn overhead(addr: SocketAddr) -> u32 {
    if addr.is_ipv4() { 20 + 8 } else { 40 + 8 }
}

/// Sends tried per size before it counts as silent (a lone loss is not a black hole).
pub const TRIES: u32 = 3;

fn open(addr: SocketAddr) -> io::Result<(UdpSocket, u32)> {
    let socket = super::socket::connected(UdpEcho::open(addr)?, addr)?;
    use rustix::net::sockopt;
    let route_mtu = if addr.is_ipv4() {
        sockopt::set_ip_mtu_discover(&socket, sockopt::Ipv4PathMtuDiscovery::PROBE)?;
        sockopt::ip_mtu(&socket)?
    } else {
        sockopt::set_ipv6_mtu_discover(&socket, sockopt::Ipv6PathMtuDiscovery::PROBE)?;
        sockopt::ipv6_mtu(&socket)?
    };
    // The route's figure is the cached path MTU once a router has named one: the interface
    // the datagrams leave by says how large they may start.
    let source = socket.local_addr()?.as_socket().map(|a| a.ip());
    let interface_mtu = source.and_then(|ip| super::interface::mtu_of(&socket, ip));
    let ceiling = route_mtu.max(interface_mtu.unwrap_or(0));
    Ok((UdpSocket::from_std(socket.into())?, ceiling))
}

/// The MTU the kernel now holds for the path (what a router's message named).
fn named_mtu(socket: &UdpSocket, addr: SocketAddr) -> Option<u32> {
    use rustix::net::sockopt;
    if addr.is_ipv4() {
        sockopt::ip_mtu(socket).ok()
    } else {
        sockopt::ipv6_mtu(socket).ok()
    }
}

/// Sends one echo request of `size` IP bytes and waits up to `timeout` for its echo.
async fn try_size(
    socket: &UdpSocket,
    addr: SocketAddr,
    stream: u64,
    seq: u64,
    size: u32,
    timeout: Duration,
) -> Probe {
    // An error left by an earlier size must not be read as this one's.
    let _ = socket.take_error();
    let payload = (size.saturating_sub(overhead(addr)) as usize).max(HEADER_BYTES);
    let request = Request {
        stream,
        seq,
        sent_ns: super::socket::wall_ns(),
    };
    let datagram = UdpEcho::encode(&request, payload, addr.is_ipv6());
    let too_big = |e: &io::Error| e.raw_os_error() == Some(libc::EMSGSIZE);
    if let Err(e) = socket.send(&datagram).await {
        return if too_big(&e) {
            Probe::TooBig(named_mtu(socket, addr))
        } else {
            Probe::Silent
        };
    }
    let mut buf = vec![0u8; payload + 1];
    let answer = async {
        loop {
            match socket.recv(&mut buf).await {
                Ok(n) => {
                    let ours = UdpEcho::decode(&buf[..n])
                        .is_some_and(|e| e.request.stream == stream && e.request.seq == seq);
                    if ours {
                        return Probe::Echoed;
                    }
                }
                Err(e) if too_big(&e) => return Probe::TooBig(named_mtu(socket, addr)),
                // A refusal or another error: this size got no echo.
                Err(_) => return Probe::Silent,
            }
        }
    };
    tokio::time::timeout(timeout, answer)
        .await
        .unwrap_or(Probe::Silent)
}

/// Finds the path MTU to the UDP echo port at `addr`, waiting up to `timeout` for each echo;
/// `Ok(None)` when not even the floor's packets pass.
pub async fn discover(addr: SocketAddr, timeout: Duration) -> io::Result<Option<PathMtu>> {
    let (socket, ceiling) = open(addr)?;
    let stream: u64 = rand::random();
    // The largest datagram the echo port takes, with its headers.
    let largest = wire::MAX_BYTES as u32 + overhead(addr);
    let mut search = Search::new(floor(addr), ceiling.min(largest));
    let mut seq = 0;
    while let Some(size) = search.next() {
        let mut probe = Probe::Silent;
        for _ in 0..TRIES {
            seq += 1;
            probe = try_size(&socket, addr, stream, seq, size, timeout).await;
            if probe != Probe::Silent {
                break;
            }
        }
        search.record(size, probe);
    }
    Ok(search.result())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search against a path that passes up to `mtu` and answers larger sizes with
    /// `above`; returns the result and the sizes tried.
    fn run(floor: u32, ceiling: u32, mtu: u32, above: Probe) -> (Option<PathMtu>, Vec<u32>) {
        let mut search = Search::new(floor, ceiling);
        let mut tried = Vec::new();
        while let Some(size) = search.next() {
            assert!(tried.len() < 40, "the search ends: {tried:?}");
            tried.push(size);
            let probe = if size <= mtu { Probe::Echoed } else { above };
            search.record(size, probe);
        }
        (search.result(), tried)
    }

    #[test]
    fn a_path_that_takes_the_route_s_mtu_is_done_in_one_try() {
        let (result, tried) = run(576, 1500, 9000, Probe::Silent);
        assert_eq!(
            result,
            Some(PathMtu {
                bytes: 1500,
                limit: Limit::Interface
            })
        );
        assert_eq!(tried, [1500]);
    }

    #[test]
    fn a_black_hole_is_found_to_the_byte_by_halving() {
        let (result, tried) = run(576, 1500, 1371, Probe::Silent);
        assert_eq!(
            result,
            Some(PathMtu {
                bytes: 1371,
                limit: Limit::BlackHole
            })
        );
        assert!(tried.len() <= 13, "{tried:?}");
    }

    #[test]
    fn a_router_s_named_mtu_is_tried_next_and_the_limit_says_who_stopped_it() {
        let (result, tried) = run(1280, 1500, 1400, Probe::TooBig(Some(1400)));
        assert_eq!(
            result,
            Some(PathMtu {
                bytes: 1400,
                limit: Limit::FragmentationNeeded
            })
        );
        assert_eq!(tried[..3], [1500, 1280, 1400], "{tried:?}");
        // A router that names no MTU is searched for by halving.
        let (result, _) = run(1280, 1500, 1400, Probe::TooBig(None));
        assert_eq!(result.map(|r| r.bytes), Some(1400));
    }

    #[test]
    fn a_path_that_takes_nothing_has_no_mtu() {
        let (result, tried) = run(576, 1500, 0, Probe::Silent);
        assert_eq!(result, None);
        assert_eq!(tried, [1500, 576]);
    }
}
