//! A task's carrier as one set of objects, in the manner of Stackable's `ClusterResources`:
//! every object the task declares is applied by server-side apply in one pass (only when it is
//! missing from the caches or differs from the declaration), then every object that carries the
//! task's labels (`app.kubernetes.io/managed-by=kdoctor`, `kdoctor.io/task-kind`,
//! `kdoctor.io/task-name`) but was not declared in that pass is deleted: a leftover of an older
//! declaration (an Ingress no longer asked for, the workload of the other kind, a Service of a
//! family turned off, an object an older controller made).
//!
//! The same labels find orphans: carrier objects whose task is gone. The garbage collector
//! removes a carrier whose owning task is deleted, and the sweep leaves every object with an
//! ownerReference to it; the sweep catches what the collector cannot — an object whose
//! ownerReference was lost or never written (a crash between steps, an object restored from a
//! backup).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kdoctor_api::labels::{FIELD_MANAGER, MANAGED_BY, MANAGED_BY_KDOCTOR, TASK_KIND, TASK_NAME};
use kdoctor_api::task::{AppHttpHealthy, NetReach, Netdns, TaskKind, TaskResource};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::drift;

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

/// An object a carrier can hold.
pub trait CarrierObject:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + Serialize
    + DeserializeOwned
    + std::fmt::Debug
{
    /// Which part of a carrier it is.
    const PART: Part;
}

impl CarrierObject for DaemonSet {
    const PART: Part = Part::DaemonSet;
}
impl CarrierObject for Deployment {
    const PART: Part = Part::Deployment;
}
impl CarrierObject for Service {
    const PART: Part = Part::Service;
}
impl CarrierObject for Ingress {
    const PART: Part = Part::Ingress;
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

/// One pass over a task's carrier: what it declared, and whether it wrote anything.
pub struct CarrierSet<'a> {
    ctx: &'a Context,
    task: (TaskKind, String),
    declared: BTreeSet<(Part, String)>,
    applied: bool,
}

impl<'a> CarrierSet<'a> {
    /// An empty pass over the carrier of the task `kind`/`name`.
    pub fn new(ctx: &'a Context, kind: TaskKind, name: &str) -> CarrierSet<'a> {
        CarrierSet {
            ctx,
            task: (kind, name.to_string()),
            declared: BTreeSet::new(),
            applied: false,
        }
    }

    /// Declares `desired`: applies it unless `live` (from the cache) already holds it. Returns
    /// the object's UID (for the ownerReferences of what it owns).
    pub async fn add<K: CarrierObject>(
        &mut self,
        live: Option<&K>,
        desired: &K,
    ) -> Result<String, kube::Error> {
        let name = desired.meta().name.clone().unwrap_or_default();
        self.declared.insert((K::PART, name.clone()));
        if let Some(live) = live
            && drift::holds(live, desired)
        {
            return Ok(live.meta().uid.clone().unwrap_or_default());
        }
        let api: Api<K> = Api::namespaced(self.ctx.client.clone(), &self.ctx.options.namespace);
        let written = api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(desired),
            )
            .await?;
        self.applied = true;
        self.ctx
            .metrics
            .carrier_applies
            .with_label_values(&[K::PART.as_str()])
            .inc();
        tracing::info!(
            kind = K::PART.as_str(),
            name = %name,
            created = live.is_none(),
            "applied a carrier object"
        );
        Ok(written.meta().uid.clone().unwrap_or_default())
    }

    /// Whether the pass wrote any object.
    pub fn applied(&self) -> bool {
        self.applied
    }

    /// Deletes every object in the caches that carries the task's labels but was not declared
    /// in this pass; returns how many went.
    pub async fn delete_leftovers(&self) -> Result<usize, kube::Error> {
        let found = with_cached(self.ctx, |objects| {
            leftovers(objects, &self.task, &self.declared)
        });
        let (kind, task) = (&self.task.0, &self.task.1);
        let mut deleted = 0;
        for (part, name) in found {
            if delete(self.ctx, part, &name).await? {
                deleted += 1;
                self.ctx
                    .metrics
                    .leftovers_deleted
                    .with_label_values(&[part.as_str()])
                    .inc();
                tracing::info!(%kind, %task, part = part.as_str(), %name, "deleted a carrier object its task no longer declares");
            }
        }
        Ok(deleted)
    }
}

/// The objects among `objects` made for `task` that `declared` does not name (and that are
/// not already being deleted).
pub fn leftovers<'m>(
    objects: impl IntoIterator<Item = (Part, &'m ObjectMeta)>,
    task: &(TaskKind, String),
    declared: &BTreeSet<(Part, String)>,
) -> Vec<(Part, String)> {
    objects
        .into_iter()
        .filter(|(_, meta)| meta.deletion_timestamp.is_none())
        .filter(|(_, meta)| made_for(meta).as_ref() == Some(task))
        .filter_map(|(part, meta)| Some((part, meta.name.clone()?)))
        .filter(|object| !declared.contains(object))
        .collect()
}

