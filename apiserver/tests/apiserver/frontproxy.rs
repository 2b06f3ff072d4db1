//! The aggregator's path: a front-proxy client certificate of the requestheader CA with an
//! allowed CN, and X-Remote-* headers naming the user; plus client certificates of the client
//! CA, the ConfigMap format, and the negatives (unknown CA, CN not allowed, forged headers).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use kdoctor_apiserver::auth::config::AuthnConfig;
use kdoctor_apiserver::auth::review::Attributes;
use kdoctor_apiserver::auth::{Auth, PeerCertificates};
use kdoctor_apiserver::metrics::ApiMetrics;
use kdoctor_apiserver::{AppState, router};
use kdoctor_store::{Store, StoreConfig};
use kdoctor_transport::pki::Ca;
use rustls::pki_types::CertificateDer;
use tower::ServiceExt;

use crate::support::{BASE, FakeReviews, reviews, scratch};

struct Setup {
    router: axum::Router,
    state: AppState,
    reviews: Arc<FakeReviews>,
    front_proxy: Ca,
    client_ca: Ca,
}

fn der(pem: &str) -> Vec<CertificateDer<'static>> {
    kdoctor_transport::tls::parse_certs(pem.as_bytes(), "test").expect("pem")
}

fn configmap(front_proxy: &Ca, client_ca: &Ca) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("client-ca-file".to_string(), client_ca.pem.cert.clone()),
        (
            "requestheader-client-ca-file".to_string(),
            front_proxy.pem.cert.clone(),
        ),
        (
            "requestheader-allowed-names".to_string(),
            "[\"front-proxy-client\"]".to_string(),
        ),
        (
            "requestheader-username-headers".to_string(),
            "[\"X-Remote-User\"]".to_string(),
        ),
        (
            "requestheader-group-headers".to_string(),
            "[\"X-Remote-Group\"]".to_string(),
        ),
        (
            "requestheader-extra-headers-prefix".to_string(),
            "[\"X-Remote-Extra-\"]".to_string(),
        ),
    ])
}

fn setup(test: &str) -> Setup {
    let dir = scratch(test);
    let front_proxy = Ca::generate("front-proxy-ca").expect("ca");
    let client_ca = Ca::generate("client-ca").expect("ca");
    let config = AuthnConfig::from_configmap(&configmap(&front_proxy, &client_ca)).expect("config");
    let reviews = Arc::new(FakeReviews {
        allowed: vec![
            ("alice".into(), "list".into()),
            ("carol".into(), "list".into()),
        ],
        ..reviews()
    });
    let auth = Arc::new(Auth::delegated(config, reviews.clone()));
    let (_tx, rx) = tokio::sync::watch::channel(false);
    std::mem::forget(_tx);
    let state = AppState::new(auth, Arc::new(ApiMetrics::new()), rx);
    state.set_store(Arc::new(
        Store::open(StoreConfig::new(&dir)).expect("store"),
    ));
    Setup {
        router: router(state.clone()),
        state,
        reviews,
        front_proxy,
        client_ca,
    }
}

async fn call(
    s: &Setup,
    path: &str,
    chain: Option<Vec<CertificateDer<'static>>>,
    headers: &[(&str, &str)],
) -> StatusCode {
    let mut request = Request::builder().uri(path);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let mut request = request.body(Body::empty()).expect("request");
    if let Some(chain) = chain {
        request
            .extensions_mut()
            .insert(PeerCertificates::new(chain));
    }
    s.router
        .clone()
        .oneshot(request)
        .await
        .expect("answered")
        .status()
}

