//! TokenReview and SubjectAccessReview answered from tables that tests set, with every
//! review recorded so tests can assert what a delegating server asked.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, RwLock};

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};

/// The user a token authenticates as (`status.user` of a TokenReview).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserInfo {
    /// Username.
    pub username: String,
    /// UID.
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with a name and groups.
    pub fn new(username: &str, groups: &[&str]) -> Self {
        UserInfo {
            username: username.into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: BTreeMap::new(),
        }
    }

    fn to_json(&self) -> Value {
        let mut v = json!({"username": self.username, "groups": self.groups});
        if !self.uid.is_empty() {
            v["uid"] = json!(self.uid);
        }
        if !self.extra.is_empty() {
            v["extra"] = json!(self.extra);
        }
        v
    }
}

/// One row of the SubjectAccessReview table; `None` matches anything, the first matching rule
/// decides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SarRule {
    /// spec.user.
    pub user: Option<String>,
    /// One of spec.groups.
    pub group: Option<String>,
    /// Verb (resource or non-resource).
    pub verb: Option<String>,
    /// resourceAttributes.group.
    pub api_group: Option<String>,
    /// resourceAttributes.resource.
    pub resource: Option<String>,
    /// resourceAttributes.subresource.
    pub subresource: Option<String>,
    /// resourceAttributes.namespace.
    pub namespace: Option<String>,
    /// resourceAttributes.name.
    pub name: Option<String>,
    /// nonResourceAttributes.path.
    pub path: Option<String>,
    /// The decision: allowed (true) or denied (false).
    pub allowed: bool,
    /// status.reason.
    pub reason: String,
}

impl SarRule {
    /// Allows `user` everything.
    pub fn allow_user(user: &str) -> Self {
        SarRule {
            user: Some(user.into()),
            allowed: true,
            ..Default::default()
        }
    }

    fn matches(&self, spec: &Value) -> bool {
        let s = |p: &str| spec.pointer(p).and_then(Value::as_str);
        let ra = spec.get("resourceAttributes");
        let nra = spec.get("nonResourceAttributes");
        let verb = ra
            .and_then(|r| r.get("verb"))
            .or_else(|| nra.and_then(|n| n.get("verb")))
            .and_then(Value::as_str);
        let eq = |want: &Option<String>, got: Option<&str>| {
            want.as_ref()
                .is_none_or(|w| w == "*" || Some(w.as_str()) == got)
        };
        let group_ok = self.group.as_ref().is_none_or(|g| {
            spec.get("groups")
                .and_then(Value::as_array)
                .is_some_and(|gs| gs.iter().any(|x| x.as_str() == Some(g)))
        });
        eq(&self.user, s("/user"))
            && group_ok
            && eq(&self.verb, verb)
            && eq(&self.api_group, s("/resourceAttributes/group"))
            && eq(&self.resource, s("/resourceAttributes/resource"))
            && eq(&self.subresource, s("/resourceAttributes/subresource"))
            && eq(&self.namespace, s("/resourceAttributes/namespace"))
            && eq(&self.name, s("/resourceAttributes/name"))
            && eq(&self.path, s("/nonResourceAttributes/path"))
    }
}

/// The review tables and the record of reviews asked.
#[derive(Default)]
pub struct Reviews {
    tokens: RwLock<HashMap<String, UserInfo>>,
    rules: RwLock<Vec<SarRule>>,
    unavailable: RwLock<bool>,
    token_reviews: Mutex<Vec<Value>>,
    sars: Mutex<Vec<Value>>,
}

fn lock_poisoned<T>(e: std::sync::PoisonError<T>) -> T {
    e.into_inner()
}

impl Reviews {
    /// Makes `token` authenticate as `user`.
    pub fn set_token(&self, token: &str, user: UserInfo) {
        self.tokens
            .write()
            .unwrap_or_else(lock_poisoned)
            .insert(token.into(), user);
    }

    /// Replaces the SubjectAccessReview table (unmatched reviews are denied with no reason).
    pub fn set_sar_rules(&self, rules: Vec<SarRule>) {
        *self.rules.write().unwrap_or_else(lock_poisoned) = rules;
    }

    /// Appends one rule to the SubjectAccessReview table.
    pub fn add_sar_rule(&self, rule: SarRule) {
        self.rules.write().unwrap_or_else(lock_poisoned).push(rule);
    }

    /// While true, reviews fail with 500 InternalError (to test a delegating server's outage
    /// handling without kube-rs's retries of 503).
    pub fn set_unavailable(&self, unavailable: bool) {
        *self.unavailable.write().unwrap_or_else(lock_poisoned) = unavailable;
    }

    /// The specs of every TokenReview asked so far.
    pub fn token_reviews(&self) -> Vec<Value> {
        self.token_reviews
            .lock()
            .unwrap_or_else(lock_poisoned)
            .clone()
    }

