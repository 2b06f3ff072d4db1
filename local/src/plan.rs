//! The round plan of a task run from this machine, shared by `kdoctor probe task` (one round,
//! no stand-ins) and `kdoctor local` (every round, with the local echo server standing in for
//! the agents and the system resolver for the cluster DNS).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use kdoctor_agent::round::execute::RoundPlan;
use kdoctor_agent::round::prepare::{Actor, prepare};
use kdoctor_agent::round::targets::{
    Carrier, CarrierPod, ServiceAddresses, app_http_target, icmp_targets, netdns_targets,
    netreach_targets, tcp_targets, udp_targets,
};
use kdoctor_api::config::Config;
use kdoctor_api::defaults::ClusterFacts;
use kdoctor_api::task::Task;

use crate::LocalError;

/// The host name that means local mode's own targets in a task, so that a task file works
/// whatever ports local picked: AppHttpHealthy `http://kdoctor.localhost/…` (the HTTP echo
/// target) and `https://kdoctor.localhost/…` (the HTTPS one), Netdns `targetUser.server:
/// kdoctor.localhost` (the DNS test server). A `.localhost` name (RFC 6761) never leaves the
/// machine, whoever resolves it.
pub const LOCAL_NAME: &str = "kdoctor.localhost";

/// The ports of local mode's own targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalPorts {
    /// The HTTP echo target.
    pub http: u16,
    /// The HTTPS echo target.
    pub https: u16,
    /// The DNS test server (UDP and TCP).
    pub dns: u16,
    /// The UDP echo target.
    pub udp_echo: u16,
}

/// What stands in for the cluster when a task runs on this machine.
#[derive(Clone, Debug, Default)]
pub struct StandIns {
    /// The local echo server, as every NetReach target kind (`None`: NetReach cannot run).
    pub carrier: Option<Carrier>,
    /// Name servers standing in for the cluster DNS of Netdns `targetDns` (`None`: it cannot
    /// run).
    pub resolvers: Option<Vec<IpAddr>>,
    /// Local mode's own targets, which [`LOCAL_NAME`] names (`None`: the name is not special).
    pub local: Option<LocalPorts>,
}

/// `url` with [`LOCAL_NAME`] (and no port of its own) as the loopback address and local's
/// port for its scheme; any other URL as it is.
pub fn resolve_local_url(url: &str, ports: LocalPorts) -> String {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return url.to_string();
    };
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return url.to_string();
    };
    if !authority.host().eq_ignore_ascii_case(LOCAL_NAME) || authority.port().is_some() {
        return url.to_string();
    }
    let port = match scheme {
        "http" => ports.http,
        "https" => ports.https,
        _ => return url.to_string(),
    };
    let rest = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    format!("{scheme}://127.0.0.1:{port}{rest}")
}

/// The task with [`LOCAL_NAME`] resolved to local's own targets.
fn resolve_local_names(task: &Task, ports: LocalPorts) -> Task {
    let mut task = task.clone();
    match &mut task {
        Task::AppHttpHealthy(t) => {
            t.spec.target.host = resolve_local_url(&t.spec.target.host, ports);
        }
        Task::Netdns(t) => {
            if let Some(user) = t.spec.target.as_mut().and_then(|t| t.target_user.as_mut())
                && user
                    .server
                    .as_deref()
                    .is_some_and(|s| s.eq_ignore_ascii_case(LOCAL_NAME))
            {
                user.server = Some(Ipv4Addr::LOCALHOST.to_string());
                user.port = i64::from(ports.dns);
            }
        }
        Task::NetReach(_) => {}
    }
    task
}

