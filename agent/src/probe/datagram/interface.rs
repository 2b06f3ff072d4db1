//! The MTU of the network interface that holds an address, in the calling thread's network
//! namespace. The path MTU search needs it as its ceiling: a connected socket's `IP_MTU` is the
//! kernel's cached path MTU, which after one "fragmentation needed" is the router's figure, not
//! the interface's — a search starting there would call a lowered path the interface's own.

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd};

/// The name of the interface holding `local`.
fn interface_of(local: IpAddr) -> Option<[libc::c_char; libc::IFNAMSIZ]> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list the kernel's answers describe; it is
    // read only while held and freed once, below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cursor = list;
    while !cursor.is_null() {
        // SAFETY: a non-null node of the list getifaddrs returned, not yet freed.
        let entry = unsafe { &*cursor };
        cursor = entry.ifa_next;
        if entry.ifa_addr.is_null() || entry.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points to a sockaddr whose family says its real type.
        let address = unsafe {
            match i32::from((*entry.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*(entry.ifa_addr as *const libc::sockaddr_in);
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
                }
                libc::AF_INET6 => {
                    let sin6 = &*(entry.ifa_addr as *const libc::sockaddr_in6);
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
                }
                _ => continue,
            }
        };
        if address != local {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated name, as long as the list lives.
        let name = unsafe { CStr::from_ptr(entry.ifa_name) }.to_bytes();
        if name.len() < libc::IFNAMSIZ {
            let mut out = [0 as libc::c_char; libc::IFNAMSIZ];
            for (o, b) in out.iter_mut().zip(name) {
                *o = *b as libc::c_char;
            }
            found = Some(out);
        }
        break;
    }
    // SAFETY: the list from getifaddrs above, freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// The MTU of the interface holding `local`, asked through `socket` (so in its namespace).
pub fn mtu_of(socket: &impl AsFd, local: IpAddr) -> Option<u32> {
    let name = interface_of(local)?;
    // SAFETY: an all-zero ifreq is valid; the name is NUL-terminated within IFNAMSIZ.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    request.ifr_name = name;
    // SAFETY: SIOCGIFMTU reads ifr_name and writes ifru_mtu of the ifreq passed.
    let rc = unsafe {
        libc::ioctl(
            socket.as_fd().as_raw_fd(),
            libc::SIOCGIFMTU as _,
            &mut request,
        )
    };
    if rc != 0 {
        return None;
    }
    // SAFETY: SIOCGIFMTU succeeded, so ifru_mtu is the union's member it wrote.
    u32::try_from(unsafe { request.ifr_ifru.ifru_mtu }).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_s_address_is_on_loopback_whose_mtu_is_read() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let mtu = mtu_of(&socket, IpAddr::V4(Ipv4Addr::LOCALHOST)).expect("lo's MTU");
        let sys = std::fs::read_to_string("/sys/class/net/lo/mtu").expect("sysfs");
        assert_eq!(mtu.to_string(), sys.trim());
        assert_eq!(mtu_of(&socket, "198.51.100.7".parse().expect("ip")), None);
    }
}
