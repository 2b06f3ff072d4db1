//! [`Reviews`] answered by the Kubernetes API (TokenReview, SubjectAccessReview), and the watch
//! that keeps the authentication ConfigMap current.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

use super::Auth;
use super::config::{AuthnConfig, NAME, NAMESPACE};
use super::review::{Attributes, Decision, Reviews};
use super::user::User;
use crate::kube::group::{GROUP, PLURAL, VERSION};

/// Reviews through a Kubernetes client.
pub struct KubeReviews {
    client: kube::Client,
}

impl KubeReviews {
    /// Reviews with this client (the server's own service account).
    pub fn new(client: kube::Client) -> KubeReviews {
        KubeReviews { client }
    }
}

impl Reviews for KubeReviews {
    fn token_review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Option<User>, String>> {
        Box::pin(async move {
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: Some(token.to_string()),
                    audiences: None,
                },
                ..TokenReview::default()
            };
            let api: Api<TokenReview> = Api::all(self.client.clone());
            let answer = api
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| e.to_string())?;
            let Some(status) = answer.status.filter(|s| s.authenticated == Some(true)) else {
                return Ok(None);
            };
            let info = status.user.unwrap_or_default();
            let mut user = User::new(
                info.username.unwrap_or_default(),
                info.groups.unwrap_or_default(),
            );
            user.uid = info.uid;
            user.extra = info.extra.unwrap_or_default().into_iter().collect();
            Ok(Some(user))
        })
    }

    fn access_review<'a>(
        &'a self,
        user: &'a User,
        attributes: &'a Attributes,
    ) -> BoxFuture<'a, Result<Decision, String>> {
        Box::pin(async move {
            let (resource_attributes, non_resource_attributes) = match attributes {
                Attributes::Resource { verb, name } => (
                    Some(ResourceAttributes {
                        group: Some(GROUP.to_string()),
                        version: Some(VERSION.to_string()),
                        resource: Some(PLURAL.to_string()),
                        verb: Some(verb.clone()),
                        name: name.clone(),
                        ..ResourceAttributes::default()
                    }),
                    None,
                ),
                Attributes::NonResource { verb, path } => (
                    None,
                    Some(NonResourceAttributes {
                        path: Some(path.clone()),
                        verb: Some(verb.clone()),
                    }),
                ),
            };
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.name.clone()),
                    uid: user.uid.clone(),
                    groups: Some(user.groups.clone()),
                    extra: Some(user.extra.clone().into_iter().collect::<BTreeMap<_, _>>()),
                    resource_attributes,
                    non_resource_attributes,
                },
                ..SubjectAccessReview::default()
            };
            let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
            let answer = api
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| e.to_string())?;
            let status = answer.status.unwrap_or_default();
            Ok(Decision {
                allowed: status.allowed && status.denied != Some(true),
                reason: status.reason.unwrap_or_default(),
            })
        })
    }
}

/// Keeps the authentication settings in step with the ConfigMap until the task is dropped.
pub async fn watch_configmap(
    client: kube::Client,
    auth: Arc<Auth>,
    on_loaded: impl Fn() + Send + 'static,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    let config = watcher::Config::default().fields(&format!("metadata.name={NAME}"));
    // Backoff: without it a failing API server is retried in a tight loop.
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        let configmap = match event {
            Ok(watcher::Event::Apply(cm)) | Ok(watcher::Event::InitApply(cm)) => cm,
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "watching {NAMESPACE}/{NAME} failed; retrying");
                continue;
            }
        };
        match AuthnConfig::from_configmap(&configmap.data.unwrap_or_default()) {
            Ok(config) => {
                tracing::info!(
                    client_ca = config.client_ca.as_ref().map_or(0, |p| p.len),
                    requestheader_ca = config.requestheader.as_ref().map_or(0, |r| r.ca.len),
                    "authentication configuration loaded from {NAMESPACE}/{NAME}"
                );
                auth.set_config(config);
                on_loaded();
            }
            Err(e) => {
                tracing::error!(error = %e, "ignoring an unusable authentication configuration")
            }
        }
    }
}
