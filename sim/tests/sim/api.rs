//! API semantics through kube-rs: CRUD, concurrency, patches, apply, status, watch, selectors,
//! finalizers, garbage collection, CRDs, discovery, namespaces.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use crate::support::{api_error, eventually, repo_root, start};

fn cm(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"}
    }))
    .expect("configmap")
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1", "ports": [{"containerPort": 80}]}]}
            }
        }
    }))
    .expect("deployment")
}

#[tokio::test]
async fn crud_conflicts_and_not_found_speak_like_the_real_server() {
    let (_sim, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = cms
        .create(&PostParams::default(), &cm("a", json!({"tier": "x"})))
        .await
        .expect("create");
    let rv1 = created.metadata.resource_version.clone().expect("rv");
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    let dup = cms
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .expect_err("duplicate");
    let dup = api_error(dup);
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(dup.message, "configmaps \"a\" already exists");

    let mut changed = created.clone();
    changed.data = Some([("k".to_string(), "w".to_string())].into());
    let updated = cms
        .replace("a", &PostParams::default(), &changed)
        .await
        .expect("replace");
    let rv2 = updated.metadata.resource_version.clone().expect("rv");
    assert!(rv2.parse::<u64>().expect("n") > rv1.parse::<u64>().expect("n"));
    let stale = api_error(
        cms.replace("a", &PostParams::default(), &changed)
            .await
            .expect_err("stale rv"),
    );
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        stale.message,
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );

    // Without a resourceVersion (absent or empty) an update is unconditional.
    for rv in [None, Some(String::new())] {
        changed.metadata.resource_version = rv;
        cms.replace("a", &PostParams::default(), &changed)
            .await
            .expect("unconditional update");
    }
    cms.create(&PostParams::default(), &cm("b", json!({"tier": "y"})))
        .await
        .expect("create b");
    let listed = cms
        .list(&ListParams::default().labels("tier in (y,z)"))
        .await
        .expect("list");
    let names: Vec<_> = listed
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(names, ["b"]);
    let by_field = cms
        .list(&ListParams::default().fields("metadata.name!=b"))
        .await
        .expect("list");
    assert!(
        by_field
            .items
            .iter()
            .all(|c| c.metadata.name.as_deref() != Some("b"))
    );
    let bad = api_error(
        cms.list(&ListParams::default().fields("spec.nope=1"))
            .await
            .expect_err("bad field"),
    );
    assert_eq!(bad.code, 400);
    assert_eq!(
        bad.message,
        "\"spec.nope\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );

    cms.delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    let gone = api_error(cms.get("a").await.expect_err("gone"));
    assert_eq!((gone.code, gone.reason.as_str()), (404, "NotFound"));
    assert_eq!(gone.message, "configmaps \"a\" not found");

    cms.create(&PostParams::default(), &cm("c", json!({})))
        .await
        .expect("create c");
    let page = cms
        .list(&ListParams::default().limit(1))
        .await
        .expect("page");
    assert_eq!(page.items.len(), 1);
    let token = page.metadata.continue_.clone().expect("continue token");
    let rest = cms
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .expect("next page");
    assert_ne!(page.items[0].metadata.name, rest.items[0].metadata.name);
}

#[tokio::test]
async fn patches_apply_and_status_subresource() {
    // No controllers: the test itself plays the Deployment controller's part on status.
    let sim = kube_sim::Sim::start(kube_sim::SimConfig {
        controllers: false,
        ..Default::default()
    })
    .await
    .expect("sim");
    let client = sim.client().await.expect("client");
    let deploys: Api<Deployment> = Api::namespaced(client, "default");
    deploys
        .create(&PostParams::default(), &deployment("d", 1))
        .await
        .expect("create");
    let merged = deploys
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("merge");
    assert_eq!(merged.spec.as_ref().and_then(|s| s.replicas), Some(2));
    assert_eq!(merged.metadata.generation, Some(2));
    let json_patched = deploys
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::<()>::Json(
                serde_json::from_value(
                    json!([{"op": "replace", "path": "/spec/replicas", "value": 3}]),
                )
                .expect("json patch"),
            ),
        )
        .await
        .expect("json patch");
    assert_eq!(json_patched.spec.as_ref().and_then(|s| s.replicas), Some(3));
    let strategic = deploys
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}})),
        )
        .await
        .expect("strategic");
    let containers = strategic
        .spec
        .expect("spec")
        .template
        .spec
        .expect("pod spec")
        .containers;
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0].image.as_deref(), Some("busybox:2"));
    assert_eq!(
        containers[0].ports.as_ref().map(Vec::len),
        Some(1),
        "merged by name, ports kept"
    );

    // Status is a subresource: the main resource ignores it, /status takes it, generation stays.
    let before = deploys.get("d").await.expect("get");
    let with_status = deploys
        .patch_status(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyReplicas": 3, "replicas": 3}})),
        )
        .await
        .expect("status");
    assert_eq!(
        with_status.status.as_ref().and_then(|s| s.ready_replicas),
        Some(3)
    );
    assert_eq!(with_status.metadata.generation, before.metadata.generation);
    let ignored = deploys
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyReplicas": 0}})),
        )
        .await
        .expect("main patch");
    assert_eq!(
        ignored.status.as_ref().and_then(|s| s.ready_replicas),
        Some(3)
    );

    // Server-side apply: conflicts between managers, force takes over, dropped fields go.
    let applied = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "ssa", "labels": {"owner": "a"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "ssa"}},
            "template": {"metadata": {"labels": {"app": "ssa"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}
        }
    });
    let created = deploys
        .patch(
            "ssa",
            &PatchParams::apply("kdoctor-controller"),
            &Patch::Apply(&applied),
        )
        .await
        .expect("apply creates");
    let managers: Vec<_> = created
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        managers,
        [("kdoctor-controller".to_string(), "Apply".to_string())]
    );
    let other = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ssa"}, "spec": {"replicas": 5}});
    let conflict = api_error(
        deploys
            .patch(
                "ssa",
                &PatchParams::apply("someone-else"),
                &Patch::Apply(&other),
            )
            .await
            .expect_err("conflict"),
    );
    assert_eq!(conflict.code, 409);
    assert_eq!(
        conflict.message,
        "Apply failed with 1 conflict: conflict with \"kdoctor-controller\": .spec.replicas"
    );
    let forced = deploys
        .patch(
            "ssa",
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(&other),
        )
        .await
        .expect("force");
    assert_eq!(forced.spec.as_ref().and_then(|s| s.replicas), Some(5));
    let mut fewer = applied.clone();
    fewer["metadata"]["labels"] = json!({});
    fewer["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("replicas");
    let reapplied = deploys
        .patch(
            "ssa",
            &PatchParams::apply("kdoctor-controller"),
            &Patch::Apply(&fewer),
        )
        .await
        .expect("reapply");
    assert_eq!(
        reapplied.metadata.labels.unwrap_or_default().get("owner"),
        None
    );
    assert_eq!(
        reapplied.spec.as_ref().and_then(|s| s.replicas),
        Some(5),
        "owned by someone-else now"
    );
}

