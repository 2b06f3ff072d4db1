//! Rounds: NetReach against the agent's own echo targets, Netdns against unbound, the round
//! timeout, and the report spooled for the harvester.

use std::net::SocketAddr;
use std::time::Duration;

use kdoctor_agent::round::execute::{RoundPlan, execute};
use kdoctor_agent::round::prepare::{Actor, prepare};
use kdoctor_agent::round::targets::{
    Carrier, CarrierPod, Load, ServiceAddresses, isolation_targets, netdns_targets,
    netreach_targets, tcp_targets, udp_targets,
};
use kdoctor_api::task::{
    Isolation, IsolationProtocol, NetDnsTarget, NetDnsTargetUser, NetReachTarget, NetdnsRequest,
    NetdnsSpec, TaskKind,
};

use crate::peers::Unbound;
use crate::support::agent;

fn plan(kind: TaskKind, load: Load) -> RoundPlan {
    RoundPlan {
        kind,
        round: 3,
        task_uid: Some("0b7f4c3e-uid".into()),
        node: "node-1".into(),
        pod: "kdoctor-agent-abc".into(),
        http: vec![],
        tcp: vec![],
        udp: vec![],
        icmp: vec![],
        isolation: vec![],
        path_mtu: false,
        dns: vec![],
        load,
        expect: None,
        tls: None,
        round_timeout: Duration::from_secs(30),
        setup_failures: vec![],
        resources: kdoctor_agent::resource::Source::own_cgroup_or_process(),
    }
}

/// The agent of these tests as the carrier's one pod, its echo server at `v4`.
fn one_agent(v4: SocketAddr) -> Carrier {
    Carrier {
        pods: vec![CarrierPod {
            name: "kdoctor-agent-abc".into(),
            ips: vec![v4.ip()],
            multus: vec![],
        }],
        http_port: v4.port(),
        ..Carrier::default()
    }
}

fn load(secs: u64) -> Load {
    Load {
        qps: 20.0,
        duration: Duration::from_secs(secs),
        timeout: Duration::from_secs(1),
    }
}

#[tokio::test]
async fn netreach_round_against_the_echo_targets() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    let v4 = agent.http.iter().find(|a| a.is_ipv4()).copied().unwrap();
    let v6 = agent.http.iter().find(|a| a.is_ipv6()).copied().unwrap();
    // Loopback stands in for the carrier: the pod IPs are 127.0.0.1 (the IPv4 echo port).
    let carrier = Carrier {
        udp_port: 0,
        http_service: [
            ServiceAddresses {
                cluster_ip: Some(v4),
                node_port: Some(SocketAddr::new(v4.ip(), v4.port())),
                load_balancer: None,
            },
            ServiceAddresses {
                cluster_ip: Some(v6),
                ..ServiceAddresses::default()
            },
        ],
        ingress: None,
        ..one_agent(v4)
    };
    let target = NetReachTarget {
        ipv4: true,
        ipv6: true,
        endpoint: true,
        multus_interface: false,
        cluster_ip: true,
        node_port: true,
        load_balancer: false,
        ingress: false,
        tcp: false,
        udp: false,
        icmp: false,
        path_mtu: false,
        enable_latency_metric: true,
        max_peers: None,
    };
    let (http, missing) = netreach_targets(&target, &carrier);
    assert_eq!(missing, vec!["failed to get nodePort IPv6 address"]);
    let mut p = plan(TaskKind::NetReach, load(1));
    p.http = http;
    p.setup_failures = missing;
    let report = execute(p, None).await;
    let result = report.task_net_reach.as_ref().expect("NetReach result");
    assert_eq!(result.target_number, 4);
    assert_eq!(result.round_task_detail.len(), 4);
    assert!(
        result.round_task_detail.iter().all(|d| d.request_succeed),
        "{:?}",
        result.round_task_detail
    );
    assert_eq!(
        result.round_task_detail[0].name,
        format!("AgentPodV4IP_kdoctor-agent-abc_{}", v4.ip())
    );
    assert_eq!(
        result.round_task_detail[0]
            .request_target_metrics
            .requests
            .request_counts,
        20
    );
    // Every target answered, but an address could not be found: the round fails, saying why.
    assert_eq!(report.round_result, "fail");
    assert_eq!(
        report.failed_reason.as_deref(),
        Some("failed to get nodePort IPv6 address")
    );
    assert_eq!(result.running_load_total.net_reach_qps, 80);
    assert_eq!(report.round_number, 3);
    assert_eq!(report.task_uid.as_deref(), Some("0b7f4c3e-uid"));
    assert_eq!(agent.echo.count("default"), 80);
}

