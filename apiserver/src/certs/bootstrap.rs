//! Bootstrapping and renewing the install's certificates through the Kubernetes API: the CA
//! Secret (created when absent, used as it is when provided — by `kdoctor certs`, Helm or an
//! operator), the serving certificate Secret (issued under that CA when missing, foreign,
//! incomplete or near expiry) and the APIService caBundle. Idempotent: every replica may run it;
//! a CA created concurrently by another replica wins by `create` semantics.

use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::renewal::{Renewal, renewal};
use kdoctor_transport::pki::{Ca, Pem, PkiError};

/// Field manager of the controller's certificate writes.
pub const FIELD_MANAGER: &str = "kdoctor-controller";

/// Where the certificates live and what they name.
#[derive(Clone, Debug)]
pub struct CertSettings {
    /// Namespace of the Secrets.
    pub namespace: String,
    /// Secret with `ca.crt` and `ca.key`.
    pub ca_secret: String,
    /// Secret (type kubernetes.io/tls) with the serving certificate.
    pub serving_secret: String,
    /// APIService whose caBundle is the CA.
    pub apiservice: String,
    /// Names the serving certificate must carry.
    pub names: Vec<String>,
    /// Renew a serving certificate this long before it expires.
    pub renew_before: Duration,
}

/// What went wrong; names the object.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// The API server refused or failed.
    #[error("{what}: {source}")]
    Api {
        /// The object.
        what: String,
        /// The client's error.
        source: kube::Error,
    },
    /// A provided Secret cannot be used.
    #[error("{what}: {problem}")]
    Unusable {
        /// The object.
        what: String,
        /// What is wrong.
        problem: String,
    },
    /// A certificate could not be made.
    #[error(transparent)]
    Pki(#[from] PkiError),
}

/// The certificates in force.
pub struct Issued {
    /// The install's CA.
    pub ca: Ca,
    /// The serving certificate and key.
    pub serving: Pem,
    /// Why the serving certificate was issued now (`None`: the stored one was kept).
    pub renewed: Option<Renewal>,
    /// Whether this call created the CA.
    pub ca_created: bool,
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text.as_bytes())
}

fn labels(component: &str) -> Value {
    json!({
        "app.kubernetes.io/name": "kdoctor",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "kdoctor",
    })
}

/// The CA Secret.
pub fn ca_secret_object(ca: &Ca, namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels("ca")},
        "type": "Opaque",
        "data": {"ca.crt": b64(&ca.pem.cert), "ca.key": b64(&ca.pem.key)},
    })
}

/// The serving certificate Secret.
pub fn serving_secret_object(serving: &Pem, ca: &Ca, namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels("controller")},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": b64(&serving.cert), "tls.key": b64(&serving.key), "ca.crt": b64(&ca.pem.cert)},
    })
}

/// The APIService registering the report API, trusting `ca`.
pub fn apiservice_object(ca: &Ca, name: &str, namespace: &str, service: &str) -> Value {
    json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name, "labels": labels("apiserver")},
        "spec": {
            "group": crate::kube::group::GROUP,
            "version": crate::kube::group::VERSION,
            "groupPriorityMinimum": 1000,
            "versionPriority": 100,
            "service": {"namespace": namespace, "name": service, "port": 443},
            "caBundle": b64(&ca.pem.cert),
        },
    })
}

fn key(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok()
}

fn api_error(what: &str) -> impl FnOnce(kube::Error) -> CertError + '_ {
    move |source| CertError::Api {
        what: what.to_string(),
        source,
    }
}

/// The CA of a provided Secret.
fn ca_of(secret: &Secret, what: &str) -> Result<Ca, CertError> {
    let unusable = |problem: String| CertError::Unusable {
        what: what.to_string(),
        problem,
    };
    // kdoctor's layout (ca.crt and ca.key), or the kubernetes.io/tls layout of a CA certificate
    // (tls.crt is the CA, tls.key its key): what cert-manager writes for an isCA Certificate.
    let (cert, private) = match (key(secret, "ca.key"), key(secret, "tls.key")) {
        (Some(private), _) => (
            key(secret, "ca.crt").ok_or_else(|| unusable("no ca.crt".to_string()))?,
            private,
        ),
        (None, Some(private)) => (
            key(secret, "tls.crt").ok_or_else(|| unusable("no tls.crt".to_string()))?,
            private,
        ),
        (None, None) => {
            return Err(unusable(
                "no ca.key (nor tls.key of a CA certificate): the controller signs the serving and harvester certificates"
                    .into(),
            ));
        }
    };
    Ca::from_pem(Pem { cert, key: private }).map_err(|e| unusable(e.to_string()))
}