#[tokio::test]
async fn the_aggregator_user_comes_from_headers_under_a_front_proxy_certificate() {
    let s = setup("fp-ok");
    let cert = der(&s
        .front_proxy
        .client("front-proxy-client", &[])
        .expect("cert")
        .cert);
    let status = call(
        &s,
        BASE,
        Some(cert),
        &[
            ("X-Remote-User", "alice"),
            ("X-Remote-Group", "dev"),
            ("X-Remote-Group", "ops"),
            ("X-Remote-Extra-Scopes%2fFoo", "a"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let asked = s.reviews.asked.lock().expect("lock").clone();
    assert_eq!(
        asked,
        [(
            "alice".to_string(),
            Attributes::Resource {
                verb: "list".into(),
                name: None
            }
        )]
    );
    let user = s.reviews.users.lock().expect("lock")[0].clone();
    assert_eq!(user.groups, ["dev", "ops", "system:authenticated"]);
    assert_eq!(user.extra.get("scopes/foo"), Some(&vec!["a".to_string()]));
}

#[tokio::test]
async fn the_availability_check_passes_without_a_review() {
    let s = setup("fp-masters");
    let cert = der(&s
        .front_proxy
        .client("front-proxy-client", &[])
        .expect("cert")
        .cert);
    let headers = [
        ("X-Remote-User", "system:kube-aggregator"),
        ("X-Remote-Group", "system:masters"),
    ];
    assert_eq!(
        call(&s, "/apis/system.kdoctor.io/v1beta1", Some(cert), &headers).await,
        StatusCode::OK
    );
    assert!(s.reviews.asked.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn front_proxy_rejections_are_counted_by_reason() {
    let s = setup("fp-reject");
    let stranger = Ca::generate("stranger").expect("ca");
    let unknown = der(&stranger
        .client("front-proxy-client", &[])
        .expect("cert")
        .cert);
    let wrong_cn = der(&s.front_proxy.client("evil", &[]).expect("cert").cert);
    let user = [
        ("X-Remote-User", "alice"),
        ("X-Remote-Group", "system:masters"),
    ];
    assert_eq!(
        call(&s, BASE, Some(unknown), &user).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(&s, BASE, Some(wrong_cn), &user).await,
        StatusCode::UNAUTHORIZED
    );
    // Forged headers without any certificate are ignored: anonymous.
    assert_eq!(call(&s, BASE, None, &user).await, StatusCode::UNAUTHORIZED);
    let rejected = &s.state.metrics.rejected_front_proxy;
    assert_eq!(rejected.with_label_values(&["unknown_ca"]).get(), 1);
    assert_eq!(rejected.with_label_values(&["cn_not_allowed"]).get(), 1);
}

#[tokio::test]
async fn client_certificates_of_the_client_ca_name_user_and_groups() {
    let s = setup("fp-client");
    let cert = der(&s
        .client_ca
        .client("carol", &["net-team"])
        .expect("cert")
        .cert);
    assert_eq!(call(&s, BASE, Some(cert), &[]).await, StatusCode::OK);
    let asked = s.reviews.asked.lock().expect("lock").clone();
    assert_eq!(asked[0].0, "carol");
    // A front-proxy certificate is not a user certificate: without headers it names nobody.
    let proxy = der(&s
        .front_proxy
        .client("front-proxy-client", &[])
        .expect("cert")
        .cert);
    assert_eq!(
        call(&s, BASE, Some(proxy), &[]).await,
        StatusCode::UNAUTHORIZED
    );
}

#[test]
fn the_configmap_lists_are_json_arrays_and_bad_ones_are_named() {
    let fp = Ca::generate("fp").expect("ca");
    let ca = Ca::generate("c").expect("ca");
    let mut data = configmap(&fp, &ca);
    let config = AuthnConfig::from_configmap(&data).expect("config");
    let rh = config.requestheader.expect("requestheader");
    assert_eq!(rh.allowed_names, ["front-proxy-client"]);
    assert_eq!(rh.group_headers, ["X-Remote-Group"]);
    data.insert(
        "requestheader-username-headers".into(),
        "X-Remote-User".into(),
    );
    let err = AuthnConfig::from_configmap(&data).expect_err("not JSON");
    assert!(
        err.to_string()
            .contains("requestheader-username-headers: expected a JSON array of strings"),
        "{err}"
    );
    data.remove("requestheader-client-ca-file");
    data.insert(
        "requestheader-username-headers".into(),
        "[\"X-Remote-User\"]".into(),
    );
    assert!(
        AuthnConfig::from_configmap(&data)
            .expect("config")
            .requestheader
            .is_none()
    );
}