#[tokio::test]
async fn netreach_with_tcp_reports_a_connect_entry_beside_each_http_target() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    let v4 = agent.http.iter().find(|a| a.is_ipv4()).copied().unwrap();
    // The ClusterIP stand-in is a port nothing listens on: its HTTP and TCP entries both fail,
    // the pod's both succeed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = closed.local_addr().unwrap();
    drop(closed);
    let carrier = Carrier {
        http_service: [
            ServiceAddresses {
                cluster_ip: Some(dead),
                ..ServiceAddresses::default()
            },
            ServiceAddresses::default(),
        ],
        ..one_agent(v4)
    };
    let target = NetReachTarget {
        node_port: false,
        tcp: true,
        ..NetReachTarget::default()
    };
    let (http, missing) = netreach_targets(&target, &carrier);
    assert!(missing.is_empty(), "{missing:?}");
    let mut p = plan(TaskKind::NetReach, load(1));
    p.tcp = tcp_targets(&target, &http);
    p.http = http;
    let report = execute(p, None).await;
    let result = report.task_net_reach.as_ref().expect("NetReach result");
    let entries: Vec<(String, String, String, bool, i64)> = result
        .round_task_detail
        .iter()
        .map(|d| {
            (
                d.name.clone(),
                d.method.clone(),
                d.url.clone(),
                d.request_succeed,
                d.request_target_metrics.requests.request_counts,
            )
        })
        .collect();
    let pod = format!("AgentPodV4IP_kdoctor-agent-abc_{}", v4.ip());
    let cluster = format!("AgentClusterV4IP_{dead}");
    let entry = |name: &str, method: &str, url: String, ok: bool| {
        (name.to_string(), method.to_string(), url, ok, 20)
    };
    assert_eq!(
        entries,
        [
            entry(&pod, "GET", format!("http://{v4}"), true),
            entry(&cluster, "GET", format!("http://{dead}"), false),
            entry(&format!("TCP_{pod}"), "TCP", format!("tcp://{v4}"), true),
            entry(
                &format!("TCP_{cluster}"),
                "TCP",
                format!("tcp://{dead}"),
                false
            ),
        ]
    );
    assert_eq!(result.target_number, 4);
    assert_eq!(result.running_load_total.net_reach_qps, 80);
    let tcp = &result.round_task_detail[2];
    assert!(
        tcp.request_mean_delay > 0.0,
        "a connect takes time: {tcp:?}"
    );
    let failed = &result.round_task_detail[3];
    let errors = &failed.request_target_metrics.requests.errors;
    assert!(
        errors.keys().all(|e| e.starts_with("refused")) && errors.values().sum::<i64>() == 20,
        "{errors:?}"
    );
    // The HTTP requests are the echo server's; the connects never reach HTTP.
    assert_eq!(agent.echo.count("default"), 20);
}

