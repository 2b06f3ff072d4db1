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
fn the_apiservice_registers_the_served_group_and_leaves_the_ca_bundle_to_the_controller() {
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
    // The controller owns caBundle: a value here would blank it on every re-apply.
    assert!(docs[0]["spec"].get("caBundle").is_none());
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

/// Every object `kubectl apply -f manifests/` installs (the CRDs have their own test).
fn install() -> Vec<serde_json::Value> {
    [
        "namespace",
        "config",
        "rbac",
        "apiserver-rbac",
        "agent",
        "controller",
        "apiservice",
    ]
    .iter()
    .flat_map(|f| documents(&format!("manifests/{f}.yaml")))
    .collect()
}

fn find<'a>(objects: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind} {name} is not in manifests/"))
}

fn typed<T: serde::de::DeserializeOwned>(object: &serde_json::Value) -> T {
    serde_json::from_value(object.clone())
        .unwrap_or_else(|e| panic!("{} {}: {e}", object["kind"], object["metadata"]["name"]))
}

#[test]
fn install_objects_parse_as_their_kinds_in_the_kdoctor_namespace() {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    use k8s_openapi::api::core::v1::{
        ConfigMap, Namespace, PersistentVolumeClaim, Service, ServiceAccount,
    };
    use k8s_openapi::api::networking::v1::Ingress;
    let objects = install();
    assert!(objects.len() >= 20, "{} objects", objects.len());
    for o in &objects {
        let namespaced = match o["kind"].as_str().unwrap_or_default() {
            "Namespace" => typed::<Namespace>(o).metadata.namespace.is_some(),
            "ConfigMap" => typed::<ConfigMap>(o).metadata.namespace.is_some(),
            "ServiceAccount" => typed::<ServiceAccount>(o).metadata.namespace.is_some(),
            "ClusterRole" => typed::<ClusterRole>(o).metadata.namespace.is_some(),
            "ClusterRoleBinding" => typed::<ClusterRoleBinding>(o).metadata.namespace.is_some(),
            "Role" => typed::<Role>(o).metadata.namespace.is_some(),
            "RoleBinding" => typed::<RoleBinding>(o).metadata.namespace.is_some(),
            "DaemonSet" => typed::<DaemonSet>(o).metadata.namespace.is_some(),
            "Deployment" => typed::<Deployment>(o).metadata.namespace.is_some(),
            "Service" => typed::<Service>(o).metadata.namespace.is_some(),
            "Ingress" => typed::<Ingress>(o).metadata.namespace.is_some(),
            "PersistentVolumeClaim" => typed::<PersistentVolumeClaim>(o)
                .metadata
                .namespace
                .is_some(),
            "APIService" => typed::<APIService>(o).metadata.namespace.is_some(),
            other => panic!("unexpected kind {other} in manifests/"),
        };
        let cluster_scoped = matches!(
            o["kind"].as_str(),
            Some("Namespace" | "ClusterRole" | "ClusterRoleBinding" | "APIService")
        );
        assert_eq!(
            namespaced, !cluster_scoped,
            "{} {}",
            o["kind"], o["metadata"]["name"]
        );
        if namespaced && o["metadata"]["namespace"] != "kube-system" {
            assert_eq!(
                o["metadata"]["namespace"], "kdoctor",
                "{}",
                o["metadata"]["name"]
            );
        }
    }
}

#[test]
fn install_rbac_has_no_wildcard_and_agents_only_read() {
    let objects = install();
    for o in objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
    {
        let rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule> =
            serde_json::from_value(o["rules"].clone()).expect("rules");
        for rule in &rules {
            for v in rule
                .api_groups
                .iter()
                .flatten()
                .chain(rule.resources.iter().flatten())
                .chain(&rule.verbs)
            {
                assert_ne!(
                    v, "*",
                    "wildcard in {} {}",
                    o["kind"], o["metadata"]["name"]
                );
            }
            if o["metadata"]["name"] == "kdoctor-agent" {
                assert!(
                    rule.verbs
                        .iter()
                        .all(|v| ["get", "list", "watch"].contains(&v.as_str())),
                    "agents only read: {rule:?}"
                );
            }
        }
    }
    // Only the controller writes task status.
    let controller = find(&objects, "ClusterRole", "kdoctor-controller");
    assert!(
        controller["rules"]
            .to_string()
            .contains("netreaches/status")
    );
    for o in &objects {
        if o["metadata"]["name"] != "kdoctor-controller" {
            assert!(
                !o["rules"].to_string().contains("/status"),
                "{} may write status",
                o["metadata"]["name"]
            );
        }
    }
}

