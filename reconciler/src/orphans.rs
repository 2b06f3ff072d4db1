//! Carrier objects whose task is gone: found in the caches by their labels
//! (`app.kubernetes.io/managed-by=kdoctor`, `kdoctor.io/task-kind`, `kdoctor.io/task-name`) and
//! deleted. The garbage collector removes a carrier whose owning task is deleted, and the sweep
//! leaves every object with an ownerReference to it; the sweep catches what the collector
//! cannot — an object whose ownerReference was lost or never written (a crash between steps, an
//! object restored from a backup), as Stackable's operators delete orphans by label.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kdoctor_api::labels::{MANAGED_BY, MANAGED_BY_KDOCTOR, TASK_KIND, TASK_NAME};
use kdoctor_api::task::{AppHttpHealthy, NetReach, Netdns, TaskKind};
use kube::api::DeleteParams;
use kube::{Api, Resource};

use crate::context::Context;

/// The kinds of object a carrier is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    /// The carrier workload.
    DaemonSet,
    /// The carrier workload.
    Deployment,
    /// One of its Services.
    Service,
    /// Its Ingress.
    Ingress,
}

impl Part {
    fn as_str(self) -> &'static str {
        match self {
            Part::DaemonSet => "DaemonSet",
            Part::Deployment => "Deployment",
            Part::Service => "Service",
            Part::Ingress => "Ingress",
        }
    }
}

/// The task a carrier object was made for, from its labels; `None` for anything else (the
/// default agent, objects of other managers).
pub fn made_for(meta: &ObjectMeta) -> Option<(TaskKind, String)> {
    let labels = meta.labels.as_ref()?;
    if labels.get(MANAGED_BY).map(String::as_str) != Some(MANAGED_BY_KDOCTOR) {
        return None;
    }
    let kind = labels.get(TASK_KIND)?.parse().ok()?;
    let name = labels.get(TASK_NAME).filter(|n| !n.is_empty())?;
    Some((kind, name.clone()))
}

/// Whether the object has an owner (a task, or the carrier workload for its Services and
/// Ingress): the garbage collector follows that chain by UID.
fn has_an_owner(meta: &ObjectMeta) -> bool {
    meta.owner_references
        .as_ref()
        .is_some_and(|owners| !owners.is_empty())
}

/// Carrier objects grouped by the task they were made for: `(part, name)` per task.
pub fn by_task<'a>(
    objects: impl IntoIterator<Item = (Part, &'a ObjectMeta)>,
) -> BTreeMap<(TaskKind, String), Vec<(Part, String)>> {
    let mut tasks: BTreeMap<(TaskKind, String), Vec<(Part, String)>> = BTreeMap::new();
    for (part, meta) in objects {
        // Already going, or the garbage collector's to delete once its owner is gone: two
        // deleters of one object would leave nobody sure which of them did the work.
        if meta.deletion_timestamp.is_some() || has_an_owner(meta) {
            continue;
        }
        if let (Some(task), Some(name)) = (made_for(meta), meta.name.clone()) {
            tasks.entry(task).or_default().push((part, name));
        }
    }
    tasks
}

/// Runs [`sweep`] every `every` until dropped.
pub async fn run(ctx: std::sync::Arc<Context>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(error) = sweep(&ctx).await {
            tracing::warn!(%error, "sweeping orphaned carrier objects (retrying)");
        }
    }
}

/// Deletes every carrier object in the caches whose task does not exist; returns how many.
pub async fn sweep(ctx: &Context) -> Result<usize, kube::Error> {
    let namespace = ctx.options.namespace.as_str();
    let caches = &ctx.caches;
    let (daemonsets, deployments, services, ingresses) = (
        caches.daemonsets.state(),
        caches.deployments.state(),
        caches.services.state(),
        caches.ingresses.state(),
    );
    let in_namespace = |meta: &ObjectMeta| meta.namespace.as_deref() == Some(namespace);
    let objects = daemonsets
        .iter()
        .map(|o| (Part::DaemonSet, o.meta()))
        .chain(deployments.iter().map(|o| (Part::Deployment, o.meta())))
        .chain(services.iter().map(|o| (Part::Service, o.meta())))
        .chain(ingresses.iter().map(|o| (Part::Ingress, o.meta())))
        .filter(|(_, meta)| in_namespace(meta));
    let mut deleted = 0;
    for ((kind, task), parts) in by_task(objects) {
        if task_exists(ctx, kind, &task).await? {
            continue;
        }
        for (part, name) in parts {
            if delete(ctx, part, &name).await? {
                deleted += 1;
                ctx.metrics
                    .orphans_deleted
                    .with_label_values(&[part.as_str()])
                    .inc();
                tracing::info!(%kind, %task, part = part.as_str(), %name, %namespace, "deleted a carrier object whose task is gone");
            }
        }
    }
    Ok(deleted)
}

