//! The server in delegated mode against a stand-in Kubernetes API, over real TLS (curl as the
//! aggregator): readyz waits for the ConfigMap, the front-proxy certificate and headers name
//! the user, tokens go through TokenReview, access through SubjectAccessReview, and a ConfigMap
//! change (new requestheader CA) is picked up without a restart.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kdoctor_apiserver::server::{AuthMode, ServerOptions, start};
use kdoctor_store::{Store, StoreConfig};
use kdoctor_transport::pki::{Ca, Pem};

use crate::fake_kube;
use crate::support::{curl, fill, scratch};

fn configmap(front_proxy: &Ca) -> BTreeMap<String, String> {
    BTreeMap::from([
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

fn write_pem(dir: &Path, name: &str, pem: &Pem) -> (std::path::PathBuf, std::path::PathBuf) {
    let (c, k) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&c, &pem.cert).expect("written");
    std::fs::write(&k, &pem.key).expect("written");
    (c, k)
}

#[tokio::test(flavor = "multi_thread")]
async fn delegated_authentication_follows_the_cluster() {
    let dir = scratch("delegated");
    std::fs::create_dir_all(&dir).expect("dir");
    let front_proxy = Ca::generate("front-proxy-ca").expect("ca");
    let tokens = BTreeMap::from([(
        "dev-token".to_string(),
        ("dave".to_string(), vec!["devs".to_string()]),
    )]);
    let allowed = vec![("alice".to_string(), "list".to_string())];
    let (url, fake) = fake_kube::start(BTreeMap::new(), tokens, allowed).await;
    let client =
        kube::Client::try_from(kube::Config::new(url.parse().expect("url"))).expect("client");

    let store = Arc::new(Store::open(StoreConfig::new(dir.join("store"))).expect("store"));
    fill(&store);
    let options = ServerOptions {
        auth: AuthMode::Delegated(client),
        store: Some(store),
        ..ServerOptions::standalone(dir.join("server"), "127.0.0.1:0".parse().expect("addr"))
    };
    let server = start(options).await.expect("starts");
    let ca = dir.join("server").join("pki").join("ca.crt");
    let base = server.url();
    let list = format!("{base}/apis/system.kdoctor.io/v1beta1/kdoctorreports");

    // Not ready until the ConfigMap has been loaded (it is empty of CAs so far: still loaded).
    let ready = |ca: std::path::PathBuf, base: String| async move {
        tokio::task::spawn_blocking(move || curl(&format!("{base}/readyz"), &ca, None, &[]))
            .await
            .expect("ran")
    };
    let mut loaded = false;
    for _ in 0..100 {
        if ready(ca.clone(), base.clone()).await.0 == 200 {
            loaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(loaded, "readyz never passed");

    // The ConfigMap gains the requestheader CA: the aggregator's certificate is now trusted.
    fake.update(configmap(&front_proxy));
    let (proxy_cert, proxy_key) = write_pem(
        &dir,
        "proxy",
        &front_proxy.client("front-proxy-client", &[]).expect("cert"),
    );
    let mut status = 0;
    for _ in 0..100 {
        let (c, k, l, a) = (
            proxy_cert.clone(),
            proxy_key.clone(),
            list.clone(),
            ca.clone(),
        );
        status = tokio::task::spawn_blocking(move || {
            curl(
                &l,
                &a,
                Some((&c, &k)),
                &["X-Remote-User: alice", "X-Remote-Group: devs"],
            )
            .0
        })
        .await
        .expect("ran");
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 200, "alice through the front proxy");
    let review = fake
        .reviews
        .lock()
        .expect("lock")
        .last()
        .cloned()
        .expect("a SubjectAccessReview");
    assert_eq!(review["spec"]["user"], "alice");
    assert_eq!(
        review["spec"]["groups"],
        serde_json::json!(["devs", "system:authenticated"])
    );
    assert_eq!(
        review["spec"]["resourceAttributes"]["resource"],
        "kdoctorreports"
    );
    assert_eq!(review["spec"]["resourceAttributes"]["verb"], "list");

    // A token is reviewed; dave may not list: the Go server's 403.
    let (l, a) = (list.clone(), ca.clone());
    let (code, body) = tokio::task::spawn_blocking(move || {
        curl(&l, &a, None, &["Authorization: Bearer dev-token"])
    })
    .await
    .expect("ran");
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("User \\\"dave\\\" cannot list resource \\\"kdoctorreports\\\""),
        "{body}"
    );
    // Forged headers without a certificate, and an unknown token: 401.
    let (l, a) = (list.clone(), ca.clone());
    let (code, _) = tokio::task::spawn_blocking(move || {
        curl(
            &l,
            &a,
            None,
            &["X-Remote-User: alice", "Authorization: Bearer nope"],
        )
    })
    .await
    .expect("ran");
    assert_eq!(code, 401);
    drop(server);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replaced_serving_certificate_is_served_without_a_restart() {
    let dir = scratch("reload");
    std::fs::create_dir_all(&dir).expect("dir");
    let (old_ca, new_ca) = (
        Ca::generate("old").expect("ca"),
        Ca::generate("new").expect("ca"),
    );
    let names = ["127.0.0.1".to_string(), "localhost".to_string()];
    let (cert, key) = write_pem(&dir, "serving", &old_ca.serving(&names).expect("cert"));
    let (old_ca_file, _) = write_pem(&dir, "old-ca", &old_ca.pem);
    let (new_ca_file, _) = write_pem(&dir, "new-ca", &new_ca.pem);
    let options = ServerOptions {
        tls_files: Some((cert.clone(), key.clone())),
        tls_reload_every: Duration::from_millis(100),
        ..ServerOptions::standalone(dir.join("server"), "127.0.0.1:0".parse().expect("addr"))
    };
    let server = start(options).await.expect("starts");
    let url = format!("{}/healthz", server.url());
    let check = |ca: std::path::PathBuf, url: String| async move {
        tokio::task::spawn_blocking(move || curl(&url, &ca, None, &[]).0)
            .await
            .expect("ran")
    };
    assert_eq!(check(old_ca_file.clone(), url.clone()).await, 200);
    // The certificate is renewed by a new CA (files replaced, as cert-manager would).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let renewed = new_ca.serving(&names).expect("cert");
    std::fs::write(&key, &renewed.key).expect("key");
    std::fs::write(&cert, &renewed.cert).expect("cert");
    let mut switched = false;
    for _ in 0..50 {
        if check(new_ca_file.clone(), url.clone()).await == 200 {
            switched = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(switched, "the renewed certificate was never served");
    assert_ne!(
        check(old_ca_file, url).await,
        200,
        "the old certificate is no longer served"
    );
}
