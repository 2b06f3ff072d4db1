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