async fn task_exists(ctx: &Context, kind: TaskKind, name: &str) -> Result<bool, kube::Error> {
    let client = ctx.client.clone();
    Ok(match kind {
        TaskKind::NetReach => Api::<NetReach>::all(client)
            .get_metadata_opt(name)
            .await?
            .is_some(),
        TaskKind::AppHttpHealthy => Api::<AppHttpHealthy>::all(client)
            .get_metadata_opt(name)
            .await?
            .is_some(),
        TaskKind::Netdns => Api::<Netdns>::all(client)
            .get_metadata_opt(name)
            .await?
            .is_some(),
    })
}

/// Deletes one object; `false` when it was already gone.
async fn delete(ctx: &Context, part: Part, name: &str) -> Result<bool, kube::Error> {
    let (client, namespace) = (ctx.client.clone(), ctx.options.namespace.as_str());
    let params = DeleteParams::background();
    let result = match part {
        Part::DaemonSet => Api::<DaemonSet>::namespaced(client, namespace)
            .delete(name, &params)
            .await
            .map(|_| ()),
        Part::Deployment => Api::<Deployment>::namespaced(client, namespace)
            .delete(name, &params)
            .await
            .map(|_| ()),
        Part::Service => Api::<Service>::namespaced(client, namespace)
            .delete(name, &params)
            .await
            .map(|_| ()),
        Part::Ingress => Api::<Ingress>::namespaced(client, namespace)
            .delete(name, &params)
            .await
            .map(|_| ()),
    };
    match result {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn carrier_objects_without_an_owner_are_grouped_by_their_task_and_nothing_else_is() {
        let carrier = [
            (MANAGED_BY, MANAGED_BY_KDOCTOR),
            (TASK_KIND, "NetReach"),
            (TASK_NAME, "own"),
        ];
        let ds = meta("kdoctor-netreach-own", &carrier);
        let svc = meta("kdoctor-netreach-own-ipv4", &carrier);
        let default_agent = meta(
            "kdoctor-agent",
            &[
                (MANAGED_BY, MANAGED_BY_KDOCTOR),
                ("app.kubernetes.io/name", "kdoctor-agent"),
            ],
        );
        let foreign = meta(
            "x",
            &[
                (MANAGED_BY, "helm"),
                (TASK_KIND, "NetReach"),
                (TASK_NAME, "own"),
            ],
        );
        let bad_kind = meta(
            "y",
            &[
                (MANAGED_BY, MANAGED_BY_KDOCTOR),
                (TASK_KIND, "Pod"),
                (TASK_NAME, "own"),
            ],
        );
        let mut going = meta("z", &carrier);
        going.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Default::default(),
        ));
        // The garbage collector's, whether or not its owner is still there.
        let mut owned = meta("kdoctor-netreach-own-ipv6", &carrier);
        owned.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: "kdoctor-netreach-own".into(),
                uid: "5f1f2a0e-0000-4000-8000-000000000001".into(),
                ..Default::default()
            },
        ]);
        let grouped = by_task([
            (Part::Service, &owned),
            (Part::DaemonSet, &ds),
            (Part::Service, &svc),
            (Part::DaemonSet, &default_agent),
            (Part::Service, &foreign),
            (Part::Service, &bad_kind),
            (Part::Service, &going),
        ]);
        assert_eq!(grouped.len(), 1, "{grouped:?}");
        assert_eq!(
            grouped[&(TaskKind::NetReach, "own".to_string())],
            [
                (Part::DaemonSet, "kdoctor-netreach-own".to_string()),
                (Part::Service, "kdoctor-netreach-own-ipv4".to_string()),
            ]
        );
    }
}
