//! ICMP echoes: an echo request (ICMP type 8, ICMPv6 type 128) with kdoctor's header as its
//! data. Any address answers, not only agents; what an echo tells is the round trip and the
//! hops back (the reply carries no reading from the target).
//!
//! The socket is an unprivileged ICMP datagram socket ("ping socket") where the process's
//! group is inside `net.ipv4.ping_group_range` (one sysctl for both families, per network
//! namespace; a safe sysctl a pod may set): the kernel fills in the identifier and the checksum
//! and hands back only the replies to this socket. Outside that range it is a raw ICMP socket,
//! which needs `CAP_NET_RAW` (root on a workstation, or a pod granted it): the request then
//! carries its own identifier and checksum, and the socket sees every ICMP message of the
//! connected peer — IPv4 ones behind their IP header — of which only an echo reply of this
//! stream is taken. With neither, the request fails naming both.

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

    // A raw IPv4 socket reads the IP header too: up to 60 bytes.
    const HEADROOM: usize = MAX_IPV4_HEADER;

    fn open(addr: SocketAddr) -> io::Result<Socket> {
        let protocol = match addr {
            SocketAddr::V4(_) => Protocol::ICMPV4,
            SocketAddr::V6(_) => Protocol::ICMPV6,
        };
        let domain = Domain::for_address(addr);
        match Socket::new(domain, Type::DGRAM, Some(protocol)) {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                Socket::new(domain, Type::RAW, Some(protocol)).map_err(|raw| {
                    if raw.kind() == io::ErrorKind::PermissionDenied {
                        io::Error::new(raw.kind(), NOT_PERMITTED)
                    } else {
                        raw
                    }
                })
            }
            opened => opened,
        }
    }

    fn encode(request: &Request, size: usize, ipv6: bool) -> Vec<u8> {
        let mut datagram = vec![0u8; size.max(ICMP_HEADER)];
        datagram[0] = if ipv6 {
            ECHO_REQUEST_V6
        } else {
            ECHO_REQUEST_V4
        };
        // A ping socket overwrites the identifier and the checksum; a raw one sends them as
        // written. The sequence field shows the low bits in a capture; kdoctor's own is in the
        // data.
        datagram[4..6].copy_from_slice(&(request.stream as u16).to_be_bytes());
        datagram[6..8].copy_from_slice(&(request.seq as u16).to_be_bytes());
        request.write(&mut datagram[ICMP_HEADER..]);
        // ICMPv6's checksum covers a pseudo-header of addresses this side does not know; the
        // kernel computes it on every ICMPv6 socket (RFC 3542).
        if !ipv6 {
            let checksum = internet_checksum(&datagram);
            datagram[2..4].copy_from_slice(&checksum.to_be_bytes());
        }
        datagram
    }

    fn decode(datagram: &[u8]) -> Option<Decoded> {
        let datagram = without_ipv4_header(datagram)?;
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

/// Why no ICMP socket could be opened.
const NOT_PERMITTED: &str = "ICMP echo sockets are not permitted: this process's group is \
     outside net.ipv4.ping_group_range, and it lacks CAP_NET_RAW for a raw socket";

/// The longest IPv4 header (IHL 15).
const MAX_IPV4_HEADER: usize = 60;

/// The ICMP message in what a socket read: a raw IPv4 socket hands the IP header before it
/// (first nibble 4, which no ICMP type kdoctor reads starts with), the others the message
/// alone. `None` when the header claims more than was read.
fn without_ipv4_header(read: &[u8]) -> Option<&[u8]> {
    let first = *read.first()?;
    if first >> 4 != 4 {
        return Some(read);
    }
    read.get(usize::from(first & 0x0f) * 4..)
}

/// RFC 1071's ones' complement sum of 16-bit words, as ICMPv4 carries it.
fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|pair| {
            u32::from(u16::from_be_bytes([
                pair[0],
                pair.get(1).copied().unwrap_or(0),
            ]))
        })
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
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

    #[test]
    fn an_ipv4_request_carries_a_valid_checksum_and_a_raw_read_s_header_is_skipped() {
        let request = Request {
            stream: 0xabcd_0102,
            seq: 3,
            sent_ns: 1,
        };
        let v4 = IcmpEcho::encode(&request, 65, false);
        // A valid checksum makes the whole message sum to zero, odd length included.
        assert_eq!(internet_checksum(&v4), 0, "{v4:?}");
        assert_eq!(&v4[4..6], &[1, 2], "the identifier: the stream's low bits");
        // RFC 1071's example words.
        assert_eq!(
            internet_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
        let v6 = IcmpEcho::encode(&request, 64, true);
        assert_eq!(&v6[2..4], &[0, 0], "the kernel computes ICMPv6's");

        let mut reply = v4.clone();
        reply[0] = ECHO_REPLY_V4;
        // What a raw IPv4 socket reads: a 24-byte header (IHL 6, an option) before the reply.
        let mut raw = vec![0x46, 0, 0, 0, 0, 0, 0, 0, 64, 1];
        raw.resize(24, 0);
        raw.extend_from_slice(&reply);
        assert_eq!(IcmpEcho::decode(&raw).map(|d| d.request), Some(request));
        assert_eq!(IcmpEcho::decode(&raw[..22]), None, "a header cut short");
    }
}
