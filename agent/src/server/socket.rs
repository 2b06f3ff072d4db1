//! Opening listening sockets. A specific IPv6 address is bound with `IPV6_FREEBIND`: right
//! after a pod's interface comes up its address is still being checked for duplicates (DAD)
//! and cannot be bound otherwise, and an address routed to the host rather than assigned to an
//! interface (an AnyIP route, as the simulated cluster uses) can only be bound that way.

use std::net::{IpAddr, SocketAddr};

use socket2::{Domain, Socket, Type};

fn open(addr: SocketAddr, ty: Type) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), ty, None)?;
    if let IpAddr::V6(ip) = addr.ip()
        && !ip.is_unspecified()
    {
        socket.set_freebind_v6(true)?;
    }
    Ok(socket)
}

/// A TCP listener on `addr` (`::` accepts IPv4 too, as the kernel's default).
pub fn tcp(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = open(addr, Type::STREAM)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(socket.into())
}

/// A UDP socket bound to `addr`.
pub fn udp(addr: SocketAddr) -> std::io::Result<tokio::net::UdpSocket> {
    let socket = open(addr, Type::DGRAM)?;
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    tokio::net::UdpSocket::from_std(socket.into())
}
