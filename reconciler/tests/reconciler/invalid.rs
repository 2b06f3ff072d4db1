//! Tasks that cannot run: every rule that needs the cluster or the configuration gives a
//! `Valid=False` condition naming the field, and a Warning Event; the task never runs.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kdoctor_api::task::{AppHttpHealthy, NetReach, TaskKind, TaskStatus};
use kdoctor_reconciler::task::TaskObject;
use kube::Api;
use kube::api::{ListParams, PostParams};

use crate::flow::{apply, net_reach};
use crate::support::{Cluster, ClusterConfig, NAMESPACE, eventually};

fn app(name: &str, target_extra: serde_json::Value) -> serde_json::Value {
    let mut target = serde_json::json!({"host": "https://127.0.0.1:9/", "method": "GET"});
    for (k, v) in target_extra.as_object().into_iter().flatten() {
        target[k] = v.clone();
    }
    serde_json::json!({
        "apiVersion": "kdoctor.io/v1beta1", "kind": "AppHttpHealthy",
        "metadata": {"name": name},
        "spec": {
            "target": target,
            "request": {"durationInSecond": 1, "qps": 2, "perRequestTimeoutInMS": 500},
            "schedule": {"schedule": "0 1", "roundTimeoutMinute": 1, "roundNumber": 1},
        }
    })
}

/// Waits for the `Valid=False` condition; returns its message and the status.
async fn invalid<K: TaskObject>(cluster: &Cluster, name: &str) -> (String, TaskStatus) {
    eventually(
        Duration::from_secs(20),
        "the Valid=False condition",
        || async {
            let status = cluster.task::<K>(name).await?.task_status()?.clone();
            let valid = status
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Valid")?;
            (valid.status == "False").then(|| (valid.message.clone(), status.clone()))
        },
    )
    .await
}

async fn warnings(cluster: &Cluster, name: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), "default");
    events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default()
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cluster_dependent_rule_gives_a_condition_and_an_event_and_the_task_never_runs() {
    let cluster = Cluster::start(ClusterConfig::default()).await;
    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some("odd-keys".into()),
                    ..ObjectMeta::default()
                },
                data: Some([("password".to_string(), ByteString(b"x".to_vec()))].into()),
                ..Secret::default()
            },
        )
        .await
        .expect("secret");

    let cases = [
        (
            "no-secret",
            app(
                "no-secret",
                serde_json::json!({"tlsSecretName": "absent", "tlsSecretNamespace": NAMESPACE}),
            ),
            "spec.target.tlsSecretName: Not found: \"absent\"",
        ),
        (
            "odd-secret",
            app(
                "odd-secret",
                serde_json::json!({"tlsSecretName": "odd-keys", "tlsSecretNamespace": NAMESPACE}),
            ),
            "only ca.crt, tls.crt and tls.key may be used",
        ),
        (
            "no-body",
            app(
                "no-body",
                serde_json::json!({"bodyConfigmapName": "absent", "bodyConfigmapNamespace": NAMESPACE}),
            ),
            "spec.target.bodyConfigmapName: Not found: \"absent\"",
        ),
        // Issue 20 H1: a task author cannot make kdoctor read another namespace's Secrets,
        // nor the install's CA.
        (
            "elsewhere",
            app(
                "elsewhere",
                serde_json::json!({"tlsSecretName": "bootstrap-signer", "tlsSecretNamespace": "kube-system"}),
            ),
            "spec.target.tlsSecretNamespace: Forbidden: kdoctor reads task inputs only from the namespaces its installer allows (kdoctor), not \"kube-system\"",
        ),
        (
            "the-ca",
            app(
                "the-ca",
                serde_json::json!({"tlsSecretName": "kdoctor-ca", "tlsSecretNamespace": NAMESPACE}),
            ),
            "Secret kdoctor/kdoctor-ca is the install's own and cannot be a task input",
        ),
    ];
    for (name, task, _) in &cases {
        apply::<AppHttpHealthy>(&cluster, name, task).await;
    }
    // Above conf.yml's netReachRequestMaxQPS (20), which only the controller knows.
    let fast = net_reach(
        "fast",
        serde_json::json!({"request": {"durationInSecond": 1, "qps": 25}}),
    );
    apply::<NetReach>(&cluster, "fast", &fast).await;

    for (name, _, wanted) in &cases {
        let (message, status) = invalid::<AppHttpHealthy>(&cluster, name).await;
        assert!(message.contains(wanted), "{name}: {message}");
        assert!(
            status.history.is_none(),
            "{name} must never run: {status:?}"
        );
        let events = eventually(Duration::from_secs(10), "the Warning Event", || async {
            let w = warnings(&cluster, name).await;
            (!w.is_empty()).then_some(w)
        })
        .await;
        assert!(
            events
                .iter()
                .any(|e| e.starts_with("InvalidTask: ") && e.contains(wanted)),
            "{events:?}"
        );
    }
    let (message, _) = invalid::<NetReach>(&cluster, "fast").await;
    assert!(
        message.contains("spec.request.qps: Invalid value: 25"),
        "{message}"
    );
    assert!(
        cluster.store.find(TaskKind::NetReach, "fast").is_empty(),
        "an invalid task is not recorded"
    );

    // The refusals came before any read (the controller may not read kube-system at all: a
    // read would have failed the reconcile, not given the condition), and agents were granted
    // nothing.
    assert!(!agent_may(&cluster, "secrets", "kdoctor-ca").await);

    // Creating the missing ConfigMap lets its task run.
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    maps.create(
        &PostParams::default(),
        &ConfigMap {
            metadata: ObjectMeta {
                name: Some("absent".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        },
    )
    .await
    .expect("configmap");
    eventually(
        Duration::from_secs(90),
        "the task to pass validation once its ConfigMap exists",
        || async {
            let status = cluster.task::<AppHttpHealthy>("no-body").await?.status?;
            let valid = status
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Valid")?;
            (valid.status == "True" && status.history.is_some()).then_some(())
        },
    )
    .await;
    // The agents may now read that ConfigMap, by name, and still nothing else.
    assert!(agent_may(&cluster, "configmaps", "absent").await);
    assert!(!agent_may(&cluster, "configmaps", "kdoctor").await);
    assert!(!agent_may(&cluster, "secrets", "kdoctor-ca").await);
}

/// Whether the agents' ServiceAccount may `get` `resource`/`name` in the install namespace, as
/// the real API server's authorizer answers.
async fn agent_may(cluster: &Cluster, resource: &str, name: &str) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let reviews: Api<SubjectAccessReview> = Api::all(cluster.client.clone());
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{NAMESPACE}:kdoctor-agent")),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{NAMESPACE}"),
            ]),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(NAMESPACE.into()),
                verb: Some("get".into()),
                resource: Some(resource.into()),
                name: Some(name.into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    reviews
        .create(&PostParams::default(), &review)
        .await
        .expect("review")
        .status
        .is_some_and(|s| s.allowed)
}
