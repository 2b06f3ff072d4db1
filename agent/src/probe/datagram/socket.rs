//! The system calls both ends of the UDP echo need beyond tokio's: asking the kernel for each
//! datagram's TTL or hop limit and receive time, setting the TTL sent, and `recvmsg(2)` to
//! read them.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};

use socket2::SockAddr;
use tokio::io::Interest;
use tokio::net::UdpSocket;

use super::ancillary::{self, KINDS, Received};

/// The TTL and hop limit both ends send with, so that the other end's reading tells how many
/// routers the datagram crossed. 64 is Linux's default and what hosts on a cluster's path
/// expect.
pub const INITIAL_TTL: u8 = 64;

/// Routers crossed by a datagram that arrived with `ttl`.
pub fn hops(ttl: u8) -> Option<u8> {
    INITIAL_TTL.checked_sub(ttl)
}

fn set_int(
    fd: &impl AsFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live c_int for the call and its size is passed; the descriptor is
    // borrowed for the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `socket` made non-blocking, bound to any local address of `addr`'s family, and connected
/// to `addr`: the kernel then passes it only `addr`'s datagrams, and its errors.
pub fn connected(socket: socket2::Socket, addr: SocketAddr) -> io::Result<socket2::Socket> {
    let local: SocketAddr = match addr {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    socket.set_nonblocking(true)?;
    socket.bind(&local.into())?;
    socket.connect(&addr.into())?;
    Ok(socket)
}

/// Sends with [`INITIAL_TTL`] and reports each received datagram's TTL or hop limit and
/// kernel receive time. `ipv6` says the socket's family: an IPv6 socket also gets the IPv4
/// options, for the IPv4-mapped datagrams a dual-stack socket receives.
pub fn enable_receive_info(socket: &impl AsFd, ipv6: bool) -> io::Result<()> {
    let ttl = libc::c_int::from(INITIAL_TTL);
    if ipv6 {
        set_int(socket, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, ttl)?;
        set_int(socket, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1)?;
        // A v6-only socket refuses the IPv4 options; it never receives IPv4 anyway.
        let _ = set_int(socket, libc::IPPROTO_IP, libc::IP_TTL, ttl);
        let _ = set_int(socket, libc::IPPROTO_IP, libc::IP_RECVTTL, 1);
    } else {
        set_int(socket, libc::IPPROTO_IP, libc::IP_TTL, ttl)?;
        set_int(socket, libc::IPPROTO_IP, libc::IP_RECVTTL, 1)?;
    }
    set_int(socket, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
}

/// One datagram read with [`recv`].
#[derive(Clone, Copy, Debug)]
pub struct Datagram {
    /// Its length (the part of the buffer filled).
    pub len: usize,
    /// It did not fit the buffer and was cut.
    pub truncated: bool,
    /// Its sender.
    pub from: Option<SocketAddr>,
    /// TTL and kernel time.
    pub info: Received,
}

/// Room for the control messages asked for: a TTL and a timestamp, with headers.
const CONTROL_BYTES: usize = 128;

fn recv_now(socket: &UdpSocket, buf: &mut [u8]) -> io::Result<Datagram> {
    let mut control = [0u8; CONTROL_BYTES];
    let fd = socket.as_raw_fd();
    // SAFETY: every pointer handed to recvmsg points into a live buffer of the length given
    // with it (`buf`, `control`, and the address storage try_init zeroed for us); the kernel
    // writes the sender's address and its length, as try_init requires.
    let ((len, flags, control_len), from) = unsafe {
        SockAddr::try_init(|storage, storage_len| {
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_name = storage.cast();
            msg.msg_namelen = *storage_len;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = CONTROL_BYTES as _;
            let n = libc::recvmsg(fd, &mut msg, 0);
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            *storage_len = msg.msg_namelen;
            Ok((n as usize, msg.msg_flags, msg.msg_controllen as usize))
        })
    }?;
    Ok(Datagram {
        len: len.min(buf.len()),
        truncated: flags & libc::MSG_TRUNC != 0,
        from: from.as_socket(),
        info: ancillary::parse(&control[..control_len.min(CONTROL_BYTES)], &KINDS),
    })
}

/// Readiness to read, or a pending socket error: an ICMP error (port unreachable) on a
/// connected socket is reported as an error event alone, which waiters on `READABLE` never
/// see.
const READ_OR_ERROR: Interest = Interest::READABLE.add(Interest::ERROR);

/// Waits for and reads one datagram with its TTL and kernel time, or the socket's pending
/// error. Cancel-safe: a datagram is only taken off the socket by a read that returns it.
pub async fn recv(socket: &UdpSocket, buf: &mut [u8]) -> io::Result<Datagram> {
    socket
        .async_io(READ_OR_ERROR, || recv_now(socket, buf))
        .await
}

/// Reads one datagram if one is queued, without waiting.
pub fn try_recv(socket: &UdpSocket, buf: &mut [u8]) -> io::Result<Datagram> {
    socket.try_io(READ_OR_ERROR, || recv_now(socket, buf))
}

/// The wall clock in nanoseconds since the Unix epoch: the clock the kernel's receive times
/// are on.
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
