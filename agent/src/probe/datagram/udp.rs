//! UDP echoes: kdoctor's header as the UDP payload, to an agent's echo port, which writes in
//! the TTL it read and its kernel's receive time.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Socket, Type};

use super::wire::{self, Request};
use super::{Decoded, EchoCodec};

/// The UDP echo codec.
pub struct UdpEcho;

impl EchoCodec for UdpEcho {
    const KIND: &'static str = "udp";
    const OVERHEAD: usize = 0;

    fn open(addr: SocketAddr) -> io::Result<Socket> {
        Socket::new(Domain::for_address(addr), Type::DGRAM, None)
    }

    fn encode(request: &Request, size: usize, _ipv6: bool) -> Vec<u8> {
        let mut datagram = vec![0u8; size];
        request.write(&mut datagram);
        datagram
    }

    fn decode(datagram: &[u8]) -> Option<Decoded> {
        let echo = wire::read_echo(datagram)?;
        Some(Decoded {
            request: echo.request,
            target_ttl: echo.ttl,
            target_received_ns: Some(echo.received_ns),
        })
    }
}
