//! The HTTP prober against real servers (the agent's echo server, nginx) and against servers
//! that fail in each way a network can.

use std::collections::BTreeMap;
use std::time::Duration;

use kdoctor_transport::tls::{ServerTrust, read_roots};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::peers::{Nginx, TempDir, write_cert};
use crate::support::{agent, errors, http_spec, pick, probe_http, serve_on_loopback};

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn echo_server_over_http_and_https_both_families() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    for v6 in [false, true] {
        let http = pick(&agent.http, v6);
        let https = pick(&agent.https, v6);
        for (url, http2) in [
            (format!("http://{http}/?task=p"), false),
            (format!("https://{https}/kdoctoragent?task=p"), false),
            (format!("https://{https}/kdoctoragent?task=p"), true),
        ] {
            let mut spec = http_spec(&url);
            spec.http2 = http2;
            let m = probe_http(spec, None, None, 50.0, SECOND, SECOND).await;
            assert_eq!(m.recorder.requests, 50, "{url}");
            assert_eq!(m.recorder.successes, 50, "{url}: {}", errors(&m));
            assert_eq!(m.recorder.http_status, BTreeMap::from([(200, 50)]));
            assert!(
                m.recorder.bytes > 50 * 200,
                "echo bodies counted: {}",
                m.recorder.bytes
            );
            assert_eq!(m.recorder.unsent, 0);
        }
    }
    assert_eq!(agent.echo.count("p"), 300);
}

#[tokio::test]
async fn keep_alive_reuses_connections_and_can_be_turned_off() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    let url = format!("http://{}/", pick(&agent.http, false));
    let connections = || {
        agent
            .registry
            .connections
            .with_label_values(&["http"])
            .get()
    };
    let m = probe_http(http_spec(&url), None, None, 40.0, SECOND, SECOND).await;
    assert_eq!(m.recorder.successes, 40);
    let reused = connections();
    // Sequential on an idle machine (one connection); a starved runtime overlaps requests.
    assert!(
        reused < 20,
        "keep-alive opened {reused} connections for 40 requests"
    );
    assert_eq!(m.recorder.connect.len(), reused);
    let mut spec = http_spec(&url);
    spec.keep_alive = false;
    let m = probe_http(spec, None, None, 40.0, SECOND, SECOND).await;
    assert_eq!(m.recorder.successes, 40);
    assert_eq!(connections() - reused, 40, "one connection per request");
    assert_eq!(m.recorder.connect.len(), 40);
}

#[tokio::test]
async fn nginx_http_https_http2_and_methods() {
    let _shared = crate::support::shared().await;
    let nginx = Nginx::start();
    let roots = read_roots(&nginx.cert).expect("nginx cert as CA");
    for host in ["127.0.0.1", "[::1]"] {
        let m = probe_http(
            http_spec(&format!("http://{host}:{}/", nginx.http_port)),
            None,
            None,
            50.0,
            SECOND,
            SECOND,
        )
        .await;
        assert_eq!(m.recorder.successes, 50, "{}", errors(&m));
        assert_eq!(m.recorder.bytes, 50 * 17, "index.html is 17 bytes");
        let mut spec = http_spec(&format!("https://{host}:{}/big", nginx.https_port));
        spec.http2 = true;
        let m = probe_http(
            spec,
            Some(ServerTrust::Roots(roots.clone())),
            None,
            20.0,
            SECOND,
            SECOND,
        )
        .await;
        assert_eq!(m.recorder.successes, 20, "{}", errors(&m));
        assert_eq!(m.recorder.bytes, 20 * 100_000);
    }
    let mut spec = http_spec(&format!("http://localhost:{}/echo", nginx.http_port));
    spec.method = http::Method::POST;
    spec.headers = vec![("X-Probe".into(), "yes".into())];
    spec.body = bytes::Bytes::from_static(b"payload");
    let m = probe_http(spec, None, None, 10.0, SECOND, SECOND).await;
    assert_eq!(m.recorder.successes, 10, "{}", errors(&m));
    assert_eq!(m.recorder.bytes, 10 * "POST yes\n".len() as u64);
}

