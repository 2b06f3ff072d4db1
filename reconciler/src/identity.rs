//! Which agent answers: before it reads an agent's reports, the harvester asks the agent for its
//! pod-bound ServiceAccount token (audience `kdoctor-report-api`) and has the API server review
//! it (TokenReview). The answer must name the pod the harvester meant to reach — its name and
//! UID, in the install's namespace — so a process that took over a dead agent's address, or any
//! other pod, cannot feed reports into the store. A review is trusted, per token, until the
//! token expires (at most [`CACHE_FOR`]): the token is bound to the pod's UID and the harvester
//! compares that UID with the live pod on every harvest, so a deleted pod's token never passes.
//! Each agent thus costs one review per token (the kubelet rotates it after about 48 minutes),
//! not one per round; at most [`MAX_CACHED`] reviews are kept.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use kdoctor_transport::report_api::TOKEN_AUDIENCE;
use kube::api::PostParams;
use kube::{Api, Client};
use sha2::{Digest, Sha256};

use crate::readiness::AgentPod;

/// The user-info keys the API server fills from a pod-bound token.
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// See [`POD_NAME_EXTRA`].
pub const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";

/// The longest a successful review is trusted (a token's own expiry comes first).
pub const CACHE_FOR: Duration = Duration::from_secs(3600);

/// The most reviews kept.
pub const MAX_CACHED: usize = 10_000;

/// Checks agents' identity tokens against the pods they should belong to.
pub struct IdentityCheck {
    client: Client,
    namespace: String,
    reviewed: Mutex<HashMap<[u8; 32], (String, Instant)>>,
}

/// How long a reviewed token stays good: until its `exp` claim, at most [`CACHE_FOR`]; zero
/// when the token carries no readable expiry (it is then reviewed every time).
pub fn trust_for(token: &str, now_unix: u64) -> Duration {
    use base64::Engine;
    let exp = token
        .split('.')
        .nth(1)
        .and_then(|payload| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(payload.trim_end_matches('='))
                .ok()
        })
        .and_then(|json| serde_json::from_slice::<serde_json::Value>(&json).ok())
        .and_then(|claims| claims.get("exp")?.as_u64());
    match exp {
        Some(exp) => Duration::from_secs(exp.saturating_sub(now_unix)).min(CACHE_FOR),
        None => Duration::ZERO,
    }
}

impl std::fmt::Debug for IdentityCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityCheck")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// Whether a review's answer proves that the token is the one of `pod`, a pod of `namespace`.
pub fn judge(status: &TokenReviewStatus, pod: &AgentPod, namespace: &str) -> Result<(), String> {
    if status.authenticated != Some(true) {
        let why = status.error.as_deref().unwrap_or("no reason given");
        return Err(format!("its identity token was refused: {why}"));
    }
    if !status
        .audiences
        .iter()
        .flatten()
        .any(|a| a == TOKEN_AUDIENCE)
    {
        return Err(format!("its identity token is not for {TOKEN_AUDIENCE:?}"));
    }
    let user = status.user.as_ref();
    let username = user.and_then(|u| u.username.as_deref()).unwrap_or_default();
    let prefix = format!("system:serviceaccount:{namespace}:");
    if !username.starts_with(&prefix) {
        return Err(format!(
            "its identity token belongs to {username:?}, not to a ServiceAccount of {namespace:?}"
        ));
    }
    let extra = |key: &str| -> Option<&str> {
        let values = user?.extra.as_ref()?.get(key)?;
        match values.as_slice() {
            [one] => Some(one.as_str()),
            _ => None,
        }
    };
    match (extra(POD_NAME_EXTRA), extra(POD_UID_EXTRA)) {
        (Some(name), Some(uid)) if name == pod.name && uid == pod.uid => Ok(()),
        (Some(name), Some(uid)) => Err(format!(
            "its identity token is pod {name:?} ({uid}), not {:?} ({})",
            pod.name, pod.uid
        )),
        _ => Err("its identity token is not bound to a pod".to_string()),
    }
}

impl IdentityCheck {
    /// Reviews tokens through `client` for agents in `namespace`.
    pub fn new(client: Client, namespace: &str) -> IdentityCheck {
        IdentityCheck {
            client,
            namespace: namespace.to_string(),
            reviewed: Mutex::new(HashMap::new()),
        }
    }

    fn cached(&self, key: &[u8; 32], pod: &AgentPod) -> bool {
        let reviewed = self.reviewed.lock().unwrap_or_else(|p| p.into_inner());
        reviewed
            .get(key)
            .is_some_and(|(uid, until)| *uid == pod.uid && Instant::now() < *until)
    }

