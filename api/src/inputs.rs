//! The cluster objects a task reads (an AppHttpHealthy task's TLS Secret and body ConfigMap) and
//! where they may come from. A task author is not trusted with the agents' and the controller's
//! credentials: inputs are read only from the namespaces the installer lists (conf.yml's
//! `taskInputNamespaces`, by default the install namespace), never the install's own Secrets,
//! and agents are granted exactly the objects that tasks name (see the controller's
//! `inputs` Role).

use crate::task::Task;
use crate::validation::field::{ErrorList, FieldError, FieldPath};

/// What kind of object a task input is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InputKind {
    /// A Secret (`tls.crt`, `tls.key`, `ca.crt`).
    Secret,
    /// A ConfigMap (a request body).
    ConfigMap,
}

impl InputKind {
    /// The RBAC resource.
    pub fn resource(self) -> &'static str {
        match self {
            InputKind::Secret => "secrets",
            InputKind::ConfigMap => "configmaps",
        }
    }
}

/// One object a task reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// Secret or ConfigMap.
    pub kind: InputKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The field naming the namespace (for errors).
    pub field: FieldPath,
}

/// The objects `task` reads from the cluster.
pub fn of(task: &Task) -> Vec<Input> {
    let Task::AppHttpHealthy(t) = task else {
        return Vec::new();
    };
    let target = &t.spec.target;
    let path = FieldPath::new("spec").child("target");
    let mut inputs = Vec::new();
    if let (Some(name), Some(namespace)) = (&target.tls_secret_name, &target.tls_secret_namespace) {
        inputs.push(Input {
            kind: InputKind::Secret,
            namespace: namespace.clone(),
            name: name.clone(),
            field: path.child("tlsSecretNamespace"),
        });
    }
    if let (Some(name), Some(namespace)) = (
        &target.body_configmap_name,
        &target.body_configmap_namespace,
    ) {
        inputs.push(Input {
            kind: InputKind::ConfigMap,
            namespace: namespace.clone(),
            name: name.clone(),
            field: path.child("bodyConfigmapNamespace"),
        });
    }
    inputs
}

/// Where inputs may come from, and what they may never be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputPolicy {
    /// Namespaces inputs are read from.
    pub namespaces: Vec<String>,
    /// `(namespace, name)` of Secrets no task may name: the install's own (the CA key).
    pub reserved_secrets: Vec<(String, String)>,
}

impl InputPolicy {
    /// The install namespace plus `extra` (conf.yml's `taskInputNamespaces`); the install's
    /// CA and serving Secrets reserved.
    pub fn new(install_namespace: &str, extra: &[String], reserved: &[&str]) -> InputPolicy {
        let mut namespaces = vec![install_namespace.to_string()];
        for namespace in extra {
            if !namespaces.contains(namespace) {
                namespaces.push(namespace.clone());
            }
        }
        InputPolicy {
            namespaces,
            reserved_secrets: reserved
                .iter()
                .map(|name| (install_namespace.to_string(), name.to_string()))
                .collect(),
        }
    }

    /// Whether `input` may be read.
    pub fn allows(&self, input: &Input) -> bool {
        self.namespaces.contains(&input.namespace)
            && !(input.kind == InputKind::Secret
                && self
                    .reserved_secrets
                    .iter()
                    .any(|(ns, name)| *ns == input.namespace && *name == input.name))
    }

    /// The inputs of `task` that may be read, or why not (one error per refused input).
    pub fn check(&self, task: &Task) -> Result<Vec<Input>, ErrorList> {
        let mut errors = ErrorList::default();
        let mut allowed = Vec::new();
        for input in of(task) {
            if self.allows(&input) {
                allowed.push(input);
            } else if self.namespaces.contains(&input.namespace) {
                errors.push(FieldError::forbidden(
                    input.field.clone(),
                    format!(
                        "Secret {}/{} is the install's own and cannot be a task input",
                        input.namespace, input.name
                    ),
                ));
            } else {
                errors.push(FieldError::forbidden(
                    input.field.clone(),
                    format!(
                        "kdoctor reads task inputs only from the namespaces its installer allows \
                         ({}), not {:?}: put the {} there, or ask the installer to add the \
                         namespace to taskInputNamespaces",
                        self.namespaces.join(", "),
                        input.namespace,
                        match input.kind {
                            InputKind::Secret => "Secret",
                            InputKind::ConfigMap => "ConfigMap",
                        }
                    ),
                ));
            }
        }
        errors.into_result().map(|()| allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::{InputKind, InputPolicy, of};
    use crate::fixtures::app_http_with_inputs;
    use crate::task::Task;

    fn task(secret_ns: &str, secret: &str, map_ns: &str) -> Task {
        Task::AppHttpHealthy(app_http_with_inputs(
            "t",
            (secret_ns, secret),
            (map_ns, "body"),
        ))
    }

    #[test]
    fn inputs_come_only_from_allowed_namespaces_and_never_the_ca() {
        let policy = InputPolicy::new("kdoctor", &["apps".to_string()], &["kdoctor-ca"]);
        let fine = task("kdoctor", "client-tls", "apps");
        let inputs = policy.check(&fine).expect("allowed");
        assert_eq!(
            inputs.iter().map(|i| i.kind).collect::<Vec<_>>(),
            [InputKind::Secret, InputKind::ConfigMap]
        );

        let errors = policy
            .check(&task("kube-system", "bootstrap-token", "default"))
            .expect_err("refused")
            .to_string();
        assert!(
            errors.contains("spec.target.tlsSecretNamespace")
                && errors.contains("spec.target.bodyConfigmapNamespace")
                && errors.contains("not \"kube-system\"")
                && errors.contains("taskInputNamespaces"),
            "{errors}"
        );

        let errors = policy
            .check(&task("kdoctor", "kdoctor-ca", "kdoctor"))
            .expect_err("the CA is reserved")
            .to_string();
        assert!(
            errors.contains("kdoctor/kdoctor-ca is the install's own"),
            "{errors}"
        );
        assert_eq!(of(&task("a", "b", "c")).len(), 2);
    }
}