#[tokio::test]
async fn watch_sends_bookmarks_and_expires_old_versions() {
    let sim = kube_sim::Sim::start(kube_sim::SimConfig {
        history: 20,
        bookmark_interval: std::time::Duration::from_millis(200),
        ..Default::default()
    })
    .await
    .expect("sim");
    let client = sim.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let list = cms.list(&ListParams::default()).await.expect("list");
    let rv = list.metadata.resource_version.expect("rv");
    let mut stream = cms
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .expect("watch")
        .boxed();
    cms.create(&PostParams::default(), &cm("w", json!({})))
        .await
        .expect("create");
    let mut saw_added = false;
    let mut saw_bookmark = false;
    while !(saw_added && saw_bookmark) {
        match stream.try_next().await.expect("event").expect("open") {
            WatchEvent::Added(c) => {
                assert_eq!(c.metadata.name.as_deref(), Some("w"));
                saw_added = true;
            }
            WatchEvent::Bookmark(b) => {
                assert!(!b.metadata.resource_version.is_empty());
                saw_bookmark = saw_added;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    for i in 0..30 {
        cms.create(&PostParams::default(), &cm(&format!("x{i}"), json!({})))
            .await
            .expect("create");
    }
    let mut old = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch")
        .boxed();
    match old.try_next().await.expect("event").expect("open") {
        WatchEvent::Error(e) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message
                    .starts_with(&format!("too old resource version: {rv} (")),
                "{}",
                e.message
            );
        }
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn kube_runtime_watcher_follows_changes() {
    let (_sim, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut events =
        kube::runtime::watcher(cms.clone(), kube::runtime::watcher::Config::default()).boxed();
    cms.create(&PostParams::default(), &cm("rt", json!({})))
        .await
        .expect("create");
    loop {
        let ev = tokio::time::timeout(std::time::Duration::from_secs(10), events.try_next())
            .await
            .expect("in time")
            .expect("watch ok")
            .expect("open");
        if let kube::runtime::watcher::Event::Apply(c) | kube::runtime::watcher::Event::InitApply(c) =
            ev
            && c.metadata.name.as_deref() == Some("rt")
        {
            break;
        }
    }
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let (_sim, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut c = cm("f", json!({}));
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &c)
        .await
        .expect("create");
    cms.delete("f", &DeleteParams::default())
        .await
        .expect("delete");
    let held = cms.get("f").await.expect("still there");
    assert!(held.metadata.deletion_timestamp.is_some());
    let refused = api_error(
        cms.patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold", "new"]}})),
        )
        .await
        .expect_err("no new finalizers"),
    );
    assert_eq!(refused.code, 403);
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("remove finalizer");
    assert_eq!(api_error(cms.get("f").await.expect_err("gone")).code, 404);
}

fn owned_cm(name: &str, owner: &ConfigMap, block: bool) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "name": owner.metadata.name, "uid": owner.metadata.uid,
            "blockOwnerDeletion": block
        }]}
    }))
    .expect("owned")
}

