//! Who may read and delete reports, as a real kube-apiserver decides it: the server in delegated
//! mode under the install's ServiceAccount and RBAC (manifests/, as shipped), its TokenReviews
//! and SubjectAccessReviews answered by the cluster's own authenticator and RBAC authorizer, the
//! aggregator's front-proxy certificate the cluster's. The in-process fakes (fake_kube.rs,
//! support.rs) remain for what a real cluster cannot be made to do: outages, and counting reviews. A review that named the wrong group, resource,
//! verb or namespace, or dropped the user's groups, forbids a real user here.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::ClusterRole;
use kdoctor_apiserver::server::{AuthMode, ServerOptions, start};
use kdoctor_store::{Store, StoreConfig};
use kube::Api;
use kube_sim::testcluster::{TestCluster, client_with_token, service_account_token};

use crate::support::{control_plane, curl_method, fill, scratch};

/// People and their bindings, beside the install's own RBAC: alice `view`, bob `edit`, the group
/// `readers` `view`, dave `view` by a RoleBinding in `team` only (nothing on a cluster-scoped
/// kind), the ServiceAccount team/reader `view`, frank `get` on the report `netreach-task` alone
/// (resourceNames); carol nothing.
const PEOPLE: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader, namespace: team}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-view}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: bob-edit}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: readers-view}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: readers}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: team-reader-view}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{kind: ServiceAccount, name: reader, namespace: team}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: dave-view, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: dave}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: one-report-reader}
rules:
- apiGroups: [system.kdoctor.io]
  resources: [kdoctorreports]
  resourceNames: [netreach-task]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: frank-one-report}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: one-report-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: frank}]
"#;

