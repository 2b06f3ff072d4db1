//! Authentication and authorization through the reviews seam: anonymous is rejected, tokens are
//! reviewed, access is reviewed (and cached), system:masters bypasses it, health is open.

use axum::http::{Method, StatusCode};

use crate::support::{BASE, FakeReviews, fill, reviews, send, server, server_with};

#[tokio::test]
async fn anonymous_requests_are_unauthorized_but_health_is_open() {
    let s = server("acc-anon");
    let reply = send(&s.router, Method::GET, BASE, None, None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.json()["message"], "Unauthorized");
    let reply = send(&s.router, Method::GET, BASE, Some("stolen-token"), None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    for path in ["/healthz", "/livez", "/readyz"] {
        let reply = send(&s.router, Method::GET, path, None, None).await;
        assert_eq!(
            (reply.status, reply.text().as_str()),
            (StatusCode::OK, "ok"),
            "{path}"
        );
    }
    let verbose = send(&s.router, Method::GET, "/readyz?verbose", None, None)
        .await
        .text();
    assert!(
        verbose.contains("[+]report-store ok") && verbose.ends_with("readyz check passed\n"),
        "{verbose}"
    );
}

#[tokio::test]
async fn a_denied_user_gets_the_go_servers_403_text() {
    let s = server("acc-deny");
    fill(&s.store);
    let reply = send(
        &s.router,
        Method::DELETE,
        &format!("{BASE}/netreach-task"),
        Some("bob-token"),
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    let status = reply.json();
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "kdoctorreports.system.kdoctor.io \"netreach-task\" is forbidden: User \"bob\" cannot delete resource \"kdoctorreports\" in API group \"system.kdoctor.io\" at the cluster scope"
    );
    let reply = send(&s.router, Method::GET, "/metrics", Some("bob-token"), None).await;
    assert_eq!(
        reply.json()["message"],
        "forbidden: User \"bob\" cannot get path \"/metrics\""
    );
    // bob may read.
    assert_eq!(
        send(&s.router, Method::GET, BASE, Some("bob-token"), None)
            .await
            .status,
        StatusCode::OK
    );
    assert!(
        s.store
            .find(kdoctor_api::task::TaskKind::NetReach, "task")
            .len()
            == 2,
        "nothing was deleted"
    );
}

#[tokio::test]
async fn reviews_carry_the_verb_and_name_and_are_cached() {
    let s = server("acc-cache");
    fill(&s.store);
    for _ in 0..3 {
        send(
            &s.router,
            Method::GET,
            &format!("{BASE}/netreach-task"),
            Some("bob-token"),
            None,
        )
        .await;
    }
    send(
        &s.router,
        Method::GET,
        &format!("{BASE}?watch=true&timeoutSeconds=1"),
        Some("bob-token"),
        None,
    )
    .await;
    let asked = s.reviews.asked.lock().expect("lock").clone();
    use kdoctor_apiserver::auth::review::Attributes;
    assert_eq!(
        asked,
        [
            (
                "bob".to_string(),
                Attributes::Resource {
                    verb: "get".into(),
                    name: Some("netreach-task".into())
                }
            ),
            (
                "bob".to_string(),
                Attributes::Resource {
                    verb: "watch".into(),
                    name: None
                }
            ),
        ]
    );
}

#[tokio::test]
async fn system_masters_bypass_the_review() {
    let s = server("acc-masters");
    let reply = send(&s.router, Method::GET, BASE, Some("root-token"), None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(s.reviews.asked.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn a_review_outage_is_an_error_not_an_allow() {
    let mut r = reviews();
    r.down = true;
    let s = server_with("acc-down", FakeReviews { down: true, ..r });
    let reply = send(&s.router, Method::GET, BASE, Some("admin-token"), None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn an_access_review_outage_is_an_error_not_an_allow() {
    let s = server_with(
        "acc-sar-down",
        FakeReviews {
            access_down: true,
            ..reviews()
        },
    );
    fill(&s.store);
    for (method, uri) in [
        (Method::GET, BASE.to_string()),
        (Method::GET, format!("{BASE}/netreach-task")),
        (Method::DELETE, format!("{BASE}/netreach-task")),
        (Method::GET, "/metrics".to_string()),
    ] {
        let reply = send(&s.router, method.clone(), &uri, Some("admin-token"), None).await;
        assert_eq!(
            reply.status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{method} {uri}"
        );
        let status = reply.json();
        assert_eq!(status["reason"], "InternalError", "{method} {uri}");
        assert!(
            status["message"]
                .as_str()
                .is_some_and(|m| m.contains("authorization failed")),
            "{status}"
        );
    }
    // Nothing was deleted while authorization was down; masters still pass.
    assert_eq!(
        s.store
            .find(kdoctor_api::task::TaskKind::NetReach, "task")
            .len(),
        2
    );
    let reply = send(&s.router, Method::GET, BASE, Some("root-token"), None).await;
    assert_eq!(reply.status, StatusCode::OK);
}
