//! The controller with real agents: every agent pod serves the echo targets on its address and
//! runs the agent's task loop, which discovers the carrier through the API and probes pods,
//! Services and the Ingress through the simulated network. Nothing is a fixture: the stored
//! reports are what the probes measured.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kdoctor_api::report::Report;
use kdoctor_api::task::{AppHttpHealthy, LastRoundStatus, NetReach, Netdns, TaskKind};
use kube::Api;
use kube::api::PostParams;

use crate::flow::{apply, kind_status_when, net_reach};
use crate::support::{Cluster, ClusterConfig, NAMESPACE};

fn real(nodes: usize, default_agent: bool) -> ClusterConfig {
    ClusterConfig {
        nodes,
        default_agent,
        real_agents: true,
        ..ClusterConfig::default()
    }
}

/// Every node's stored report of round 1 of the task.
fn stored_reports(cluster: &Cluster, kind: TaskKind, name: &str) -> Vec<Report> {
    let task = &cluster.store.find(kind, name)[0];
    cluster
        .store
        .reports(task.id, 1)
        .expect("read reports")
        .iter()
        .map(|meta| {
            cluster
                .store
                .report(task.id, 1, &meta.node)
                .expect("read")
                .expect("report")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_net_reach_carrier_of_real_agents_reaches_pods_services_and_the_ingress() {
    mesh_round(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_dual_stack_cluster_real_agents_reach_every_target_over_ipv4_and_ipv6() {
    mesh_round(true).await;
}

/// A NetReach round with every target type on a 2-node DaemonSet carrier of real agents,
/// over IPv4 (and IPv6 when `ipv6`): every target succeeds with every request.
async fn mesh_round(ipv6: bool) {
    let cluster = Cluster::start(ClusterConfig {
        ipv6,
        ..real(2, false)
    })
    .await;
    if ipv6 && !cluster.kube.ipv6 {
        // The machine cannot turn IPv6 on in a network namespace: reported, never a pass.
        kube_sim::testcluster::missing(
            "the dual-stack round of real agents",
            "the test cluster could not be dual stack on this machine (hack/cluster.sh says why)",
        );
        return;
    }
    let task = net_reach(
        "mesh",
        serde_json::json!({
            "agentSpec": {"kind": "DaemonSet", "terminationGracePeriodMinutes": 0},
            "request": {"durationInSecond": 1, "qps": 5, "perRequestTimeoutInMS": 1000},
            "target": {"endpoint": true, "clusterIP": true, "nodePort": true,
                       "loadBalancer": true, "ingress": true, "ipv4": true, "ipv6": ipv6},
        }),
    );
    apply::<NetReach>(&cluster, "mesh", &task).await;
    let status = kind_status_when::<NetReach>(
        &cluster,
        "mesh",
        Duration::from_secs(60),
        "the round to finish",
        |s| s.finish,
    )
    .await;
    let reports = stored_reports(&cluster, TaskKind::NetReach, "mesh");
    let reasons: Vec<_> = reports.iter().map(|r| &r.failed_reason).collect();
    assert_eq!(
        status.last_round_status,
        Some(LastRoundStatus::Succeed),
        "{status:?}\nreasons: {reasons:?}"
    );
    assert_eq!(reports.len(), 2);
    let uid = cluster.store.find(TaskKind::NetReach, "mesh")[0]
        .uid
        .clone();
    let families: &[&str] = if ipv6 { &["4", "6"] } else { &["4"] };
    for report in &reports {
        assert_eq!(report.task_uid.as_deref(), Some(uid.as_str()));
        assert!(
            report.pod_name.starts_with("kdoctor-netreach-mesh-"),
            "{}",
            report.pod_name
        );
        let result = report.task_net_reach.as_ref().expect("NetReach result");
        let names: Vec<&str> = result
            .round_task_detail
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        // Per family: two pods, then the Service three ways; then the Ingress (IPv4 only, as
        // upstream) — upstream's names.
        assert_eq!(
            result.target_number,
            5 * families.len() as i64 + 1,
            "{names:?}"
        );
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(cluster.client.clone());
        let node = nodes.get(&report.node_name).await.expect("node");
        let addresses: Vec<String> = node
            .status
            .expect("status")
            .addresses
            .expect("addresses")
            .into_iter()
            .filter(|a| a.type_ == "InternalIP")
            .map(|a| a.address)
            .collect();
        assert_eq!(addresses.len(), families.len(), "{addresses:?}");
        for (i, v) in families.iter().enumerate() {
            assert_eq!(
                names
                    .iter()
                    .filter(|n| n.starts_with(&format!("AgentPodV{v}IP_kdoctor-netreach-mesh-")))
                    .count(),
                2,
                "{names:?}"
            );
            for prefix in ["AgentClusterV", "AgentNodePortV", "AgentLoadbalancerV"] {
                let prefix = format!("{prefix}{v}IP_");
                assert!(
                    names.iter().any(|n| n.starts_with(&prefix)),
                    "{prefix} in {names:?}"
                );
            }
            // The NodePort target is this node's own address of that family.
            let node_port = names
                .iter()
                .find(|n| n.starts_with(&format!("AgentNodePortV{v}IP_")))
                .expect("node port target");
            assert!(
                node_port.contains(&format!("_{}_", addresses[i])),
                "{node_port} on {addresses:?}"
            );
        }
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("AgentIngress_v4_http://")),
            "ingress in {names:?}"
        );
        for detail in &result.round_task_detail {
            let requests = &detail.request_target_metrics.requests;
            assert!(
                detail.request_succeed,
                "{}: {:?}",
                detail.name, detail.failure_reason
            );
            assert_eq!(requests.request_counts, 5, "{}", detail.name);
            assert_eq!(requests.success_counts, 5, "{}", detail.name);
            assert_eq!(
                detail.request_target_metrics.status_codes.get(&200),
                Some(&5),
                "{}",
                detail.name
            );
        }
    }
    if ipv6 {
        cluster_dns_over_both_families(&cluster).await;
    }
}

/// A Netdns round on a per-task carrier asks the cluster DNS at its IPv4 address (A records)
/// and at its IPv6 one (AAAA records); both answer.
async fn cluster_dns_over_both_families(cluster: &Cluster) {
    let dns = serde_json::json!({
        "apiVersion": "kdoctor.io/v1beta1", "kind": "Netdns",
        "metadata": {"name": "dns6"},
        "spec": {
            "agentSpec": {"kind": "DaemonSet", "terminationGracePeriodMinutes": 0},
            "target": {"targetDns": {"testIPv4": true, "testIPv6": true}},
            "request": {"domain": "kubernetes.default.svc.cluster.local", "durationInSecond": 1,
                        "qps": 4, "protocol": "udp"},
            "schedule": {"schedule": "0 1", "roundTimeoutMinute": 1, "roundNumber": 1},
        }
    });
    apply::<Netdns>(cluster, "dns6", &dns).await;
    let status = kind_status_when::<Netdns>(
        cluster,
        "dns6",
        Duration::from_secs(60),
        "the DNS round",
        |s| s.finish,
    )
    .await;
    let reports = stored_reports(cluster, TaskKind::Netdns, "dns6");
    let reasons: Vec<_> = reports.iter().map(|r| &r.failed_reason).collect();
    assert_eq!(
        status.last_round_status,
        Some(LastRoundStatus::Succeed),
        "{reasons:?}"
    );
    assert_eq!(reports.len(), 2);
    for report in &reports {
        let result = report.task_net_dns.as_ref().expect("result");
        let mut names: Vec<&str> = result
            .round_task_detail
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "{names:?}");
        // The cluster DNS Service's addresses (hack/cluster.sh's plan).
        assert!(
            names[0].starts_with("typeAAAA_[fd6b:6474:0:20::a]"),
            "{names:?}"
        );
        assert!(names[1].starts_with("typeA_198.18.32.10"), "{names:?}");
        for detail in &result.round_task_detail {
            assert_eq!(
                detail.request_target_metrics.reply_code.get("NOERROR"),
                Some(&4),
                "{}",
                detail.name
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_agents_probe_an_app_with_its_configmap_body_and_the_cluster_dns() {
    let cluster = Cluster::start(real(2, true)).await;
    // The app: the echo target of the first default agent pod, found by its address.
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(cluster.client.clone(), NAMESPACE);
    let ip = crate::support::eventually(Duration::from_secs(20), "an agent pod address", || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .find_map(|p| p.status.as_ref()?.pod_ip.clone())
        }
    })
    .await;
    let body = ConfigMap {
        metadata: kube::core::ObjectMeta {
            name: Some("body".into()),
            // Task inputs come from the install namespace (issue 20 H1): the agents read it
            // through the Role the controller grants them.
            namespace: Some(NAMESPACE.into()),
            ..Default::default()
        },
        data: Some([("hello".to_string(), "world".to_string())].into()),
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(cluster.client.clone(), NAMESPACE)
        .create(&PostParams::default(), &body)
        .await
        .expect("body ConfigMap");
    let http = serde_json::json!({
        "apiVersion": "kdoctor.io/v1beta1", "kind": "AppHttpHealthy",
        "metadata": {"name": "app"},
        "spec": {
            "target": {"host": format!("http://{ip}/?task=app"), "method": "PUT",
                       "bodyConfigmapName": "body", "bodyConfigmapNamespace": NAMESPACE},
            "request": {"durationInSecond": 1, "qps": 4, "perRequestTimeoutInMS": 1000},
            "expect": {"statusCode": 200},
            "schedule": {"schedule": "0 1", "roundTimeoutMinute": 1, "roundNumber": 1},
        }
    });
    let dns = serde_json::json!({
        "apiVersion": "kdoctor.io/v1beta1", "kind": "Netdns",
        "metadata": {"name": "dns"},
        "spec": {
            "target": {"targetDns": {"testIPv4": true}},
            "request": {"domain": "kubernetes.default.svc.cluster.local", "durationInSecond": 1,
                        "qps": 4, "protocol": "udp"},
            "schedule": {"schedule": "0 1", "roundTimeoutMinute": 1, "roundNumber": 1},
        }
    });
    apply::<AppHttpHealthy>(&cluster, "app", &http).await;
    apply::<Netdns>(&cluster, "dns", &dns).await;
    let app = kind_status_when::<AppHttpHealthy>(
        &cluster,
        "app",
        Duration::from_secs(60),
        "the app round",
        |s| s.finish,
    )
    .await;
    let reports = stored_reports(&cluster, TaskKind::AppHttpHealthy, "app");
    let reasons: Vec<_> = reports.iter().map(|r| &r.failed_reason).collect();
    assert_eq!(
        app.last_round_status,
        Some(LastRoundStatus::Succeed),
        "{reasons:?}"
    );
    assert_eq!(reports.len(), 2);
    for report in &reports {
        let detail = &report
            .task_app_http_healthy
            .as_ref()
            .expect("result")
            .round_task_detail[0];
        assert_eq!(detail.method, "PUT");
        assert_eq!(detail.request_target_metrics.requests.success_counts, 4);
    }
    let dns_status = kind_status_when::<Netdns>(
        &cluster,
        "dns",
        Duration::from_secs(60),
        "the DNS round",
        |s| s.finish,
    )
    .await;
    let reports = stored_reports(&cluster, TaskKind::Netdns, "dns");
    let reasons: Vec<_> = reports.iter().map(|r| &r.failed_reason).collect();
    assert_eq!(
        dns_status.last_round_status,
        Some(LastRoundStatus::Succeed),
        "{reasons:?}"
    );
    for report in &reports {
        let result = report.task_net_dns.as_ref().expect("result");
        assert_eq!(result.round_task_detail.len(), 1);
        let detail = &result.round_task_detail[0];
        assert!(detail.name.starts_with("typeA_"), "{}", detail.name);
        assert!(
            detail
                .name
                .ends_with(":53_kubernetes.default.svc.cluster.local")
        );
        assert_eq!(detail.request_target_metrics.requests.success_counts, 4);
        assert_eq!(
            detail.request_target_metrics.reply_code.get("NOERROR"),
            Some(&4)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_max_peers_each_agent_probes_a_rotating_subset() {
    let cluster = Cluster::start(real(4, false)).await;
    let task = net_reach(
        "sampled",
        serde_json::json!({
            "agentSpec": {"kind": "DaemonSet", "terminationGracePeriodMinutes": 0},
            "request": {"durationInSecond": 1, "qps": 2, "perRequestTimeoutInMS": 1000},
            "target": {"endpoint": true, "clusterIP": false, "nodePort": false,
                       "ipv4": true, "ipv6": false, "maxPeers": 1},
        }),
    );
    apply::<NetReach>(&cluster, "sampled", &task).await;
    let status = kind_status_when::<NetReach>(
        &cluster,
        "sampled",
        Duration::from_secs(60),
        "the round to finish",
        |s| s.finish,
    )
    .await;
    let reports = stored_reports(&cluster, TaskKind::NetReach, "sampled");
    let reasons: Vec<_> = reports.iter().map(|r| &r.failed_reason).collect();
    assert_eq!(
        status.last_round_status,
        Some(LastRoundStatus::Succeed),
        "{status:?}\nreasons: {reasons:?}"
    );
    assert_eq!(reports.len(), 4);
    let mut probed = std::collections::BTreeMap::new();
    for report in &reports {
        let details = &report
            .task_net_reach
            .as_ref()
            .expect("result")
            .round_task_detail;
        assert_eq!(details.len(), 1, "one peer, not the full mesh: {details:?}");
        assert!(
            !details[0].name.contains(&report.pod_name),
            "not itself: {}",
            details[0].name
        );
        *probed.entry(details[0].name.clone()).or_insert(0) += 1;
    }
    // Balanced: every agent is probed by exactly one other.
    assert_eq!(probed.len(), 4, "{probed:?}");
}

/// The agent's `/metrics` on its pod address.
async fn scrape(ip: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let port = kdoctor_reconciler::options::ControllerOptions::new(NAMESPACE)
        .ports
        .metrics;
    let mut stream = tokio::net::TcpStream::connect((ip.as_str(), port))
        .await
        .expect("metrics port");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: agent\r\n\r\n")
        .await
        .expect("request");
    let mut text = String::new();
    stream.read_to_string(&mut text).await.expect("answer");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_metrics_carry_the_source_and_target_nodes_zones() {
    let cluster = Cluster::start(real(2, false)).await;
    // Zones before the task: agents read a node's zone once, when a round first needs it.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(cluster.client.clone());
    let mut zone_of = std::collections::BTreeMap::new();
    for (i, node) in nodes
        .list(&Default::default())
        .await
        .expect("nodes")
        .items
        .iter()
        .enumerate()
    {
        let name = node.metadata.name.clone().expect("name");
        let zone = format!("zone-{}", ["a", "b"][i % 2]);
        let patch =
            serde_json::json!({"metadata": {"labels": {"topology.kubernetes.io/zone": zone}}});
        nodes
            .patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .expect("zone label");
        zone_of.insert(name, zone);
    }
    let task = net_reach(
        "zoned",
        serde_json::json!({
            // The carrier stays a minute after the round: its agents are scraped then.
            "agentSpec": {"kind": "DaemonSet", "terminationGracePeriodMinutes": 1},
            "request": {"durationInSecond": 1, "qps": 5, "perRequestTimeoutInMS": 1000},
            "target": {"endpoint": true, "clusterIP": false, "nodePort": false, "ipv4": true, "ipv6": false},
        }),
    );
    apply::<NetReach>(&cluster, "zoned", &task).await;
    let status = kind_status_when::<NetReach>(
        &cluster,
        "zoned",
        Duration::from_secs(60),
        "the round to finish",
        |s| s.finish,
    )
    .await;
    assert_eq!(
        status.last_round_status,
        Some(LastRoundStatus::Succeed),
        "{status:?}"
    );
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(cluster.client.clone(), NAMESPACE);
    let carrier = pods
        .list(
            &kube::api::ListParams::default()
                .labels("app.kubernetes.io/name=kdoctor-netreach-zoned"),
        )
        .await
        .expect("carrier pods")
        .items;
    assert_eq!(carrier.len(), 2);
    // Each agent probed both pods: one pair within its zone, one across.
    for pod in &carrier {
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("node");
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .expect("pod IP");
        let text = cluster.inside(scrape(ip.clone())).await;
        let source = &zone_of[&node];
        for target in zone_of.values() {
            let series =
                format!("source_zone=\"{source}\",target_type=\"pod\",target_zone=\"{target}\"");
            let line = text
                .lines()
                .find(|l| {
                    l.starts_with("kdoctor_agent_probe_target_requests_total{")
                        && l.contains(&series)
                        && l.contains("result=\"succeed\"")
                })
                .unwrap_or_else(|| panic!("no {series} on {node}:\n{text}"));
            assert!(
                line.ends_with(" 5"),
                "5 requests to the pod in {target}: {line}"
            );
        }
    }
}
