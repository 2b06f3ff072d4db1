//! Real traffic: a DaemonSet on 5 nodes whose pods run as processes (the `kube-sim echo`
//! stand-in for the agent), reached on each pod address and through the Service's ClusterIP,
//! a NodePort, the LoadBalancer address and an Ingress; the cluster DNS answers for every
//! Service and NXDOMAIN otherwise; a deleted pod's process stops. The same over IPv6 in a
//! dual-stack cluster.

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_sim::net::dns;
use kube_sim::runner::RunnerConfig;
use kube_sim::{Ipv6Mode, Sim, SimConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{assert_invalid, eventually};

async fn http_get(addr: &str, host: &str, path: &str) -> Option<Value> {
    let mut s = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&buf);
    let body = text.split_once("\r\n\r\n")?.1;
    serde_json::from_str(body.trim()).ok()
}

/// Creates the `agent` DaemonSet (5 process nodes), its LoadBalancer Service (`svc_extra`
/// merged into the spec) and an Ingress, and waits until all five pods are Ready.
async fn deploy_agents(client: &kube::Client, svc_extra: Value) -> Vec<Pod> {
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}},
                "spec": {"nodeSelector": {"kube-sim.kdoctor.io/processes": "true"},
                    "containers": [{"name": "agent", "image": "kdoctor:dev", "ports": [{"name": "http", "containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}}}]}}}
    }))
    .expect("ds");
    Api::<DaemonSet>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &ds)
        .await
        .expect("create ds");
    let mut spec = json!({"type": "LoadBalancer", "selector": {"app": "agent"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), svc_extra.as_object()) {
        spec.extend(extra.clone());
    }
    let svc: Service =
        serde_json::from_value(json!({"metadata": {"name": "agent"}, "spec": spec})).expect("svc");
    Api::<Service>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &svc)
        .await
        .expect("svc");
    let ing: Ingress = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"rules": [{"host": "agent.example", "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "agent", "port": {"number": 80}}}}]}}]}
    }))
    .expect("ingress");
    Api::<Ingress>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &ing)
        .await
        .expect("ingress");
    // The DaemonSet counts a pod Ready only once its process answers the readiness probe, so
    // when all five are Ready every process answers at once.
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
    eventually(20, || {
        let dss = dss.clone();
        async move { (dss.get("agent").await.expect("ds").status?.number_ready == 5).then_some(()) }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    eventually(20, || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("app=agent"))
                .await
                .expect("pods");
            (list.items.len() == 5
                && list
                    .items
                    .iter()
                    .all(|p| p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some()))
            .then_some(list.items)
        }
    })
    .await
}

/// The load-balancer addresses of a Service or Ingress status, once assigned.
async fn lb_ips<K>(api: &Api<K>, name: &str) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    eventually(10, || async move {
        let obj = serde_json::to_value(api.get(name).await.ok()?.clone()).ok()?;
        let ips: Vec<String> = obj
            .pointer("/status/loadBalancer/ingress")?
            .as_array()?
            .iter()
            .filter_map(|i| i.get("ip")?.as_str().map(String::from))
            .collect();
        (!ips.is_empty()).then_some(ips)
    })
    .await
}

