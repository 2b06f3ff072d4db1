//! The manifests parse as the Kubernetes objects they claim to be, agree with the code's names,
//! and grant no wildcard permission.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde::Deserialize;

use crate::support::repo;

fn documents(path: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(repo().join(path)).expect("manifest exists");
    serde_yaml_ng::Deserializer::from_str(&text)
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

/// Issue 20: each rule of apiserver-rbac.yaml is checked against what the code does. The
/// server's own calls are TokenReviews and SubjectAccessReviews (exactly what
/// `system:auth-delegator` grants) and the watch of kube-system's authentication ConfigMap
/// (exactly the `extension-apiserver-authentication-reader` Role); the users' ClusterRoles
/// together grant the verbs the report resource serves, each to the role that matches it.
#[test]
fn the_apiserver_rbac_is_least_privilege() {
    use kdoctor_apiserver::auth::config as authn;
    let code = std::fs::read_to_string("apiserver/src/auth/kube_reviews.rs").expect("source");
    // The Kubernetes objects the server's code reads or creates, and nothing else.
    for used in ["TokenReview", "SubjectAccessReview", "ConfigMap"] {
        assert!(
            code.contains(&format!("Api<{used}>")),
            "the code no longer uses {used}"
        );
    }
    assert_eq!(
        (authn::NAMESPACE, authn::NAME),
        ("kube-system", "extension-apiserver-authentication")
    );
    let mut served: Vec<String> = Vec::new();
    let mut bindings = Vec::new();
    for doc in documents("manifests/apiserver-rbac.yaml") {
        match doc["kind"].as_str() {
            Some("ClusterRole") => {
                let role: ClusterRole = serde_json::from_value(doc).expect("a ClusterRole");
                let name = role.metadata.name.clone().unwrap_or_default();
                for rule in role.rules.unwrap_or_default() {
                    assert_eq!(
                        (rule.api_groups.clone(), rule.resources.clone()),
                        (
                            Some(vec![kdoctor_apiserver::GROUP.to_string()]),
                            Some(vec![kdoctor_apiserver::PLURAL.to_string()])
                        ),
                        "{name} grants something other than the reports"
                    );
                    let expected: &[&str] = match name.as_str() {
                        "kdoctor-report-reader" => &["get", "list", "watch"],
                        "kdoctor-report-editor" => &["delete"],
                        other => panic!("unexpected ClusterRole {other}"),
                    };
                    assert_eq!(rule.verbs, expected, "{name}");
                    served.extend(rule.verbs);
                }
            }
            Some("ClusterRoleBinding") => {
                let binding: ClusterRoleBinding =
                    serde_json::from_value(doc).expect("a ClusterRoleBinding");
                bindings.push(binding.role_ref.name.clone());
                assert_eq!(binding.role_ref.name, "system:auth-delegator");
            }
            Some("RoleBinding") => {
                let binding: RoleBinding = serde_json::from_value(doc).expect("a RoleBinding");
                bindings.push(binding.role_ref.name.clone());
                assert_eq!(
                    binding.metadata.namespace.as_deref(),
                    Some(authn::NAMESPACE)
                );
                assert_eq!(
                    binding.role_ref.name,
                    "extension-apiserver-authentication-reader"
                );
            }
            other => panic!("unexpected kind {other:?}"),
        }
    }
    bindings.sort();
    assert_eq!(
        bindings,
        [
            "extension-apiserver-authentication-reader",
            "system:auth-delegator"
        ]
    );
    served.sort();
    let mut verbs: Vec<String> = kdoctor_apiserver::discovery::VERBS
        .iter()
        .map(|v| v.to_string())
        .collect();
    verbs.sort();
    assert_eq!(
        served, verbs,
        "the users' roles grant exactly the verbs served"
    );
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
    use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
    use k8s_openapi::api::networking::v1::Ingress;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
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
            "StatefulSet" => typed::<StatefulSet>(o).metadata.namespace.is_some(),
            "PodDisruptionBudget" => typed::<PodDisruptionBudget>(o).metadata.namespace.is_some(),
            "Service" => typed::<Service>(o).metadata.namespace.is_some(),
            "Ingress" => typed::<Ingress>(o).metadata.namespace.is_some(),
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
    // Issue 20 H1: no Secret or ConfigMap is readable cluster-wide, agents get none by their
    // own roles (the controller grants them the named task inputs), and the only unnamed
    // Secret reads are the controller's in the task-input namespace.
    for o in &objects {
        let rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule> =
            serde_json::from_value(o["rules"].clone()).unwrap_or_default();
        for rule in &rules {
            let sensitive = rule
                .resources
                .iter()
                .flatten()
                .any(|r| r == "secrets" || r == "configmaps");
            if !sensitive {
                continue;
            }
            let name = o["metadata"]["name"].as_str().unwrap_or("");
            assert_ne!(
                o["kind"], "ClusterRole",
                "{name} grants {rule:?} cluster-wide"
            );
            assert_ne!(name, "kdoctor-agent", "agents' own Role grants {rule:?}");
            let named = rule.resource_names.as_ref().is_some_and(|n| !n.is_empty());
            let reads = rule.verbs.iter().any(|v| v != "create");
            assert!(
                !reads || named || name == "kdoctor-controller-task-inputs",
                "{name} reads every {:?}",
                rule.resources
            );
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

    // The report API's Service has no selector: the leading replica keeps its EndpointSlices,
    // under the names the controller's Role lets it write.
    let api = find(&objects, "Service", "kdoctor-controller");
    assert!(
        api["spec"].get("selector").is_none(),
        "Service kdoctor-controller has a selector: Kubernetes would keep its endpoints"
    );
    let slices: Vec<String> = ["ipv4", "ipv6"]
        .iter()
        .map(|f| kdoctor_reconciler::replica::endpoints::slice_name("kdoctor-controller", f))
        .collect();
    let role = find(&objects, "Role", "kdoctor-controller");
    let named = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| r["resources"][0] == "endpointslices" && r.get("resourceNames").is_some())
        .expect("a rule for the report API's EndpointSlices by name");
    let names: Vec<&str> = named["resourceNames"]
        .as_array()
        .expect("resourceNames")
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert_eq!(
        names, slices,
        "the Role names the slices the controller writes"
    );

    for (service, kind, workload, selects) in [
        (
            config.agent_service_ipv4_name.as_str(),
            "DaemonSet",
            config.agent_daemonset_name.as_str(),
            true,
        ),
        (
            "kdoctor-controller",
            "StatefulSet",
            "kdoctor-controller",
            false,
        ),
        (
            "kdoctor-controller-metrics",
            "StatefulSet",
            "kdoctor-controller",
            true,
        ),
    ] {
        let svc = find(&objects, "Service", service);
        let template = pod_of(&objects, kind, workload);
        let labels = template["metadata"]["labels"].as_object().expect("labels");
        if selects {
            for (k, v) in svc["spec"]["selector"].as_object().expect("selector") {
                assert_eq!(labels.get(k), Some(v), "Service {service} selects {k}={v}");
            }
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
            assert!(
                volume.get("persistentVolumeClaim").is_none(),
                "{workload}: a claim shared by replicas; each has its own (volumeClaimTemplates)"
            );
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
fn the_default_agent_binds_its_ports_as_carriers_do_without_root() {
    let objects = install();
    let pod = &pod_of(&objects, "DaemonSet", "kdoctor-agent")["spec"];
    let container = &pod["containers"][0];
    let ports: Vec<u16> = container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| p["containerPort"].as_u64().expect("containerPort") as u16)
        .collect();
    let host_network = pod["hostNetwork"].as_bool().unwrap_or(false);
    // The same rules as the carriers' pods (one place decides; see pod_security.rs).
    let (want_pod, want_container) =
        kdoctor_reconciler::pod_security::agent_security(host_network, &ports);
    assert_eq!(
        pod["securityContext"],
        serde_json::to_value(want_pod).expect("json"),
        "pod securityContext"
    );
    assert_eq!(
        container["securityContext"],
        serde_json::to_value(want_container).expect("json"),
        "container securityContext"
    );
    // The spool must be writable by the image's non-root user: kubelet makes hostPath
    // directories root-owned.
    let spool = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "reports")
        .expect("reports volume");
    assert!(spool.get("hostPath").is_none(), "{spool}");
}

#[test]
fn the_workloads_arguments_are_accepted_by_the_binary() {
    let objects = install();
    for (kind, name) in [
        ("DaemonSet", "kdoctor-agent"),
        ("StatefulSet", "kdoctor-controller"),
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

/// Every metric name the crates register, as the string literals they register them by.
struct Registered(String);

impl Registered {
    fn load() -> Self {
        fn rust_files(dir: &std::path::Path, out: &mut String) {
            for entry in std::fs::read_dir(dir).expect("source dir").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    rust_files(&path, out);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    out.push_str(&std::fs::read_to_string(&path).expect("source"));
                }
            }
        }
        let mut sources = String::new();
        for dir in ["reconciler/src", "agent/src", "apiserver/src", "store/src"] {
            rust_files(&repo().join(dir), &mut sources);
        }
        Registered(sources)
    }

    /// Whether `name` is registered: whole, or (the agent's registry prefixes its metrics)
    /// without `kdoctor_agent_`; histograms are queried through their series.
    fn has(&self, name: &str) -> bool {
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        self.0.contains(&format!("\"{base}\""))
            || base
                .strip_prefix("kdoctor_agent_")
                .is_some_and(|rest| self.0.contains(&format!("\"{rest}\"")))
    }
}

/// The words of a PromQL expression that name kdoctor's (or its API server's) metrics.
fn metric_names(expr: &str) -> Vec<&str> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("kdoctor_") || w.starts_with("apiserver_"))
        .collect()
}

#[test]
fn every_alert_uses_metrics_the_code_exports() {
    let rules = documents("manifests/monitoring/prometheusrule.yaml");
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["kind"], "PrometheusRule");
    let registered = Registered::load();
    let mut alerts = 0;
    for group in rules[0]["spec"]["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            alerts += 1;
            let expr = rule["expr"].as_str().expect("expr");
            let names = metric_names(expr);
            assert!(!names.is_empty(), "{expr}");
            for name in names {
                assert!(
                    registered.has(name),
                    "alert {} uses {name}, which no code registers",
                    rule["alert"]
                );
            }
            assert!(rule["annotations"]["runbook_url"].is_string());
        }
    }
    assert!(alerts >= 5);
}

