//! Bringing a task's carrier into being: the objects [`crate::carrier`] builds, declared as one
//! [`CarrierSet`] on every reconcile, and its readiness from the caches.

use std::collections::BTreeMap;

use kdoctor_api::labels::APP_NAME;
use kdoctor_api::task::{AgentSpec, RuntimeStatus, Task, TaskResource};

use crate::carrier::{self, Owner, Workload};
use crate::carrier_set::CarrierSet;
use crate::context::Context;
use crate::readiness::{AgentPod, daemonset_ready, deployment_ready};

/// What the controller knows about a task's carrier after looking at it.
#[derive(Clone, Debug)]
pub struct CarrierState {
    /// `status.resource`.
    pub resource: TaskResource,
    /// Every agent is ready.
    pub ready: bool,
    /// Its agents.
    pub agents: Vec<AgentPod>,
    /// Why it is not ready (for the condition).
    pub not_ready_reason: Option<String>,
    /// The carrier's objects were (re)applied in this reconcile.
    pub applied: bool,
}

/// The default agent DaemonSet: never created or deleted by tasks.
pub fn default_carrier(ctx: &Context) -> CarrierState {
    let config = &ctx.config;
    let namespace = &ctx.options.namespace;
    let name = &config.agent_daemonset_name;
    let selector = BTreeMap::from([(APP_NAME.to_string(), name.clone())]);
    let (ready, not_ready_reason) = match ctx.caches.daemonset(namespace, name) {
        None => (
            false,
            Some(format!(
                "the default agent DaemonSet {namespace}/{name} does not exist"
            )),
        ),
        Some(ds) if daemonset_ready(&ds) => {
            let services: Vec<String> = [
                &config.agent_service_ipv4_name,
                &config.agent_service_ipv6_name,
            ]
            .into_iter()
            .zip([config.enable_ipv4, config.enable_ipv6])
            .filter(|(_, on)| *on)
            .map(|(name, _)| name.clone())
            // The install may leave out a family's Service (manifests/ are IPv4 only).
            .filter(|name| ctx.caches.has_slices(namespace, name))
            .collect();
            let agents =
                usize::try_from(ds.status.as_ref().map_or(0, |s| s.number_ready)).unwrap_or(0);
            if ctx.caches.routed(namespace, name, &services, agents) {
                (true, None)
            } else {
                (
                    false,
                    Some(format!(
                        "the Services of the default agent DaemonSet {namespace}/{name} do not route to every agent yet"
                    )),
                )
            }
        }
        Some(_) => (
            false,
            Some(format!(
                "the default agent DaemonSet {namespace}/{name} is not ready"
            )),
        ),
    };
    CarrierState {
        resource: carrier::default_agent_resource(config),
        ready,
        agents: ctx.caches.agents(namespace, &selector),
        not_ready_reason,
        applied: false,
    }
}

/// A task's own carrier, declared on every reconcile (each object applied when it is missing
/// or differs from the declaration), ready once every agent is.
pub async fn own_carrier(
    ctx: &Context,
    task: &Task,
    uid: &str,
    agent: &AgentSpec,
    previous: Option<&TaskResource>,
) -> Result<CarrierState, kube::Error> {
    let owner = Owner {
        kind: task.kind(),
        name: task.name(),
        uid,
    };
    let wants_ingress = matches!(task, Task::NetReach(t)
        if t.spec.target.as_ref().is_some_and(|target| target.ingress));
    let built = carrier::build(&owner, agent, wants_ingress, &ctx.config, &ctx.options);
    let namespace = &ctx.options.namespace;
    let selector = carrier::carrier_selector(&owner, &ctx.config);
    if previous.is_some_and(|r| r.runtime_status == RuntimeStatus::Deleted) {
        return Ok(CarrierState {
            resource: previous.cloned().unwrap_or(built.resource),
            ready: false,
            agents: Vec::new(),
            not_ready_reason: Some("the carrier was deleted after the task finished".into()),
            applied: false,
        });
    }
    let cached_ready = match &built.workload {
        Workload::DaemonSet(_) => ctx
            .caches
            .daemonset(namespace, &built.name)
            .map(|ds| daemonset_ready(&ds)),
        Workload::Deployment(_) => ctx
            .caches
            .deployment(namespace, &built.name)
            .map(|d| deployment_ready(&d)),
    };
    let created = previous.is_some_and(|r| r.runtime_status == RuntimeStatus::Created);
    // Declared, not created once: every object is compared with the cache and applied only
    // when it is missing or differs, so an upgrade's new template, an edit and a deletion all
    // converge, and a steady state costs no API request.
    let mut set = CarrierSet::new(ctx, owner.kind, owner.name);
    let workload_uid = match &built.workload {
        Workload::DaemonSet(ds) => {
            let live = ctx.caches.daemonset(namespace, &built.name);
            set.add(live.as_deref(), ds).await?
        }
        Workload::Deployment(d) => {
            let live = ctx.caches.deployment(namespace, &built.name);
            set.add(live.as_deref(), d).await?
        }
    };
    for service in &built.services {
        let mut service = service.clone();
        carrier::owned_by(
            &mut service.metadata,
            built.workload.kind(),
            &built.name,
            &workload_uid,
        );
        let name = service.metadata.name.clone().unwrap_or_default();
        let live = ctx.caches.service(namespace, &name);
        set.add(live.as_deref(), &service).await?;
    }
    if let Some(ingress) = &built.ingress {
        let mut ingress = ingress.clone();
        carrier::owned_by(
            &mut ingress.metadata,
            built.workload.kind(),
            &built.name,
            &workload_uid,
        );
        let name = ingress.metadata.name.clone().unwrap_or_default();
        let live = ctx.caches.ingress(namespace, &name);
        set.add(live.as_deref(), &ingress).await?;
    }
    set.delete_leftovers().await?;
    let agents = ctx.caches.agents(namespace, &selector);
    let workload_ready = cached_ready.unwrap_or(false);
    let services: Vec<String> = built
        .services
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    let ready_agents = agents.iter().filter(|a| a.ready).count();
    let ready = workload_ready
        && ctx
            .caches
            .routed(namespace, &built.name, &services, ready_agents);
    let mut resource = built.resource;
    resource.runtime_status = if workload_ready || created {
        RuntimeStatus::Created
    } else {
        RuntimeStatus::Creating
    };
    Ok(CarrierState {
        resource,
        ready,
        agents,
        not_ready_reason: (!ready).then(|| {
            if workload_ready {
                format!(
                    "the Services of {} {namespace}/{} do not route to every agent yet",
                    built.workload.kind(),
                    built.name
                )
            } else {
                format!(
                    "{} {namespace}/{} has not every agent ready",
                    built.workload.kind(),
                    built.name
                )
            }
        }),
        applied: set.applied(),
    })
}