#[tokio::test]
async fn daemonset_processes_answer_on_every_service_address_and_dns() {
    let work = tempfile::tempdir().expect("work dir");
    let sim = Sim::start(SimConfig {
        nodes: 6,
        agent_nodes: 5,
        traffic: true,
        runner: Some(RunnerConfig {
            program: env!("CARGO_BIN_EXE_kube-sim").into(),
            args: vec!["echo".into(), "--listen".into(), "$(POD_IP):8080".into()],
            selector: "app=agent".into(),
            work_dir: work.path().to_path_buf(),
        }),
        ..Default::default()
    })
    .await
    .expect("sim");
    let client = sim.client().await.expect("client");
    let pod_list = deploy_agents(&client, json!({})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let ings: Api<Ingress> = Api::namespaced(client.clone(), "default");
    // Every pod's process answers on its own address.
    for p in &pod_list {
        let ip = p
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .expect("ip");
        let name = p.metadata.name.clone().expect("name");
        let answer = http_get(&format!("{ip}:8080"), "x", "/")
            .await
            .expect("a Ready pod's process answers");
        assert_eq!(answer["pod"], json!(name));
        assert_eq!(answer["podIP"], json!(ip));
    }

    let svc = svcs.get("agent").await.expect("svc");
    let spec = svc.spec.expect("spec");
    let cluster_ip = spec.cluster_ip.expect("clusterIP");
    let node_port = spec.ports.expect("ports")[0].node_port.expect("nodePort");
    let lb_ip = lb_ips(&svcs, "agent").await[0].clone();
    let node = sim
        .cluster()
        .store
        .get("core/nodes", "", "node-6")
        .expect("node-6");
    let node_ip = kube_sim::stages::funcs::internal_ip(&node).expect("node ip");
    let ing_ip = lb_ips(&ings, "agent").await[0].clone();
    // ClusterIP, NodePort (on a node without agents), LoadBalancer: all reach some agent pod.
    for addr in [
        format!("{cluster_ip}:80"),
        format!("{node_ip}:{node_port}"),
        format!("{lb_ip}:80"),
    ] {
        reaches_an_agent(&addr, "x").await;
    }
    let via_ingress = eventually(20, || {
        let addr = format!("{ing_ip}:80");
        async move { http_get(&addr, "agent.example", "/probe").await }
    })
    .await;
    assert_eq!(via_ingress["path"], json!("/probe"));
    assert_eq!(via_ingress["host"], json!("agent.example"));

    // Cluster DNS over UDP and TCP.
    let dns_addr = sim.dns_addr().expect("dns");
    for (name, want_rcode, want) in [
        (
            "agent.default.svc.cluster.local",
            0u8,
            vec![cluster_ip.clone()],
        ),
        ("kubernetes.default.svc.cluster.local", 0, vec![]),
        ("nope.default.svc.cluster.local", 3, vec![]),
        ("example.com", 5, vec![]),
    ] {
        let (rcode, ips) = dns_ask(dns_addr, name, dns::TYPE_A).await;
        assert_eq!(rcode, want_rcode, "{name}");
        if name.starts_with("kubernetes") {
            assert_eq!(ips.len(), 1);
        } else {
            assert_eq!(ips, want, "{name}");
        }
    }
    let mut tcp = TcpStream::connect(dns_addr).await.expect("dns tcp");
    let q = dns::query(7, "agent.default.svc.cluster.local");
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    tcp.write_all(&framed).await.expect("write");
    let mut len = [0u8; 2];
    tcp.read_exact(&mut len).await.expect("len");
    let mut resp = vec![0u8; u16::from_be_bytes(len) as usize];
    tcp.read_exact(&mut resp).await.expect("resp");
    assert_eq!(
        dns::parse_response(&resp).map(|(_, ips)| ips.len()),
        Some(1)
    );

    // An agent crash: the process is killed, restarted with back-off, and the pod shows it.
    let crashed = pod_list[1].metadata.name.clone().expect("name");
    let crashed_ip = pod_list[1]
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("ip");
    assert!(sim.crash_pod_process("default", &crashed));
    let restarts = eventually(20, || {
        let pods = pods.clone();
        let crashed = crashed.clone();
        async move {
            let p = pods.get(&crashed).await.expect("pod");
            let cs = p.status?.container_statuses?.into_iter().next()?;
            (cs.restart_count >= 1 && cs.ready).then_some(cs.restart_count)
        }
    })
    .await;
    assert_eq!(restarts, 1);
    eventually(20, || {
        let addr = format!("{crashed_ip}:8080");
        async move { http_get(&addr, "x", "/").await }
    })
    .await;

    // Logs are kept per pod; deleting a pod stops its process (the DaemonSet makes a new one).
    let victim = pod_list[0].clone();
    let (vname, vip) = (
        victim.metadata.name.clone().expect("name"),
        victim.status.and_then(|s| s.pod_ip).expect("ip"),
    );
    assert!(sim.pod_log("default", &vname).is_some());
    let logs = pods
        .logs(&vname, &kube::api::LogParams::default())
        .await
        .expect("pods/log");
    assert!(
        logs.contains(&format!("echo listening on {vip}:8080")),
        "{logs}"
    );
    pods.delete(&vname, &DeleteParams::default())
        .await
        .expect("delete pod");
    eventually(20, || {
        let addr = format!("{vip}:8080");
        async move { http_get(&addr, "x", "/").await.is_none().then_some(()) }
    })
    .await;
}

/// Waits until `addr` answers an HTTP GET (with `host`) from one of the agent pods.
async fn reaches_an_agent(addr: &str, host: &str) {
    let answer = eventually(20, || async move { http_get(addr, host, "/").await }).await;
    assert!(
        answer["pod"]
            .as_str()
            .is_some_and(|p| p.starts_with("agent-")),
        "{addr}: {answer}"
    );
}

/// Sends one DNS query of `qtype` over UDP and returns (rcode, addresses).
async fn dns_ask(server: std::net::SocketAddr, name: &str, qtype: u16) -> (u8, Vec<String>) {
    let local = if server.is_ipv6() {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    };
    let sock = tokio::net::UdpSocket::bind(local).await.expect("udp");
    sock.send_to(&dns::query_type(9, name, qtype), server)
        .await
        .expect("send");
    let mut buf = [0u8; 512];
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), sock.recv_from(&mut buf))
        .await
        .expect("dns answer in time")
        .expect("recv");
    let (rcode, ips) = dns::parse_response(&buf[..n]).expect("response");
    (rcode, ips.iter().map(|i| i.to_string()).collect())
}