#[tokio::test]
async fn netreach_with_isolation_passes_only_while_the_peers_stay_unreachable() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    let v4 = agent.http.iter().find(|a| a.is_ipv4()).copied().unwrap();
    let carrier = one_agent(v4);
    let target = NetReachTarget {
        cluster_ip: false,
        node_port: false,
        ..NetReachTarget::default()
    };
    let (http, missing) = netreach_targets(&target, &carrier);
    assert!(missing.is_empty(), "{missing:?}");
    // A UDP port that never answers stands for a peer a policy keeps away; a TCP port nothing
    // listens on answers with a reset: the SYN got through, so that isolation is broken.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (udp_port, tcp_port) = (
        silent.local_addr().unwrap().port(),
        closed.local_addr().unwrap().port(),
    );
    drop(closed);
    let check = |name: &str, protocol, port: u16| Isolation {
        name: name.into(),
        namespace: "shop".into(),
        pod_selector: Some(Default::default()),
        service: None,
        protocol,
        port: Some(i32::from(port)),
    };
    let peers = [("db-0".to_string(), v4.ip())];
    let held = isolation_targets(
        &target,
        &check("dns", IsolationProtocol::Udp, udp_port),
        &peers,
    )
    .expect("a peer");
    let broken = isolation_targets(
        &target,
        &check("db", IsolationProtocol::Tcp, tcp_port),
        &peers,
    )
    .expect("a peer");
    let round = |isolation| {
        let mut p = plan(TaskKind::NetReach, load(1));
        p.http = http.clone();
        p.isolation = isolation;
        p.load.timeout = Duration::from_millis(300);
        execute(p, None)
    };

    let report = round([held.clone(), broken].concat()).await;
    let result = report.task_net_reach.as_ref().expect("NetReach result");
    let entries: Vec<(&str, &str, &str, bool)> = result
        .round_task_detail
        .iter()
        .map(|d| {
            (
                d.name.as_str(),
                d.method.as_str(),
                d.url.as_str(),
                d.request_succeed,
            )
        })
        .collect();
    let ip = v4.ip();
    assert_eq!(
        entries[1..],
        [
            (
                format!("UDP_Deny_dns_db-0_{ip}").as_str(),
                "UDP",
                format!("udp://{ip}:{udp_port}").as_str(),
                true
            ),
            (
                format!("TCP_Deny_db_db-0_{ip}").as_str(),
                "TCP",
                format!("tcp://{ip}:{tcp_port}").as_str(),
                false
            ),
        ]
    );
    assert!(entries[0].3, "the path that must work works: {entries:?}");
    let isolation = |i: usize| {
        result.round_task_detail[i]
            .request_target_metrics
            .isolation
            .clone()
            .expect("isolation metrics")
    };
    assert_eq!(
        (
            isolation(1).observed.as_str(),
            isolation(1).reached,
            isolation(1).attempts
        ),
        ("unreachable", 0, 3)
    );
    assert_eq!(
        (isolation(2).observed.as_str(), isolation(2).reached),
        ("reachable", 3)
    );
    assert!(!result.round_succeed, "a broken isolation fails the round");
    let reason = result.round_task_detail[2]
        .failure_reason
        .as_deref()
        .unwrap_or("");
    assert!(
        reason.contains("isolation db broken: 3 of 3 tries reached")
            && reason.contains("refused 3"),
        "{reason}"
    );
    assert_eq!(result.target_number, 3);
    assert_eq!(
        result.running_load_total.net_reach_qps, 20,
        "tries are not the rate"
    );

    let report = round(held).await;
    let result = report.task_net_reach.as_ref().expect("NetReach result");
    assert!(result.round_succeed, "{:?}", result.failure_reason);
    drop(silent);
}