/// Calls `f` with every carrier-kind object of the controller's namespace in the caches.
fn with_cached<R>(
    ctx: &Context,
    f: impl FnOnce(&mut dyn Iterator<Item = (Part, &ObjectMeta)>) -> R,
) -> R {
    let namespace = ctx.options.namespace.as_str();
    let caches = &ctx.caches;
    let (daemonsets, deployments, services, ingresses) = (
        caches.daemonsets.state(),
        caches.deployments.state(),
        caches.services.state(),
        caches.ingresses.state(),
    );
    let mut objects = daemonsets
        .iter()
        .map(|o| (Part::DaemonSet, o.meta()))
        .chain(deployments.iter().map(|o| (Part::Deployment, o.meta())))
        .chain(services.iter().map(|o| (Part::Service, o.meta())))
        .chain(ingresses.iter().map(|o| (Part::Ingress, o.meta())))
        .filter(|(_, meta)| meta.namespace.as_deref() == Some(namespace));
    f(&mut objects)
}

/// Deletes a task's own carrier workload (its Services and Ingress follow by ownerReference).
pub async fn delete_workload(ctx: &Context, resource: &TaskResource) -> Result<(), kube::Error> {
    let part = if resource.runtime_type == "Deployment" {
        Part::Deployment
    } else {
        Part::DaemonSet
    };
    delete(ctx, part, &resource.runtime_name).await.map(|_| ())
}

/// Deletes one object; `false` when it was already gone.
async fn delete(ctx: &Context, part: Part, name: &str) -> Result<bool, kube::Error> {
    let result = match part {
        Part::DaemonSet => delete_as::<DaemonSet>(ctx, name).await,
        Part::Deployment => delete_as::<Deployment>(ctx, name).await,
        Part::Service => delete_as::<Service>(ctx, name).await,
        Part::Ingress => delete_as::<Ingress>(ctx, name).await,
    };
    match result {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

async fn delete_as<K: CarrierObject>(ctx: &Context, name: &str) -> Result<(), kube::Error> {
    Api::<K>::namespaced(ctx.client.clone(), &ctx.options.namespace)
        .delete(name, &DeleteParams::background())
        .await
        .map(|_| ())
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
    let mut deleted = 0;
    for ((kind, task), parts) in with_cached(ctx, |objects| by_task(objects)) {
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

    #[test]
    fn leftovers_are_the_tasks_objects_the_pass_did_not_declare() {
        let labels = |kind: &'static str, name: &'static str| {
            [
                (MANAGED_BY, MANAGED_BY_KDOCTOR),
                (TASK_KIND, kind),
                (TASK_NAME, name),
            ]
        };
        let ds = meta("kdoctor-netreach-own", &labels("NetReach", "own"));
        let v4 = meta("kdoctor-netreach-own-ipv4", &labels("NetReach", "own"));
        // No longer asked for: the Ingress, the Deployment of an older agentSpec.
        let ingress = meta("kdoctor-netreach-own", &labels("NetReach", "own"));
        let old_workload = meta("kdoctor-netreach-own", &labels("NetReach", "own"));
        // Another task's, a foreign object, and one already going.
        let other = meta("kdoctor-netreach-other", &labels("NetReach", "other"));
        let netdns = meta("kdoctor-netdns-own", &labels("Netdns", "own"));
        let foreign = meta(
            "kdoctor-netreach-own-x",
            &[(TASK_KIND, "NetReach"), (TASK_NAME, "own")],
        );
        let mut going = meta("kdoctor-netreach-own-ipv6", &labels("NetReach", "own"));
        going.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Default::default(),
        ));
        let declared = BTreeSet::from([
            (Part::DaemonSet, "kdoctor-netreach-own".to_string()),
            (Part::Service, "kdoctor-netreach-own-ipv4".to_string()),
        ]);
        let task = (TaskKind::NetReach, "own".to_string());
        let found = leftovers(
            [
                (Part::DaemonSet, &ds),
                (Part::Service, &v4),
                (Part::Ingress, &ingress),
                (Part::Deployment, &old_workload),
                (Part::DaemonSet, &other),
                (Part::DaemonSet, &netdns),
                (Part::Service, &foreign),
                (Part::Service, &going),
            ],
            &task,
            &declared,
        );
        assert_eq!(
            found,
            [
                (Part::Ingress, "kdoctor-netreach-own".to_string()),
                (Part::Deployment, "kdoctor-netreach-own".to_string()),
            ]
        );
    }
}
