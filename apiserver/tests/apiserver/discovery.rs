//! Discovery and OpenAPI, as kubectl and the aggregator fetch them.

use axum::http::{Method, StatusCode};

use crate::support::{get, send, server};

#[tokio::test]
async fn legacy_discovery_lists_one_cluster_scoped_resource_with_its_verbs() {
    let s = server("disc-legacy");
    let groups = get(&s.router, "/apis").await.json();
    assert_eq!(groups["kind"], "APIGroupList");
    assert_eq!(groups["groups"][0]["name"], "system.kdoctor.io");
    assert_eq!(
        groups["groups"][0]["preferredVersion"]["groupVersion"],
        "system.kdoctor.io/v1beta1"
    );
    let list = get(&s.router, "/apis/system.kdoctor.io/v1beta1")
        .await
        .json();
    let resource = &list["resources"][0];
    assert_eq!(resource["name"], "kdoctorreports");
    assert_eq!(resource["singularName"], "kdoctorreport");
    assert_eq!(resource["kind"], "KdoctorReport");
    assert_eq!(resource["namespaced"], false);
    assert_eq!(resource["shortNames"], serde_json::json!(["kdr"]));
    assert_eq!(resource["categories"], serde_json::json!(["kdoctor"]));
    assert_eq!(
        resource["verbs"],
        serde_json::json!(["delete", "get", "list", "watch"])
    );
    let version = get(&s.router, "/version").await.json();
    assert_eq!(
        (version["major"].as_str(), version["minor"].as_str()),
        (Some("1"), Some("32"))
    );
}

#[tokio::test]
async fn aggregated_discovery_answers_by_content_type_with_etag_and_304() {
    let s = server("disc-agg");
    let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
    let reply = send(
        &s.router,
        Method::GET,
        "/apis",
        Some("admin-token"),
        Some(accept),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.headers["content-type"],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let body = reply.json();
    assert_eq!(body["apiVersion"], "apidiscovery.k8s.io/v2");
    let resource = &body["items"][0]["versions"][0]["resources"][0];
    assert_eq!(resource["resource"], "kdoctorreports");
    assert_eq!(resource["scope"], "Cluster");
    assert_eq!(resource["responseKind"]["kind"], "KdoctorReport");
    let etag = reply.headers["etag"].to_str().expect("etag").to_string();

    // kubectl 1.28 asks for v2beta1 only.
    let old = send(&s.router, Method::GET, "/apis", Some("admin-token"), Some("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")).await;
    assert_eq!(old.json()["apiVersion"], "apidiscovery.k8s.io/v2beta1");

    let request = axum::http::Request::builder()
        .uri("/apis")
        .header("accept", accept)
        .header("if-none-match", &etag)
        .header("authorization", "Bearer admin-token")
        .body(axum::body::Body::empty())
        .expect("request");
    let response = tower::ServiceExt::oneshot(s.router.clone(), request)
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
}

#[tokio::test]
async fn openapi_v3_has_hash_urls_paths_with_gvk_and_descriptions() {
    let s = server("disc-openapi");
    let index = get(&s.router, "/openapi/v3").await.json();
    let url = index["paths"]["apis/system.kdoctor.io/v1beta1"]["serverRelativeURL"]
        .as_str()
        .expect("url")
        .to_string();
    assert!(
        url.starts_with("/openapi/v3/apis/system.kdoctor.io/v1beta1?hash="),
        "{url}"
    );
    let reply = get(&s.router, &url).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.headers["cache-control"], "public, immutable");
    let doc = reply.json();
    let op = &doc["paths"]["/apis/system.kdoctor.io/v1beta1/kdoctorreports/{name}"]["get"];
    assert_eq!(
        op["x-kubernetes-group-version-kind"]["kind"],
        "KdoctorReport"
    );
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    let report = schemas
        .values()
        .find(|s| s["x-kubernetes-group-version-kind"][0]["kind"] == "KdoctorReport")
        .expect("the KdoctorReport schema");
    assert!(report["properties"]["status"].is_object());
    // A stale hash redirects to the current one.
    let stale = get(
        &s.router,
        "/openapi/v3/apis/system.kdoctor.io/v1beta1?hash=0000",
    )
    .await;
    assert_eq!(stale.status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(stale.headers["location"], url.as_str());
    // kubectl's v2 fallback asks for protobuf: refused, not garbled.
    let proto = send(
        &s.router,
        Method::GET,
        "/openapi/v2",
        Some("admin-token"),
        Some("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
    )
    .await;
    assert_eq!(proto.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(get(&s.router, "/openapi/v2").await.json()["swagger"], "2.0");
}

#[tokio::test]
async fn unknown_paths_are_404_statuses() {
    let s = server("disc-404");
    let reply = get(&s.router, "/apis/apps/v1/deployments").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(
        reply.json()["message"],
        "the server could not find the requested resource"
    );
}