/// The label names a PromQL expression groups by or matches on.
fn label_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (open, close) in [("by (", ')'), ("{", '}')] {
        for part in expr.split(open).skip(1) {
            let inside = part.split(close).next().unwrap_or_default();
            for item in inside.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        }
    }
    out
}

#[test]
fn the_dashboard_is_a_grafana_dashboard_on_metrics_and_labels_the_code_exports() {
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("charts/kdoctor/dashboards/kdoctor.json"))
            .expect("chart dashboard"),
    )
    .expect("chart dashboard JSON");
    for key in ["uid", "title"] {
        assert!(
            dashboard[key].as_str().is_some_and(|v| !v.is_empty()),
            "dashboard {key} missing"
        );
    }
    assert!(dashboard["schemaVersion"].is_u64(), "schemaVersion missing");
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list");
    let source = variables
        .iter()
        .find(|v| v["type"] == "datasource" && v["query"] == "prometheus")
        .expect("a Prometheus datasource variable");
    let source_uid = format!("${{{}}}", source["name"].as_str().expect("its name"));
    let task = variables
        .iter()
        .find(|v| v["name"] == "task" && v["type"] == "query")
        .expect("a task variable");
    assert_eq!(task["datasource"]["uid"], source_uid.as_str());

    let registered = Registered::load();
    // Labels Prometheus adds or histograms carry, not the code.
    let implicit = ["le", "job", "instance"];
    let check_expr = |what: &str, expr: &str| {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{what}: no kdoctor metric in {expr}");
        for name in names {
            assert!(
                registered.has(name),
                "{what} uses {name}, which no code registers"
            );
        }
        for label in label_names(expr) {
            assert!(
                implicit.contains(&label.as_str())
                    || registered.0.contains(&format!("\"{label}\"")),
                "{what} uses the label {label}, which no code sets"
            );
        }
    };
    check_expr(
        "the task variable",
        task["definition"].as_str().expect("its definition"),
    );

    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = std::collections::BTreeSet::new();
    // Grafana's grid is 24 columns wide; panels must not overlap.
    let mut cells = std::collections::BTreeSet::new();
    let (mut queries, mut per_task, mut zone_pairs) = (0, 0, 0);
    for panel in panels {
        let title = panel["title"].as_str().expect("panel title");
        assert!(
            ids.insert(panel["id"].as_u64().expect("panel id")),
            "{title}: id repeated"
        );
        let grid = &panel["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| {
            grid[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{title}: gridPos.{k} missing"))
        });
        assert!(w > 0 && h > 0 && x + w <= 24, "{title}: gridPos {grid}");
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(cells.insert((cx, cy)), "{title} overlaps another panel");
            }
        }
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], source_uid.as_str(), "{title}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no queries");
        for target in targets {
            let expr = target["expr"].as_str().expect("expr");
            assert!(
                target["refId"].is_string(),
                "{title}: a query without refId"
            );
            check_expr(title, expr);
            queries += 1;
            per_task += usize::from(expr.contains("\"$task\""));
            let zones = label_names(expr);
            zone_pairs += usize::from(
                zones.iter().any(|l| l == "source_zone")
                    && zones.iter().any(|l| l == "target_zone"),
            );
        }
    }
    assert!(queries >= 10, "{queries} queries");
    assert!(per_task >= 4, "{per_task} queries filter by $task");
    assert!(zone_pairs >= 2, "{zone_pairs} queries by zone pair");
}