#[tokio::test]
async fn garbage_collection_background_foreground_orphan() {
    let (_sim, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let pp = PostParams::default();
    for (policy, dp) in [
        ("background", DeleteParams::background()),
        ("foreground", DeleteParams::foreground()),
        ("orphan", DeleteParams::orphan()),
    ] {
        let owner = cms
            .create(&pp, &cm(policy, json!({})))
            .await
            .expect("owner");
        cms.create(&pp, &owned_cm(&format!("{policy}-child"), &owner, true))
            .await
            .expect("child");
        cms.delete(policy, &dp).await.expect("delete owner");
        let child_name = format!("{policy}-child");
        let cms2 = cms.clone();
        eventually(5, || {
            let cms = cms2.clone();
            let child_name = child_name.clone();
            async move {
                let owner_gone = cms.get_opt(policy).await.expect("get").is_none();
                let child = cms.get_opt(&child_name).await.expect("get");
                match policy {
                    "orphan" => (owner_gone
                        && child.as_ref().is_some_and(|c| {
                            c.metadata
                                .owner_references
                                .as_ref()
                                .is_none_or(Vec::is_empty)
                        }))
                    .then_some(()),
                    _ => (owner_gone && child.is_none()).then_some(()),
                }
            }
        })
        .await;
    }
    // A dependent whose owner never existed is collected too.
    let ghost = cm("ghost", json!({}));
    let mut ghost_owner = ghost.clone();
    ghost_owner.metadata.uid = Some("00000000-0000-4000-8000-000000000000".into());
    cms.create(&pp, &owned_cm("orphaned-at-birth", &ghost_owner, false))
        .await
        .expect("create");
    eventually(5, || {
        let cms = cms.clone();
        async move {
            cms.get_opt("orphaned-at-birth")
                .await
                .expect("get")
                .is_none()
                .then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn crds_serve_new_kinds_with_schema_defaults() {
    let (_sim, client) = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let text =
        std::fs::read_to_string(repo_root().join("manifests/crds/kdoctor.io_netreaches.yaml"))
            .expect("crd file");
    let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("crd yaml");
    let created = crds
        .create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    let established = created
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established);

    let discovery = kube::Discovery::new(client.clone())
        .run_aggregated()
        .await
        .expect("discovery");
    let (ar, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("kdoctor.io", "v1beta1", "NetReach"))
        .expect("NetReach discovered");
    assert_eq!(ar.plural, "netreaches");
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);

    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let task: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kdoctor.io/v1beta1", "kind": "NetReach",
        "metadata": {"name": "t"},
        "spec": {"schedule": {"schedule": "0 1", "roundNumber": 1}, "unknownField": 1}
    }))
    .expect("task");
    let stored = api
        .create(&PostParams::default(), &task)
        .await
        .expect("create task");
    let spec = &stored.data["spec"];
    assert!(spec.get("unknownField").is_none(), "pruned: {spec}");
    assert!(
        spec.get("request").is_some()
            || spec.get("target").is_some()
            || spec["schedule"].as_object().is_some_and(|s| s.len() > 2),
        "schema defaults applied: {spec}"
    );
    crds.delete("netreaches.kdoctor.io", &DeleteParams::default())
        .await
        .expect("delete crd");
    assert!(
        api.list(&ListParams::default()).await.is_err(),
        "kind no longer served"
    );
}