/// The CA: the Secret's, or a new one stored in a new Secret.
async fn ca(secrets: &Api<Secret>, s: &CertSettings) -> Result<(Ca, bool), CertError> {
    let what = format!("Secret {}/{}", s.namespace, s.ca_secret);
    if let Some(secret) = secrets
        .get_opt(&s.ca_secret)
        .await
        .map_err(api_error(&what))?
    {
        return Ok((ca_of(&secret, &what)?, false));
    }
    let ca = Ca::generate("kdoctor-ca")?;
    let object: Secret = serde_json::from_value(ca_secret_object(&ca, &s.namespace, &s.ca_secret))
        .map_err(|e| CertError::Unusable {
            what: what.clone(),
            problem: e.to_string(),
        })?;
    match secrets.create(&PostParams::default(), &object).await {
        Ok(_) => {
            tracing::info!(secret = %what, "created the install's CA");
            Ok((ca, true))
        }
        // Another replica created it first: use theirs, so there is one CA.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let secret = secrets.get(&s.ca_secret).await.map_err(api_error(&what))?;
            Ok((ca_of(&secret, &what)?, false))
        }
        Err(source) => Err(CertError::Api { what, source }),
    }
}

fn now_unix() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Makes sure the CA, a good serving certificate and the APIService caBundle exist; returns the
/// certificates in force. An absent APIService is only logged (the server also runs without
/// the aggregation layer).
pub async fn ensure(client: &Client, s: &CertSettings) -> Result<Issued, CertError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &s.namespace);
    let (ca, ca_created) = ca(&secrets, s).await?;
    let what = format!("Secret {}/{}", s.namespace, s.serving_secret);
    let stored = secrets
        .get_opt(&s.serving_secret)
        .await
        .map_err(api_error(&what))?;
    let cert = stored.as_ref().and_then(|secret| key(secret, "tls.crt"));
    let private = stored.as_ref().and_then(|secret| key(secret, "tls.key"));
    let renew_before = i64::try_from(s.renew_before.as_secs()).unwrap_or(i64::MAX);
    let mut why = renewal(
        cert.as_deref(),
        &ca.pem.cert,
        &s.names,
        now_unix(),
        renew_before,
    );
    if why.is_none() && private.is_none() {
        why = Some(Renewal::Unreadable("no tls.key".to_string()));
    }
    let serving = match (&why, cert, private) {
        (None, Some(cert), Some(key)) => Pem { cert, key },
        _ => {
            let serving = ca.serving(&s.names)?;
            let object = serving_secret_object(&serving, &ca, &s.namespace, &s.serving_secret);
            secrets
                .patch(
                    &s.serving_secret,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&object),
                )
                .await
                .map_err(api_error(&what))?;
            if let Some(reason) = &why {
                tracing::info!(secret = %what, %reason, "issued the serving certificate");
            }
            serving
        }
    };
    inject_ca_bundle(client, s, &ca).await?;
    Ok(Issued {
        ca,
        serving,
        renewed: why,
        ca_created,
    })
}

/// Sets the APIService's caBundle to the CA when it differs.
async fn inject_ca_bundle(client: &Client, s: &CertSettings, ca: &Ca) -> Result<(), CertError> {
    let what = format!("APIService {}", s.apiservice);
    let api: Api<APIService> = Api::all(client.clone());
    let Some(current) = api.get_opt(&s.apiservice).await.map_err(api_error(&what))? else {
        tracing::warn!(apiservice = %s.apiservice, "no APIService to give the CA to yet; it gets the CA as soon as it is created");
        return Ok(());
    };
    set_ca_bundle(&api, &current, s, &ca.pem.cert).await
}

async fn set_ca_bundle(
    api: &Api<APIService>,
    current: &APIService,
    s: &CertSettings,
    ca_pem: &str,
) -> Result<(), CertError> {
    let same = current
        .spec
        .as_ref()
        .and_then(|spec| spec.ca_bundle.as_ref())
        .is_some_and(|b| b.0 == ca_pem.as_bytes());
    if same {
        return Ok(());
    }
    let what = format!("APIService {}", s.apiservice);
    let patch = json!({"spec": {"caBundle": b64(ca_pem), "insecureSkipTLSVerify": null}});
    api.patch(
        &s.apiservice,
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(api_error(&what))?;
    tracing::info!(apiservice = %s.apiservice, "set the APIService caBundle to the install's CA");
    Ok(())
}

/// Keeps the APIService's caBundle equal to `ca_pem` for as long as it runs: an APIService
/// created after the controller, or re-applied from a manifest, gets the CA at once.
pub async fn keep_ca_bundle(client: Client, s: CertSettings, ca_pem: String) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let api: Api<APIService> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", s.apiservice));
    let mut changes = watcher(api.clone(), config)
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(change) = changes.next().await {
        let result = match change {
            Ok(current) => set_ca_bundle(&api, &current, &s, &ca_pem).await,
            Err(error) => {
                tracing::debug!(%error, "APIService watch (retrying)");
                Ok(())
            }
        };
        if let Err(error) = result {
            tracing::warn!(%error, "cannot set the APIService caBundle");
        }
    }
}
