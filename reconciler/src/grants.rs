//! What agents may read: in every namespace tasks may read inputs from, the Role
//! `kdoctor-agent-inputs` grants the agents' ServiceAccount `get` on exactly the Secrets and
//! ConfigMaps that unfinished tasks name — nothing else (no ClusterRole grants agents any
//! Secret). Kept as declared by server-side apply; the controller can grant only what it holds
//! itself (Kubernetes' escalation check), which is its task-inputs Role in those namespaces.
//!
//! Two paths change the grant: a task's reconcile adds its inputs before its first round is
//! planned (so agents can read them when the round starts), and a loop over every
//! AppHttpHealthy task recomputes the whole grant, dropping what no unfinished task names.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kdoctor_api::inputs::{Input, InputKind, InputPolicy};
use kdoctor_api::labels::{APP_NAME, FIELD_MANAGER};
use kdoctor_api::task::{AppHttpHealthy, Task};
use kube::Client;
use kube::api::{Api, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Mutex;

/// The Role (and RoleBinding) the controller keeps in each input namespace.
pub const ROLE: &str = "kdoctor-agent-inputs";

/// Names granted in one namespace, by kind.
pub type Granted = BTreeMap<InputKind, BTreeSet<String>>;

/// The grant every namespace of `policy` should have for `tasks` (finished tasks need none).
pub fn desired<'a>(
    tasks: impl IntoIterator<Item = &'a AppHttpHealthy>,
    policy: &InputPolicy,
) -> BTreeMap<String, Granted> {
    let mut grants: BTreeMap<String, Granted> = policy
        .namespaces
        .iter()
        .map(|ns| (ns.clone(), Granted::new()))
        .collect();
    for task in tasks {
        let finished = task.status.as_ref().is_some_and(|s| s.finish);
        if finished {
            continue;
        }
        // A task with any refused input never runs: it is granted nothing.
        if let Ok(inputs) = policy.check(&Task::AppHttpHealthy(task.clone())) {
            add(&mut grants, &inputs);
        }
    }
    grants
}

fn add(grants: &mut BTreeMap<String, Granted>, inputs: &[Input]) {
    for input in inputs {
        grants
            .entry(input.namespace.clone())
            .or_default()
            .entry(input.kind)
            .or_default()
            .insert(input.name.clone());
    }
}

/// The Role of a grant: one rule per kind with names (a rule without names would grant all).
pub fn role(namespace: &str, granted: &Granted) -> Role {
    Role {
        metadata: metadata(namespace),
        rules: Some(
            granted
                .iter()
                .filter(|(_, names)| !names.is_empty())
                .map(|(kind, names)| PolicyRule {
                    api_groups: Some(vec![String::new()]),
                    resources: Some(vec![kind.resource().to_string()]),
                    resource_names: Some(names.iter().cloned().collect()),
                    verbs: vec!["get".to_string()],
                    ..PolicyRule::default()
                })
                .collect(),
        ),
    }
}

/// The binding of the Role to the agents' ServiceAccount.
pub fn binding(namespace: &str, agent_namespace: &str, agent_account: &str) -> RoleBinding {
    RoleBinding {
        metadata: metadata(namespace),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_string(),
            kind: "Role".to_string(),
            name: ROLE.to_string(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_string(),
            name: agent_account.to_string(),
            namespace: Some(agent_namespace.to_string()),
            ..Subject::default()
        }]),
    }
}

fn metadata(namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(ROLE.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(BTreeMap::from([
            (APP_NAME.to_string(), "kdoctor".to_string()),
            (
                "app.kubernetes.io/component".to_string(),
                "agent-inputs".to_string(),
            ),
        ])),
        ..ObjectMeta::default()
    }
}

/// Keeps the agents' input Roles; remembers what it applied so that a steady state writes
/// nothing.
pub struct Grants {
    client: Client,
    policy: InputPolicy,
    agent_namespace: String,
    agent_account: String,
    applied: Mutex<BTreeMap<String, Granted>>,
}

impl Grants {
    /// Grants for agents of `agent_account` in `agent_namespace`, in `policy`'s namespaces.
    pub fn new(
        client: Client,
        policy: InputPolicy,
        agent_namespace: &str,
        agent_account: &str,
    ) -> Grants {
        Grants {
            client,
            policy,
            agent_namespace: agent_namespace.to_string(),
            agent_account: agent_account.to_string(),
            applied: Mutex::new(BTreeMap::new()),
        }
    }

    /// Where inputs may come from.
    pub fn policy(&self) -> &InputPolicy {
        &self.policy
    }

    /// Adds `inputs` (already allowed by the policy) to what agents may read.
    pub async fn include(&self, inputs: &[Input]) -> Result<(), kube::Error> {
        let mut applied = self.applied.lock().await;
        let mut wanted = applied.clone();
        add(&mut wanted, inputs);
        self.converge(&mut applied, wanted, false).await
    }