/// Labels of the pod template of workload `kind/name`, and its container.
fn pod_of(objects: &[serde_json::Value], kind: &str, name: &str) -> serde_json::Value {
    find(objects, kind, name)["spec"]["template"].clone()
}

#[test]
fn names_ports_selectors_and_mounts_agree_across_objects_and_with_the_code() {
    let objects = install();
    let conf = find(&objects, "ConfigMap", "kdoctor")["data"]["conf.yml"]
        .as_str()
        .expect("conf.yml")
        .to_string();
    let config = kdoctor_api::config::Config::from_yaml(&conf).expect("conf.yml parses");
    find(&objects, "DaemonSet", &config.agent_daemonset_name);
    find(&objects, "Service", &config.agent_service_ipv4_name);
    find(&objects, "Ingress", &config.agent_ingress_name);

    for (service, kind, workload) in [
        (
            config.agent_service_ipv4_name.as_str(),
            "DaemonSet",
            config.agent_daemonset_name.as_str(),
        ),
        ("kdoctor-controller", "Deployment", "kdoctor-controller"),
    ] {
        let svc = find(&objects, "Service", service);
        let template = pod_of(&objects, kind, workload);
        let labels = template["metadata"]["labels"].as_object().expect("labels");
        for (k, v) in svc["spec"]["selector"].as_object().expect("selector") {
            assert_eq!(labels.get(k), Some(v), "Service {service} selects {k}={v}");
        }
        let selector = find(&objects, kind, workload)["spec"]["selector"]["matchLabels"].clone();
        for (k, v) in selector.as_object().expect("matchLabels") {
            assert_eq!(labels.get(k), Some(v), "{workload} selects its own pods");
        }
        let port_names: Vec<&str> = template["spec"]["containers"][0]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        for port in svc["spec"]["ports"].as_array().expect("ports") {
            if let Some(target) = port["targetPort"].as_str() {
                assert!(port_names.contains(&target), "{service} targets {target}");
            }
        }
        let account = template["spec"]["serviceAccountName"].as_str().expect("SA");
        find(&objects, "ServiceAccount", account);
        for volume in template["spec"]["volumes"].as_array().expect("volumes") {
            if let Some(cm) = volume["configMap"]["name"].as_str() {
                find(&objects, "ConfigMap", cm);
            }
            if let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() {
                find(&objects, "PersistentVolumeClaim", claim);
            }
            if let Some(secret) = volume["secret"]["secretName"].as_str() {
                assert!(
                    ["kdoctor-ca", "kdoctor-controller-cert"].contains(&secret),
                    "{secret} is not made by `kdoctor certs`"
                );
            }
        }
    }
    // The controller watches agent pods by their component label.
    let agent = pod_of(&objects, "DaemonSet", &config.agent_daemonset_name);
    assert_eq!(
        agent["metadata"]["labels"]["app.kubernetes.io/component"],
        kdoctor_reconciler::carrier::AGENT_COMPONENT
    );
    // Agents get the CA certificate only, never its key.
    let tls = agent["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["secret"]["secretName"] == "kdoctor-ca")
        .expect("the CA volume");
    assert_eq!(
        tls["secret"]["items"],
        serde_json::json!([{"key": "ca.crt", "path": "ca.crt"}])
    );
    // The Ingress routes to the agent Service's http port; the APIService to the controller's.
    let ingress = find(&objects, "Ingress", &config.agent_ingress_name);
    let backend = &ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"];
    assert_eq!(backend["name"], config.agent_service_ipv4_name.as_str());
    assert_eq!(backend["port"]["name"], "http");
    let api = find(&objects, "APIService", "v1beta1.system.kdoctor.io");
    let svc = find(
        &objects,
        "Service",
        api["spec"]["service"]["name"].as_str().expect("svc"),
    );
    assert!(
        svc["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| p["port"] == api["spec"]["service"]["port"])
    );
}

#[test]
fn the_workloads_arguments_are_accepted_by_the_binary() {
    let objects = install();
    for (kind, name) in [
        ("DaemonSet", "kdoctor-agent"),
        ("Deployment", "kdoctor-controller"),
    ] {
        let container = &pod_of(&objects, kind, name)["spec"]["containers"][0];
        let mut args: Vec<String> = container["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("string").to_string())
            .collect();
        // clap stops at --help after checking every argument before it.
        args.push("--help".into());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = crate::support::kdoctor(&refs);
        assert!(
            out.status.success(),
            "{kind} {name}: {}",
            crate::support::stderr(&out)
        );
    }
}

#[test]
fn kdoctor_certs_makes_what_the_manifests_mount_and_the_apiservice_trusts() {
    let dir = crate::support::scratch("certs");
    let dir_arg = dir.display().to_string();
    let out = crate::support::kdoctor(&["certs", "-o", "json", "--dir", &dir_arg]);
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    let list: serde_json::Value =
        serde_json::from_str(&crate::support::stdout(&out)).expect("JSON");
    let items = list["items"].as_array().expect("a List").clone();
    let ca = find(&items, "Secret", "kdoctor-ca");
    assert_eq!(ca["metadata"]["namespace"], "kdoctor");
    assert!(ca["data"]["ca.crt"].is_string() && ca["data"]["ca.key"].is_string());
    let serving = find(&items, "Secret", "kdoctor-controller-cert");
    assert_eq!(serving["type"], "kubernetes.io/tls");
    let api = find(&items, "APIService", "v1beta1.system.kdoctor.io");
    assert_eq!(api["spec"]["caBundle"], ca["data"]["ca.crt"]);
    let shipped = find(&install(), "APIService", "v1beta1.system.kdoctor.io").clone();
    assert_eq!(api["spec"]["service"], shipped["spec"]["service"]);
    // The serving certificate names the Service the APIService points at.
    use base64::Engine;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(serving["data"]["tls.crt"].as_str().expect("tls.crt"))
        .expect("base64");
    let text = String::from_utf8(pem).expect("PEM");
    assert!(text.starts_with("-----BEGIN CERTIFICATE-----"));
    // --dir keeps the CA: a second run re-issues the serving certificate under the same CA.
    let again = crate::support::kdoctor(&["certs", "-o", "json", "--dir", &dir_arg]);
    let again: serde_json::Value =
        serde_json::from_str(&crate::support::stdout(&again)).expect("JSON");
    let again_items = again["items"].as_array().expect("List").clone();
    assert_eq!(
        find(&again_items, "Secret", "kdoctor-ca")["data"],
        ca["data"]
    );
    assert_ne!(
        find(&again_items, "Secret", "kdoctor-controller-cert")["data"]["tls.key"],
        serving["data"]["tls.key"]
    );
}

#[test]
fn every_alert_uses_metrics_the_code_exports() {
    let rules = documents("manifests/monitoring/prometheusrule.yaml");
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["kind"], "PrometheusRule");
    let sources: String = ["reconciler/src", "agent/src", "apiserver/src"]
        .iter()
        .flat_map(|dir| {
            std::fs::read_dir(repo().join(dir))
                .expect("source dir")
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "rs"))
                .map(|p| std::fs::read_to_string(p).expect("source"))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut alerts = 0;
    for group in rules[0]["spec"]["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            alerts += 1;
            let expr = rule["expr"].as_str().expect("expr");
            let names: Vec<&str> = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("kdoctor_"))
                .collect();
            assert!(!names.is_empty(), "{expr}");
            for name in names {
                // Registered by name as a string literal in one of the crates.
                assert!(
                    sources.contains(&format!("\"{name}\"")),
                    "alert {} uses {name}, which no code registers",
                    rule["alert"]
                );
            }
            assert!(rule["annotations"]["runbook_url"].is_string());
        }
    }
    assert!(alerts >= 4);
}
