//! The checks of a task that need the cluster: the Secret and ConfigMap an AppHttpHealthy task
//! names come from a namespace the installer allows (and are not the install's own Secrets),
//! exist, and the Secret holds usable keys. Each problem names the field, as the other
//! validation errors do. Nothing outside the policy is ever read.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kdoctor_api::inputs::{InputKind, InputPolicy};
use kdoctor_api::task::Task;
use kdoctor_api::validation::{ErrorList, FieldError, FieldPath, check_tls_secret};
use kube::{Api, Client};

/// Checks the objects `task` refers to. `Err` only for API failures (retried), never for a
/// missing or refused object, which is a validation error.
pub async fn check(
    client: &Client,
    policy: &InputPolicy,
    task: &Task,
) -> Result<ErrorList, kube::Error> {
    let inputs = match policy.check(task) {
        Ok(inputs) => inputs,
        Err(refused) => return Ok(refused),
    };
    let mut errors = ErrorList::default();
    let path = FieldPath::new("spec").child("target");
    for input in inputs {
        let (name, namespace) = (&input.name, &input.namespace);
        match input.kind {
            InputKind::Secret => {
                let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
                match secrets.get_opt(name).await? {
                    None => errors.push(FieldError::not_found(
                        path.child("tlsSecretName"),
                        name.clone(),
                        format!("no Secret {name:?} in namespace {namespace:?}"),
                    )),
                    Some(secret) => {
                        let entries: Vec<(&str, usize)> = secret
                            .data
                            .iter()
                            .flatten()
                            .map(|(k, v)| (k.as_str(), v.0.len()))
                            .chain(
                                secret
                                    .string_data
                                    .iter()
                                    .flatten()
                                    .map(|(k, v)| (k.as_str(), v.len())),
                            )
                            .collect();
                        if let Err(list) = check_tls_secret(namespace, name, entries) {
                            errors.extend(list);
                        }
                    }
                }
            }
            InputKind::ConfigMap => {
                let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
                if maps.get_opt(name).await?.is_none() {
                    errors.push(FieldError::not_found(
                        path.child("bodyConfigmapName"),
                        name.clone(),
                        format!("no ConfigMap {name:?} in namespace {namespace:?}"),
                    ));
                }
            }
        }
    }
    Ok(errors)
}