#[tokio::test]
async fn aggregated_discovery_has_an_etag() {
    let (sim, client) = start().await;
    let accept =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let req = http::Request::get(format!("{}/apis", sim.url()))
        .header("accept", accept)
        .body(kube::client::Body::empty())
        .expect("request");
    let resp = client.send(req).await.expect("send");
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let etag = resp.headers()["etag"].to_str().expect("etag").to_string();
    let again = http::Request::get(format!("{}/apis", sim.url()))
        .header("accept", accept)
        .header("if-none-match", &etag)
        .body(kube::client::Body::empty())
        .expect("request");
    assert_eq!(client.send(again).await.expect("send").status(), 304);
    let version = client.apiserver_version().await.expect("version");
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "32")
    );
}

#[tokio::test]
async fn namespace_deletion_removes_its_content() {
    let (_sim, client) = start().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "tmp"}})).expect("ns"),
    )
    .await
    .expect("create ns");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "tmp");
    cms.create(&PostParams::default(), &cm("in-tmp", json!({})))
        .await
        .expect("cm");
    let protected = api_error(
        nss.delete("default", &DeleteParams::default())
            .await
            .expect_err("protected"),
    );
    assert_eq!(
        protected.message,
        "namespaces \"default\" is forbidden: this namespace may not be deleted"
    );
    nss.delete("tmp", &DeleteParams::default())
        .await
        .expect("delete ns");
    let refused = match cms
        .create(&PostParams::default(), &cm("late", json!({})))
        .await
    {
        Ok(_) => panic!("created in a terminating namespace"),
        Err(e) => api_error(e),
    };
    // Either still terminating (403) or already gone (404): never accepted.
    assert!(refused.code == 403 || refused.code == 404, "{refused:?}");
    eventually(5, || {
        let nss = nss.clone();
        async move {
            nss.get_opt("tmp")
                .await
                .expect("get")
                .is_none()
                .then_some(())
        }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client, "nope");
    let e = api_error(
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})).expect("pod"),
        )
        .await
        .expect_err("no namespace"),
    );
    assert_eq!(e.message, "namespaces \"nope\" not found");
}

#[tokio::test]
async fn controller_building_blocks_of_kube_runtime_work() {
    let (_sim, client) = start().await;
    // Events through kube-runtime's Recorder (events.k8s.io/v1) show up as core/v1 Events.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let target = cms
        .create(&PostParams::default(), &cm("evented", json!({})))
        .await
        .expect("cm");
    let recorder =
        kube::runtime::events::Recorder::new(client.clone(), "kdoctor-controller".into());
    let reference = kube::Resource::object_ref(&target, &());
    for _ in 0..2 {
        recorder
            .publish(
                &kube::runtime::events::Event {
                    type_: kube::runtime::events::EventType::Normal,
                    reason: "RoundStarted".into(),
                    note: Some("round 1".into()),
                    action: "Start".into(),
                    secondary: None,
                },
                &reference,
            )
            .await
            .expect("publish");
    }
    let core_events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let list = core_events
        .list(&ListParams::default().fields("involvedObject.name=evented"))
        .await
        .expect("events");
    assert_eq!(list.items.len(), 1, "the second publish patched the series");
    assert_eq!(list.items[0].reason.as_deref(), Some("RoundStarted"));
    assert_eq!(list.items[0].message.as_deref(), Some("round 1"));

    // Server-side apply of a custom resource's status, as the reconciler writes task status.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let text =
        std::fs::read_to_string(repo_root().join("manifests/crds/kdoctor.io_netreaches.yaml"))
            .expect("crd");
    crds.create(
        &PostParams::default(),
        &serde_yaml::from_str(&text).expect("yaml"),
    )
    .await
    .expect("crd");
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kdoctor.io", "v1beta1", "NetReach"),
        "netreaches",
    );
    let tasks: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let task: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kdoctor.io/v1beta1", "kind": "NetReach", "metadata": {"name": "t"},
        "spec": {"schedule": {"schedule": "0 1", "roundNumber": 1}}
    }))
    .expect("task");
    tasks
        .create(&PostParams::default(), &task)
        .await
        .expect("task");
    let status = json!({"apiVersion": "kdoctor.io/v1beta1", "kind": "NetReach", "metadata": {"name": "t"},
        "status": {"expectedRound": 1, "doneRound": 0, "finish": false}});
    let applied = tasks
        .patch_status(
            "t",
            &PatchParams::apply("kdoctor-controller").force(),
            &Patch::Apply(&status),
        )
        .await
        .expect("apply status");
    assert_eq!(applied.data["status"]["expectedRound"], json!(1));
    assert_eq!(
        applied.metadata.generation,
        Some(1),
        "status writes leave generation alone"
    );

    // kube-runtime's streaming lists (sendInitialEvents + the closing bookmark).
    let mut stream = kube::runtime::watcher(
        cms.clone(),
        kube::runtime::watcher::Config::default().streaming_lists(),
    )
    .boxed();
    let mut saw_init_done = false;
    while !saw_init_done {
        let ev = tokio::time::timeout(std::time::Duration::from_secs(10), stream.try_next())
            .await
            .expect("in time")
            .expect("ok")
            .expect("open");
        saw_init_done = matches!(ev, kube::runtime::watcher::Event::InitDone);
    }
}

