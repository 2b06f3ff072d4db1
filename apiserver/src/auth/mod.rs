//! Authentication and authorization, in the order the Go delegating authenticator uses:
//! front-proxy certificate and headers, then client certificates, then bearer tokens
//! (TokenReview); anonymous requests are rejected. Authorization by SubjectAccessReview (or, for
//! a standalone server, every authenticated user), with `system:masters` bypassing it and the
//! health paths always allowed.

pub mod config;
pub mod kube_reviews;
pub mod requestheader;
pub mod review;
pub mod user;
pub mod x509;

use std::sync::{Arc, RwLock};

use axum::extract::Request;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use self::config::AuthnConfig;
use self::review::{Attributes, Decision, DecisionQuery, Reviews, TtlCache};
use self::user::User;
use crate::kube::group::{GROUP, GROUP_RESOURCE, PLURAL};
use crate::kube::status::ApiError;
use crate::metrics::{ApiMetrics, RequestInfo};

pub use self::x509::PeerCertificates;

/// Paths served without authentication (exact matches, as the Go server).
pub const ALWAYS_ALLOWED: [&str; 3] = ["/healthz", "/livez", "/readyz"];

/// How requests are authorized.
pub enum Authorizer {
    /// Every authenticated user may do everything (a standalone server whose CA issues only
    /// trusted users' certificates).
    AllowAuthenticated,
    /// SubjectAccessReview.
    Delegated,
}

/// Authentication and authorization of the server.
pub struct Auth {
    config: RwLock<Arc<AuthnConfig>>,
    reviews: Option<Arc<dyn Reviews>>,
    authorizer: Authorizer,
    tokens: TtlCache<String, Option<User>>,
    /// Keyed by the whole review: two users who differ only in uid or extra (scopes) may be
    /// answered differently.
    decisions: TtlCache<(User, Attributes), Decision>,
}

impl Auth {
    /// Authentication by client certificates of `config`, every authenticated user allowed.
    pub fn standalone(config: AuthnConfig) -> Auth {
        Auth::build(config, None, Authorizer::AllowAuthenticated)
    }

    /// Delegated to the Kubernetes API (bearer tokens and authorization through `reviews`).
    pub fn delegated(config: AuthnConfig, reviews: Arc<dyn Reviews>) -> Auth {
        Auth::build(config, Some(reviews), Authorizer::Delegated)
    }

    fn build(
        config: AuthnConfig,
        reviews: Option<Arc<dyn Reviews>>,
        authorizer: Authorizer,
    ) -> Auth {
        Auth {
            config: RwLock::new(Arc::new(config)),
            reviews,
            authorizer,
            tokens: TtlCache::new(),
            decisions: TtlCache::new(),
        }
    }

    /// Replaces the certificate settings (hot reload).
    pub fn set_config(&self, config: AuthnConfig) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
    }

    fn config(&self) -> Arc<AuthnConfig> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Who sent the request, or `None` (anonymous).
    async fn authenticate(
        &self,
        metrics: &ApiMetrics,
        request: &mut Request,
    ) -> Result<Option<User>, ApiError> {
        let config = self.config();
        let peer = request
            .extensions()
            .get::<PeerCertificates>()
            .cloned()
            .unwrap_or_default();
        let chain = peer.chain();
        if let Some(front) = &config.requestheader {
            let result = if chain.is_empty() {
                None
            } else {
                Some(front.authenticate(&peer, request.headers()))
            };
            let looks_proxied = front.names_a_user(request.headers());
            // Never let later code read identity headers that were not vouched for.
            front.strip(request.headers_mut());
            match result {
                Some(Ok(user)) => return Ok(Some(user)),
                Some(Err((reason, detail))) if looks_proxied => {
                    let cn = peer.subject().map(|(cn, _)| cn).unwrap_or_default();
                    tracing::warn!(reason = reason.as_str(), cn = %cn, detail = %detail, "front-proxy certificate rejected");
                    metrics
                        .rejected_front_proxy
                        .with_label_values(&[reason.as_str()])
                        .inc();
                }
                _ => {}
            }
        }
        if let (Some(pool), false) = (&config.client_ca, chain.is_empty())
            && pool.verify_once(&peer).is_ok()
            && let Some((cn, groups)) = peer.subject()
        {
            return Ok(Some(User::new(cn, groups.iter().cloned())));
        }
        let token = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| t.trim().to_string());
        if let (Some(token), Some(reviews)) = (token, &self.reviews) {
            if let Some(cached) = self.tokens.get(&token) {
                return Ok(cached);
            }
            let user = reviews.token_review(&token).await.map_err(|e| {
                tracing::error!(error = %e, "TokenReview failed");
                ApiError::unauthorized()
            })?;
            self.tokens.put(token, user.clone());
            return Ok(user);
        }
        Ok(None)
    }

    /// Whether `user` may make the request.
    async fn authorize(&self, user: &User, info: &RequestInfo) -> Result<Decision, ApiError> {
        if user.is_master() {
            return Ok(Decision {
                allowed: true,
                reason: String::new(),
            });
        }
        let reviews = match (&self.authorizer, &self.reviews) {
            (Authorizer::AllowAuthenticated, _) => {
                return Ok(Decision {
                    allowed: true,
                    reason: String::new(),
                });
            }
            (Authorizer::Delegated, Some(reviews)) => reviews,
            (Authorizer::Delegated, None) => {
                return Err(ApiError::internal(
                    "Internal error occurred: no authorizer configured",
                ));
            }
        };
        let attributes = if info.is_resource {
            Attributes::Resource {
                verb: info.verb.to_string(),
                name: info.name.clone(),
            }
        } else {
            Attributes::NonResource {
                verb: info.verb.to_string(),
                path: info.path.clone(),
            }
        };
        if let Some(decision) = self.decisions.get(&DecisionQuery(user, &attributes)) {
            return Ok(decision);
        }
        let decision = reviews
            .access_review(user, &attributes)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "SubjectAccessReview failed");
                ApiError::internal(format!(
                    "Internal error occurred: authorization failed: {e}"
                ))
            })?;
        self.decisions
            .put((user.clone(), attributes), decision.clone());
        Ok(decision)
    }
}