/// `(kind, namespace, name)` of an object.
fn identity(o: &serde_json::Value) -> (String, String, String) {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    (
        text(&o["kind"]),
        text(&o["metadata"]["namespace"]),
        text(&o["metadata"]["name"]),
    )
}

/// Every manifest file `kubectl apply -k manifests/` must install: manifests/*.yaml and
/// manifests/crds/*.yaml (monitoring/ needs the prometheus-operator CRDs and stays out).
fn manifest_files() -> Vec<String> {
    let mut files = Vec::new();
    for dir in ["manifests", "manifests/crds"] {
        for entry in std::fs::read_dir(repo().join(dir)).expect("manifests/") {
            let name = entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .to_string();
            if name.ends_with(".yaml") && name != "kustomization.yaml" {
                files.push(format!("{dir}/{name}"));
            }
        }
    }
    files.sort();
    files
}

/// A copy with every number as a float (1 and 1.0 alike).
fn numbers_by_value(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Number(n) => serde_json::json!(n.as_f64().expect("a finite number")),
        Value::Array(items) => Value::Array(items.iter().map(numbers_by_value).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), numbers_by_value(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[test]
fn the_manifests_dashboard_is_the_charts() {
    let docs = documents("manifests/monitoring/grafana-dashboard.yaml");
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0]["kind"], "ConfigMap");
    assert_eq!(docs[0]["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: serde_json::Value = serde_json::from_str(
        docs[0]["data"]["kdoctor.json"]
            .as_str()
            .expect("kdoctor.json"),
    )
    .expect("dashboard JSON");
    let chart: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("charts/kdoctor/dashboards/kdoctor.json"))
            .expect("chart dashboard"),
    )
    .expect("chart dashboard JSON");
    assert_eq!(
        shipped, chart,
        "manifests/monitoring and the chart ship different dashboards"
    );
    let titles: Vec<&str> = chart["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter_map(|p| p["title"].as_str())
        .collect();
    for view in ["Per task", "Zone pairs"] {
        assert!(
            titles.iter().any(|t| t.starts_with(view)),
            "no {view} row: {titles:?}"
        );
    }
}