/// The local echo server as a NetReach carrier: one "pod" at the loopback addresses, and the
/// same server as its ClusterIP, NodePort, LoadBalancer and Ingress (there is no Service layer
/// on one machine; the target names show the loopback addresses, so no report pretends
/// otherwise).
pub fn loopback_carrier(pod: &str, http_port: u16, udp_port: u16, ipv6: bool) -> Carrier {
    let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), http_port);
    let v6 = ipv6.then(|| SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), http_port));
    let mut ips = vec![v4.ip()];
    ips.extend(v6.map(|a| a.ip()));
    // The one server stands for every kind of Service address, at each of its ports.
    let service = |port: u16| {
        let at = |ip: IpAddr| {
            let server = Some(SocketAddr::new(ip, port));
            ServiceAddresses {
                cluster_ip: server,
                node_port: server,
                load_balancer: server,
            }
        };
        [
            at(v4.ip()),
            v6.map_or_else(ServiceAddresses::default, |a| at(a.ip())),
        ]
    };
    Carrier {
        pods: vec![CarrierPod {
            name: pod.to_string(),
            ips,
            multus: vec![],
        }],
        http_port,
        udp_port,
        http_service: service(http_port),
        udp_service: service(udp_port),
        ingress: Some(format!("http://{v4}/kdoctoragent")),
    }
}

/// The name servers of a resolv.conf text (`nameserver IP` lines; a zone suffix is dropped).
pub fn resolvers_of(resolv_conf: &str) -> Vec<IpAddr> {
    resolv_conf
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            match (words.next(), words.next()) {
                (Some("nameserver"), Some(address)) => {
                    address.split('%').next().and_then(|a| a.parse().ok())
                }
                _ => None,
            }
        })
        .collect()
}

/// The plan of round 1 of `task`, run by `node`/`pod`, with `config`'s defaults (the same
/// effective task a cluster's agents plan from); the caller sets the round number, the task UID
/// and the time box when it runs another round. An error says why the task cannot run here.
pub fn local_plan(
    task: &Task,
    config: &Config,
    node: &str,
    pod: &str,
    stand_ins: &StandIns,
) -> Result<RoundPlan, LocalError> {
    let resolved = stand_ins
        .local
        .map(|ports| resolve_local_names(task, ports));
    let task = resolved.as_ref().unwrap_or(task);
    let actor = Actor {
        node: node.to_string(),
        pod: pod.to_string(),
        resources: kdoctor_agent::resource::Source::Process,
    };
    let (task, mut plan) = prepare(
        task,
        config,
        ClusterFacts::default(),
        &actor,
        1,
        Duration::ZERO,
    );
    // One machine has no controller to time-box rounds: the task's own timeout does.
    plan.round_timeout = Duration::from_secs(
        60 * task
            .schedule()
            .map(|s| s.round_timeout_minute)
            .unwrap_or(1)
            .max(1) as u64,
    );
    let name = task.name();
    match &task {
        Task::AppHttpHealthy(t) => {
            let target = &t.spec.target;
            if target.body_configmap_name.is_some() || target.tls_secret_name.is_some() {
                return Err(LocalError::NeedsTheCluster(format!(
                    "AppHttpHealthy {name:?}: bodyConfigmapName and tlsSecretName need the cluster; \
                     use `kdoctor probe http` with --body-file, --ca, --cert and --key"
                )));
            }
            plan.http = vec![app_http_target(&t.spec, None)?];
            Ok(plan)
        }
        Task::Netdns(t) => {
            let user = t.spec.target.as_ref().and_then(|t| t.target_user.as_ref());
            let resolvers = match (user, &stand_ins.resolvers) {
                (Some(_), _) => vec![],
                (None, Some(resolvers)) => resolvers.clone(),
                (None, None) => {
                    return Err(LocalError::NeedsTheCluster(format!(
                        "Netdns {name:?}: targetDns (the cluster DNS) needs the cluster; give \
                     targetUser, or use `kdoctor local` (the system resolver stands in)"
                    )));
                }
            };
            plan.dns = netdns_targets(&t.spec, &resolvers)?;
            if plan.dns.is_empty() {
                // No resolver of the asked family: the round fails saying so, as a cluster
                // without a DNS Service would.
                plan.setup_failures
                    .push("no name server of the tested IP family in /etc/resolv.conf".into());
            }
            Ok(plan)
        }
        Task::NetReach(t) => {
            let Some(carrier) = &stand_ins.carrier else {
                return Err(LocalError::NeedsTheCluster(format!(
                    "NetReach {name:?}: probes the agents of a cluster; it cannot run from here \
                     (`kdoctor local` runs it against a local echo server)"
                )));
            };
            let target = t.spec.target.clone().unwrap_or_default();
            let (targets, missing) = netreach_targets(&target, carrier);
            plan.tcp = tcp_targets(&target, &targets);
            plan.udp = udp_targets(&target, &targets, carrier);
            plan.icmp = icmp_targets(&target, &targets);
            plan.path_mtu = target.path_mtu;
            plan.http = targets;
            plan.setup_failures = missing;
            // Its peers are a cluster's pods and Services: unchecked, the round must not pass.
            for isolation in t.spec.isolation.iter().flatten() {
                plan.setup_failures.push(format!(
                    "isolation {}: its peers are pods or a Service of a cluster; `kdoctor \
                     local` cannot check it",
                    isolation.name
                ));
            }
            Ok(plan)
        }
    }
}