#[tokio::test]
async fn wrong_status_fails_unless_expected() {
    let _shared = crate::support::shared().await;
    let nginx = Nginx::start();
    let url = format!("http://127.0.0.1:{}/status/503", nginx.http_port);
    let m = probe_http(http_spec(&url), None, None, 20.0, SECOND, SECOND).await;
    assert_eq!(
        m.recorder.successes, 0,
        "5xx is a failure (upstream counted it as success)"
    );
    assert_eq!(
        m.recorder.errors,
        BTreeMap::from([("status 503".to_string(), 20)])
    );
    assert_eq!(m.recorder.http_status, BTreeMap::from([(503, 20)]));
    let mut spec = http_spec(&url);
    spec.expected_status = Some(503);
    let m = probe_http(spec, None, None, 20.0, SECOND, SECOND).await;
    assert_eq!(m.recorder.successes, 20);
    let mut spec = http_spec(&format!("http://127.0.0.1:{}/", nginx.http_port));
    spec.expected_status = Some(201);
    let m = probe_http(spec, None, None, 10.0, SECOND, SECOND).await;
    assert_eq!(
        m.recorder.errors,
        BTreeMap::from([("status 200".to_string(), 10)])
    );
}

#[tokio::test]
async fn connection_refused() {
    let _shared = crate::support::shared().await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let m = probe_http(
        http_spec(&format!("http://127.0.0.1:{port}/")),
        None,
        None,
        20.0,
        SECOND,
        SECOND,
    )
    .await;
    assert_eq!(m.recorder.requests, 20);
    assert_eq!(m.recorder.successes, 0);
    let refused: i64 = m
        .recorder
        .errors
        .iter()
        .filter(|(k, _)| k.starts_with("refused"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(refused, 20, "{}", errors(&m));
    assert_eq!(m.recorder.http_status, BTreeMap::from([(0, 20)]));
}

#[tokio::test]
async fn silent_server_times_out_at_the_timeout() {
    let _shared = crate::support::shared().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Accepts and holds connections without answering.
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let timeout = Duration::from_millis(200);
    let m = probe_http(
        http_spec(&format!("http://{addr}/")),
        None,
        None,
        20.0,
        SECOND,
        timeout,
    )
    .await;
    server.abort();
    assert_eq!(
        m.recorder.errors,
        BTreeMap::from([("timeout".to_string(), 20)])
    );
    let p50 = m.recorder.response.value_at_quantile(0.5);
    assert!(
        (200_000..260_000).contains(&p50),
        "timeouts recorded at the timeout: {p50} µs"
    );
}

#[tokio::test]
async fn server_closing_mid_body_is_a_reset() {
    let _shared = crate::support::shared().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly ten b")
                    .await;
                let _ = s.shutdown().await;
            });
        }
    });
    let m = probe_http(
        http_spec(&format!("http://{addr}/")),
        None,
        None,
        10.0,
        SECOND,
        SECOND,
    )
    .await;
    server.abort();
    assert_eq!(m.recorder.successes, 0);
    assert_eq!(
        m.recorder.http_status,
        BTreeMap::from([(200, 10)]),
        "the status came"
    );
    assert_eq!(m.recorder.bytes, 100, "the partial bodies are counted");
    let resets: i64 = m
        .recorder
        .errors
        .iter()
        .filter(|(k, _)| k.starts_with("reset"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(resets, 10, "{}", errors(&m));
    assert!(
        errors(&m).contains("answer body cut short"),
        "{}",
        errors(&m)
    );
}

#[tokio::test]
async fn tls_failures_are_classified() {
    let _shared = crate::support::shared().await;
    let agent = agent().await;
    let url = format!("https://{}/", pick(&agent.https, false));
    // A CA that did not sign the agent's certificate.
    let dir = TempDir::new("other-ca");
    let (other, _, _) = write_cert(&dir.0);
    let roots = read_roots(&other).unwrap();
    let m = probe_http(
        http_spec(&url),
        Some(ServerTrust::Roots(roots)),
        None,
        10.0,
        SECOND,
        SECOND,
    )
    .await;
    assert_eq!(m.recorder.successes, 0);
    let keys: Vec<&String> = m.recorder.errors.keys().collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(
        keys[0].starts_with("tls: invalid peer certificate"),
        "{keys:?}"
    );
    // Plain HTTP spoken to the TLS port: the server's TLS layer rejects it.
    let m = probe_http(
        http_spec(&format!("http://{}/", pick(&agent.https, false))),
        None,
        None,
        5.0,
        SECOND,
        SECOND,
    )
    .await;
    assert_eq!(m.recorder.successes, 0, "{}", errors(&m));
    // TLS spoken to a plain HTTP port.
    let m = probe_http(
        http_spec(&format!("https://{}/", pick(&agent.http, false))),
        None,
        None,
        5.0,
        SECOND,
        SECOND,
    )
    .await;
    assert_eq!(m.recorder.successes, 0);
    assert!(
        m.recorder.errors.keys().all(|k| k.starts_with("tls")),
        "{}",
        errors(&m)
    );
}

#[tokio::test]
async fn unknown_host_is_a_dns_error() {
    let _shared = crate::support::shared().await;
    let m = probe_http(
        http_spec("http://no-such-host.invalid/"),
        None,
        None,
        3.0,
        SECOND,
        SECOND,
    )
    .await;
    assert_eq!(m.recorder.successes, 0);
    assert!(
        m.recorder.errors.keys().all(|k| k.starts_with("dns")),
        "{}",
        errors(&m)
    );
}

#[tokio::test]
async fn report_of_a_real_run_has_fractional_latencies_and_mergeable_histograms() {
    let _shared = crate::support::shared().await;
    use kdoctor_agent::histogram::decode;
    use kdoctor_agent::report::{APP_HTTP_HEALTHY_TARGET_NAME, histogram_names, http_detail};
    use kdoctor_api::report::AppHttpHealthyTaskDetail;
    let agent = agent().await;
    let url = format!("http://{}/?delay=3ms", pick(&agent.http, false));
    let m = probe_http(http_spec(&url), None, None, 20.0, SECOND, SECOND).await;
    let detail: AppHttpHealthyTaskDetail =
        http_detail(APP_HTTP_HEALTHY_TARGET_NAME, &url, "GET", &m, None);
    assert!(detail.request_succeed, "{:?}", detail.failure_reason);
    let json = serde_json::to_value(&detail).unwrap();
    let metrics = &json["requestTargetMetrics"];
    assert_eq!(metrics["requestCounts"], 20);
    let mean = metrics["latencies"]["meanInMs"].as_f64().unwrap();
    assert!(
        (3.0..10.0).contains(&mean) && mean.fract() != 0.0,
        "fractional ms: {mean}"
    );
    assert_eq!(json["requestMeanDelay"].as_f64(), Some(mean));
    let encoded = detail.request_target_metrics.histograms.as_ref().unwrap();
    let mut merged = decode(&encoded[histogram_names::RESPONSE_TIME]).unwrap();
    merged
        .add(decode(&encoded[histogram_names::RESPONSE_TIME]).unwrap())
        .unwrap();
    assert_eq!(merged.len(), 40, "two copies merge exactly");
    assert!(merged.min() >= 3000);
}

#[tokio::test]
async fn kept_alive_connections_are_capped_and_waiting_shows_in_response_time() {
    let _shared = crate::support::shared().await;
    use kdoctor_agent::probe::http::HttpProber;
    use kdoctor_agent::probe::{Plan, run};
    let agent = agent().await;
    let url = format!("http://{}/?delay=50ms", pick(&agent.http, false));
    let prober = HttpProber::new(http_spec(&url), None)
        .unwrap()
        .with_max_connections(2);
    let plan = Plan::new(40.0, SECOND, Duration::from_secs(5)).unwrap();
    let m = run(std::sync::Arc::new(prober), plan, Default::default(), None).await;
    assert_eq!(m.recorder.successes, 40, "{}", errors(&m));
    let opened = agent
        .registry
        .connections
        .with_label_values(&["http"])
        .get();
    assert_eq!(opened, 2, "two connections at most");
    // 40/s of 50 ms requests need two connections in steady state, so waiting stays short,
    // but service time is measured after the wait: response time is never below it.
    assert!(
        m.recorder.response.value_at_quantile(0.99) >= m.recorder.service.value_at_quantile(0.99)
    );
    let prober = HttpProber::new(http_spec(&url), None)
        .unwrap()
        .with_max_connections(1);
    let plan = Plan::new(40.0, SECOND, Duration::from_secs(5)).unwrap();
    let m = run(std::sync::Arc::new(prober), plan, Default::default(), None).await;
    // One connection serves 20 requests/s of 50 ms: a queue builds up, and response time
    // (from the pacer's wake) shows it while service time stays near 50 ms.
    let service_p50 = m.recorder.service.value_at_quantile(0.5);
    let response_p99 = m.recorder.response.value_at_quantile(0.99);
    assert!(service_p50 < 60_000, "service p50 {service_p50} µs");
    assert!(
        response_p99 > 500_000,
        "queueing hidden: response p99 {response_p99} µs"
    );
}

#[tokio::test]
async fn requests_beyond_the_in_flight_cap_are_counted_unsent_and_fail_the_target() {
    let _shared = crate::support::shared().await;
    use kdoctor_agent::metrics::Metrics;
    use kdoctor_agent::probe::http::HttpProber;
    use kdoctor_agent::probe::{Plan, Progress, run};
    use kdoctor_agent::report::{APP_HTTP_HEALTHY_TARGET_NAME, http_detail};
    use kdoctor_api::report::AppHttpHealthyTaskDetail;
    use std::sync::atomic::Ordering;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let url = format!("http://{addr}/");
    let prober = HttpProber::new(http_spec(&url), None).unwrap();
    let mut plan = Plan::new(20.0, SECOND, Duration::from_secs(2)).unwrap();
    plan.max_in_flight = 3;
    let metrics = Metrics::new();
    let progress = std::sync::Arc::new(Progress::default());
    let m = run(
        std::sync::Arc::new(prober),
        plan,
        progress.clone(),
        Some(metrics.clone()),
    )
    .await;
    server.abort();
    assert_eq!(m.recorder.requests, 3, "only the cap was sent");
    assert_eq!(m.recorder.unsent, 17);
    assert_eq!(progress.unsent.load(Ordering::Relaxed), 17);
    assert_eq!(metrics.probe_unsent.with_label_values(&["http"]).get(), 17);
    assert_eq!(
        metrics
            .probe_requests
            .with_label_values(&["http", "timeout"])
            .get(),
        3
    );
    let detail: AppHttpHealthyTaskDetail =
        http_detail(APP_HTTP_HEALTHY_TARGET_NAME, &url, "GET", &m, None);
    assert!(
        detail
            .request_target_metrics
            .requests
            .exists_not_send_requests
    );
    assert!(!detail.request_succeed);
}

/// A run lives on a prober thread of its own, but is its caller's: a caller that gives up (a
/// round past its deadline) stops the sending at once instead of leaving it running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_caller_gives_up_stops_sending() {
    let served = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = served.clone();
    let addr = serve_on_loopback(axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            async { "ok" }
        }),
    ))
    .await;
    let count = || served.load(std::sync::atomic::Ordering::Relaxed);
    // 200/s for 10 s, given up after half a second.
    let run = probe_http(
        http_spec(&format!("http://{addr}/")),
        None,
        None,
        200.0,
        Duration::from_secs(10),
        SECOND,
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(500), run)
            .await
            .is_err()
    );
    let at_give_up = count();
    assert!(at_give_up > 0, "nothing was sent before giving up");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // At most the requests already in flight arrive after.
    let later = count();
    assert!(
        later <= at_give_up + 2,
        "{} requests sent after the caller gave up",
        later - at_give_up
    );
}

