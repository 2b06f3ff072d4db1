//! kubectl 1.32 against the sim: apply, get, get -w, describe, delete, for CRDs and built-ins.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::support::{Kubectl, repo_root, start};

#[tokio::test]
async fn kubectl_applies_the_kdoctor_crds_and_examples() {
    let (sim, _) = start().await;
    let k = Kubectl::new(&sim);
    let root = repo_root();
    let crds = root.join("manifests/crds");
    let examples = root.join("examples");
    let out = k.ok(&["apply", "-f", crds.to_str().expect("path")]).await;
    assert!(
        out.contains("customresourcedefinition.apiextensions.k8s.io/netreaches.kdoctor.io created"),
        "{out}"
    );
    let out = k
        .ok(&["apply", "-f", examples.to_str().expect("path")])
        .await;
    assert!(out.contains("netreach.kdoctor.io/task created"), "{out}");
    // Applying again is a no-op.
    let out = k
        .ok(&["apply", "-f", examples.to_str().expect("path")])
        .await;
    assert!(out.contains("netreach.kdoctor.io/task unchanged"), "{out}");
    let out = k.ok(&["get", "netreach"]).await;
    let header = out.lines().next().expect("header");
    assert!(
        header.starts_with("NAME")
            && header.contains("LASTROUNDSTATUS")
            && header.matches("AGE").count() == 1,
        "{out}"
    );
    assert!(out.contains("task"), "{out}");
    let out = k.ok(&["get", "kdoctor"]).await;
    assert!(
        out.contains("netdns.kdoctor.io/cluster-dns"),
        "category: {out}"
    );
    let out = k.ok(&["describe", "netreach", "task"]).await;
    assert!(out.contains("Kind:         NetReach"), "{out}");
    let yaml = k
        .ok(&["get", "nr", "task", "-o", "jsonpath={.spec.target.ipv6}"])
        .await;
    assert_eq!(yaml, "false", "schema default");
    let out = k.ok(&["delete", "netreach", "task"]).await;
    assert!(
        out.contains("netreach.kdoctor.io \"task\" deleted"),
        "{out}"
    );
    let err = k.fails(&["get", "netreach", "task"]).await;
    assert!(
        err.contains("Error from server (NotFound): netreaches.kdoctor.io \"task\" not found"),
        "{err}"
    );
}

#[tokio::test]
async fn kubectl_manages_builtin_kinds() {
    let (sim, _) = start().await;
    let k = Kubectl::new(&sim);
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("app.yaml");
    let manifest = |replicas: u32| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  type: NodePort\n  selector: {{app: web}}\n  ports:\n  - port: 80\n"
        )
    };
    std::fs::write(&file, manifest(2)).expect("write");
    let path = file.to_str().expect("path");
    let out = k.ok(&["apply", "-f", path]).await;
    assert!(
        out.contains("deployment.apps/web created") && out.contains("service/web created"),
        "{out}"
    );
    std::fs::write(&file, manifest(3)).expect("write");
    let out = k.ok(&["apply", "-f", path]).await;
    assert!(out.contains("deployment.apps/web configured"), "{out}");
    let replicas = k
        .ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"])
        .await;
    assert_eq!(replicas, "3");
    let out = k.ok(&["get", "svc", "web"]).await;
    assert!(out.contains("NodePort") && out.contains("80:3"), "{out}");
    let out = k.ok(&["describe", "svc", "web"]).await;
    assert!(out.contains("Type:                     NodePort"), "{out}");
    let err = k.fails(&["get", "configmap", "nope"]).await;
    assert!(
        err.contains("Error from server (NotFound): configmaps \"nope\" not found"),
        "{err}"
    );
    k.ok(&["delete", "-f", path]).await;
    let out = k.run(&["get", "deploy", "-o", "name"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
}

#[tokio::test]
async fn kubectl_get_watch_streams_changes() {
    let (sim, client) = start().await;
    let k = Kubectl::new(&sim);
    let mut child = k
        .command(&["get", "configmaps", "-w", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kubectl");
    let stdout = child.stdout.take().expect("stdout");
    let lines = tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("line");
            let done = line.contains("watched-2");
            seen.push(line);
            if done {
                break;
            }
        }
        seen
    });
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    // kubectl starts with a list; give it time to reach the watch.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    for name in ["watched-1", "watched-2"] {
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).expect("cm"),
        )
        .await
        .expect("create");
    }
    let seen = tokio::time::timeout(std::time::Duration::from_secs(30), lines)
        .await
        .expect("kubectl printed the new objects in time")
        .expect("join");
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.iter().any(|l| l == "configmap/watched-1"), "{seen:?}");
    assert!(seen.iter().any(|l| l == "configmap/watched-2"), "{seen:?}");
}

#[tokio::test]
async fn kubectl_imperative_create_and_auth_can_i() {
    let (sim, _) = start().await;
    let k = Kubectl::new(&sim);
    assert!(
        k.ok(&["create", "namespace", "probe"])
            .await
            .contains("namespace/probe created")
    );
    k.ok(&[
        "create",
        "configmap",
        "conf",
        "-n",
        "probe",
        "--from-literal=a=b",
    ])
    .await;
    k.ok(&[
        "create",
        "secret",
        "generic",
        "pw",
        "-n",
        "probe",
        "--from-literal=p=q",
    ])
    .await;
    let data = k
        .ok(&[
            "get",
            "configmap",
            "conf",
            "-n",
            "probe",
            "-o",
            "jsonpath={.data.a}",
        ])
        .await;
    assert_eq!(data, "b");
    let secret = k
        .ok(&[
            "get",
            "secret",
            "pw",
            "-n",
            "probe",
            "-o",
            "jsonpath={.data.p}",
        ])
        .await;
    assert_eq!(secret, "cQ==");
    assert_eq!(
        k.ok(&["auth", "can-i", "delete", "nodes"]).await.trim(),
        "yes"
    );
    // Typed creates send protobuf; the fields they set arrive intact.
    k.ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:1",
        "--port=8080",
        "--replicas=2",
    ])
    .await;
    let spec = k
        .ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].ports[0].containerPort} {.spec.selector.matchLabels.app}"])
        .await;
    assert_eq!(spec, "2 nginx:1 8080 web");
    k.ok(&["create", "service", "nodeport", "web", "--tcp=80:8080"])
        .await;
    let ports = k
        .ok(&["get", "svc", "web", "-o", "jsonpath={.spec.type} {.spec.ports[0].port} {.spec.ports[0].targetPort} {.spec.selector.app}"])
        .await;
    assert_eq!(ports, "NodePort 80 8080 web");
    k.ok(&["create", "serviceaccount", "agent"]).await;
    k.ok(&[
        "create",
        "role",
        "reader",
        "--verb=get,list",
        "--resource=pods",
    ])
    .await;
    k.ok(&[
        "create",
        "rolebinding",
        "agent-reads",
        "--role=reader",
        "--serviceaccount=default:agent",
    ])
    .await;
    let binding = k
        .ok(&["get", "rolebinding", "agent-reads", "-o", "jsonpath={.roleRef.kind}/{.roleRef.name} {.subjects[0].kind}/{.subjects[0].namespace}/{.subjects[0].name}"])
        .await;
    assert_eq!(binding, "Role/reader ServiceAccount/default/agent");
    let rules = k
        .ok(&["get", "role", "reader", "-o", "jsonpath={.rules[0].verbs}"])
        .await;
    assert_eq!(rules, "[\"get\",\"list\"]");
}
