//! kube-rs against the server over TLS: a paged list of DynamicObjects, a watch from a version
//! the store no longer has (410 Expired, which kube-rs's watcher relists on), and the watcher.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kdoctor_api::fixtures::net_reach_report;
use kdoctor_apiserver::server::{ServerOptions, start};
use kdoctor_store::{Store, StoreConfig};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;

use crate::support::{fill, scratch};

async fn client(
    test: &str,
    window: usize,
) -> (
    kube::Client,
    Arc<Store>,
    kdoctor_apiserver::server::RunningServer,
) {
    let dir = scratch(test);
    let store = Arc::new(
        Store::open(StoreConfig {
            event_window: window,
            ..StoreConfig::new(dir.join("store"))
        })
        .expect("store"),
    );
    fill(&store);
    let options = ServerOptions {
        store: Some(store.clone()),
        ..ServerOptions::standalone(dir.join("server"), "127.0.0.1:0".parse().expect("addr"))
    };
    let server = start(options).await.expect("starts");
    let kubeconfig =
        Kubeconfig::from_yaml(&server.kubeconfig().expect("kubeconfig")).expect("parses");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config");
    (
        kube::Client::try_from(config).expect("client"),
        store,
        server,
    )
}

fn api(client: kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("system.kdoctor.io", "v1beta1", "KdoctorReport"),
        "kdoctorreports",
    );
    Api::all_with(client, &resource)
}

#[tokio::test]
async fn kube_rs_pages_through_a_list() {
    let (client, _store, _server) = client("kube-list", 100).await;
    let api = api(client);
    let mut names = Vec::new();
    let mut params = ListParams::default().limit(1);
    loop {
        let page = api.list(&params).await.expect("page");
        names.extend(page.items.iter().filter_map(|o| o.metadata.name.clone()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(
        names,
        ["netdns-dns", "netreach-task", "netreach-task.0d1ca000"]
    );
    let one = api.get("netreach-task.round-2").await.expect("get");
    assert_eq!(one.data["status"]["roundNumber"], 2);
}

#[tokio::test]
async fn an_expired_version_is_a_410_error_event_for_kube_rs() {
    let (client, _store, _server) = client("kube-410", 2).await;
    let api = api(client);
    let mut stream = api
        .watch(&WatchParams::default(), "1")
        .await
        .expect("watch opens")
        .boxed();
    let event = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .expect("in time")
        .expect("ok");
    match event {
        Some(WatchEvent::Error(e)) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
        }
        other => panic!("expected a 410 error event, got {other:?}"),
    }
}

#[tokio::test]
async fn the_kube_rs_watcher_lists_then_follows_changes() {
    let (client, store, _server) = client("kube-watcher", 100).await;
    let api = api(client);
    let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
    let mut initial = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), events.try_next())
            .await
            .expect("in time")
            .expect("ok")
        {
            Some(watcher::Event::Init) => {}
            Some(watcher::Event::InitApply(o)) => initial.push(o.metadata.name.unwrap_or_default()),
            Some(watcher::Event::InitDone) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    initial.sort();
    assert_eq!(
        initial,
        ["netdns-dns", "netreach-task", "netreach-task.0d1ca000"]
    );
    let id = store.find(kdoctor_api::task::TaskKind::Netdns, "dns")[0].id;
    let s = store.clone();
    tokio::task::spawn_blocking(move || {
        s.put_report(id, &net_reach_report("node-x", 1, 1, 1))
            .expect("put")
    })
    .await
    .expect("stored");
    match tokio::time::timeout(Duration::from_secs(10), events.try_next())
        .await
        .expect("in time")
        .expect("ok")
    {
        Some(watcher::Event::Apply(o)) => {
            assert_eq!(o.metadata.name.as_deref(), Some("netdns-dns"));
            assert_eq!(o.data["status"]["roundNumber"], 1);
        }
        other => panic!("expected an update, got {other:?}"),
    }
}
