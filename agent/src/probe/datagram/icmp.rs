//! ICMP echoes: an echo request (ICMP type 8, ICMPv6 type 128) with kdoctor's header as its
//! data, on an unprivileged ICMP datagram socket ("ping socket"): the kernel fills in the
//! identifier and the checksum and hands back only the replies to this socket. Any address
//! answers, not only agents; what an echo tells is the round trip and the hops back (the reply
//! carries no reading from the target).
//!
//! A ping socket needs the process's group inside `net.ipv4.ping_group_range` (one sysctl for
//! both families, per network namespace; a safe sysctl a pod may set). Outside it the socket
//! is refused, and the request fails saying so.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

use super::wire::{self, Request};
use super::{Decoded, EchoCodec};

/// The ICMP echo codec.
pub struct IcmpEcho;

/// The ICMP header: type, code, checksum, identifier, sequence number.
const ICMP_HEADER: usize = 8;
const ECHO_REQUEST_V4: u8 = 8;
const ECHO_REPLY_V4: u8 = 0;
const ECHO_REQUEST_V6: u8 = 128;
const ECHO_REPLY_V6: u8 = 129;

impl EchoCodec for IcmpEcho {
    const KIND: &'static str = "icmp";
    const OVERHEAD: usize = ICMP_HEADER;

    fn open(addr: SocketAddr) -> io::Result<Socket> {
        let protocol = match addr {
            SocketAddr::V4(_) => Protocol::ICMPV4,
            SocketAddr::V6(_) => Protocol::ICMPV6,
        };
        Socket::new(Domain::for_address(addr), Type::DGRAM, Some(protocol)).map_err(|e| {
            if e.kind() == io::ErrorKind::PermissionDenied {
                io::Error::new(
                    e.kind(),
                    "ICMP echo sockets are not permitted: this process's group is outside \
                     net.ipv4.ping_group_range",
                )
            } else {
                e
            }
        })
    }

    fn encode(request: &Request, size: usize, ipv6: bool) -> Vec<u8> {
        let mut datagram = vec![0u8; size.max(ICMP_HEADER)];
        datagram[0] = if ipv6 {
            ECHO_REQUEST_V6
        } else {
            ECHO_REQUEST_V4
        };
        // The sequence field shows the low bits in a capture; kdoctor's own is in the data.
        datagram[6..8].copy_from_slice(&(request.seq as u16).to_be_bytes());
        request.write(&mut datagram[ICMP_HEADER..]);
        datagram
    }

    fn decode(datagram: &[u8]) -> Option<Decoded> {
        let kind = *datagram.first()?;
        if kind != ECHO_REPLY_V4 && kind != ECHO_REPLY_V6 {
            return None;
        }
        Some(Decoded {
            request: wire::read_request(datagram.get(ICMP_HEADER..)?)?,
            target_ttl: None,
            target_received_ns: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_carries_kdoctor_s_header_and_its_reply_reads_back() {
        let request = Request {
            stream: 9,
            seq: 0x1_0005,
            sent_ns: 77,
        };
        let mut v4 = IcmpEcho::encode(&request, 64, false);
        assert_eq!(v4.len(), 64);
        assert_eq!((v4[0], v4[1]), (ECHO_REQUEST_V4, 0));
        assert_eq!(&v4[6..8], &[0, 5], "the low bits of the sequence number");
        assert_eq!(IcmpEcho::decode(&v4), None, "a request is not a reply");
        v4[0] = ECHO_REPLY_V4;
        assert_eq!(
            IcmpEcho::decode(&v4).map(|d| d.request),
            Some(request),
            "the reply returns the data as sent"
        );
        let mut v6 = IcmpEcho::encode(&request, 48, true);
        assert_eq!(v6[0], ECHO_REQUEST_V6);
        v6[0] = ECHO_REPLY_V6;
        assert_eq!(IcmpEcho::decode(&v6).map(|d| d.request), Some(request));
        // Another program's ping, or a truncated reply, is not ours.
        let mut other = vec![ECHO_REPLY_V4, 0, 0, 0, 0, 1, 0, 1];
        other.extend_from_slice(b"abcdefghijklmnop");
        assert_eq!(IcmpEcho::decode(&other), None);
        assert_eq!(IcmpEcho::decode(&v4[..20]), None);
    }
}