#[tokio::test]
async fn watch_selectors_dry_run_scale_generate_name_and_deletecollection() {
    let sim = kube_sim::Sim::start(kube_sim::SimConfig {
        controllers: false,
        ..Default::default()
    })
    .await
    .expect("sim");
    let client = sim.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // A label-selected watch sees an object enter (ADDED) and leave (DELETED) the selection.
    let rv = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let mut stream = cms
        .watch(&WatchParams::default().labels("team=a").timeout(10), &rv)
        .await
        .expect("watch")
        .boxed();
    cms.create(&PostParams::default(), &cm("moving", json!({"team": "b"})))
        .await
        .expect("create");
    cms.patch(
        "moving",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .expect("join");
    cms.patch(
        "moving",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "c"}}})),
    )
    .await
    .expect("leave");
    let mut kinds = Vec::new();
    while kinds.len() < 2 {
        match stream.try_next().await.expect("event").expect("open") {
            WatchEvent::Added(_) => kinds.push("ADDED"),
            WatchEvent::Deleted(_) => kinds.push("DELETED"),
            WatchEvent::Modified(_) => kinds.push("MODIFIED"),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(kinds, ["ADDED", "DELETED"]);

    // dryRun validates and answers without storing.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let answered = cms
        .create(&dry, &cm("dry", json!({})))
        .await
        .expect("dry run");
    assert_eq!(answered.metadata.name.as_deref(), Some("dry"));
    assert!(cms.get_opt("dry").await.expect("get").is_none());

    // generateName.
    let mut generated = cm("", json!({"gen": "yes"}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let created = cms
        .create(&PostParams::default(), &generated)
        .await
        .expect("generateName");
    let name = created.metadata.name.expect("name");
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    // Scale subresource.
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deploys
        .create(&PostParams::default(), &deployment("s", 1))
        .await
        .expect("deploy");
    let scale = deploys.get_scale("s").await.expect("scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(1));
    deploys
        .patch_scale(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("patch scale");
    assert_eq!(
        deploys
            .get("s")
            .await
            .expect("get")
            .spec
            .and_then(|s| s.replicas),
        Some(4)
    );

    // deletecollection by label.
    for i in 0..3 {
        cms.create(
            &PostParams::default(),
            &cm(&format!("bulk-{i}"), json!({"bulk": "yes"})),
        )
        .await
        .expect("create");
    }
    cms.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("bulk=yes"),
    )
    .await
    .expect("deletecollection");
    let left = cms
        .list(&ListParams::default().labels("bulk=yes"))
        .await
        .expect("list");
    assert!(left.items.is_empty());
    assert!(
        cms.get_opt("moving").await.expect("get").is_some(),
        "others untouched"
    );
}

#[tokio::test]
async fn manifests_apply_from_the_library() {
    let (sim, client) = start().await;
    let crds = sim
        .apply_path(&repo_root().join("manifests/crds"))
        .expect("crds");
    assert_eq!(crds.len(), 3);
    let tasks = sim
        .apply_path(&repo_root().join("examples"))
        .expect("examples");
    assert_eq!(tasks.len(), 3);
    // Applying again changes nothing.
    let rv_before: Vec<_> = tasks
        .iter()
        .map(|t| t["metadata"]["resourceVersion"].clone())
        .collect();
    let again = sim
        .apply_path(&repo_root().join("examples"))
        .expect("again");
    let rv_after: Vec<_> = again
        .iter()
        .map(|t| t["metadata"]["resourceVersion"].clone())
        .collect();
    assert_eq!(rv_before, rv_after);
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kdoctor.io", "v1beta1", "NetDns"),
        "netdnses",
    );
    let dns: Api<DynamicObject> = Api::all_with(client, &ar);
    assert_eq!(
        dns.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        1
    );
    let err = sim
        .apply_yaml("apiVersion: example.com/v1\nkind: Nope\nmetadata: {name: x}\n")
        .expect_err("unknown kind");
    assert_eq!(err.code, 400);
}
