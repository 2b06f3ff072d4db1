//! The delegation surface an extension API server uses: TokenReview and SubjectAccessReview
//! tables, the authentication ConfigMap, client certificates from the sim's client CA.

use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube_sim::{SarRule, UserInfo};
use serde_json::json;

use crate::support::start;

#[tokio::test]
async fn token_reviews_answer_from_the_table() {
    let (sim, client) = start().await;
    sim.reviews()
        .set_token("alice-token", UserInfo::new("alice", &["dev"]));
    let api: Api<TokenReview> = Api::all(client);
    let review: TokenReview =
        serde_json::from_value(json!({"spec": {"token": "alice-token"}})).expect("review");
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .expect("review");
    let status = answer.status.expect("status");
    assert_eq!(status.authenticated, Some(true));
    let user = status.user.expect("user");
    assert_eq!(user.username.as_deref(), Some("alice"));
    assert_eq!(user.groups, Some(vec!["dev".to_string()]));
    let unknown: TokenReview =
        serde_json::from_value(json!({"spec": {"token": "nope"}})).expect("review");
    let answer = api
        .create(&PostParams::default(), &unknown)
        .await
        .expect("review");
    assert_eq!(answer.status.and_then(|s| s.authenticated), Some(false));
    assert_eq!(sim.reviews().token_reviews().len(), 2);
}

#[tokio::test]
async fn subject_access_reviews_answer_from_rules_and_are_recorded() {
    let (sim, client) = start().await;
    sim.reviews().set_sar_rules(vec![
        SarRule {
            user: Some("bob".into()),
            allowed: false,
            reason: "bob is banned".into(),
            ..Default::default()
        },
        SarRule {
            group: Some("dev".into()),
            verb: Some("get".into()),
            api_group: Some("system.kdoctor.io".into()),
            resource: Some("kdoctorreports".into()),
            allowed: true,
            reason: "devs read reports".into(),
            ..Default::default()
        },
    ]);
    let api: Api<SubjectAccessReview> = Api::all(client);
    let ask = |user: &str, groups: &[&str], verb: &str| -> SubjectAccessReview {
        serde_json::from_value(json!({"spec": {
            "user": user, "groups": groups,
            "resourceAttributes": {"verb": verb, "group": "system.kdoctor.io", "version": "v1beta1", "resource": "kdoctorreports", "name": "netreach-x"}
        }}))
        .expect("sar")
    };
    let allowed = api
        .create(&PostParams::default(), &ask("alice", &["dev"], "get"))
        .await
        .expect("sar")
        .status
        .expect("status");
    assert!(allowed.allowed);
    assert_eq!(allowed.reason.as_deref(), Some("devs read reports"));
    let denied = api
        .create(&PostParams::default(), &ask("bob", &["dev"], "get"))
        .await
        .expect("sar")
        .status
        .expect("status");
    assert!(!denied.allowed);
    assert_eq!(denied.denied, Some(true));
    let unmatched = api
        .create(&PostParams::default(), &ask("alice", &["dev"], "delete"))
        .await
        .expect("sar")
        .status
        .expect("status");
    assert!(!unmatched.allowed);
    let recorded = sim.reviews().subject_access_reviews();
    assert_eq!(recorded.len(), 3);
    assert_eq!(
        recorded[0]["resourceAttributes"]["name"],
        json!("netreach-x")
    );
    sim.reviews().set_unavailable(true);
    let down = api
        .create(&PostParams::default(), &ask("alice", &["dev"], "get"))
        .await
        .expect_err("unavailable");
    assert!(matches!(down, kube::Error::Api(s) if s.code == 500));
}

#[tokio::test]
async fn authentication_configmap_carries_the_sims_cas() {
    let (sim, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "kube-system");
    let cm = cms
        .get("extension-apiserver-authentication")
        .await
        .expect("configmap");
    let data = cm.data.expect("data");
    assert_eq!(data["client-ca-file"], sim.pki().client_ca.cert_pem);
    assert_eq!(
        data["requestheader-client-ca-file"],
        sim.pki().front_proxy_ca.cert_pem
    );
    let names: Vec<String> =
        serde_json::from_str(&data["requestheader-allowed-names"]).expect("json array");
    assert_eq!(names, ["front-proxy-client"]);
    let users: Vec<String> =
        serde_json::from_str(&data["requestheader-username-headers"]).expect("json array");
    assert_eq!(users, ["X-Remote-User"]);
}

