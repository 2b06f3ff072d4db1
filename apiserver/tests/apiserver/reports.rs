//! get, list, Table, selectors, paging and delete of KdoctorReports.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::{BASE, TABLE, fill, get, get_gzip, metric, send, server};

#[tokio::test]
async fn list_has_one_object_per_incarnation_with_kind_labels_and_reports() {
    let s = server("rep-list");
    fill(&s.store);
    let list = get(&s.router, BASE).await.json();
    assert_eq!(
        (list["kind"].as_str(), list["apiVersion"].as_str()),
        (Some("KdoctorReportList"), Some("system.kdoctor.io/v1beta1"))
    );
    let names: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap_or(""))
        .collect();
    // The newest incarnation has upstream's name; the old one is reachable by its UID tag.
    assert_eq!(
        names,
        ["netdns-dns", "netreach-task", "netreach-task.0d1ca000"]
    );
    let task = &list["items"][1];
    assert_eq!(
        task["metadata"]["labels"]["kdoctor.io/task-kind"],
        "NetReach"
    );
    assert_eq!(task["metadata"]["labels"]["kdoctor.io/task-name"], "task");
    assert_eq!(task["metadata"]["labels"]["kdoctor.io/last-result"], "fail");
    assert_eq!(task["metadata"]["annotations"]["kdoctor.io/rounds"], "1,2");
    assert_eq!(task["task"]["kind"], "NetReach");
    assert_eq!(task["task"]["spec"]["netReach"]["request"]["qps"], 10);
    assert_eq!(task["status"]["roundNumber"], 2);
    assert_eq!(task["status"]["totalRoundNumber"], 3);
    assert_eq!(task["status"]["roundFinishedNumber"], 2);
    assert_eq!(task["status"]["status"], "NotFinished");
    let reports = task["report"]["latestRoundReport"]
        .as_array()
        .expect("reports");
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0]["nodeName"], "node-a");
    assert_eq!(reports[0]["roundNumber"], 2);
    assert_eq!(
        reports[0]["taskNetReach"]["roundTaskDetail"]
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    let old = &list["items"][2];
    assert_eq!(old["status"]["taskState"], "Deleted");
    assert!(old["metadata"]["annotations"]["kdoctor.io/task-deleted"].is_string());
    assert_eq!(list["items"][0]["report"], json!({}));
    assert!(
        list["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|v| v.parse::<u64>().is_ok())
    );
}

#[tokio::test]
async fn every_round_and_incarnation_is_reachable_by_name() {
    let s = server("rep-get");
    fill(&s.store);
    let latest = get(&s.router, &format!("{BASE}/netreach-task"))
        .await
        .json();
    assert_eq!(latest["metadata"]["name"], "netreach-task");
    assert_eq!(latest["status"]["roundNumber"], 2);
    let round1 = get(&s.router, &format!("{BASE}/netreach-task.round-1"))
        .await
        .json();
    assert_eq!(round1["metadata"]["name"], "netreach-task.round-1");
    assert_eq!(round1["status"]["roundNumber"], 1);
    assert_eq!(round1["report"]["latestRoundReport"][0]["roundNumber"], 1);
    let old = get(&s.router, &format!("{BASE}/netreach-task.0d1ca000"))
        .await
        .json();
    assert_eq!(old["report"]["latestRoundReport"][0]["roundNumber"], 1);
    assert_eq!(
        old["metadata"]["uid"],
        "0ld1ncar-0000-0000-0000-000000000001"
    );
    let old_round = get(&s.router, &format!("{BASE}/netreach-task.0d1ca000.round-1")).await;
    assert_eq!(old_round.status, StatusCode::OK);
    // The newest incarnation also answers under its own tag.
    assert_eq!(
        get(&s.router, &format!("{BASE}/netreach-task.c0ffee00"))
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn repeated_gets_are_answered_from_the_cache_until_the_task_changes() {
    let s = server("rep-cache");
    let (_, new) = fill(&s.store);
    let uri = format!("{BASE}/netreach-task");
    let hits = || {
        s.state
            .metrics
            .registry
            .gather()
            .iter()
            .filter(|f| f.name() == "kdoctor_apiserver_object_cache_lookups_total")
            .flat_map(|f| f.get_metric().iter())
            .filter(|m| m.get_label().iter().any(|l| l.value() == "hit"))
            .map(|m| m.get_counter().get_value() as u64)
            .sum::<u64>()
    };
    let first = get(&s.router, &uri).await;
    let second = get(&s.router, &uri).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, second.body, "a hit serves the same bytes");
    assert_eq!(hits(), 1);
    // A new round changes the task's version: the next GET shows it, not the cached bytes.
    s.store
        .put_report(
            new,
            &kdoctor_api::fixtures::net_reach_report("node-a", 3, 3, 30),
        )
        .expect("put");
    let third = get(&s.router, &uri).await.json();
    assert_eq!(third["status"]["roundNumber"], 3);
    assert_eq!(hits(), 1);
    // So does a round purged by retention.
    s.store.purge_round(new, 1).expect("purge");
    let fourth = get(&s.router, &uri).await.json();
    assert_eq!(
        fourth["status"]["retainedRounds"],
        serde_json::json!([2, 3])
    );
    // Each name of an object is its own entry: a round's name shows its own metadata.
    let round = get(&s.router, &format!("{BASE}/netreach-task.round-2"))
        .await
        .json();
    assert_eq!(round["metadata"]["name"], "netreach-task.round-2");
    assert_eq!(hits(), 1);
}

#[tokio::test]
async fn gzip_clients_get_the_cached_object_compressed_once_and_never_twice() {
    let s = server("rep-cache-gzip");
    fill(&s.store);
    let uri = format!("{BASE}/netreach-task");
    let plain = get(&s.router, &uri).await;
    // The first gzip request compresses the cached identity bytes, the later ones are served
    // from the gzip variant: each decodes (once: never compressed twice) to the plain body.
    assert_eq!(get_gzip(&s.router, &uri).await, plain.body);
    assert_eq!(get_gzip(&s.router, &uri).await, plain.body);
    assert_eq!(get_gzip(&s.router, &uri).await, plain.body);
    // Three gzip GETs of one version: each a cache hit, one compression.
    assert_eq!(metric(&s.router, HITS).await, "3");
    assert_eq!(metric(&s.router, ENCODINGS).await, "1");
}

const HITS: &str = "kdoctor_apiserver_object_cache_lookups_total{result=\"hit\"}";
const ENCODINGS: &str = "kdoctor_apiserver_object_cache_gzip_encodings_total";

#[tokio::test]
async fn a_missing_name_is_the_not_found_status_kubectl_prints() {
    let s = server("rep-404");
    fill(&s.store);
    for name in [
        "netreach-nope",
        "netreach-task.round-9",
        "pod-task",
        "netreach-task.deadbeef",
    ] {
        let reply = get(&s.router, &format!("{BASE}/{name}")).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{name}");
        let status = reply.json();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(
            status["message"],
            format!("kdoctorreports.system.kdoctor.io \"{name}\" not found")
        );
        assert_eq!(status["details"]["name"], name);
        assert_eq!(status["details"]["kind"], "kdoctorreports");
        assert_eq!(status["code"], 404);
    }
}

#[tokio::test]
async fn tables_have_stable_columns_and_server_rendered_cells() {
    let s = server("rep-table");
    fill(&s.store);
    let list = send(
        &s.router,
        Method::GET,
        &format!("{BASE}?limit=500"),
        Some("admin-token"),
        Some(TABLE),
    )
    .await
    .json();
    assert_eq!(list["kind"], "Table");
    let columns: Vec<&str> = list["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        columns[..9],
        [
            "Name",
            "Kind",
            "Task",
            "Rounds",
            "Status",
            "Last Result",
            "Nodes",
            "Task CR",
            "Age"
        ]
    );
    let row = &list["rows"][1];
    assert_eq!(row["cells"][0], "netreach-task");
    assert_eq!(row["cells"][3], "2/3");
    assert_eq!(row["cells"][5], "fail");
    assert_eq!(row["cells"][6], "1/1/1");
    assert_eq!(row["cells"][7], "Present");
    assert_eq!(row["cells"][8], "5m");
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(list["rows"][2]["cells"][7], "Deleted");
    // A single GET gives the same columns.
    let one = send(
        &s.router,
        Method::GET,
        &format!("{BASE}/netreach-task"),
        Some("admin-token"),
        Some(TABLE),
    )
    .await
    .json();
    assert_eq!(one["columnDefinitions"], list["columnDefinitions"]);
    assert_eq!(one["rows"].as_array().map(Vec::len), Some(1));
    let bare = send(
        &s.router,
        Method::GET,
        &format!("{BASE}?includeObject=None"),
        Some("admin-token"),
        Some(TABLE),
    )
    .await
    .json();
    assert!(bare["rows"][0].get("object").is_none());
    let bad = send(
        &s.router,
        Method::GET,
        &format!("{BASE}?includeObject=All"),
        Some("admin-token"),
        Some(TABLE),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn label_and_field_selectors_filter_and_bad_ones_are_400() {
    let s = server("rep-select");
    fill(&s.store);
    let names = |v: serde_json::Value| -> Vec<String> {
        v["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let failing = get(
        &s.router,
        &format!("{BASE}?labelSelector=kdoctor.io%2Flast-result%3Dfail"),
    )
    .await
    .json();
    assert_eq!(names(failing), ["netreach-task"]);
    let kinds = get(
        &s.router,
        &format!("{BASE}?labelSelector=kdoctor.io/task-kind%20in%20(Netdns),kdoctor.io/task-name"),
    )
    .await
    .json();
    assert_eq!(names(kinds), ["netdns-dns"]);
    let by_name = get(
        &s.router,
        &format!("{BASE}?fieldSelector=metadata.name%3Dnetreach-task"),
    )
    .await
    .json();
    assert_eq!(names(by_name), ["netreach-task"]);
    let not_name = get(
        &s.router,
        &format!("{BASE}?fieldSelector=metadata.name!%3Dnetreach-task"),
    )
    .await
    .json();
    assert_eq!(names(not_name).len(), 2);
    let bad = get(&s.router, &format!("{BASE}?labelSelector=a%3D%3D%3Db")).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let field = get(&s.router, &format!("{BASE}?fieldSelector=spec.x%3D1")).await;
    assert_eq!(field.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        field.json()["message"],
        "\"spec.x\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );
}

#[tokio::test]
async fn limit_and_continue_page_through_every_object() {
    let s = server("rep-page");
    fill(&s.store);
    let first = get(&s.router, &format!("{BASE}?limit=2")).await.json();
    assert_eq!(first["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(first["metadata"]["remainingItemCount"], 1);
    let token = first["metadata"]["continue"].as_str().expect("continue");
    let second = get(&s.router, &format!("{BASE}?limit=2&continue={token}"))
        .await
        .json();
    assert_eq!(second["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        second["items"][0]["metadata"]["name"],
        "netreach-task.0d1ca000"
    );
    assert!(second["metadata"].get("continue").is_none());
    let bad = get(&s.router, &format!("{BASE}?limit=2&continue=garbage")).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn delete_purges_a_round_or_a_whole_incarnation() {
    let s = server("rep-delete");
    let (old, new) = fill(&s.store);
    let reply = send(
        &s.router,
        Method::DELETE,
        &format!("{BASE}/netreach-task.round-1"),
        Some("admin-token"),
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert!(s.store.round(new, 1).expect("read").is_none());
    assert!(s.store.round(new, 2).expect("read").is_some());
    let reply = send(
        &s.router,
        Method::DELETE,
        &format!("{BASE}/netreach-task.0d1ca000"),
        Some("admin-token"),
        None,
    )
    .await;
    assert_eq!(reply.json()["metadata"]["name"], "netreach-task.0d1ca000");
    assert!(s.store.task(old).is_none());
    assert_eq!(
        get(&s.router, &format!("{BASE}/netreach-task.0d1ca000"))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn unsupported_verbs_are_405_with_the_kubectl_message() {
    let s = server("rep-405");
    let reply = send(&s.router, Method::POST, BASE, Some("admin-token"), None).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(
        reply.json()["message"],
        "create is not supported on resources of kind \"kdoctorreports.system.kdoctor.io\""
    );
}

/// A server whose store holds task `netreach-big` with one round of 9,000 probe entries: over
/// the object cache's largest object as JSON.
fn server_with_big_report(test: &str) -> crate::support::Server {
    let s = server(test);
    let (id, _) = s
        .store
        .record_task(&crate::support::record(
            kdoctor_api::task::TaskKind::NetReach,
            "big",
            "b1b1b1b1-0000-0000-0000-000000000000",
        ))
        .expect("task");
    s.store
        .put_report(
            id,
            &kdoctor_api::fixtures::net_reach_report("node-a", 1, 9000, 1),
        )
        .expect("put");
    s
}

#[tokio::test]
async fn large_reports_stream_and_gzip_when_asked() {
    let s = server_with_big_report("rep-large");
    // Over the cache's largest object: streamed from the store as it is written, in many
    // frames and without a Content-Length, never held whole.
    let (count, length) = frames(&s.router, &format!("{BASE}/netreach-big"), false).await;
    assert!(count > 10, "{count} frames");
    assert_eq!(length, None);
    // gzip-encoded as it streams (the encoder's output is far smaller than the JSON, so it may
    // arrive in one frame): never a body of known length, built whole first.
    let (_, length) = frames(&s.router, &format!("{BASE}/netreach-big"), true).await;
    assert_eq!(length, None);
    let reply = get(&s.router, &format!("{BASE}/netreach-big")).await;
    assert!(reply.body.len() > 4 * 1024 * 1024, "{}", reply.body.len());
    assert_eq!(
        reply.json()["report"]["latestRoundReport"][0]["taskNetReach"]["roundTaskDetail"]
            .as_array()
            .map(Vec::len),
        Some(9000)
    );
    let decoded = get_gzip(&s.router, &format!("{BASE}/netreach-big")).await;
    assert_eq!(decoded, reply.body);
}

#[tokio::test]
async fn a_report_too_large_to_keep_as_json_is_kept_gzip_encoded_after_one_gzip_get() {
    let s = server_with_big_report("rep-large-gzip");
    let uri = format!("{BASE}/netreach-big");
    let plain = get(&s.router, &uri).await;
    assert!(plain.body.len() > 4 * 1024 * 1024, "{}", plain.body.len());
    // The first gzip GET compresses as it streams and keeps what it sent; the later ones are
    // hits on those bytes (kubectl asks for gzip: a round of thousands of nodes is read from
    // the store and compressed once, not at every GET).
    for _ in 0..3 {
        assert_eq!(get_gzip(&s.router, &uri).await, plain.body);
    }
    assert_eq!(metric(&s.router, HITS).await, "2");
    assert_eq!(metric(&s.router, ENCODINGS).await, "1");
    // Identity stays streamed: its JSON is over the cache's largest object.
    assert_eq!(get(&s.router, &uri).await.body, plain.body);
    assert_eq!(metric(&s.router, HITS).await, "2");
}

#[tokio::test]
async fn the_store_not_open_is_503_and_not_ready() {
    let reviews = std::sync::Arc::new(crate::support::reviews());
    let auth = std::sync::Arc::new(kdoctor_apiserver::auth::Auth::delegated(
        Default::default(),
        reviews,
    ));
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let state = kdoctor_apiserver::AppState::new(
        auth,
        std::sync::Arc::new(kdoctor_apiserver::metrics::ApiMetrics::new()),
        rx,
    );
    let router = kdoctor_apiserver::router(state);
    let reply = get(&router, BASE).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.json()["reason"], "ServiceUnavailable");
    let ready = send(&router, Method::GET, "/readyz?verbose", None, None).await;
    assert_eq!(ready.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        ready
            .text()
            .contains("[-]report-store failed: reason withheld"),
        "{}",
        ready.text()
    );
    // Discovery never depends on the store: the aggregator's availability check keeps passing.
    assert_eq!(
        get(&router, "/apis/system.kdoctor.io/v1beta1").await.status,
        StatusCode::OK
    );
}

const MATRIX: &str = "application/json;as=KdoctorReportMatrix;g=system.kdoctor.io;v=v1beta1";

/// The matrix built from the object's own reports, as a client would.
fn matrix_of_object(object: &serde_json::Value) -> serde_json::Value {
    let rows: Vec<kdoctor_api::matrix::ProbeRow> = object["report"]["latestRoundReport"]
        .as_array()
        .expect("reports")
        .iter()
        .map(|r| serde_json::from_value::<kdoctor_api::report::Report>(r.clone()).expect("report"))
        .filter_map(|r| kdoctor_api::matrix::ProbeRow::of(&r))
        .collect();
    serde_json::to_value(kdoctor_api::matrix::build(
        &rows,
        kdoctor_api::report::protocol::Protocol::Http,
    ))
    .expect("json")
}

#[tokio::test]
async fn the_matrix_view_is_the_rounds_matrix_from_stored_probe_rows() {
    let s = server("matrix-view");
    fill(&s.store);
    for (name, round) in [("netreach-task", 2), ("netreach-task.round-1", 1)] {
        let uri = format!("{BASE}/{name}");
        let view = send(
            &s.router,
            Method::GET,
            &uri,
            Some("admin-token"),
            Some(MATRIX),
        )
        .await;
        assert_eq!(view.status, StatusCode::OK, "{}", view.text());
        let view = view.json();
        assert_eq!(view["kind"], "KdoctorReportMatrix");
        assert_eq!(view["apiVersion"], "system.kdoctor.io/v1beta1");
        assert_eq!(view["metadata"]["name"], name);
        assert_eq!(
            view["task"],
            serde_json::json!({"kind": "NetReach", "name": "task"})
        );
        assert_eq!(view["roundNumber"], round);
        assert_eq!(
            view["matrix"]["rows"],
            serde_json::json!(["node-a", "node-b"])
        );
        let object = get(&s.router, &uri).await.json();
        assert_eq!(view["matrix"], matrix_of_object(&object), "{name}");
        assert_eq!(view["matrix"]["protocol"], "http");
        // Asked sparse: the same matrix, only the probed cells on the wire.
        let sparse = send(
            &s.router,
            Method::GET,
            &format!("{uri}?cells=sparse"),
            Some("admin-token"),
            Some(MATRIX),
        )
        .await;
        assert_eq!(sparse.status, StatusCode::OK, "{}", sparse.text());
        let sparse = sparse.json();
        assert!(sparse["matrix"].get("cells").is_none(), "{sparse}");
        assert!(sparse["matrix"]["sparseCells"].is_array(), "{sparse}");
        let read = |json: &serde_json::Value| {
            serde_json::from_value::<kdoctor_api::matrix::Matrix>(json.clone()).expect("matrix")
        };
        assert_eq!(read(&sparse["matrix"]), read(&view["matrix"]), "{name}");
    }
    let cells = send(
        &s.router,
        Method::GET,
        &format!("{BASE}/netreach-task?cells=some"),
        Some("admin-token"),
        Some(MATRIX),
    )
    .await;
    assert_eq!(cells.status, StatusCode::BAD_REQUEST, "{}", cells.text());
    assert_eq!(
        cells.json()["message"],
        "cells: \"some\" is neither \"dense\" nor \"sparse\""
    );
    // The TCP connect entries' matrix is asked for by name; another protocol is refused.
    let tcp = send(
        &s.router,
        Method::GET,
        &format!("{BASE}/netreach-task?protocol=tcp"),
        Some("admin-token"),
        Some(MATRIX),
    )
    .await;
    assert_eq!(tcp.status, StatusCode::OK, "{}", tcp.text());
    assert_eq!(tcp.json()["matrix"]["protocol"], "tcp");
    let udp = send(
        &s.router,
        Method::GET,
        &format!("{BASE}/netreach-task?protocol=sctp"),
        Some("admin-token"),
        Some(MATRIX),
    )
    .await;
    assert_eq!(udp.status, StatusCode::BAD_REQUEST, "{}", udp.text());
    assert_eq!(
        udp.json()["message"],
        "protocol: \"sctp\" is not a protocol (http, tcp, udp, icmp)"
    );
    // Only NetReach reports have a matrix; a list has no matrix view.
    let dns = send(
        &s.router,
        Method::GET,
        &format!("{BASE}/netdns-dns"),
        Some("admin-token"),
        Some(MATRIX),
    )
    .await;
    assert_eq!(dns.status, StatusCode::BAD_REQUEST);
    assert!(
        dns.text()
            .contains("the matrix view is for NetReach reports"),
        "{}",
        dns.text()
    );
    let list = send(
        &s.router,
        Method::GET,
        BASE,
        Some("admin-token"),
        Some(MATRIX),
    )
    .await;
    assert_eq!(list.status, StatusCode::NOT_ACCEPTABLE, "{}", list.text());
}

/// How many body frames a GET answers with, and its Content-Length if it has one.
async fn frames(router: &axum::Router, uri: &str, gzip: bool) -> (usize, Option<String>) {
    use http_body_util::BodyExt;
    let mut request = axum::http::Request::builder()
        .uri(uri)
        .header("authorization", "Bearer admin-token");
    if gzip {
        request = request.header("accept-encoding", "gzip");
    }
    let request = request.body(axum::body::Body::empty()).expect("request");
    let response = tower::ServiceExt::oneshot(router.clone(), request)
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    let length = response
        .headers()
        .get("content-length")
        .map(|v| v.to_str().unwrap_or_default().to_string());
    let mut body = response.into_body();
    let mut count = 0;
    while let Some(frame) = body.frame().await {
        if frame.expect("frame").is_data() {
            count += 1;
        }
    }
    (count, length)
}

#[tokio::test]
async fn metadata_clients_get_partial_object_metadata_of_lists_and_objects() {
    let s = server("partial-metadata");
    fill(&s.store);
    // What client-go's metadata client sends (kube-controller-manager's garbage collector).
    let list_accept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
    let full = get(&s.router, BASE).await;
    let partial = send(
        &s.router,
        Method::GET,
        BASE,
        Some("admin-token"),
        Some(list_accept),
    )
    .await;
    assert_eq!(partial.status, StatusCode::OK, "{}", partial.text());
    let (full_json, partial_json) = (full.json(), partial.json());
    assert_eq!(partial_json["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(partial_json["kind"], "PartialObjectMetadataList");
    assert_eq!(
        partial_json["metadata"]["resourceVersion"],
        full_json["metadata"]["resourceVersion"]
    );
    let items = partial_json["items"].as_array().expect("items");
    assert_eq!(
        items.len(),
        full_json["items"].as_array().map_or(0, Vec::len)
    );
    for (item, whole) in items
        .iter()
        .zip(full_json["items"].as_array().expect("items"))
    {
        assert_eq!(item["kind"], "PartialObjectMetadata");
        assert_eq!(item["metadata"], whole["metadata"]);
        assert!(
            item.get("report").is_none() && item.get("status").is_none(),
            "{item}"
        );
    }
    assert!(
        partial.body.len() * 4 < full.body.len(),
        "{} bytes of metadata for a {}-byte list",
        partial.body.len(),
        full.body.len()
    );
    // One object, in the older v1beta1 as well.
    let uri = format!("{BASE}/netreach-task");
    let one = send(
        &s.router,
        Method::GET,
        &uri,
        Some("admin-token"),
        Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1"),
    )
    .await;
    assert_eq!(one.status, StatusCode::OK, "{}", one.text());
    let one = one.json();
    assert_eq!(one["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(one["kind"], "PartialObjectMetadata");
    assert_eq!(
        one["metadata"],
        get(&s.router, &uri).await.json()["metadata"]
    );
    // The list kind on one object, or the single kind on a list, is not what was asked: with
    // nothing else acceptable, 406 as kube-apiserver answers.
    for (uri, accept) in [
        (
            uri.as_str(),
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        ),
        (
            BASE,
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        ),
        (
            BASE,
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v2",
        ),
    ] {
        let refused = send(
            &s.router,
            Method::GET,
            uri,
            Some("admin-token"),
            Some(accept),
        )
        .await;
        assert_eq!(refused.status, StatusCode::NOT_ACCEPTABLE, "{uri} {accept}");
    }
}