#[cfg(test)]
mod tests {
    use kdoctor_api::document::parse_tasks;
    use kdoctor_api::task::TaskKind;

    use super::*;

    #[test]
    fn the_local_name_means_local_targets_whatever_their_ports() {
        let ports = LocalPorts {
            http: 1080,
            https: 1443,
            dns: 1053,
            udp_echo: 1007,
        };
        for (url, resolved) in [
            (
                "http://kdoctor.localhost/a?b=1",
                "http://127.0.0.1:1080/a?b=1",
            ),
            ("https://KDOCTOR.localhost", "https://127.0.0.1:1443/"),
            // A port of its own, another host: as written.
            ("http://kdoctor.localhost:9/", "http://kdoctor.localhost:9/"),
            ("https://example.com/", "https://example.com/"),
        ] {
            assert_eq!(resolve_local_url(url, ports), resolved);
        }
        let task = kdoctor_api::document::parse_tasks(
            "apiVersion: kdoctor.io/v1beta1\nkind: Netdns\nmetadata: {name: d}\nspec: {target: {targetUser: {server: kdoctor.localhost}}}\n",
        )
        .remove(0)
        .task
        .unwrap();
        let Task::Netdns(resolved) = resolve_local_names(&task, ports) else {
            panic!("a Netdns task");
        };
        let user = resolved.spec.target.unwrap().target_user.unwrap();
        assert_eq!(
            (user.server.as_deref(), user.port),
            (Some("127.0.0.1"), 1053)
        );
    }

    fn task(yaml: &str) -> Task {
        let document = parse_tasks(yaml).into_iter().next().unwrap();
        kdoctor_api::validation::check(
            document.task.unwrap(),
            &Config::default(),
            ClusterFacts::default(),
        )
        .unwrap()
    }

    #[test]
    fn resolv_conf_name_servers() {
        let text = "# comment\nsearch example\nnameserver 10.0.0.2\nnameserver fe80::1%eth0\n\
                    nameserver\noptions ndots:5\nnameserver bad\n";
        assert_eq!(
            resolvers_of(text),
            vec![
                "10.0.0.2".parse::<IpAddr>().unwrap(),
                "fe80::1".parse().unwrap()
            ]
        );
    }

