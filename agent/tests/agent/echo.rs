//! The echo API (upstream §14.1), health and metrics, over HTTP, HTTPS (HTTP/1.1 and HTTP/2 by
//! ALPN), IPv4 and IPv6.

use std::time::{Duration, Instant};

use crate::support::{agent, fetch, pick};

#[tokio::test]
async fn get_echoes_the_request_on_both_paths_and_families() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    for v6 in [false, true] {
        let addr = pick(&agent.http, v6);
        for path in ["/", "/kdoctoragent"] {
            let answer = fetch("GET", addr, &format!("{path}?task=t{v6}"), false, false).await;
            assert_eq!(answer.status, 200, "{answer:?}");
            let json: serde_json::Value = serde_json::from_str(&answer.body).expect("JSON body");
            assert_eq!(json["serverName"], "kdoctor-agent-test");
            assert_eq!(json["requestMethod"], "GET");
            assert_eq!(json["TaskName"], format!("t{v6}"));
            assert_eq!(json["requestUrl"], format!("{path}?task=t{v6}"));
            assert_eq!(json["requestHeader"]["x-probe"], "one");
            assert_eq!(json["supportedMethod"].as_array().map(Vec::len), Some(7));
            let client: std::net::SocketAddr = json["clientIp"]
                .as_str()
                .unwrap()
                .parse()
                .expect("clientIp is ip:port");
            assert_eq!(client.is_ipv6(), v6);
        }
        let json: serde_json::Value = serde_json::from_str(
            &fetch("GET", addr, &format!("/?task=t{v6}"), false, false)
                .await
                .body,
        )
        .unwrap();
        assert_eq!(json["requestCount"], 3, "per-task counter over both paths");
    }
}

#[tokio::test]
async fn every_method_counts_and_delete_resets() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    let addr = pick(&agent.http, false);
    for method in ["PUT", "POST", "PATCH", "OPTIONS", "HEAD"] {
        let answer = fetch(method, addr, "/kdoctoragent?task=m", false, false).await;
        assert_eq!(answer.status, 200, "{method}");
        assert_eq!(answer.body, "", "{method} has an empty answer");
    }
    assert_eq!(agent.echo.count("m"), 5);
    assert_eq!(agent.echo.count("default"), 0);
    assert_eq!(
        fetch("DELETE", addr, "/?task=m", false, false).await.status,
        200
    );
    assert_eq!(agent.echo.count("m"), 0);
    fetch("GET", addr, "/", false, false).await;
    assert_eq!(agent.echo.count("default"), 1);
}

#[tokio::test]
async fn delay_is_applied_and_bad_delays_are_rejected() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    let addr = pick(&agent.http, false);
    let began = Instant::now();
    let answer = fetch("GET", addr, "/?delay=0.2", false, false).await;
    let took = began.elapsed();
    assert_eq!(answer.status, 200);
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert!(took < Duration::from_millis(1000), "{took:?}");
    let json: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(json["requestParam"], "delay=0.2");
    let bad = fetch("GET", addr, "/?delay=soon", false, false).await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.body.starts_with("query parameter delay:"),
        "{}",
        bad.body
    );
}

#[tokio::test]
async fn https_speaks_http2_by_alpn_and_http1_otherwise() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    for v6 in [false, true] {
        let addr = pick(&agent.https, v6);
        let h2 = fetch("GET", addr, "/kdoctoragent", true, true).await;
        assert_eq!((h2.status, h2.version), (200, http::Version::HTTP_2));
        let h1 = fetch("POST", addr, "/", true, false).await;
        assert_eq!((h1.status, h1.version), (200, http::Version::HTTP_11));
    }
}

#[tokio::test]
async fn health_and_metrics() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    let health = pick(&agent.health, false);
    for probe in ["startup", "readiness", "liveness"] {
        let answer = fetch("GET", health, &format!("/healthy/{probe}"), false, false).await;
        assert_eq!(answer.status, 200, "{probe}");
    }
    assert_eq!(
        fetch("GET", health, "/healthy/other", false, false)
            .await
            .status,
        404
    );
    fetch("GET", pick(&agent.http, true), "/", false, false).await;
    let metrics = fetch("GET", pick(&agent.metrics, false), "/metrics", false, false).await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .body
            .contains("kdoctor_agent_echo_requests_total{method=\"GET\",scheme=\"http\"} 1"),
        "{}",
        metrics.body
    );
    assert!(
        metrics
            .body
            .contains("kdoctor_agent_target_connections_total")
    );
}
