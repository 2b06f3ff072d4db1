//! The install's certificates managed through a real kube-apiserver: the CA Secret
//! created once or taken as provided, the serving certificate issued, kept, and renewed, the
//! APIService caBundle set.

use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kdoctor_apiserver::certs::bootstrap::{
    CertSettings, apiservice_object, ca_secret_object, ensure,
};
use kdoctor_apiserver::certs::renewal::{Renewal, renewal, serving_names};
use kdoctor_transport::pki::Ca;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

use crate::support::control_plane;

fn settings() -> CertSettings {
    CertSettings {
        namespace: "kdoctor".into(),
        ca_secret: "kdoctor-ca".into(),
        serving_secret: "kdoctor-controller-cert".into(),
        apiservice: "v1beta1.system.kdoctor.io".into(),
        names: serving_names("kdoctor-controller", "kdoctor", "cluster.local"),
        renew_before: Duration::from_secs(30 * 86_400),
    }
}

fn text(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

async fn register_apiservice(client: &kube::Client) {
    let placeholder = Ca::generate("placeholder").unwrap();
    let mut object = apiservice_object(
        &placeholder,
        "v1beta1.system.kdoctor.io",
        "kdoctor",
        "kdoctor-controller",
    );
    object["spec"]["caBundle"] = serde_json::Value::Null;
    let service: APIService = serde_json::from_value(object).unwrap();
    Api::<APIService>::all(client.clone())
        .create(&PostParams::default(), &service)
        .await
        .expect("APIService");
}

#[tokio::test]
async fn a_fresh_install_gets_a_ca_a_serving_certificate_and_a_ca_bundle_once() {
    let (_sim, client) = control_plane().await;
    register_apiservice(&client).await;
    let s = settings();
    let first = ensure(&client, &s).await.expect("bootstrap");
    assert!(first.ca_created);
    assert_eq!(first.renewed, Some(Renewal::Missing));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kdoctor");
    let ca = secrets.get("kdoctor-ca").await.expect("CA Secret");
    assert_eq!(text(&ca, "ca.crt"), first.ca.pem.cert);
    let serving = secrets
        .get("kdoctor-controller-cert")
        .await
        .expect("serving Secret");
    assert_eq!(serving.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(text(&serving, "tls.crt"), first.serving.cert);
    assert_eq!(
        renewal(
            Some(&first.serving.cert),
            &first.ca.pem.cert,
            &s.names,
            jiff::Timestamp::now().as_second(),
            0
        ),
        None
    );
    let api = Api::<APIService>::all(client.clone())
        .get("v1beta1.system.kdoctor.io")
        .await
        .unwrap();
    assert_eq!(
        api.spec.unwrap().ca_bundle.unwrap().0,
        first.ca.pem.cert.as_bytes()
    );

    // Again (a restart, a second replica): nothing changes.
    let second = ensure(&client, &s).await.expect("again");
    assert!(!second.ca_created);
    assert_eq!(second.renewed, None);
    assert_eq!(second.ca.pem.cert, first.ca.pem.cert);
    assert_eq!(second.serving.cert, first.serving.cert);

    // Inside the renewal window the serving certificate is issued again, under the same CA.
    let soon = CertSettings {
        renew_before: Duration::from_secs(400 * 86_400),
        ..settings()
    };
    let renewed = ensure(&client, &soon).await.expect("renew");
    assert!(matches!(renewed.renewed, Some(Renewal::Expiring(_))));
    assert_ne!(renewed.serving.cert, first.serving.cert);
    assert_eq!(renewed.ca.pem.cert, first.ca.pem.cert);
    let stored = secrets.get("kdoctor-controller-cert").await.unwrap();
    assert_eq!(text(&stored, "tls.crt"), renewed.serving.cert);
}

#[tokio::test]
async fn a_provided_ca_is_used_and_an_unusable_one_is_named() {
    let (_sim, client) = control_plane().await;
    let provided = Ca::generate("operator-ca").unwrap();
    let secret: Secret =
        serde_json::from_value(ca_secret_object(&provided, "kdoctor", "kdoctor-ca")).unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kdoctor");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    // No APIService installed: certificates are still managed.
    let issued = ensure(&client, &settings()).await.expect("bootstrap");
    assert!(!issued.ca_created);
    assert_eq!(issued.ca.pem.cert, provided.pem.cert);

    // cert-manager's layout of a CA certificate (kubernetes.io/tls: tls.crt is the CA) works too.
    secrets
        .delete("kdoctor-ca", &DeleteParams::default())
        .await
        .unwrap();
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let managed: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "kdoctor-ca", "namespace": "kdoctor"},
        "data": {
            "tls.crt": b64(&provided.pem.cert),
            "tls.key": b64(&provided.pem.key),
            "ca.crt": b64(&provided.pem.cert),
        },
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &managed)
        .await
        .unwrap();
    let issued = ensure(&client, &settings())
        .await
        .expect("cert-manager's CA");
    assert!(!issued.ca_created);
    assert_eq!(issued.ca.pem.cert, provided.pem.cert);

    // A CA Secret without its key cannot sign: the error names the Secret and the key.
    secrets
        .delete("kdoctor-ca", &DeleteParams::default())
        .await
        .unwrap();
    let mut keyless = secret.clone();
    keyless.metadata.resource_version = None;
    keyless.data.as_mut().unwrap().remove("ca.key");
    secrets
        .create(&PostParams::default(), &keyless)
        .await
        .unwrap();
    let err = ensure(&client, &settings())
        .await
        .err()
        .expect("a keyless CA is refused")
        .to_string();
    assert!(
        err.starts_with("Secret kdoctor/kdoctor-ca: no ca.key"),
        "{err}"
    );

    // Replacing the CA re-issues the serving certificate under the new one.
    secrets
        .delete("kdoctor-ca", &DeleteParams::default())
        .await
        .unwrap();
    let replaced = ensure(&client, &settings()).await.expect("new CA");
    assert!(replaced.ca_created);
    assert_eq!(replaced.renewed, Some(Renewal::OtherCa));
}

#[tokio::test]
async fn an_apiservice_created_or_blanked_later_gets_the_ca_at_once() {
    use kdoctor_apiserver::certs::bootstrap::keep_ca_bundle;
    use kube::api::{Patch, PatchParams};
    let (_sim, client) = control_plane().await;
    let issued = ensure(&client, &settings()).await.expect("bootstrap");
    let keeper = tokio::spawn(keep_ca_bundle(
        client.clone(),
        settings(),
        issued.ca.pem.cert.clone(),
    ));
    let api: Api<APIService> = Api::all(client.clone());
    let bundle = |api: Api<APIService>| async move {
        api.get("v1beta1.system.kdoctor.io")
            .await
            .ok()
            .and_then(|a| a.spec?.ca_bundle)
            .map(|b| b.0)
    };
    let wait_for_ca = |api: Api<APIService>, expected: Vec<u8>| async move {
        for _ in 0..100 {
            if bundle(api.clone()).await.as_ref() == Some(&expected) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the caBundle was not set to the CA");
    };
    register_apiservice(&client).await;
    wait_for_ca(api.clone(), issued.ca.pem.cert.clone().into_bytes()).await;
    // `kubectl apply` of an old manifest with an empty caBundle.
    api.patch(
        "v1beta1.system.kdoctor.io",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"caBundle": ""}})),
    )
    .await
    .expect("blank it");
    wait_for_ca(api.clone(), issued.ca.pem.cert.clone().into_bytes()).await;
    keeper.abort();
}
