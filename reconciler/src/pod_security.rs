//! How agent pods may bind their ports. The image runs as a non-root user, and capabilities
//! added to a non-root container are not effective (runtimes put them in the bounding set
//! only; there are no ambient capabilities, and `allowPrivilegeEscalation: false` blocks file
//! capabilities). So a pod with its own network namespace lowers
//! `net.ipv4.ip_unprivileged_port_start` (a namespaced sysctl in Kubernetes' safe set since
//! 1.22) to its lowest port and stays non-root; a host-network pod cannot set that sysctl and
//! runs as root with NET_BIND_SERVICE as its only capability.
//!
//! ICMP echo probes (`spec.target.icmp`) use unprivileged ICMP sockets rather than NET_RAW:
//! a pod with its own network namespace sets `net.ipv4.ping_group_range` (safe since 1.18) to
//! every group. A host-network pod cannot; its ICMP probes work where the node allows them.

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext, Sysctl,
};

/// The sysctl that lets a non-root process bind ports from its value up.
pub const UNPRIVILEGED_PORT_SYSCTL: &str = "net.ipv4.ip_unprivileged_port_start";
/// The sysctl whose range of groups may open ICMP echo sockets.
pub const PING_GROUP_SYSCTL: &str = "net.ipv4.ping_group_range";
/// Every group.
pub const EVERY_GROUP: &str = "0 2147483647";
/// Ports below this need privilege (the kernel's default of the sysctl).
pub const FIRST_UNPRIVILEGED_PORT: u16 = 1024;

/// The pod and container security contexts of an agent listening on `ports`.
pub fn agent_security(host_network: bool, ports: &[u16]) -> (PodSecurityContext, SecurityContext) {
    let lowest = ports
        .iter()
        .copied()
        .min()
        .unwrap_or(FIRST_UNPRIVILEGED_PORT);
    let privileged_port = lowest < FIRST_UNPRIVILEGED_PORT;
    let as_root = host_network && privileged_port;
    let pod = PodSecurityContext {
        run_as_non_root: Some(!as_root),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            ..SeccompProfile::default()
        }),
        // The chart's order: the port's, then ICMP's.
        sysctls: (!host_network).then(|| {
            let mut sysctls = Vec::new();
            if privileged_port {
                sysctls.push(Sysctl {
                    name: UNPRIVILEGED_PORT_SYSCTL.to_string(),
                    value: lowest.to_string(),
                });
            }
            sysctls.push(Sysctl {
                name: PING_GROUP_SYSCTL.to_string(),
                value: EVERY_GROUP.to_string(),
            });
            sysctls
        }),
        ..PodSecurityContext::default()
    };
    let container = SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_user: as_root.then_some(0),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            add: as_root.then(|| vec!["NET_BIND_SERVICE".to_string()]),
        }),
        ..SecurityContext::default()
    };
    (pod, container)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_network_agent_stays_non_root_and_lowers_the_port_sysctl_to_its_lowest_port() {
        let (pod, container) = agent_security(false, &[5710, 80, 443]);
        assert_eq!(pod.run_as_non_root, Some(true));
        let sysctls = pod.sysctls.expect("sysctl");
        assert_eq!(sysctls[0].name, UNPRIVILEGED_PORT_SYSCTL);
        assert_eq!(sysctls[0].value, "80");
        assert_eq!(
            (sysctls[1].name.as_str(), sysctls[1].value.as_str()),
            (PING_GROUP_SYSCTL, EVERY_GROUP),
            "ICMP echo sockets for every group"
        );
        assert_eq!(container.run_as_user, None);
        let caps = container.capabilities.expect("capabilities");
        assert_eq!(caps.drop, Some(vec!["ALL".to_string()]));
        assert_eq!(
            caps.add, None,
            "an added capability does nothing for non-root"
        );
        assert_eq!(container.allow_privilege_escalation, Some(false));
    }

    #[test]
    fn a_host_network_agent_on_low_ports_is_root_with_only_net_bind_service() {
        let (pod, container) = agent_security(true, &[80, 443]);
        assert_eq!(pod.sysctls, None, "not allowed with hostNetwork");
        assert_eq!(pod.run_as_non_root, Some(false));
        assert_eq!(container.run_as_user, Some(0));
        let caps = container.capabilities.expect("capabilities");
        assert_eq!(caps.drop, Some(vec!["ALL".to_string()]));
        assert_eq!(caps.add, Some(vec!["NET_BIND_SERVICE".to_string()]));
    }

    #[test]
    fn high_ports_need_neither_the_sysctl_nor_root() {
        for host_network in [false, true] {
            let (pod, container) = agent_security(host_network, &[8080, 8443, 5710]);
            let names: Vec<String> = pod
                .sysctls
                .iter()
                .flatten()
                .map(|s| s.name.clone())
                .collect();
            let expected: &[&str] = if host_network {
                &[]
            } else {
                &[PING_GROUP_SYSCTL]
            };
            assert_eq!(names, expected);
            assert_eq!(pod.run_as_non_root, Some(true));
            assert_eq!(container.run_as_user, None);
            assert_eq!(container.capabilities.and_then(|c| c.add), None);
        }
    }
}