/// The 403 message of the Go server.
fn forbidden(user: &User, info: &RequestInfo, reason: &str) -> ApiError {
    let mut message = if info.is_resource {
        let subject = match &info.name {
            Some(name) => format!("{GROUP_RESOURCE} {name:?} is forbidden"),
            None => format!("{GROUP_RESOURCE} is forbidden"),
        };
        format!(
            "{subject}: User {:?} cannot {} resource {PLURAL:?} in API group {GROUP:?} at the cluster scope",
            user.name, info.verb
        )
    } else {
        format!(
            "forbidden: User {:?} cannot {} path {:?}",
            user.name, info.verb, info.path
        )
    };
    if !reason.is_empty() {
        message.push_str(": ");
        message.push_str(reason);
    }
    ApiError::forbidden(message, info.name.as_deref())
}

/// Authenticates and authorizes every request but the health paths.
pub async fn guard<F, Fut>(
    auth: &Auth,
    metrics: &ApiMetrics,
    mut request: Request,
    next: F,
) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    if ALWAYS_ALLOWED.contains(&request.uri().path()) {
        return next(request).await;
    }
    let user = match auth.authenticate(metrics, &mut request).await {
        Ok(Some(user)) => user,
        Ok(None) => return ApiError::unauthorized().into_response(),
        Err(e) => return e.into_response(),
    };
    // Derived by the metrics step outside this one (crate::pipeline); read here only.
    let info = match request.extensions_mut().remove::<RequestInfo>() {
        Some(info) => info,
        None => RequestInfo::of(
            request.method(),
            request.uri().path(),
            request.uri().query(),
        ),
    };
    match auth.authorize(&user, &info).await {
        Ok(decision) if decision.allowed => {
            let mut response = next(request).await;
            // For the access log, which sits outside this step (nothing inside reads it).
            response.extensions_mut().insert(user);
            response
        }
        Ok(decision) => {
            let mut response = forbidden(&user, &info, &decision.reason).into_response();
            response.extensions_mut().insert(user);
            response
        }
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::*;

    #[test]
    fn a_refusal_names_the_object_and_ends_with_the_reviews_reason() {
        let bob = User::new("bob", Vec::new());
        let delete = RequestInfo::of(
            &Method::DELETE,
            "/apis/system.kdoctor.io/v1beta1/kdoctorreports/netreach-task",
            None,
        );
        // RBAC gives no reason when no rule matches: kube-apiserver's own message.
        assert_eq!(
            forbidden(&bob, &delete, "").message,
            "kdoctorreports.system.kdoctor.io \"netreach-task\" is forbidden: User \"bob\" cannot delete resource \"kdoctorreports\" in API group \"system.kdoctor.io\" at the cluster scope"
        );
        // Another authorizer (a webhook) may give one; it follows, as in the Go server.
        let metrics = RequestInfo::of(&Method::GET, "/metrics", None);
        assert_eq!(
            forbidden(&bob, &metrics, "denied by policy X").message,
            "forbidden: User \"bob\" cannot get path \"/metrics\": denied by policy X"
        );
    }
}
