//! Dual stack on one machine. Every IPv6 address of the simulated cluster is its IPv4 twin
//! inside `fd00:10::/96` (pod 127.30.16.5 is also fd00:10::7f1e:1005), so the IPv4 pools
//! allocate both families and releasing one address frees its twin. Those addresses become
//! reachable with one route that makes the whole prefix local on `lo`; processes then bind
//! them with `IPV6_FREEBIND`, as they bind any 127.x.y.z address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use socket2::{Domain, Socket, Type};

/// The prefix of every simulated IPv6 address (a unique-local /96).
pub const PREFIX: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0, 0, 0, 0, 0, 0);
/// Length of [`PREFIX`].
pub const PREFIX_LEN: u8 = 96;

/// The IPv6 twin of an IPv4 address.
pub fn twin(v4: Ipv4Addr) -> Ipv6Addr {
    Ipv6Addr::from(u128::from(PREFIX) | u128::from(u32::from(v4)))
}

/// The address of a pool slot in an IP family (`"IPv4"` or `"IPv6"`, as Kubernetes names them).
pub fn in_family(slot: Ipv4Addr, family: &str) -> IpAddr {
    match family {
        "IPv6" => twin(slot).into(),
        _ => slot.into(),
    }
}

/// The Kubernetes name of an address's family.
pub fn family(ip: IpAddr) -> &'static str {
    if ip.is_ipv6() { "IPv6" } else { "IPv4" }
}

/// The IPv4 pool slot an address occupies: itself, or the IPv4 twin of an address in
/// [`PREFIX`]; None for any other IPv6 address.
pub fn slot(ip: IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            (bits >> 32 == u128::from(PREFIX) >> 32).then(|| Ipv4Addr::from(bits as u32))
        }
    }
}

/// The variable `.ci/run` sets, to the reason, when `hack/sim-ipv6.sh` could not make
/// [`PREFIX`] usable on the machine: dual-stack tests then report themselves missing.
pub const MISSING_ENV: &str = "KUBE_SIM_IPV6_MISSING";

/// Why dual-stack tests cannot run here, when CI said so through [`MISSING_ENV`]; the test
/// prints it and stops. Unset, as on a developer's machine, a machine without IPv6 fails them.
pub fn reported_missing() -> Option<String> {
    let why = std::env::var(MISSING_ENV)
        .ok()
        .filter(|why| !why.trim().is_empty())?;
    eprintln!("MISSING: dual-stack test not run: {why}");
    Some(why)
}

/// Whether a process here can bind an address of [`PREFIX`] and reach it.
fn reachable() -> Result<(), String> {
    let addr = SocketAddr::new(twin(Ipv4Addr::new(127, 255, 255, 254)).into(), 0);
    let listener = tcp_listener(addr).map_err(|e| format!("cannot bind {}: {e}", addr.ip()))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    TcpStream::connect_timeout(&bound, Duration::from_secs(1))
        .map(drop)
        .map_err(|e| format!("cannot connect to {bound}: {e}"))
}

/// Makes [`PREFIX`] usable: checks it, and when it is not routed yet adds the local route
/// (`ip -6 route replace local fd00:10::/96 dev lo`, which needs CAP_NET_ADMIN). The route is
/// left in place: it only claims a unique-local prefix and other simulated clusters share it.
/// Err says why IPv6 cannot be used here.
pub fn prepare() -> Result<(), String> {
    if reachable().is_ok() {
        return Ok(());
    }
    let prefix = format!("{PREFIX}/{PREFIX_LEN}");
    let out = Command::new("ip")
        .args(["-6", "route", "replace", "local", &prefix, "dev", "lo"])
        .output()
        .map_err(|e| format!("cannot run `ip` (iproute2) to route {prefix}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`ip -6 route replace local {prefix} dev lo` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    reachable()
}

fn socket(addr: SocketAddr, ty: Type) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), ty, None)?;
    if addr.is_ipv6() {
        // The twins are routed, not assigned: binding one needs freebind.
        socket.set_only_v6(true)?;
        socket.set_freebind_v6(true)?;
    }
    Ok(socket)
}

/// A non-blocking TCP listener on `addr` (either family).
pub fn tcp_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = socket(addr, Type::STREAM)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// A non-blocking UDP socket bound to `addr` (either family).
pub fn udp_socket(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let socket = socket(addr, Type::DGRAM)?;
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twins_map_both_ways_and_foreign_addresses_have_no_slot() {
        let v4 = Ipv4Addr::new(127, 30, 16, 5);
        let v6 = twin(v4);
        assert_eq!(v6.to_string(), "fd00:10::7f1e:1005");
        assert_eq!(slot(v6.into()), Some(v4));
        assert_eq!(slot(v4.into()), Some(v4));
        assert_eq!(slot("fd00:11::7f1e:1005".parse().expect("ip")), None);
        assert_eq!(slot(Ipv6Addr::LOCALHOST.into()), None);
    }
}
