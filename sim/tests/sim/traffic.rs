//! Real traffic: a DaemonSet on 5 nodes whose pods run as processes (the `kube-sim echo`
//! stand-in for the agent), reached on each pod address and through the Service's ClusterIP,
//! a NodePort, the LoadBalancer address and an Ingress; the cluster DNS answers for every
//! Service and NXDOMAIN otherwise; a deleted pod's process stops.

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube_sim::net::dns;
use kube_sim::runner::RunnerConfig;
use kube_sim::{Sim, SimConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::eventually;

async fn http_get(addr: &str, host: &str, path: &str) -> Option<Value> {
    let mut s = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
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
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "agent"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
    }))
    .expect("svc");
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    svcs.create(&PostParams::default(), &svc)
        .await
        .expect("svc");
    let ing: Ingress = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"rules": [{"host": "agent.example", "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "agent", "port": {"number": 80}}}}]}}]}
    }))
    .expect("ingress");
    let ings: Api<Ingress> = Api::namespaced(client.clone(), "default");
    ings.create(&PostParams::default(), &ing)
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
    // Every pod's process answers on its own address.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod_list = eventually(20, || {
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
    .await;
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
    let lb_ip = eventually(10, || {
        let svcs = svcs.clone();
        async move {
            svcs.get("agent")
                .await
                .expect("svc")
                .status?
                .load_balancer?
                .ingress?
                .first()?
                .ip
                .clone()
        }
    })
    .await;
    let node = sim
        .cluster()
        .store
        .get("core/nodes", "", "node-6")
        .expect("node-6");
    let node_ip = kube_sim::stages::funcs::internal_ip(&node).expect("node ip");
    let ing_ip = eventually(10, || {
        let ings = ings.clone();
        async move {
            ings.get("agent")
                .await
                .expect("ing")
                .status?
                .load_balancer?
                .ingress?
                .first()?
                .ip
                .clone()
        }
    })
    .await;
    // ClusterIP, NodePort (on a node without agents), LoadBalancer: all reach some agent pod.
    for addr in [
        format!("{cluster_ip}:80"),
        format!("{node_ip}:{node_port}"),
        format!("{lb_ip}:80"),
    ] {
        let answer = eventually(20, || {
            let addr = addr.clone();
            async move { http_get(&addr, "x", "/").await }
        })
        .await;
        assert!(
            answer["pod"]
                .as_str()
                .is_some_and(|p| p.starts_with("agent-")),
            "{addr}: {answer}"
        );
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
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("udp");
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
        sock.send_to(&dns::query(42, name), dns_addr)
            .await
            .expect("send");
        let mut buf = [0u8; 512];
        let (n, _) = tokio::time::timeout(Duration::from_secs(5), sock.recv_from(&mut buf))
            .await
            .expect("dns answer in time")
            .expect("recv");
        let (rcode, ips) = dns::parse_response(&buf[..n]).expect("response");
        assert_eq!(rcode, want_rcode, "{name}");
        if name.starts_with("kubernetes") {
            assert_eq!(ips.len(), 1);
        } else {
            assert_eq!(
                ips.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
                want,
                "{name}"
            );
        }
    }
    let mut tcp = tokio::net::TcpStream::connect(dns_addr)
        .await
        .expect("dns tcp");
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