    /// Makes the grant exactly `wanted` (every namespace of the policy applied at least once).
    pub async fn reset(&self, wanted: BTreeMap<String, Granted>) -> Result<(), kube::Error> {
        let mut applied = self.applied.lock().await;
        self.converge(&mut applied, wanted, true).await
    }

    async fn converge(
        &self,
        applied: &mut BTreeMap<String, Granted>,
        wanted: BTreeMap<String, Granted>,
        every_namespace: bool,
    ) -> Result<(), kube::Error> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        for (namespace, granted) in wanted {
            let known = applied.get(&namespace);
            if known == Some(&granted)
                || (known.is_none() && !every_namespace && granted.is_empty())
            {
                continue;
            }
            let roles: Api<Role> = Api::namespaced(self.client.clone(), &namespace);
            roles
                .patch(
                    ROLE,
                    &params,
                    &kube::api::Patch::Apply(role(&namespace, &granted)),
                )
                .await?;
            if known.is_none() {
                let bindings: Api<RoleBinding> = Api::namespaced(self.client.clone(), &namespace);
                bindings
                    .patch(
                        ROLE,
                        &params,
                        &kube::api::Patch::Apply(binding(
                            &namespace,
                            &self.agent_namespace,
                            &self.agent_account,
                        )),
                    )
                    .await?;
            }
            tracing::info!(
                namespace = %namespace,
                secrets = granted.get(&InputKind::Secret).map_or(0, BTreeSet::len),
                configmaps = granted.get(&InputKind::ConfigMap).map_or(0, BTreeSet::len),
                "agents' task inputs granted"
            );
            applied.insert(namespace, granted);
        }
        Ok(())
    }

    /// Recomputes the grant from every AppHttpHealthy task, after each change, until the task
    /// stream ends.
    pub async fn run(self: Arc<Self>) {
        let (reader, writer) = reflector::store::<AppHttpHealthy>();
        let api: Api<AppHttpHealthy> = Api::all(self.client.clone());
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff();
        let mut stream = std::pin::pin!(stream);
        // Recomputed once the first list is whole, then on every change.
        let mut listed = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => {
                    listed = true;
                    self.recompute(&reader).await;
                }
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) if listed => {
                    self.recompute(&reader).await;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "task watch for the agents' inputs (retrying)")
                }
            }
        }
    }

    async fn recompute(&self, reader: &Store<AppHttpHealthy>) {
        let tasks = reader.state();
        let wanted = desired(tasks.iter().map(|t| t.as_ref()), &self.policy);
        if let Err(e) = self.reset(wanted).await {
            tracing::warn!(error = %e, "keeping the agents' input Roles failed; retried on the next task change");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{desired, role};
    use kdoctor_api::fixtures::app_http_with_inputs;
    use kdoctor_api::inputs::{InputKind, InputPolicy};
    use kdoctor_api::task::AppHttpHealthy;

    fn task(name: &str, secret_ns: &str, secret: &str, finished: bool) -> AppHttpHealthy {
        let body = format!("body-{name}");
        let mut t = app_http_with_inputs(name, (secret_ns, secret), ("kdoctor", &body));
        if finished {
            t.status =
                Some(serde_json::from_value(serde_json::json!({"finish": true})).expect("status"));
        }
        t
    }

    #[test]
    fn agents_are_granted_exactly_what_unfinished_allowed_tasks_name() {
        let policy = InputPolicy::new("kdoctor", &["apps".to_string()], &["kdoctor-ca"]);
        let tasks = [
            task("a", "kdoctor", "tls-a", false),
            task("b", "apps", "tls-b", false),
            task("done", "kdoctor", "tls-done", true),
            task("stranger", "kube-system", "token", false),
            task("thief", "kdoctor", "kdoctor-ca", false),
        ];
        let grants = desired(tasks.iter(), &policy);
        assert_eq!(grants.keys().collect::<Vec<_>>(), ["apps", "kdoctor"]);
        let kdoctor = &grants["kdoctor"];
        assert_eq!(
            kdoctor[&InputKind::Secret].iter().collect::<Vec<_>>(),
            ["tls-a"]
        );
        assert_eq!(
            kdoctor[&InputKind::ConfigMap].iter().collect::<Vec<_>>(),
            ["body-a", "body-b"]
        );
        assert_eq!(
            grants["apps"][&InputKind::Secret]
                .iter()
                .collect::<Vec<_>>(),
            ["tls-b"]
        );
        // Rules always carry names: an empty grant is a Role without rules, not a wildcard.
        let rules = role("kdoctor", &kdoctor.clone()).rules.expect("rules");
        assert!(
            rules
                .iter()
                .all(|r| r.resource_names.as_ref().is_some_and(|n| !n.is_empty()))
        );
        assert_eq!(role("apps", &Default::default()).rules, Some(vec![]));
    }
}
