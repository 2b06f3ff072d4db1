//! Attacks on the API server from issue 20's findings, each reproduced as a client would make
//! it: encoded query keys and values, cached reviews reused across users, label values minted by
//! unauthenticated clients, names reviewed in their encoded form, answers that are not a Status.

use axum::http::{Method, StatusCode};
use kdoctor_apiserver::auth::review::Attributes;

use crate::support::{BASE, fill, get, send, server};

/// M1: the verb authorized is the verb served, however the query is spelt.
#[tokio::test]
async fn an_encoded_or_repeated_watch_is_authorized_as_a_watch() {
    let s = server("hostile-watch");
    fill(&s.store);
    // bob may get and list, not watch.
    for query in [
        "watch=%74rue",
        "wat%63h=true",
        "watch=TRUE",
        "watch=true&watch=false",
    ] {
        let reply = send(
            &s.router,
            Method::GET,
            &format!("{BASE}?{query}&timeoutSeconds=1"),
            Some("bob-token"),
            None,
        )
        .await;
        assert_eq!(
            reply.status,
            StatusCode::FORBIDDEN,
            "?{query}: {}",
            reply.text()
        );
        assert!(
            reply.json()["message"]
                .as_str()
                .is_some_and(|m| m.contains("cannot watch resource")),
            "?{query}: {}",
            reply.text()
        );
    }
    // The first value decides, for the review and the handler alike: a list, served as one.
    let reply = send(
        &s.router,
        Method::GET,
        &format!("{BASE}?watch=false&watch=true"),
        Some("bob-token"),
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.json()["kind"], "KdoctorReportList");
}

/// M2: a cached answer is reused only for the very same user (uid and extra included).
#[tokio::test]
async fn a_cached_review_is_not_reused_for_another_uid_or_other_scopes() {
    let s = server("hostile-cache");
    fill(&s.store);
    let uri = format!("{BASE}/netreach-task");
    let bob = send(&s.router, Method::GET, &uri, Some("bob-token"), None).await;
    assert_eq!(bob.status, StatusCode::OK);
    for token in ["bob-scoped-token", "bob-revoked-token"] {
        let reply = send(&s.router, Method::GET, &uri, Some(token), None).await;
        assert_eq!(
            reply.status,
            StatusCode::FORBIDDEN,
            "{token}: {}",
            reply.text()
        );
    }
    // Each of the three users was reviewed; bob's own answer is still served from the cache.
    assert_eq!(s.reviews.asked.lock().expect("lock").len(), 3);
    send(&s.router, Method::GET, &uri, Some("bob-token"), None).await;
    assert_eq!(s.reviews.asked.lock().expect("lock").len(), 3);
}

/// M3: methods that clients make up do not become label values.
#[tokio::test]
async fn made_up_methods_do_not_mint_metric_series() {
    let s = server("hostile-metrics");
    let series = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .count()
    };
    let before = series(&get(&s.router, "/metrics").await.text());
    for i in 0..200 {
        let method = Method::from_bytes(format!("X{i}").as_bytes()).expect("method");
        for path in ["/", "/metrics", BASE] {
            send(&s.router, method.clone(), path, None, None).await;
        }
    }
    let text = get(&s.router, "/metrics").await.text();
    let after = series(&text);
    assert!(
        after <= before + 4,
        "200 made-up methods grew the request series from {before} to {after}"
    );
    assert!(
        !text.contains("verb=\"X1") && !text.contains("verb=\"x1"),
        "{text}"
    );
}

/// L4: the review names the object the handler serves, not its percent-encoding.
#[tokio::test]
async fn the_review_names_the_decoded_object() {
    let s = server("hostile-name");
    fill(&s.store);
    let reply = send(
        &s.router,
        Method::GET,
        &format!("{BASE}/netreach%2Dtask"),
        Some("bob-token"),
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.json()["metadata"]["name"], "netreach-task");
    let asked = s.reviews.asked.lock().expect("lock").clone();
    assert_eq!(
        asked,
        [(
            "bob".to_string(),
            Attributes::Resource {
                verb: "get".into(),
                name: Some("netreach-task".into())
            }
        )]
    );
}

/// L3: what the framework rejects by itself still answers a Status kubectl can print.
#[tokio::test]
async fn framework_rejections_answer_a_status() {
    let s = server("hostile-status");
    fill(&s.store);
    let cases = [
        (
            Method::GET,
            format!("{BASE}/%FF%FE"),
            StatusCode::BAD_REQUEST,
            "BadRequest",
        ),
        (
            Method::OPTIONS,
            BASE.to_string(),
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
        ),
        (
            Method::TRACE,
            format!("{BASE}/x"),
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
        ),
        (
            Method::POST,
            "/version".to_string(),
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
        ),
    ];
    for (method, uri, code, reason) in cases {
        let reply = send(&s.router, method.clone(), &uri, Some("admin-token"), None).await;
        assert_eq!(reply.status, code, "{method} {uri}");
        assert_eq!(
            reply
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("application/json"),
            "{method} {uri}"
        );
        let status = reply.json();
        assert_eq!(
            (status["kind"].as_str(), status["reason"].as_str()),
            (Some("Status"), Some(reason)),
            "{method} {uri}: {status}"
        );
        assert!(
            status["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{method} {uri}: {status}"
        );
    }
    // Health answers stay the Go server's plain text.
    let reply = send(
        &s.router,
        Method::GET,
        "/readyz/nothing",
        Some("admin-token"),
        None,
    )
    .await;
    assert_eq!(
        (reply.status, reply.text().as_str()),
        (StatusCode::NOT_FOUND, "404 page not found\n")
    );
}
