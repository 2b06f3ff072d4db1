//! Addresses of the test cluster: the n-th address of a network, and which family an address
//! is. The plan itself (which network holds what) is hack/cluster.sh's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// The `n`-th address of `net` (0 is the network address), if it lies inside it.
pub fn nth(net: &IpNet, n: u128) -> Option<IpAddr> {
    let ip = match net.network() {
        IpAddr::V4(base) => {
            let v = u128::from(u32::from(base)).checked_add(n)?;
            IpAddr::V4(Ipv4Addr::from(u32::try_from(v).ok()?))
        }
        IpAddr::V6(base) => IpAddr::V6(Ipv6Addr::from(u128::from(base).checked_add(n)?)),
    };
    net.contains(&ip).then_some(ip)
}

/// The address of node `i` (1-based): the network's 10th address onwards, below them the
/// control plane's, the DNS's and the ingress's.
pub fn node_ip(net: &IpNet, i: usize) -> Option<IpAddr> {
    nth(net, 10 + i as u128)
}

/// "IPv4" or "IPv6", as Kubernetes names families.
pub fn family(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}

/// The IPv4 network first, then IPv6 (Kubernetes lists the primary family first; the test
/// cluster is IPv4-primary).
pub fn primary_first(mut nets: Vec<IpNet>) -> Vec<IpNet> {
    nets.sort_by_key(|n| matches!(n, IpNet::V6(_)));
    nets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_addresses_stay_inside() {
        let v4: IpNet = "198.18.0.0/20".parse().expect("net");
        assert_eq!(node_ip(&v4, 1), Some("198.18.0.11".parse().expect("ip")));
        assert_eq!(node_ip(&v4, 300), Some("198.18.1.54".parse().expect("ip")));
        assert_eq!(nth(&v4, 4096), None);
        let v6: IpNet = "fd6b:6474::/64".parse().expect("net");
        assert_eq!(node_ip(&v6, 6), Some("fd6b:6474::10".parse().expect("ip")));
        assert_eq!(family(&"fd6b::1".parse().expect("ip")), "IPv6");
    }

    #[test]
    fn ipv4_goes_first() {
        let nets = primary_first(vec![
            "fd6b:6474::/64".parse().expect("net"),
            "198.18.0.0/20".parse().expect("net"),
        ]);
        assert!(matches!(nets[0], IpNet::V4(_)));
    }
}
