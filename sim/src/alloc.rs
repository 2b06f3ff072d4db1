//! Address allocation on loopback: every pod, node, ClusterIP and LoadBalancer address is a
//! 127.x.y.z address, so the kube-proxy stand-in and real agent processes can bind them. In a
//! dual-stack cluster each slot also stands for its IPv6 twin (`crate::net::ipv6`).

use std::collections::HashSet;
use std::net::Ipv4Addr;

/// One IPv4 pool: addresses `base + 1 ..= base + size - 2` (never .0 or .255 of a /24).
#[derive(Debug)]
pub struct Pool {
    base: u32,
    size: u32,
    next: u32,
    used: HashSet<u32>,
}

impl Pool {
    /// A pool starting at `base` with `size` addresses.
    pub fn new(base: Ipv4Addr, size: u32) -> Self {
        Pool {
            base: u32::from(base),
            size,
            next: 1,
            used: HashSet::new(),
        }
    }

    fn usable(&self, off: u32) -> bool {
        let last = (self.base + off) & 0xff;
        off > 0 && off < self.size && last != 0 && last != 255
    }

    /// The next free address.
    pub fn allocate(&mut self) -> Option<Ipv4Addr> {
        for _ in 0..self.size {
            let off = self.next;
            self.next = if self.next + 1 >= self.size {
                1
            } else {
                self.next + 1
            };
            if self.usable(off) && !self.used.contains(&off) {
                self.used.insert(off);
                return Some(Ipv4Addr::from(self.base + off));
            }
        }
        None
    }

    /// Claims a given address; false when taken or out of range.
    pub fn claim(&mut self, ip: Ipv4Addr) -> bool {
        let v = u32::from(ip);
        if v < self.base || !self.usable(v - self.base) {
            return false;
        }
        self.used.insert(v - self.base)
    }

    /// Whether the address is in the pool's range.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let v = u32::from(ip);
        v > self.base && v - self.base < self.size
    }

    /// Returns an address to the pool.
    pub fn release(&mut self, ip: Ipv4Addr) {
        let v = u32::from(ip);
        if v >= self.base {
            self.used.remove(&(v - self.base));
        }
    }
}

/// Every address pool of the cluster.
#[derive(Debug)]
pub struct Allocator {
    /// Service ClusterIPs.
    pub cluster_ips: Pool,
    /// LoadBalancer (and Ingress) addresses.
    pub load_balancers: Pool,
    /// Pod addresses.
    pub pods: Pool,
    /// Node InternalIP addresses.
    pub nodes: Pool,
    /// Dual stack: pods, nodes and Services that ask for it get IPv6 twins too.
    pub ipv6: bool,
    node_ports: HashSet<u16>,
    next_node_port: u16,
}

/// First NodePort (as kube-apiserver's default range 30000-32767).
pub const NODE_PORT_MIN: u16 = 30000;
/// Last NodePort.
pub const NODE_PORT_MAX: u16 = 32767;

impl Default for Allocator {
    fn default() -> Self {
        Allocator {
            cluster_ips: Pool::new(Ipv4Addr::new(127, 96, 0, 0), 1 << 16),
            load_balancers: Pool::new(Ipv4Addr::new(127, 200, 0, 0), 1 << 16),
            pods: Pool::new(Ipv4Addr::new(127, 20, 0, 0), 1 << 20),
            nodes: Pool::new(Ipv4Addr::new(127, 10, 0, 0), 1 << 16),
            ipv6: false,
            node_ports: HashSet::new(),
            next_node_port: NODE_PORT_MIN,
        }
    }
}

impl Allocator {
    /// A compact layout inside 127.`k`.0.0/16, so that several simulated clusters with live
    /// traffic on one machine never bind the same address: nodes 127.k.0-3.x, ClusterIPs
    /// 127.k.4-7.x, load balancers 127.k.8-11.x, pods 127.k.16-255.x.
    pub fn subnet(k: u8) -> Self {
        Allocator {
            nodes: Pool::new(Ipv4Addr::new(127, k, 0, 0), 1024),
            cluster_ips: Pool::new(Ipv4Addr::new(127, k, 4, 0), 1024),
            load_balancers: Pool::new(Ipv4Addr::new(127, k, 8, 0), 1024),
            pods: Pool::new(Ipv4Addr::new(127, k, 16, 0), 240 * 256),
            ipv6: false,
            node_ports: HashSet::new(),
            next_node_port: NODE_PORT_MIN,
        }
    }

    /// The tenth ClusterIP, which the cluster DNS Service takes (as kube-dns does).
    pub fn dns_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.cluster_ips.base + 10)
    }

    /// The next free NodePort.
    pub fn allocate_node_port(&mut self) -> Option<u16> {
        for _ in NODE_PORT_MIN..=NODE_PORT_MAX {
            let p = self.next_node_port;
            self.next_node_port = if p == NODE_PORT_MAX {
                NODE_PORT_MIN
            } else {
                p + 1
            };
            if self.node_ports.insert(p) {
                return Some(p);
            }
        }
        None
    }

    /// Claims a requested NodePort; false when taken or out of range.
    pub fn claim_node_port(&mut self, port: u16) -> bool {
        (NODE_PORT_MIN..=NODE_PORT_MAX).contains(&port) && self.node_ports.insert(port)
    }

    /// Returns a NodePort.
    pub fn release_node_port(&mut self, port: u16) {
        self.node_ports.remove(&port);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_skip_network_and_broadcast_and_reuse_released() {
        let mut p = Pool::new(Ipv4Addr::new(127, 20, 0, 0), 600);
        let mut got = Vec::new();
        while let Some(ip) = p.allocate() {
            got.push(ip);
        }
        assert!(
            got.iter()
                .all(|ip| ip.octets()[3] != 0 && ip.octets()[3] != 255)
        );
        assert_eq!(got[0], Ipv4Addr::new(127, 20, 0, 1));
        assert!(!p.claim(got[3]));
        p.release(got[3]);
        assert_eq!(p.allocate(), Some(got[3]));
        let mut a = Allocator::default();
        assert!(a.claim_node_port(30000));
        assert_eq!(a.allocate_node_port(), Some(30001));
        assert!(!a.claim_node_port(80));
    }
}