    #[test]
    fn netreach_targets_are_the_local_echo_server() {
        let nr = task(
            "apiVersion: kdoctor.io/v1beta1\nkind: NetReach\nmetadata: {name: nr}\nspec:\n  \
             target: {endpoint: true, clusterIP: true, nodePort: true, loadBalancer: true, \
             ingress: true, ipv4: true, ipv6: true, tcp: true}\n",
        );
        let none = local_plan(&nr, &Config::default(), "n", "p", &StandIns::default()).unwrap_err();
        assert!(none.to_string().contains("cannot run from here"), "{none}");
        let stand_ins = StandIns {
            local: None,
            carrier: Some(loopback_carrier("kdoctor-local", 18080, 17007, true)),
            resolvers: None,
        };
        let plan = local_plan(
            &nr,
            &Config::default(),
            "node-a",
            "kdoctor-local",
            &stand_ins,
        )
        .unwrap();
        let names: Vec<&str> = plan.http.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "AgentPodV4IP_kdoctor-local_127.0.0.1",
                "AgentPodV6IP_kdoctor-local_::1",
                "AgentClusterV4IP_127.0.0.1:18080",
                "AgentNodePortV4IP_127.0.0.1_18080",
                "AgentLoadbalancerV4IP_127.0.0.1:18080",
                "AgentClusterV6IP_[::1]:18080",
                "AgentNodePortV6IP_::1_18080",
                "AgentLoadbalancerV6IP_[::1]:18080",
                "AgentIngress_v4_http://127.0.0.1:18080/kdoctoragent",
            ]
        );
        // With `tcp`, the same addresses are timed as connects (the Ingress's at port 18080).
        let tcp: Vec<(&str, String)> = plan
            .tcp
            .iter()
            .map(|t| (t.name.as_str(), t.addr.to_string()))
            .collect();
        assert_eq!(tcp.len(), names.len());
        assert_eq!(
            tcp[8],
            (
                "TCP_AgentIngress_v4_http://127.0.0.1:18080/kdoctoragent",
                "127.0.0.1:18080".to_string()
            )
        );
        assert!(plan.setup_failures.is_empty());
        assert_eq!(plan.node, "node-a");
        // Without IPv6 on the machine, asked-for IPv6 Service targets fail the round by name.
        let stand_ins = StandIns {
            local: None,
            carrier: Some(loopback_carrier("kdoctor-local", 18080, 17007, false)),
            resolvers: None,
        };
        let plan = local_plan(
            &nr,
            &Config::default(),
            "node-a",
            "kdoctor-local",
            &stand_ins,
        )
        .unwrap();
        assert_eq!(plan.http.len(), 5);
        assert_eq!(
            plan.setup_failures,
            [
                "failed to get cluster IPv6 IP",
                "failed to get nodePort IPv6 address",
                "failed to get loadbalancer IPv6 address"
            ]
        );
    }

    #[test]
    fn netdns_target_dns_asks_the_system_resolvers() {
        let dns = task(
            "apiVersion: kdoctor.io/v1beta1\nkind: Netdns\nmetadata: {name: d}\nspec:\n  \
             target: {targetDns: {testIPv4: true}}\n",
        );
        let err = local_plan(&dns, &Config::default(), "n", "p", &StandIns::default()).unwrap_err();
        assert!(err.to_string().contains("targetDns"), "{err}");
        let stand_ins = StandIns {
            local: None,
            carrier: None,
            resolvers: Some(vec![
                "10.0.0.2".parse().unwrap(),
                "fd00::2".parse().unwrap(),
            ]),
        };
        let plan = local_plan(&dns, &Config::default(), "n", "p", &stand_ins).unwrap();
        let names: Vec<&str> = plan.dns.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            ["typeA_10.0.0.2:53_kubernetes.default.svc.cluster.local"]
        );
        let stand_ins = StandIns {
            local: None,
            carrier: None,
            resolvers: Some(vec!["fd00::2".parse().unwrap()]),
        };
        let plan = local_plan(&dns, &Config::default(), "n", "p", &stand_ins).unwrap();
        assert!(plan.dns.is_empty());
        assert_eq!(plan.setup_failures.len(), 1);
    }

    /// One task file, one meaning: with every optional block omitted, the controller's
    /// effective task (what it validates, schedules and builds carriers from), an agent's round
    /// plan and local mode's are the same, and all carry conf.yml's defaults.
    #[test]
    fn the_controller_the_agents_and_local_mode_plan_one_effective_task() {
        let config = Config {
            enable_ipv6: false,
            net_http_default_request_qps: 7,
            net_http_default_request_duration_in_second: 3,
            net_http_default_request_per_request_timeout_in_ms: 700,
            ..Config::default()
        };
        let facts = ClusterFacts::default();
        let stand_ins = StandIns {
            local: None,
            carrier: Some(loopback_carrier("kdoctor-local", 18080, 17007, true)),
            resolvers: Some(vec![
                "10.0.0.2".parse().unwrap(),
                "fd00::2".parse().unwrap(),
            ]),
        };
        let actor = Actor {
            node: "node-a".into(),
            pod: "kdoctor-local".into(),
            resources: kdoctor_agent::resource::Source::Process,
        };
        let files = [
            "apiVersion: kdoctor.io/v1beta1\nkind: NetReach\nmetadata: {name: nr}\nspec: {}\n",
            "apiVersion: kdoctor.io/v1beta1\nkind: AppHttpHealthy\nmetadata: {name: a}\nspec:\n  \
             target: {host: \"127.0.0.1:18080\", method: GET}\n",
            "apiVersion: kdoctor.io/v1beta1\nkind: Netdns\nmetadata: {name: d}\nspec: {}\n",
        ];
        for yaml in files {
            let raw = parse_tasks(yaml).into_iter().next().unwrap().task.unwrap();
            let controller = kdoctor_api::validation::check(raw.clone(), &config, facts).unwrap();
            let local =
                local_plan(&controller, &config, "node-a", "kdoctor-local", &stand_ins).unwrap();
            // An agent plans from the object as the API server stores it: no defaults applied.
            let (agent_task, mut agent) =
                prepare(&raw, &config, facts, &actor, 1, local.round_timeout);
            assert_eq!(agent_task, controller, "{yaml}");
            match &agent_task {
                Task::NetReach(t) => {
                    let target = t.spec.target.as_ref().unwrap();
                    assert!(
                        target.ipv4 && !target.ipv6,
                        "conf.yml's families: {target:?}"
                    );
                    let (http, missing) =
                        netreach_targets(target, stand_ins.carrier.as_ref().unwrap());
                    agent.http = http;
                    agent.setup_failures = missing;
                }
                Task::AppHttpHealthy(t) => {
                    agent.http = vec![app_http_target(&t.spec, None).unwrap()]
                }
                Task::Netdns(t) => {
                    let resolvers = stand_ins.resolvers.as_deref().unwrap();
                    agent.dns = netdns_targets(&t.spec, resolvers).unwrap();
                }
            }
            assert_eq!(agent.load, local.load, "{yaml}");
            assert_eq!(agent.expect, local.expect, "{yaml}");
            assert_eq!(agent.round_timeout, local.round_timeout, "{yaml}");
            assert_eq!(
                format!("{:?}", agent.http),
                format!("{:?}", local.http),
                "{yaml}"
            );
            assert_eq!(
                format!("{:?}", agent.dns),
                format!("{:?}", local.dns),
                "{yaml}"
            );
            assert_eq!(agent.setup_failures, local.setup_failures, "{yaml}");
            let timeout = Duration::from_millis(700);
            let expected = match agent.kind {
                // conf.yml's rate and length for the HTTP kinds; Netdns keeps its CRD's.
                TaskKind::Netdns => (5.0, Duration::from_secs(2)),
                _ => (7.0, Duration::from_secs(3)),
            };
            assert_eq!((agent.load.qps, agent.load.duration), expected, "{yaml}");
            assert_eq!(agent.load.timeout, timeout, "{yaml}");
            assert_eq!(agent.round_timeout, Duration::from_secs(60), "{yaml}");
            assert_eq!(
                agent.expect.as_ref().and_then(|e| e.success_rate),
                Some(1.0),
                "{yaml}"
            );
            assert!(!agent.http.is_empty() || !agent.dns.is_empty(), "{yaml}");
        }
    }
}
