//! Watch: initial ADDED events, MODIFIED when a report is stored, resume by resourceVersion,
//! 410 for versions the store no longer has, Table events with columns once.

use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use futures::StreamExt;
use kdoctor_api::fixtures::net_reach_report;
use serde_json::Value;
use tower::ServiceExt;

use crate::support::{BASE, Server, TABLE, fill, server};

/// Opens a watch and returns a stream of its events.
async fn open(
    s: &Server,
    query: &str,
    accept: Option<&str>,
) -> futures::stream::BoxStream<'static, Value> {
    let mut request = Request::builder()
        .uri(format!("{BASE}?watch=true&{query}"))
        .header("authorization", "Bearer admin-token");
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let response = s
        .router
        .clone()
        .oneshot(request.body(Body::empty()).expect("request"))
        .await
        .expect("answered");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body().into_data_stream();
    let mut buffer = Vec::new();
    futures::stream::poll_fn(move |cx| {
        loop {
            if let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                return std::task::Poll::Ready(Some(
                    serde_json::from_slice::<Value>(&line).expect("a JSON line"),
                ));
            }
            match body.poll_next_unpin(cx) {
                std::task::Poll::Ready(Some(Ok(chunk))) => buffer.extend_from_slice(&chunk),
                std::task::Poll::Ready(_) => return std::task::Poll::Ready(None),
                std::task::Poll::Pending => return std::task::Poll::Pending,
            }
        }
    })
    .boxed()
}

async fn next(events: &mut futures::stream::BoxStream<'static, Value>) -> Value {
    tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("an event in time")
        .expect("stream open")
}