#[tokio::test]
async fn user_certificates_from_the_client_ca_connect() {
    let (sim, _) = start().await;
    let alice = sim.client_cert("alice", &["dev"]).expect("cert");
    let client = sim
        .client_with(&sim.kubeconfig_for(&alice))
        .await
        .expect("client");
    let version = client.apiserver_version().await.expect("version");
    assert_eq!(version.minor, "32");
}

#[tokio::test]
async fn rbac_mode_authenticates_and_authorizes_like_the_real_server() {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
    use kube::api::ListParams;

    let sim = kube_sim::Sim::start(kube_sim::SimConfig {
        rbac: true,
        ..Default::default()
    })
    .await
    .expect("sim");
    let admin = sim.client().await.expect("admin");
    let alice_cert = sim.client_cert("alice", &["dev"]).expect("cert");
    let alice = sim
        .client_with(&sim.kubeconfig_for(&alice_cert))
        .await
        .expect("alice");
    let pods: Api<Pod> = Api::namespaced(alice.clone(), "default");
    let denied = pods
        .list(&ListParams::default())
        .await
        .expect_err("no role yet");
    match denied {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
            assert_eq!(
                s.message,
                "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
            );
        }
        other => panic!("{other}"),
    }
    assert_eq!(
        alice
            .apiserver_version()
            .await
            .expect("discovery is open")
            .minor,
        "32"
    );

    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    }))
    .expect("role");
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("create role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "dev-reads-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pod-reader"},
        "subjects": [{"kind": "Group", "name": "dev"}]
    }))
    .expect("binding");
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &binding)
        .await
        .expect("create binding");
    pods.list(&ListParams::default())
        .await
        .expect("now allowed in default");
    let elsewhere: Api<Pod> = Api::namespaced(alice.clone(), "kube-system");
    assert!(
        elsewhere.list(&ListParams::default()).await.is_err(),
        "RoleBinding is per namespace"
    );

    // Tokens from the TokenReview table authenticate too; unknown callers get 401.
    sim.reviews()
        .set_token("bob-token", UserInfo::new("bob", &[]));
    let bob_kc = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: s\n  cluster:\n    server: {}\n    certificate-authority-data: {}\ncontexts:\n- name: s\n  context: {{cluster: s, user: u}}\ncurrent-context: s\nusers:\n- name: u\n  user:\n    token: {{TOKEN}}\n",
        sim.url(),
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            &sim.pki().server_ca.cert_pem
        ),
    );
    let bob = sim
        .client_with(&bob_kc.replace("{TOKEN}", "bob-token"))
        .await
        .expect("bob");
    let err = Api::<Pod>::namespaced(bob, "default")
        .list(&ListParams::default())
        .await
        .expect_err("bob");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403 && s.message.contains("User \"bob\"")),
        "{err}"
    );
    let stranger = sim
        .client_with(&bob_kc.replace("{TOKEN}", "nope"))
        .await
        .expect("stranger");
    let err = Api::<Pod>::namespaced(stranger, "default")
        .list(&ListParams::default())
        .await
        .expect_err("401");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 401),
        "{err}"
    );

    // kubectl auth can-i asks a SelfSubjectAccessReview, answered by RBAC.
    let dir = tempfile::tempdir().expect("dir");
    let kc = dir.path().join("alice");
    std::fs::write(&kc, sim.kubeconfig_for(&alice_cert)).expect("kubeconfig");
    let cache = dir.path().join("cache");
    let can = move |verb: &str| {
        std::process::Command::new(crate::support::kubectl_binary())
            .arg("--kubeconfig")
            .arg(&kc)
            .arg("--cache-dir")
            .arg(&cache)
            .args(["auth", "can-i", verb, "pods"])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("kubectl")
    };
    let (yes, no) = tokio::task::spawn_blocking(move || (can("list"), can("delete")))
        .await
        .expect("join");
    assert_eq!(
        String::from_utf8_lossy(&yes.stdout).trim(),
        "yes",
        "{}",
        String::from_utf8_lossy(&yes.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&no.stdout).trim(), "no");
}

#[tokio::test]
async fn rbac_names_may_hold_colons_other_names_may_not() {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let (_sim, client) = start().await;
    // As the real server: RBAC names are path segments (`x:system:auth-delegator` is common).
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "kdoctor-controller:system:auth-delegator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"},
        "subjects": [{"kind": "ServiceAccount", "name": "kdoctor-controller", "namespace": "kdoctor"}]
    }))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("a colon in an RBAC name");
    let odd: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "a:b"}})).expect("configmap");
    let err = Api::<ConfigMap>::namespaced(client, "default")
        .create(&PostParams::default(), &odd)
        .await
        .expect_err("a colon in a ConfigMap name");
    assert!(err.to_string().contains("RFC 1123 subdomain"), "{err}");
}