fn kubectl_apply(sim: &TestCluster, files: &[PathBuf]) {
    let mut command = std::process::Command::new(sim.kubectl());
    command
        .arg("--kubeconfig")
        .arg(sim.kubeconfig())
        .arg("apply");
    for file in files {
        command.arg("-f").arg(file);
    }
    let out = command.output().expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The built-in ClusterRole `name` once kube-controller-manager has aggregated kdoctor's rules
/// into it.
async fn aggregated(admin: &kube::Client, name: &str, verb: &str) {
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    for _ in 0..300 {
        let role = roles.get(name).await.expect("ClusterRole");
        let has = role.rules.iter().flatten().any(|rule| {
            rule.api_groups
                .iter()
                .flatten()
                .any(|g| g == "system.kdoctor.io")
                && rule.verbs.iter().any(|v| v == verb)
        });
        if has {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{name} never gained kdoctorreports' {verb} (the shipped ClusterRoles' aggregation labels)"
    );
}

/// One request through the "aggregator": the cluster's front-proxy client certificate, the user
/// and groups in its headers (or a bearer token, without the certificate).
struct Caller {
    base: String,
    ca: PathBuf,
    proxy: (PathBuf, PathBuf),
}

impl Caller {
    async fn as_user(
        &self,
        method: &str,
        path: &str,
        user: &str,
        groups: &[&str],
    ) -> (u16, String) {
        let mut headers = vec![format!("X-Remote-User: {user}")];
        headers.extend(groups.iter().map(|g| format!("X-Remote-Group: {g}")));
        self.call(method, path, headers, true).await
    }

    async fn with_token(&self, method: &str, path: &str, token: &str) -> (u16, String) {
        let headers = vec![format!("Authorization: Bearer {token}")];
        self.call(method, path, headers, false).await
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        headers: Vec<String>,
        proxy: bool,
    ) -> (u16, String) {
        let (url, ca, cert) = (
            format!("{}{path}", self.base),
            self.ca.clone(),
            proxy.then(|| self.proxy.clone()),
        );
        let method = method.to_string();
        tokio::task::spawn_blocking(move || {
            let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
            let cert = cert.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
            curl_method(&method, &url, &ca, cert, &headers)
        })
        .await
        .expect("curl ran")
    }
}

const REPORTS: &str = "/apis/system.kdoctor.io/v1beta1/kdoctorreports";

/// kube-apiserver's message when USER (authenticated, nothing bound) deletes the built-in
/// cluster-scoped ClusterRole `view`: the admin impersonates the user.
async fn kube_apiserver_refusal(admin: &kube::Client, user: &str) -> String {
    let request = http::Request::delete("/apis/rbac.authorization.k8s.io/v1/clusterroles/view")
        .header("Impersonate-User", user)
        .header("Impersonate-Group", "system:authenticated")
        .body(Vec::new())
        .expect("request");
    match admin.request_text(request).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            status.message
        }
        other => panic!("{user} deleting clusterroles/view: expected 403, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn people_get_from_reports_what_the_clusters_rbac_grants_them() {
    let (sim, admin) = control_plane().await;
    let dir = scratch("real-rbac");
    std::fs::create_dir_all(&dir).expect("dir");
    let people = dir.join("people.yaml");
    std::fs::write(&people, PEOPLE).expect("people");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    kubectl_apply(
        &sim,
        &[
            root.join("manifests/rbac.yaml"),
            root.join("manifests/apiserver-rbac.yaml"),
            people,
        ],
    );
    aggregated(&admin, "view", "list").await;
    aggregated(&admin, "edit", "delete").await;

    // The server as the controller runs it: its own ServiceAccount's token.
    let server_client = client_with_token(
        &sim.kubeconfig(),
        service_account_token(&admin, "kdoctor", "kdoctor-controller", 3600)
            .await
            .expect("the controller's token"),
    )
    .await
    .expect("the controller's client");
    let store = Arc::new(Store::open(StoreConfig::new(dir.join("store"))).expect("store"));
    fill(&store);
    let server = start(ServerOptions {
        auth: AuthMode::Delegated(server_client),
        store: Some(store),
        ..ServerOptions::standalone(dir.join("server"), "127.0.0.1:0".parse().expect("addr"))
    })
    .await
    .expect("starts");
    let pki = sim.kubeconfig().with_file_name("pki");
    let caller = Caller {
        base: server.url(),
        ca: dir.join("server").join("pki").join("ca.crt"),
        proxy: (
            pki.join("front-proxy-client.crt"),
            pki.join("front-proxy-client.key"),
        ),
    };

    // Ready once the cluster's authentication ConfigMap is loaded: until then even alice is
    // refused, so wait for her first list.
    let mut first = (0, String::new());
    for _ in 0..200 {
        first = caller.as_user("GET", REPORTS, "alice", &[]).await;
        if first.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(first.0, 200, "alice (view) lists: {}", first.1);
    assert!(first.1.contains("netreach-task"), "{}", first.1);

    let one = format!("{REPORTS}/netreach-task");
    let round = format!("{REPORTS}/netreach-task.round-1");
    let watch = format!("{REPORTS}?watch=1&timeoutSeconds=1");
    let authenticated = ["system:authenticated"];
    let masters = ["system:masters", "system:authenticated"];
    // (who, groups, method, path, the code RBAC gives)
    let cases: [(&str, &[&str], &str, &str, u16); 17] = [
        ("alice", &authenticated, "GET", &one, 200),
        ("alice", &authenticated, "GET", &watch, 200),
        ("alice", &authenticated, "DELETE", &round, 403),
        (
            "erin",
            &["readers", "system:authenticated"],
            "GET",
            REPORTS,
            200,
        ),
        (
            "erin",
            &["readers", "system:authenticated"],
            "GET",
            &one,
            200,
        ),
        (
            "erin",
            &["readers", "system:authenticated"],
            "DELETE",
            &round,
            403,
        ),
        ("erin", &authenticated, "GET", REPORTS, 403),
        ("carol", &authenticated, "GET", REPORTS, 403),
        ("carol", &authenticated, "GET", &one, 403),
        ("dave", &authenticated, "GET", REPORTS, 403),
        ("dave", &authenticated, "GET", &one, 403),
        ("bob", &authenticated, "GET", &one, 200),
        // The review names the object: get on one name is not get on another, nor a list.
        ("frank", &authenticated, "GET", &one, 200),
        ("frank", &authenticated, "GET", &round, 403),
        ("frank", &authenticated, "GET", REPORTS, 403),
        ("frank", &authenticated, "DELETE", &one, 403),
        ("root", &masters, "GET", REPORTS, 200),
    ];
    for (who, groups, method, path, want) in cases {
        let (code, body) = caller.as_user(method, path, who, groups).await;
        assert_eq!(code, want, "{who} {groups:?}: {method} {path}: {body}");
        if want == 403 {
            assert!(
                body.contains(&format!("User \\\"{who}\\\" cannot")),
                "{who}: the Status names the user and what was refused: {body}"
            );
        }
    }
    // A refusal reads as kube-apiserver's own for a built-in kind refused to the same user.
    let (_, ours) = caller
        .as_user("DELETE", &one, "carol", &authenticated)
        .await;
    let ours: serde_json::Value = serde_json::from_str(&ours).expect("a Status");
    let theirs = kube_apiserver_refusal(&admin, "carol").await;
    assert_eq!(
        ours["message"].as_str().unwrap_or_default(),
        theirs
            .replace(
                "clusterroles.rbac.authorization.k8s.io \"view\"",
                "kdoctorreports.system.kdoctor.io \"netreach-task\""
            )
            .replace("resource \"clusterroles\"", "resource \"kdoctorreports\"")
            .replace(
                "API group \"rbac.authorization.k8s.io\"",
                "API group \"system.kdoctor.io\""
            ),
        "the refusal's message, beside kube-apiserver's for clusterroles: {theirs}"
    );
    assert_eq!(ours["reason"], "Forbidden", "{ours}");
    assert_eq!(ours["code"], 403, "{ours}");

    // The editor deletes a round; it is then gone for everyone.
    let (code, body) = caller
        .as_user("DELETE", &round, "bob", &authenticated)
        .await;
    assert_eq!(code, 200, "bob (edit) deletes a round: {body}");
    let (code, _) = caller.as_user("GET", &round, "alice", &authenticated).await;
    assert_eq!(code, 404, "the deleted round is gone");

    // A ServiceAccount's token, reviewed by the cluster's TokenReview: its binding applies.
    let reader = service_account_token(&admin, "team", "reader", 3600)
        .await
        .expect("team/reader's token");
    let (code, body) = caller.with_token("GET", REPORTS, &reader).await;
    assert_eq!(code, 200, "team/reader's token (view): {body}");
    let (code, body) = caller.with_token("DELETE", &one, &reader).await;
    assert_eq!(code, 403, "team/reader may not delete: {body}");
    assert!(body.contains("system:serviceaccount:team:reader"), "{body}");
    let (code, _) = caller.with_token("GET", REPORTS, "not-a-token").await;
    assert_eq!(code, 401, "a token the cluster does not know");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