/// Probes go out from the caller's network namespace, whichever prober thread runs them: a
/// process that runs agents for several namespaces (the reconciler tests do, one cluster each)
/// must not probe one namespace's addresses from another's. A fresh namespace has its loopback
/// down, so there the probe of a server on this namespace's loopback cannot connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_go_out_from_the_caller_s_network_namespace() {
    let addr =
        serve_on_loopback(axum::Router::new().route("/", axum::routing::get(|| async { "ok" })))
            .await;
    let url = format!("http://{addr}/");
    let here = probe_http(http_spec(&url), None, None, 20.0, SECOND / 2, SECOND).await;
    assert_eq!(here.recorder.successes, 10, "{}", errors(&here));
    let elsewhere = std::thread::spawn(move || {
        // SAFETY: unshare affects only this thread's network namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            panic!(
                "unshare(CLONE_NEWNET): {} (the test needs root)",
                std::io::Error::last_os_error()
            );
        }
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(probe_http(
                http_spec(&url),
                None,
                None,
                20.0,
                SECOND / 2,
                SECOND,
            ))
    })
    .join()
    .expect("the probe in a new namespace");
    assert_eq!(elsewhere.recorder.requests, 10);
    assert_eq!(
        elsewhere.recorder.successes,
        0,
        "probed from another namespace: {}",
        errors(&elsewhere)
    );
}