#[test]
fn kubectl_kustomize_renders_exactly_the_objects_of_the_manifest_files() {
    let kustomization = &documents("manifests/kustomization.yaml")[0];
    let mut listed: Vec<String> = kustomization["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| format!("manifests/{}", r.as_str().expect("a path")))
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        manifest_files(),
        "manifests/kustomization.yaml must list every manifest file"
    );

    let out = std::process::Command::new(crate::support::kubectl_bin())
        .args(["kustomize", "manifests/"])
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("kubectl cannot run ({e})"));
    assert!(
        out.status.success(),
        "kubectl kustomize manifests/: {}",
        crate::support::stderr(&out)
    );
    let rendered: Vec<serde_json::Value> =
        serde_yaml_ng::Deserializer::from_str(&crate::support::stdout(&out))
            .map(|d| serde_json::Value::deserialize(d).expect("YAML"))
            .filter(|v| !v.is_null())
            .collect();
    let expected: Vec<serde_json::Value> =
        manifest_files().iter().flat_map(|f| documents(f)).collect();
    let ids = |objects: &[serde_json::Value]| {
        let mut ids: Vec<_> = objects.iter().map(identity).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&rendered), ids(&expected), "kinds and names");
    // Kustomize passes every object through unchanged (no prefix, labels or namespace); it
    // only writes the CRDs' `minimum: 1.0` as `1`, so numbers compare by value.
    for object in &expected {
        let same = rendered
            .iter()
            .find(|r| identity(r) == identity(object))
            .expect("rendered");
        assert_eq!(
            numbers_by_value(same),
            numbers_by_value(object),
            "{:?} changed by kustomize",
            identity(object)
        );
    }
    assert!(expected.len() >= 23, "{} objects", expected.len());
}