    fn remember(&self, key: [u8; 32], pod: &AgentPod, trust: Duration) {
        if trust.is_zero() {
            return;
        }
        let mut reviewed = self.reviewed.lock().unwrap_or_else(|p| p.into_inner());
        if reviewed.len() >= MAX_CACHED {
            let now = Instant::now();
            reviewed.retain(|_, (_, until)| now < *until);
            if reviewed.len() >= MAX_CACHED {
                reviewed.clear();
            }
        }
        reviewed.insert(key, (pod.uid.clone(), Instant::now() + trust));
    }

    /// Ok when `token` is `pod`'s; otherwise why not (the harvest of that agent fails).
    pub async fn verify(&self, token: &str, pod: &AgentPod) -> Result<(), String> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if self.cached(&key, pod) {
            return Ok(());
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: Some(vec![TOKEN_AUDIENCE.to_string()]),
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("reviewing its identity token: {e}"))?;
        let status = answer.status.unwrap_or_default();
        judge(&status, pod, &self.namespace)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.remember(key, pod, trust_for(token, now));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::authentication::v1::UserInfo;

    use super::*;

    fn pod() -> AgentPod {
        AgentPod {
            name: "kdoctor-agent-abc".into(),
            uid: "uid-1".into(),
            node: "node-1".into(),
            ip: "10.0.0.7".parse().unwrap(),
            ready: true,
        }
    }

    fn status(user: &str, name: &str, uid: &str) -> TokenReviewStatus {
        TokenReviewStatus {
            authenticated: Some(true),
            audiences: Some(vec![TOKEN_AUDIENCE.to_string()]),
            user: Some(UserInfo {
                username: Some(user.to_string()),
                extra: Some(BTreeMap::from([
                    (POD_NAME_EXTRA.to_string(), vec![name.to_string()]),
                    (POD_UID_EXTRA.to_string(), vec![uid.to_string()]),
                ])),
                ..UserInfo::default()
            }),
            error: None,
        }
    }

    const AGENT: &str = "system:serviceaccount:kdoctor:kdoctor-agent";

    #[test]
    fn a_review_is_trusted_until_the_token_expires_and_no_longer_than_an_hour() {
        use base64::Engine;
        let jwt = |claims: serde_json::Value| {
            let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
            format!(
                "{}.{}.sig",
                b64(br#"{"alg":"RS256"}"#),
                b64(claims.to_string().as_bytes())
            )
        };
        let now = 1_800_000_000;
        assert_eq!(
            trust_for(&jwt(serde_json::json!({"exp": now + 600})), now),
            Duration::from_secs(600)
        );
        assert_eq!(
            trust_for(&jwt(serde_json::json!({"exp": now + 86_400})), now),
            CACHE_FOR
        );
        assert_eq!(
            trust_for(&jwt(serde_json::json!({"exp": now - 5})), now),
            Duration::ZERO
        );
        assert_eq!(
            trust_for(&jwt(serde_json::json!({"sub": "x"})), now),
            Duration::ZERO
        );
        assert_eq!(trust_for("not a token", now), Duration::ZERO);
    }

    #[test]
    fn only_the_token_of_the_pod_meant_is_accepted() {
        assert_eq!(
            judge(
                &status(AGENT, "kdoctor-agent-abc", "uid-1"),
                &pod(),
                "kdoctor"
            ),
            Ok(())
        );
        let refused = [
            (
                status(AGENT, "kdoctor-agent-xyz", "uid-2"),
                "not \"kdoctor-agent-abc\"",
            ),
            (
                status(AGENT, "kdoctor-agent-abc", "uid-old"),
                "(uid-old), not",
            ),
            (
                status(
                    "system:serviceaccount:other:kdoctor-agent",
                    "kdoctor-agent-abc",
                    "uid-1",
                ),
                "not to a ServiceAccount of \"kdoctor\"",
            ),
            (
                TokenReviewStatus {
                    authenticated: Some(false),
                    error: Some("token expired".into()),
                    ..TokenReviewStatus::default()
                },
                "refused: token expired",
            ),
            (
                TokenReviewStatus {
                    audiences: Some(vec!["https://kubernetes.default.svc".into()]),
                    ..status(AGENT, "kdoctor-agent-abc", "uid-1")
                },
                "not for \"kdoctor-report-api\"",
            ),
            (
                TokenReviewStatus {
                    user: Some(UserInfo {
                        username: Some(AGENT.into()),
                        ..UserInfo::default()
                    }),
                    ..status(AGENT, "kdoctor-agent-abc", "uid-1")
                },
                "not bound to a pod",
            ),
        ];
        for (answer, expected) in refused {
            let error = judge(&answer, &pod(), "kdoctor").unwrap_err();
            assert!(
                error.contains(expected),
                "{error:?} should say {expected:?}"
            );
        }
    }
}
