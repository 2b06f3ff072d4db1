//! The aggregation layer: an extension API server (a small fake here) registered by an
//! APIService is checked, becomes Available, joins discovery, and kubectl reaches it through
//! the sim with the front-proxy certificate and X-Remote-* headers.

use axum::extract::Request;
use axum::response::Json;
use axum::routing::get;
use base64::Engine;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, DeleteParams};
use kube_sim::server::identity::PeerIdentity;
use serde_json::{Value, json};

use crate::support::{Kubectl, eventually, start};

async fn widgets(req: Request) -> Json<Value> {
    let h = |name: &str| -> Vec<String> {
        req.headers()
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok().map(String::from))
            .collect()
    };
    let proxy = req
        .extensions()
        .get::<PeerIdentity>()
        .and_then(|p| p.0.clone())
        .map(|u| u.username)
        .unwrap_or_default();
    Json(json!({
        "kind": "WidgetList", "apiVersion": "test.kdoctor.io/v1", "metadata": {"resourceVersion": "1"},
        "items": [{"kind": "Widget", "apiVersion": "test.kdoctor.io/v1", "metadata": {
            "name": "w1", "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"user": h("x-remote-user").join(","), "groups": h("x-remote-group").join(","), "proxy": proxy}
        }}]
    }))
}

async fn discovery() -> Json<Value> {
    Json(json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "test.kdoctor.io/v1",
        "resources": [{"name": "widgets", "singularName": "widget", "namespaced": false, "kind": "Widget",
            "verbs": ["get", "list"], "shortNames": ["wd"], "categories": ["kdoctor"]}]
    }))
}

#[tokio::test]
async fn aggregated_api_is_checked_discovered_and_proxied() {
    let (sim, client) = start().await;
    // The extension server: its own CA, client certificates from the sim's front-proxy CA.
    let ca = kube_sim::certs::Ca::new("ext-ca").expect("ca");
    let serving = ca
        .server_cert("ext", &["ext.kube-system.svc".to_string()])
        .expect("cert");
    let tls = kube_sim::server::tls_config(
        &serving.cert_pem,
        &serving.key_pem,
        &sim.pki().front_proxy_ca.cert_pem,
    )
    .expect("tls");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let router = axum::Router::new()
        .route("/apis/test.kdoctor.io/v1", get(discovery))
        .route("/apis/test.kdoctor.io/v1/widgets", get(widgets));
    let server = tokio::spawn(kube_sim::server::serve_https(
        listener, tls, router, stopped,
    ));

    sim.apply_yaml(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: ext, namespace: kube-system}}\nspec:\n  ports: [{{port: 443, targetPort: {port}}}]\n---\napiVersion: v1\nkind: Endpoints\nmetadata: {{name: ext, namespace: kube-system}}\nsubsets:\n- addresses: [{{ip: 127.0.0.1}}]\n  ports: [{{port: {port}}}]\n---\napiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {{name: v1.test.kdoctor.io}}\nspec:\n  group: test.kdoctor.io\n  version: v1\n  groupPriorityMinimum: 1000\n  versionPriority: 15\n  caBundle: {}\n  service: {{name: ext, namespace: kube-system, port: 443}}\n",
        base64::engine::general_purpose::STANDARD.encode(&ca.cert_pem)
    ))
    .expect("apply");
    let apiservices: Api<APIService> = Api::all(client.clone());
    eventually(15, || {
        let apiservices = apiservices.clone();
        async move {
            let a = apiservices.get("v1.test.kdoctor.io").await.expect("get");
            let cs = a.status?.conditions?;
            cs.iter()
                .any(|c| c.type_ == "Available" && c.status == "True")
                .then_some(())
        }
    })
    .await;

    let k = Kubectl::new(&sim);
    let out = k.ok(&["get", "widgets"]).await;
    assert!(out.contains("w1"), "{out}");
    let annotations = k
        .ok(&[
            "get",
            "wd",
            "-o",
            "jsonpath={.items[0].metadata.annotations}",
        ])
        .await;
    let a: Value = serde_json::from_str(&annotations).expect("json");
    assert_eq!(a["user"], json!("kube-sim-admin"));
    assert!(
        a["groups"]
            .as_str()
            .is_some_and(|g| g.contains("system:masters")),
        "{a}"
    );
    assert_eq!(a["proxy"], json!("front-proxy-client"));
    let resources = k
        .ok(&["api-resources", "--api-group=test.kdoctor.io"])
        .await;
    assert!(
        resources.contains("widgets") && resources.contains("Widget"),
        "{resources}"
    );

    // The backend goes away: the APIService turns unavailable and requests get 503.
    let _ = stop.send(true);
    let _ = server.await;
    Api::<k8s_openapi::api::core::v1::Endpoints>::namespaced(client.clone(), "kube-system")
        .delete("ext", &DeleteParams::default())
        .await
        .expect("delete endpoints");
    let reason = eventually(15, || {
        let apiservices = apiservices.clone();
        async move {
            let a = apiservices.get("v1.test.kdoctor.io").await.expect("get");
            let cs = a.status?.conditions?;
            cs.iter()
                .find(|c| c.type_ == "Available" && c.status == "False")
                .map(|c| c.reason.clone())
        }
    })
    .await;
    assert_eq!(reason.as_deref(), Some("MissingEndpoints"));
}