#[test]
fn the_chart_ships_the_manifests_crds_byte_for_byte() {
    let names = |dir: &str| {
        let mut names: Vec<String> = std::fs::read_dir(repo().join(dir))
            .expect("CRD dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names("charts/kdoctor/crds"),
        names("manifests/crds"),
        "cp manifests/crds/*.yaml charts/kdoctor/crds/"
    );
    for name in names("manifests/crds") {
        let read = |dir: &str| std::fs::read(repo().join(dir).join(&name)).expect("CRD");
        assert!(
            read("charts/kdoctor/crds") == read("manifests/crds"),
            "charts/kdoctor/crds/{name} differs from manifests/crds/{name}: cp manifests/crds/*.yaml charts/kdoctor/crds/"
        );
    }
}

/// The manifests run the image as hack/image/kdoctor.json describes it (tests/cli/image.rs holds
/// the Dockerfile and hack/image/build.sh to that description): args only, its tag, its user.
#[test]
fn the_manifests_run_the_image_as_described() {
    let spec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("hack/image/kdoctor.json"))
            .expect("image description"),
    )
    .expect("JSON");
    assert_eq!(spec["entrypoint"], serde_json::json!(["/usr/bin/kdoctor"]));
    let uid: i64 = spec["user"]
        .as_str()
        .and_then(|u| u.split(':').next())
        .and_then(|u| u.parse().ok())
        .expect("numeric user");
    assert_eq!(uid, 65532, "non-root");
    let tag = format!(
        "{}:{}",
        spec["name"].as_str().expect("name"),
        env!("CARGO_PKG_VERSION")
    );

    let objects = install();
    for (kind, name, subcommand) in [
        ("DaemonSet", "kdoctor-agent", "agent"),
        ("StatefulSet", "kdoctor-controller", "controller"),
    ] {
        let pod = &pod_of(&objects, kind, name)["spec"];
        let container = &pod["containers"][0];
        assert!(
            container.get("command").is_none(),
            "{name}: the image's ENTRYPOINT is the binary; manifests give args only"
        );
        assert_eq!(container["args"][0], subcommand, "{name}");
        assert_eq!(container["image"], tag.as_str(), "{name}");
        // The pod runs as the image's user, or explicitly as the same one.
        let run_as = pod["securityContext"]["runAsUser"].as_i64();
        assert!(
            run_as.is_none() || run_as == Some(uid),
            "{name} runs as {run_as:?}, the image as {uid}"
        );
    }
    // Per-task carriers run the controller's own image.
    let controller =
        &pod_of(&objects, "StatefulSet", "kdoctor-controller")["spec"]["containers"][0];
    let agent_image = controller["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "ENV_AGENT_IMAGE")
        .expect("ENV_AGENT_IMAGE");
    assert_eq!(agent_image["value"], controller["image"]);
}