#[tokio::test]
async fn a_watch_from_now_lists_then_streams_changes() {
    let s = server("watch-now");
    let (_, new) = fill(&s.store);
    let mut events = open(&s, "", None).await;
    let mut added = Vec::new();
    for _ in 0..3 {
        let e = next(&mut events).await;
        assert_eq!(e["type"], "ADDED");
        added.push(
            e["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        );
    }
    added.sort();
    assert_eq!(
        added,
        ["netdns-dns", "netreach-task", "netreach-task.0d1ca000"]
    );
    s.store
        .put_report(new, &net_reach_report("node-c", 3, 2, 99))
        .expect("put");
    let e = next(&mut events).await;
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(e["object"]["metadata"]["name"], "netreach-task");
    assert_eq!(e["object"]["status"]["roundNumber"], 3);
}

#[tokio::test]
async fn a_watch_resumes_after_a_version_and_sees_deletions() {
    let s = server("watch-resume");
    let (old, new) = fill(&s.store);
    let rv = s.store.resource_version();
    s.store
        .put_report(new, &net_reach_report("node-c", 3, 2, 99))
        .expect("put");
    s.store.purge_task(old).expect("purged");
    let mut events = open(&s, &format!("resourceVersion={rv}"), None).await;
    // The changes since `rv`, in order: the new report, then the purge of the old incarnation.
    let first = next(&mut events).await;
    assert_eq!(
        (
            first["type"].as_str(),
            first["object"]["metadata"]["name"].as_str()
        ),
        (Some("MODIFIED"), Some("netreach-task"))
    );
    let second = next(&mut events).await;
    assert_eq!(
        (
            second["type"].as_str(),
            second["object"]["metadata"]["name"].as_str()
        ),
        (Some("DELETED"), Some("netreach-task.0d1ca000"))
    );
}

#[tokio::test]
async fn a_too_old_version_gets_one_410_error_event() {
    let dir = crate::support::scratch("watch-old");
    let store = std::sync::Arc::new(
        kdoctor_store::Store::open(kdoctor_store::StoreConfig {
            event_window: 2,
            ..kdoctor_store::StoreConfig::new(&dir)
        })
        .expect("opens"),
    );
    fill(&store);
    let s = server("watch-old-router");
    s.state.set_store(store);
    let mut events = open(&s, "resourceVersion=1", None).await;
    let e = next(&mut events).await;
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(e["object"]["reason"], "Expired");
    assert!(
        e["object"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("too old resource version: 1 ("))
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("closes")
            .is_none()
    );
}

#[tokio::test]
async fn table_watches_send_columns_once_and_honour_field_selectors() {
    let s = server("watch-table");
    let (_, new) = fill(&s.store);
    let mut events = open(
        &s,
        "fieldSelector=metadata.name%3Dnetreach-task",
        Some(TABLE),
    )
    .await;
    let first = next(&mut events).await;
    assert_eq!(first["object"]["kind"], "Table");
    assert!(first["object"]["columnDefinitions"].is_array());
    assert_eq!(first["object"]["rows"][0]["cells"][0], "netreach-task");
    s.store
        .put_report(new, &net_reach_report("node-c", 3, 2, 7))
        .expect("put");
    let second = next(&mut events).await;
    assert_eq!(second["type"], "MODIFIED");
    assert!(second["object"].get("columnDefinitions").is_none());
}

#[tokio::test]
async fn send_initial_events_ends_with_an_annotated_bookmark_and_timeouts_close() {
    let s = server("watch-initial");
    fill(&s.store);
    let mut events = open(&s, "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1", None).await;
    for _ in 0..3 {
        assert_eq!(next(&mut events).await["type"], "ADDED");
    }
    let bookmark = next(&mut events).await;
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(
        bookmark["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let closed = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("the watch ends");
    assert!(closed.is_none());
}

#[tokio::test]
async fn watches_are_never_compressed_so_events_are_not_held_back() {
    let s = server("watch-gzip");
    fill(&s.store);
    let request = Request::builder()
        .uri(format!("{BASE}?watch=true&timeoutSeconds=1"))
        .header("authorization", "Bearer admin-token")
        .header("accept-encoding", "gzip")
        .body(Body::empty())
        .expect("request");
    let response = s.router.clone().oneshot(request).await.expect("answered");
    assert!(
        response.headers().get("content-encoding").is_none(),
        "{:?}",
        response.headers()
    );
}

#[tokio::test]
async fn a_recreated_task_renames_the_old_incarnation_and_labels_drive_membership() {
    let s = server("watch-rename");
    fill(&s.store);
    // A watch of failing tasks only.
    let mut failing = open(&s, "labelSelector=kdoctor.io%2Flast-result%3Dfail", None).await;
    assert_eq!(
        next(&mut failing).await["object"]["metadata"]["name"],
        "netreach-task"
    );
    let mut all = open(&s, "", None).await;
    for _ in 0..3 {
        next(&mut all).await;
    }
    // The task is re-created: the current one moves to its tagged name, the new one takes the
    // plain name.
    let record = crate::support::record(
        kdoctor_api::task::TaskKind::NetReach,
        "task",
        "feed0000-0000-0000-0000-000000000000",
    );
    s.store.record_task(&record).expect("recreated");
    let mut seen = Vec::new();
    for _ in 0..3 {
        let e = next(&mut all).await;
        seen.push(format!(
            "{} {}",
            e["type"].as_str().unwrap_or(""),
            e["object"]["metadata"]["name"].as_str().unwrap_or("")
        ));
    }
    assert_eq!(
        seen,
        [
            "DELETED netreach-task",
            "ADDED netreach-task.c0ffee00",
            "ADDED netreach-task"
        ]
    );
    // For the "failing" watch: the failing object left the plain name and appeared tagged; the
    // newcomer has no result yet, so it does not match.
    let mut failing_seen = Vec::new();
    for _ in 0..2 {
        let e = next(&mut failing).await;
        failing_seen.push(format!(
            "{} {}",
            e["type"].as_str().unwrap_or(""),
            e["object"]["metadata"]["name"].as_str().unwrap_or("")
        ));
    }
    assert_eq!(
        failing_seen,
        ["DELETED netreach-task", "ADDED netreach-task.c0ffee00"]
    );
}

/// What client-go's metadata client (kube-controller-manager's garbage collector and quota
/// controller) sends on a watch.
const METADATA_WATCH: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

#[tokio::test]
async fn a_metadata_watch_is_sent_each_objects_metadata_and_never_a_report() {
    let s = server("watch-metadata");
    let (old, new) = fill(&s.store);
    let full: Vec<Value> = {
        let mut events = open(&s, "timeoutSeconds=1", None).await;
        let mut all = Vec::new();
        for _ in 0..3 {
            all.push(next(&mut events).await["object"].clone());
        }
        all
    };
    let mut events = open(
        &s,
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
        Some(METADATA_WATCH),
    )
    .await;
    for _ in 0..3 {
        let e = next(&mut events).await;
        assert_eq!(e["type"], "ADDED");
        let object = &e["object"];
        assert_eq!(object["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(object["kind"], "PartialObjectMetadata");
        assert_eq!(
            object.as_object().map(|o| o.len()),
            Some(3),
            "apiVersion, kind, metadata: {object}"
        );
        let name = &object["metadata"]["name"];
        let whole = full
            .iter()
            .find(|o| o["metadata"]["name"] == *name)
            .expect("the object in the full watch");
        assert_eq!(object["metadata"], whole["metadata"], "{name}");
    }
    let bookmark = next(&mut events).await;
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(bookmark["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(
        bookmark["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    // A change, then a deletion: metadata alone too.
    s.store
        .put_report(new, &net_reach_report("node-c", 3, 2, 99))
        .expect("put");
    let e = next(&mut events).await;
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(e["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(e["object"]["metadata"]["name"], "netreach-task");
    assert!(e["object"].get("report").is_none(), "{e}");
    s.store.purge_task(old).expect("purged");
    let e = next(&mut events).await;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(e["object"]["metadata"]["name"], "netreach-task.0d1ca000");
}