#[tokio::test]
async fn netreach_with_udp_reports_loss_order_jitter_and_hops_for_each_pod() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    let v4 = agent.http.iter().find(|a| a.is_ipv4()).copied().unwrap();
    let udp = agent
        .udp_echo
        .iter()
        .find(|a| a.is_ipv4())
        .copied()
        .unwrap();
    // Two "pods" on loopback: the agent's echo port, and a second address of the loopback
    // range where nothing answers UDP (its port is refused).
    let carrier = Carrier {
        pods: vec![
            CarrierPod {
                name: "kdoctor-agent-abc".into(),
                ips: vec![v4.ip()],
                multus: vec![],
            },
            CarrierPod {
                name: "kdoctor-agent-gone".into(),
                ips: vec!["127.0.0.2".parse().unwrap()],
                multus: vec![],
            },
        ],
        http_port: v4.port(),
        udp_port: udp.port(),
        ..one_agent(v4)
    };
    let target = NetReachTarget {
        cluster_ip: false,
        node_port: false,
        udp: true,
        ..NetReachTarget::default()
    };
    let (http, missing) = netreach_targets(&target, &carrier);
    assert!(missing.is_empty(), "{missing:?}");
    let mut p = plan(TaskKind::NetReach, load(1));
    p.udp = udp_targets(&target, &http, &carrier);
    // Only the UDP entries are judged here.
    p.setup_failures = vec![];
    p.http = vec![];
    let report = execute(p, None).await;
    let result = report.task_net_reach.as_ref().expect("NetReach result");
    assert_eq!(result.target_number, 2);
    let [alive, gone] = &result.round_task_detail[..] else {
        panic!("two UDP entries: {:?}", result.round_task_detail);
    };
    assert_eq!(
        (
            alive.name.as_str(),
            alive.method.as_str(),
            alive.url.as_str()
        ),
        (
            format!("UDP_AgentPodV4IP_kdoctor-agent-abc_{}", v4.ip()).as_str(),
            "UDP",
            format!("udp://{}:{}", v4.ip(), udp.port()).as_str()
        )
    );
    assert!(alive.request_succeed, "{alive:?}");
    let datagrams = alive
        .request_target_metrics
        .datagrams
        .as_ref()
        .expect("datagram measurements");
    assert_eq!(datagrams.payload_bytes, 64);
    assert_eq!(datagrams.loss_percent, 0.0);
    assert_eq!((datagrams.duplicates, datagrams.reordered), (0, 0));
    assert_eq!(
        (datagrams.forward_hops, datagrams.return_hops),
        (Some(0), Some(0)),
        "loopback crosses no router"
    );
    assert!(datagrams.jitter_ms >= 0.0 && datagrams.jitter_ms < 50.0);
    assert_eq!(alive.request_target_metrics.requests.request_counts, 20);

    assert!(!gone.request_succeed);
    let lost = gone
        .request_target_metrics
        .datagrams
        .as_ref()
        .expect("datagrams");
    assert_eq!(lost.loss_percent, 100.0);
    assert_eq!(lost.forward_hops, None);
    let errors = &gone.request_target_metrics.requests.errors;
    assert!(
        errors.keys().all(|e| e.starts_with("refused")),
        "an ICMP port unreachable is a refusal: {errors:?}"
    );
    assert_eq!(report.round_result, "fail");
}