/// Issues 18 and 31: the controller keeps the APIService Available and its store writable
/// through the loss of a pod — three replicas under Raft, each with a store of its own, a
/// majority kept through voluntary disruptions, spread over nodes, each told its pod IP and UID
/// (where and who it is to the others) and serving the replication port.
#[test]
fn the_controller_runs_three_replicas_each_on_its_own_store_and_keeps_a_majority() {
    let objects = install();
    let set = find(&objects, "StatefulSet", "kdoctor-controller");
    assert_eq!(set["spec"]["replicas"], 3);
    // Started together: a cluster forms only once every replica answers.
    assert_eq!(set["spec"]["podManagementPolicy"], "Parallel");
    let claims = set["spec"]["volumeClaimTemplates"]
        .as_array()
        .expect("volumeClaimTemplates");
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0]["metadata"]["name"], "reports");
    let pod = &pod_of(&objects, "StatefulSet", "kdoctor-controller")["spec"];
    let container = &pod["containers"][0];
    let mounts = container["volumeMounts"].as_array().expect("mounts");
    assert!(
        mounts
            .iter()
            .any(|m| m["name"] == "reports" && m["mountPath"] == "/report"),
        "{mounts:?}"
    );
    let env = container["env"].as_array().expect("env");
    let pod_ip = env
        .iter()
        .find(|e| e["name"] == "ENV_POD_IP")
        .expect("ENV_POD_IP");
    assert_eq!(pod_ip["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
    // With the pod's name, its UID names the replica's node when its volume is first used.
    let pod_uid = env
        .iter()
        .find(|e| e["name"] == "ENV_POD_UID")
        .expect("ENV_POD_UID");
    assert_eq!(
        pod_uid["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.uid"
    );
    let ports = container["ports"].as_array().expect("ports");
    assert!(
        ports
            .iter()
            .any(|p| p["name"] == "replication" && p["containerPort"] == 5722),
        "{ports:?}"
    );
    let spread =
        &pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(
        spread[0]["podAffinityTerm"]["topologyKey"],
        "kubernetes.io/hostname"
    );
    // A drain or upgrade never takes the majority that writes and reads need.
    let budget = find(&objects, "PodDisruptionBudget", "kdoctor-controller");
    assert_eq!(budget["spec"]["minAvailable"], 2);
    assert!(budget["spec"].get("maxUnavailable").is_none());
    let labels = &pod_of(&objects, "StatefulSet", "kdoctor-controller")["metadata"]["labels"];
    for (k, v) in budget["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("selector")
    {
        assert_eq!(&labels[k], v, "the budget selects the controller's pods");
    }
}