fn is_v6(ip: &str) -> bool {
    ip.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_ipv6())
}

#[tokio::test]
async fn a_dual_stack_cluster_carries_ipv6_to_pods_services_node_ports_load_balancers_ingress_and_dns()
 {
    if kube_sim::net::ipv6::reported_missing().is_some() {
        return;
    }
    let work = tempfile::tempdir().expect("work dir");
    // On: a machine that cannot route the IPv6 addresses fails here, saying why.
    let sim = Sim::start(SimConfig {
        nodes: 6,
        agent_nodes: 5,
        traffic: true,
        ipv6: Ipv6Mode::On,
        runner: Some(RunnerConfig {
            program: env!("CARGO_BIN_EXE_kube-sim").into(),
            args: ["echo", "--ips", "$(POD_IPS)", "--port", "8080"]
                .map(String::from)
                .to_vec(),
            selector: "app=agent".into(),
            work_dir: work.path().to_path_buf(),
        }),
        ..Default::default()
    })
    .await
    .expect("a dual-stack simulated cluster (needs CAP_NET_ADMIN for one route on lo)");
    assert!(sim.dual_stack());
    let client = sim.client().await.expect("client");
    let pod_list = deploy_agents(&client, json!({"ipFamilyPolicy": "RequireDualStack"})).await;

    // Every pod has an IPv4 and an IPv6 address, and its process answers on the IPv6 one.
    for p in &pod_list {
        let ips: Vec<String> = p
            .status
            .as_ref()
            .and_then(|s| s.pod_ips.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|i| i.ip)
            .collect();
        assert_eq!(ips.len(), 2, "{ips:?}");
        assert!(!is_v6(&ips[0]) && is_v6(&ips[1]), "{ips:?}");
        let answer = http_get(&format!("[{}]:8080", ips[1]), "x", "/")
            .await
            .expect("the pod's process answers on its IPv6 address");
        assert_eq!(answer["pod"], json!(p.metadata.name));
    }

    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let spec = svcs.get("agent").await.expect("svc").spec.expect("spec");
    assert_eq!(
        spec.ip_families,
        Some(vec!["IPv4".to_string(), "IPv6".to_string()])
    );
    let cluster_ips = spec.cluster_ips.expect("clusterIPs");
    assert_eq!(cluster_ips.len(), 2, "{cluster_ips:?}");
    let node_port = spec.ports.expect("ports")[0].node_port.expect("nodePort");
    let node = sim
        .cluster()
        .store
        .get("core/nodes", "", "node-6")
        .expect("node-6");
    let node_v6 = kube_sim::stages::funcs::internal_ips(&node)
        .into_iter()
        .find(|ip| is_v6(ip))
        .expect("node-6 has an IPv6 InternalIP");
    let lb_v6 = lb_ips(&svcs, "agent")
        .await
        .into_iter()
        .find(|ip| is_v6(ip))
        .expect("the LoadBalancer has an IPv6 address");
    let ings: Api<Ingress> = Api::namespaced(client.clone(), "default");
    let ing_v6 = lb_ips(&ings, "agent")
        .await
        .into_iter()
        .find(|ip| is_v6(ip))
        .expect("the Ingress has an IPv6 address");
    // IPv6 ClusterIP, NodePort on a node without agents, LoadBalancer, Ingress.
    for (addr, host) in [
        (format!("[{}]:80", cluster_ips[1]), "x"),
        (format!("[{node_v6}]:{node_port}"), "x"),
        (format!("[{lb_v6}]:80"), "x"),
        (format!("[{ing_v6}]:80"), "agent.example"),
    ] {
        reaches_an_agent(&addr, host).await;
    }

    // One EndpointSlice per family.
    let slices = sim
        .cluster()
        .store
        .list("discovery.k8s.io/endpointslices", Some("default"));
    let mut families: Vec<(String, usize)> = slices
        .0
        .iter()
        .filter(|s| {
            s.pointer("/metadata/labels/kubernetes.io~1service-name") == Some(&json!("agent"))
        })
        .map(|s| {
            (
                s["addressType"].as_str().unwrap_or("").to_string(),
                s["endpoints"].as_array().map_or(0, Vec::len),
            )
        })
        .collect();
    families.sort();
    assert_eq!(families, vec![("IPv4".into(), 5), ("IPv6".into(), 5)]);

    // The cluster DNS has an IPv6 address too, and answers A and AAAA.
    let dns_svc = Api::<Service>::namespaced(client.clone(), "kube-system")
        .get("kube-dns")
        .await
        .expect("kube-dns");
    let dns_ips = dns_svc.spec.and_then(|s| s.cluster_ips).expect("dns ips");
    let dns_v6: std::net::SocketAddr = format!("[{}]:53", dns_ips[1]).parse().expect("addr");
    let name = "agent.default.svc.cluster.local";
    assert_eq!(
        dns_ask(dns_v6, name, dns::TYPE_AAAA).await,
        (0, vec![cluster_ips[1].clone()])
    );
    assert_eq!(
        dns_ask(dns_v6, name, dns::TYPE_A).await,
        (0, vec![cluster_ips[0].clone()])
    );
    assert_eq!(
        dns_ask(dns_v6, "nope.default.svc.cluster.local", dns::TYPE_AAAA).await,
        (3, vec![])
    );

    // A single-stack IPv6 Service gets only an IPv6 ClusterIP.
    let v6_only: Service = serde_json::from_value(json!({
        "metadata": {"name": "agent-v6"},
        "spec": {"ipFamilies": ["IPv6"], "selector": {"app": "agent"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .expect("svc");
    let created = svcs
        .create(&PostParams::default(), &v6_only)
        .await
        .expect("create");
    let ips = created.spec.and_then(|s| s.cluster_ips).expect("ips");
    assert!(ips.len() == 1 && is_v6(&ips[0]), "{ips:?}");
    reaches_an_agent(&format!("[{}]:80", ips[0]), "x").await;

    // The policy moves a Service between one family and two, as kube-apiserver does; its
    // second ClusterIP, EndpointSlice and listener come and go with it.
    let restack: Service = serde_json::from_value(json!({
        "metadata": {"name": "agent-restack"},
        "spec": {"selector": {"app": "agent"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .expect("svc");
    let v4 = svcs
        .create(&PostParams::default(), &restack)
        .await
        .expect("create")
        .spec
        .and_then(|s| s.cluster_ips)
        .expect("ips");
    assert!(v4.len() == 1 && !is_v6(&v4[0]), "{v4:?}");
    let set_policy = |policy: &str| {
        let svcs = svcs.clone();
        let patch = Patch::Merge(json!({"spec": {"ipFamilyPolicy": policy}}));
        async move {
            svcs.patch("agent-restack", &PatchParams::default(), &patch)
                .await
                .expect("policy patched")
                .spec
                .expect("spec")
        }
    };
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let slice_families = || {
        let slices = slices.clone();
        async move {
            let lp = ListParams::default().labels("kubernetes.io/service-name=agent-restack");
            let mut fams: Vec<String> = slices
                .list(&lp)
                .await
                .expect("slices")
                .items
                .into_iter()
                .map(|s| s.address_type)
                .collect();
            fams.sort();
            fams
        }
    };
    let up = set_policy("PreferDualStack").await;
    assert_eq!(
        up.ip_families,
        Some(vec!["IPv4".to_string(), "IPv6".to_string()])
    );
    let both = up.cluster_ips.expect("ips");
    assert!(
        both.len() == 2 && both[0] == v4[0] && is_v6(&both[1]),
        "{both:?}"
    );
    reaches_an_agent(&format!("[{}]:80", both[1]), "x").await;
    eventually(20, || async {
        (slice_families().await == ["IPv4", "IPv6"]).then_some(())
    })
    .await;

    let down = set_policy("SingleStack").await;
    assert_eq!(down.ip_families, Some(vec!["IPv4".to_string()]));
    assert_eq!(down.cluster_ips, Some(v4.clone()));
    eventually(20, || async {
        (slice_families().await == ["IPv4"]).then_some(())
    })
    .await;
    let gone = format!("[{}]:80", both[1]);
    eventually(20, || {
        let gone = gone.clone();
        async move { TcpStream::connect(&gone).await.is_err().then_some(()) }
    })
    .await;
    reaches_an_agent(&format!("{}:80", v4[0]), "x").await;
}

#[tokio::test]
async fn an_ipv4_only_cluster_refuses_ipv6_services_as_kube_apiserver_does() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    assert!(!sim.dual_stack());
    let svcs: Api<Service> = Api::namespaced(sim.client().await.expect("client"), "default");
    for (spec, message) in [
        (
            json!({"ipFamilies": ["IPv6"], "ports": [{"port": 80}]}),
            "spec.ipFamilies[0]: Invalid value: \"IPv6\": not configured on this cluster",
        ),
        (
            json!({"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}),
            "spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services",
        ),
    ] {
        let svc: Service =
            serde_json::from_value(json!({"metadata": {"name": "v6"}, "spec": spec})).expect("svc");
        let err = svcs
            .create(&PostParams::default(), &svc)
            .await
            .expect_err("refused");
        assert_invalid(err, message);
    }
    // PreferDualStack falls back to IPv4 alone.
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "pref"},
        "spec": {"ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]}}))
    .expect("svc");
    let spec = svcs
        .create(&PostParams::default(), &svc)
        .await
        .expect("created")
        .spec
        .expect("spec");
    assert_eq!(spec.ip_families, Some(vec!["IPv4".to_string()]));
    assert_eq!(spec.cluster_ips.map(|v| v.len()), Some(1));
    // And an update cannot ask for what the cluster lacks; the Service stays as it was.
    let err = svcs
        .patch(
            "pref",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ipFamilyPolicy": "RequireDualStack"}})),
        )
        .await
        .expect_err("refused");
    assert_invalid(
        err,
        "this cluster is not configured for dual-stack services",
    );
    let kept = svcs.get("pref").await.expect("svc").spec.expect("spec");
    assert_eq!(kept.ip_family_policy.as_deref(), Some("PreferDualStack"));
}