    /// The specs of every SubjectAccessReview asked so far (self-reviews included).
    pub fn subject_access_reviews(&self) -> Vec<Value> {
        self.sars.lock().unwrap_or_else(lock_poisoned).clone()
    }

    fn check_available(&self) -> ApiResult<()> {
        if *self.unavailable.read().unwrap_or_else(lock_poisoned) {
            // 500 rather than 503: kube-rs retries 503 for minutes, and a test wants the failure now.
            return Err(ApiError::internal("the review backend is unavailable"));
        }
        Ok(())
    }

    /// The user a token maps to, without recording a review (the sim's own authentication).
    pub fn peek_token(&self, token: &str) -> Option<UserInfo> {
        self.tokens
            .read()
            .unwrap_or_else(lock_poisoned)
            .get(token)
            .cloned()
    }

    /// The table's decision for a SubjectAccessReview spec, if a rule matches.
    pub fn table_decision(&self, spec: &Value) -> Option<(bool, String)> {
        self.rules
            .read()
            .unwrap_or_else(lock_poisoned)
            .iter()
            .find(|r| r.matches(spec))
            .map(|r| (r.allowed, r.reason.clone()))
    }

    /// Records a review asked of the RBAC evaluator instead of the table.
    pub fn record_sar(&self, spec: Value) {
        self.sars.lock().unwrap_or_else(lock_poisoned).push(spec);
    }

    /// Answers a TokenReview object.
    pub fn token_review(&self, mut review: Value) -> ApiResult<Value> {
        self.check_available()?;
        let spec = review.get("spec").cloned().unwrap_or(Value::Null);
        self.token_reviews
            .lock()
            .unwrap_or_else(lock_poisoned)
            .push(spec.clone());
        let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
        let status = match self.tokens.read().unwrap_or_else(lock_poisoned).get(token) {
            Some(user) => {
                let mut s = json!({"authenticated": true, "user": user.to_json()});
                if let Some(aud) = spec.get("audiences") {
                    s["audiences"] = aud.clone();
                }
                s
            }
            None => json!({"authenticated": false, "error": "invalid bearer token"}),
        };
        review["status"] = status;
        review["apiVersion"] = json!("authentication.k8s.io/v1");
        review["kind"] = json!("TokenReview");
        Ok(review)
    }

    /// Answers a SubjectAccessReview (or SelfSubjectAccessReview, for `self_user`).
    pub fn subject_access_review(
        &self,
        mut review: Value,
        self_user: Option<&UserInfo>,
    ) -> ApiResult<Value> {
        self.check_available()?;
        let mut spec = review.get("spec").cloned().unwrap_or(Value::Null);
        if let Some(u) = self_user {
            spec["user"] = json!(u.username);
            spec["groups"] = json!(u.groups);
        }
        self.sars
            .lock()
            .unwrap_or_else(lock_poisoned)
            .push(spec.clone());
        let rules = self.rules.read().unwrap_or_else(lock_poisoned);
        let status = match rules.iter().find(|r| r.matches(&spec)) {
            Some(r) if r.allowed => json!({"allowed": true, "reason": r.reason}),
            Some(r) => json!({"allowed": false, "denied": true, "reason": r.reason}),
            None => json!({"allowed": false}),
        };
        review["status"] = status;
        Ok(review)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_decide_and_record() {
        let r = Reviews::default();
        r.set_token("t1", UserInfo::new("alice", &["dev"]));
        let ok = r
            .token_review(json!({"spec": {"token": "t1"}}))
            .expect("review");
        assert_eq!(ok["status"]["user"]["username"], json!("alice"));
        let bad = r
            .token_review(json!({"spec": {"token": "x"}}))
            .expect("review");
        assert_eq!(bad["status"]["authenticated"], json!(false));
        r.set_sar_rules(vec![SarRule {
            group: Some("dev".into()),
            verb: Some("get".into()),
            resource: Some("kdoctorreports".into()),
            allowed: true,
            reason: "dev may read".into(),
            ..Default::default()
        }]);
        let spec = json!({"spec": {"user": "alice", "groups": ["dev"],
            "resourceAttributes": {"verb": "get", "resource": "kdoctorreports", "group": "system.kdoctor.io"}}});
        assert_eq!(
            r.subject_access_review(spec, None).expect("sar")["status"]["allowed"],
            json!(true)
        );
        let denied = json!({"spec": {"user": "bob", "resourceAttributes": {"verb": "get", "resource": "kdoctorreports"}}});
        assert_eq!(
            r.subject_access_review(denied, None).expect("sar")["status"]["allowed"],
            json!(false)
        );
        assert_eq!(r.subject_access_reviews().len(), 2);
        r.set_unavailable(true);
        assert_eq!(
            r.token_review(json!({"spec": {"token": "t1"}}))
                .expect_err("down")
                .code,
            500
        );
    }
}
