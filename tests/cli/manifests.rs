//! The manifests parse as the Kubernetes objects they claim to be, agree with the code's names,
//! and grant no wildcard permission.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde::Deserialize;

use crate::support::repo;

fn documents(path: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(repo().join(path)).expect("manifest exists");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde_json::Value::deserialize(d).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn the_apiservice_registers_the_served_group_with_a_ca_bundle_field() {
    let docs = documents("manifests/apiservice.yaml");
    let service: APIService = serde_json::from_value(docs[0].clone()).expect("an APIService");
    assert_eq!(
        service.metadata.name.as_deref(),
        Some("v1beta1.system.kdoctor.io")
    );
    let spec = service.spec.expect("spec");
    assert_eq!(
        (spec.group.as_deref(), spec.version.as_deref()),
        (
            Some(kdoctor_apiserver::GROUP),
            Some(kdoctor_apiserver::VERSION)
        )
    );
    assert_ne!(
        spec.insecure_skip_tls_verify,
        Some(true),
        "the aggregator must verify the server"
    );
    assert!(docs[0]["spec"].get("caBundle").is_some());
    assert_eq!(spec.service.and_then(|s| s.port), Some(443));
}

#[test]
fn the_apiserver_rbac_is_least_privilege() {
    for doc in documents("manifests/apiserver-rbac.yaml") {
        match doc["kind"].as_str() {
            Some("ClusterRole") => {
                let role: ClusterRole = serde_json::from_value(doc).expect("a ClusterRole");
                for rule in role.rules.unwrap_or_default() {
                    let all = [
                        rule.api_groups.unwrap_or_default(),
                        rule.resources.unwrap_or_default(),
                        rule.verbs,
                    ];
                    assert!(
                        all.iter().flatten().all(|v| v != "*"),
                        "wildcard in {:?}",
                        role.metadata.name
                    );
                }
            }
            Some("ClusterRoleBinding") => {
                let binding: ClusterRoleBinding =
                    serde_json::from_value(doc).expect("a ClusterRoleBinding");
                assert_eq!(binding.role_ref.name, "system:auth-delegator");
            }
            Some("RoleBinding") => {
                let binding: RoleBinding = serde_json::from_value(doc).expect("a RoleBinding");
                assert_eq!(binding.metadata.namespace.as_deref(), Some("kube-system"));
                assert_eq!(
                    binding.role_ref.name,
                    "extension-apiserver-authentication-reader"
                );
            }
            Some("Role") => {
                let _: Role = serde_json::from_value(doc).expect("a Role");
            }
            other => panic!("unexpected kind {other:?}"),
        }
    }
}