#[tokio::test]
async fn netdns_round_against_unbound_is_spooled_for_the_harvester() {
    let _shared = crate::support::shared().await;
    let unbound = Unbound::start();
    let spec = NetdnsSpec {
        target: Some(NetDnsTarget {
            target_user: Some(NetDnsTargetUser {
                server: Some("127.0.0.1".into()),
                port: i64::from(unbound.port),
            }),
            ..Default::default()
        }),
        request: Some(NetdnsRequest {
            duration_in_second: 1,
            qps: 20,
            per_request_timeout_in_ms: Some(500),
            domain: "probe.test".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut p = plan(
        TaskKind::Netdns,
        kdoctor_agent::round::targets::dns_load(spec.request.as_ref().unwrap()),
    );
    p.dns = netdns_targets(&spec, &[]).unwrap();
    let report = execute(p, None).await;
    assert_eq!(report.round_result, "succeed", "{:?}", report.failed_reason);
    let result = report.task_net_dns.as_ref().unwrap();
    assert_eq!(result.target_type, "kdoctor agent");
    let detail = &result.round_task_detail[0];
    assert_eq!(
        detail.name,
        format!("typeA_127.0.0.1:{}_probe.test", unbound.port)
    );
    assert_eq!(detail.request_target_metrics.reply_code["NOERROR"], 20);

    let dir = crate::peers::TempDir::new("round-spool");
    let spool = kdoctor_agent::spool::Spool::open(&dir.0).unwrap();
    let expiry = jiff::Timestamp::now() + jiff::SignedDuration::from_mins(6);
    let name = spool
        .write(TaskKind::Netdns, "dns-check", "node-1", &report, expiry)
        .unwrap();
    assert!(
        name.starts_with("Netdns_dns-check_round3_node-1_"),
        "{name}"
    );
    let back: kdoctor_api::report::Report =
        serde_json::from_slice(&spool.read(&name).unwrap()).unwrap();
    // Times are metav1.Time (whole seconds): compare what the harvester gets.
    assert_eq!(
        serde_json::to_value(&back).unwrap(),
        serde_json::to_value(&report).unwrap()
    );
}

#[tokio::test]
async fn a_round_that_overruns_its_timeout_fails() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    let url = format!("http://{}/?delay=300ms", agent.http[0]);
    let mut p = plan(TaskKind::AppHttpHealthy, load(2));
    p.http = vec![kdoctor_agent::round::targets::HttpTarget {
        name: "HttpAppHealthy target".into(),
        spec: crate::support::http_spec(&url),
    }];
    p.round_timeout = Duration::from_millis(500);
    let report = execute(p, None).await;
    assert_eq!(report.round_result, "fail");
    let reason = report.failed_reason.unwrap_or_default();
    assert!(
        reason.starts_with("the round timed out after 500ms"),
        "{reason}"
    );
}

/// A task that omits `request` runs, through the agent's own planning, at conf.yml's default
/// rate and length — not at the CRD's or a constant of the agent's.
#[tokio::test]
async fn an_omitted_request_runs_at_the_configured_default_rate() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    let v4 = agent.http.iter().find(|a| a.is_ipv4()).copied().unwrap();
    let task = kdoctor_api::document::parse_tasks(
        "apiVersion: kdoctor.io/v1beta1\nkind: NetReach\nmetadata: {name: defaults}\nspec:\n  \
         target: {endpoint: true, clusterIP: false, nodePort: false, ipv4: true, ipv6: false}\n",
    )
    .remove(0)
    .task
    .unwrap();
    let config = kdoctor_api::config::Config {
        net_http_default_request_qps: 7,
        net_http_default_request_duration_in_second: 2,
        net_http_default_request_per_request_timeout_in_ms: 900,
        ..kdoctor_api::config::Config::default()
    };
    let actor = Actor {
        node: "node-1".into(),
        pod: "kdoctor-agent-abc".into(),
        resources: kdoctor_agent::resource::Source::Process,
    };
    let (effective, mut p) = prepare(
        &task,
        &config,
        Default::default(),
        &actor,
        1,
        Duration::from_secs(30),
    );
    assert_eq!(
        p.load,
        Load {
            qps: 7.0,
            duration: Duration::from_secs(2),
            timeout: Duration::from_millis(900),
        }
    );
    let kdoctor_api::task::Task::NetReach(nr) = &effective else {
        panic!("a NetReach task")
    };
    let carrier = one_agent(v4);
    let (http, missing) = netreach_targets(nr.spec.target.as_ref().unwrap(), &carrier);
    assert!(missing.is_empty(), "{missing:?}");
    p.http = http;
    let before = agent.echo.count("default");
    let report = execute(p, None).await;
    assert_eq!(report.round_result, "succeed", "{:?}", report.failed_reason);
    let detail = &report.task_net_reach.as_ref().unwrap().round_task_detail;
    assert_eq!(detail.len(), 1);
    assert_eq!(detail[0].request_target_metrics.requests.request_counts, 14);
    assert_eq!(agent.echo.count("default") - before, 14);
}
