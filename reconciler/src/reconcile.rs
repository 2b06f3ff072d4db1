//! One reconcile of one task: validate (with the cluster-dependent checks), record the
//! incarnation in the store, ensure the carrier, harvest the ongoing round, advance the round
//! state machine, write the status (the controller is its only writer), publish Events, and
//! delete a finished task's carrier after its grace period.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kdoctor_api::defaults::{ClusterFacts, omitted_schedule};
use kdoctor_api::labels::FIELD_MANAGER;
use kdoctor_api::schedule::Schedule;
use kdoctor_api::task::{
    API_VERSION, Marked, MarkerPolicy, StatusHistoryRecord, Task, TaskKind, TaskStatus,
};
use kdoctor_api::validation;
use kdoctor_store::{IncarnationId, StoreError, TaskRecord};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use crate::carrier_set;
use crate::context::Context;
use crate::ensure::{self, CarrierState};
use crate::harvest::Harvestee;
use crate::harvest_loop::WantedHarvest;
use crate::markers;
use crate::plan::{
    self, Admission, Candidate, FinishedRound, HarvestWish, Note, Observed, OwnCarrier,
};
use crate::readiness::AgentPod;
use crate::references;
use crate::rounds;
use crate::task::TaskObject;

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A Kubernetes API call failed.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A blocking store call could not run.
    #[error("store task: {0}")]
    Join(#[from] tokio::task::JoinError),
    /// The task could not be serialized.
    #[error("task: {0}")]
    Json(#[from] serde_json::Error),
}

/// Reason of a round failed because its task was deleted while it ran.
pub const FAILURE_REASON_TASK_DELETED: &str = "the task was deleted during the round";
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, ReconcileError> {
    Ok(tokio::task::spawn_blocking(f).await??)
}

/// Applies the marker policy after a finished round; an Event on the task per flip. Failures
/// are logged and retried at the next round (marks never hold up rounds).
async fn mark_nodes<K: TaskObject>(
    ctx: &Context,
    object: &K,
    kind: TaskKind,
    name: &str,
    policy: &MarkerPolicy,
    history: &[StatusHistoryRecord],
    agents: &[AgentPod],
) {
    // The task's agent pods, as the cache holds them (for `markPods`).
    let pods: Vec<Arc<Pod>> = agents
        .iter()
        .filter_map(|a| {
            ctx.caches
                .pods
                .get(&ObjectRef::new(&a.name).within(&ctx.options.namespace))
        })
        .collect();
    match markers::mark(&ctx.client, kind, name, policy, history, &pods).await {
        Ok(flips) => {
            for flip in flips {
                let (warning, reason, what) = match flip.state {
                    Marked::Healthy => (false, "NodeMarkedHealthy", "passed"),
                    Marked::Unhealthy => (true, "NodeMarkedUnhealthy", "failed"),
                };
                ctx.event(
                    object,
                    warning,
                    reason,
                    format!(
                        "node {} {what} {} rounds in a row: condition {} set",
                        flip.node, flip.rounds, policy.condition_type
                    ),
                )
                .await;
            }
        }
        Err(error) => tracing::warn!(%kind, task = %name, %error, "marking nodes failed"),
    }
}

fn has_finalizer<K: TaskObject>(object: &K) -> bool {
    object
        .meta()
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == markers::FINALIZER)
}

/// Adds or removes the markers finalizer, keeping every other finalizer.
async fn set_finalizer<K: TaskObject>(
    ctx: &Context,
    object: &K,
    present: bool,
) -> Result<(), ReconcileError> {
    let name = object.meta().name.clone().unwrap_or_default();
    let mut finalizers: Vec<String> = object
        .meta()
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != markers::FINALIZER)
        .cloned()
        .collect();
    if present {
        finalizers.push(markers::FINALIZER.to_string());
    }
    let mut patch = json!({"metadata": {"finalizers": finalizers}});
    // Optimistic: a concurrent change of the list makes this fail and the reconcile retry.
    if let Some(rv) = &object.meta().resource_version {
        patch["metadata"]["resourceVersion"] = json!(rv);
    }
    let api: Api<K> = Api::all(ctx.client.clone());
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Writes the status by server-side apply, conditional on the object's resourceVersion (a
/// reconcile that worked from a stale copy gets a conflict instead of undoing a newer status).
async fn write_status<K: TaskObject>(
    ctx: &Context,
    object: &K,
    status: &TaskStatus,
) -> Result<bool, ReconcileError> {
    let name = object.meta().name.clone().unwrap_or_default();
    let api: Api<K> = Api::all(ctx.client.clone());
    let mut patch = json!({
        "apiVersion": API_VERSION,
        "kind": K::KIND.as_str(),
        "metadata": { "name": name },
        "status": status,
    });
    if let Some(rv) = &object.meta().resource_version {
        patch["metadata"]["resourceVersion"] = json!(rv);
    }
    match api
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(_) => {
            ctx.metrics
                .status_writes
                .with_label_values(&[K::KIND.as_str()])
                .inc();
            Ok(true)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Facts for defaulting an omitted NetReach target: whether the default agent has a load
/// balancer address and an Ingress (looked up only when the target is omitted).
async fn cluster_facts(ctx: &Context, task: &Task) -> Result<ClusterFacts, ReconcileError> {
    if !ClusterFacts::needed(task) {
        return Ok(ClusterFacts::default());
    }
    let namespace = &ctx.options.namespace;
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(ctx.client.clone(), namespace);
    let ingresses: Api<k8s_openapi::api::networking::v1::Ingress> =
        Api::namespaced(ctx.client.clone(), namespace);
    let service = services
        .get_opt(&ctx.config.agent_service_ipv4_name)
        .await?;
    let ingress = ingresses.get_opt(&ctx.config.agent_ingress_name).await?;
    Ok(ClusterFacts::of(service.as_ref(), ingress.as_ref()))
}

/// Reconciles one task: reads what the plan needs, lets [`plan`] decide, carries it out.
pub async fn reconcile<K: TaskObject>(
    object: Arc<K>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let meta = object.meta();
    let name = meta.name.clone().unwrap_or_default();
    let uid = meta.uid.clone().unwrap_or_default();
    if name.is_empty() || uid.is_empty() {
        return Ok(Action::await_change());
    }
    if meta.deletion_timestamp.is_some() {
        return finalize(&ctx, object.as_ref(), &name, &uid).await;
    }
    if ctx
        .store()
        .by_uid(&uid)
        .is_some_and(|t| t.deleted.is_some())
    {
        // Seen deleted already: a late copy from the cache.
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let task = object.to_task();
    let old_status = object.task_status().cloned().unwrap_or_default();
    let (effective, conditions) =
        match admit(&ctx, object.as_ref(), &task, &old_status, now).await? {
            Ok(admitted) => admitted,
            Err(action) => return Ok(action),
        };
    let schedule_plan = effective
        .schedule()
        .cloned()
        .unwrap_or_else(omitted_schedule);
    let schedule: Schedule = match schedule_plan.schedule.as_deref().unwrap_or("0 1").parse() {
        Ok(schedule) => schedule,
        // Validation accepted it, so this cannot happen; never loop on it.
        Err(_) => return Ok(Action::await_change()),
    };
    let (harvestee, mut record) =
        record_incarnation(&ctx, object.as_ref(), &old_status, now).await?;

    // What the plan looks at: the carrier as ensured, the ongoing round's stored reports, the
    // harvest loop's last pass.
    let agent_spec = effective.agent_spec().cloned();
    let carrier: CarrierState = match &agent_spec {
        None => ensure::default_carrier(&ctx),
        Some(agent) => {
            ensure::own_carrier(&ctx, &effective, &uid, agent, old_status.resource.as_ref()).await?
        }
    };
    let stored = match rounds::ongoing(&old_status) {
        Some(current) => {
            let (store, round) = (ctx.store().clone(), current.round_number.max(0) as u64);
            let id = harvestee.id;
            blocking(move || store.reports(id, round)).await?
        }
        None => Vec::new(),
    };
    let last_pass = ctx.harvests.last(&uid);
    let poll = Duration::from_secs(ctx.config.task_poll_interval_in_second.max(1) as u64)
        .min(ctx.options.poll);
    let decision = plan::advance(&Observed {
        now,
        generation: meta.generation,
        status: &old_status,
        conditions,
        plan: &schedule_plan,
        schedule: &schedule,
        carrier: &carrier,
        own_carrier: agent_spec.as_ref().map(|agent| OwnCarrier {
            grace_minutes: agent
                .termination_grace_period_minutes
                .unwrap_or(ctx.config.agent_default_termination_grace_period_minutes),
        }),
        stored: &stored,
        last_pass: last_pass.as_ref(),
        probing: effective.probing_time(),
        duration: effective.duration(),
        max_history: ctx.config.crd_max_history.max(1) as usize,
        poll,
        namespace: &ctx.options.namespace,
    });
    let tracked = agent_spec
        .as_ref()
        .and(decision.status.resource.as_ref())
        .map(|r| r.runtime_status);
    ctx.track_carrier(&uid, tracked);
    let requeue = decision.requeue;
    let Some(next) = carry_out(
        &ctx,
        object.as_ref(),
        &harvestee,
        &carrier,
        decision,
        &old_status,
    )
    .await?
    else {
        // Worked from a stale copy: the newer one is on its way.
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    record.status = Some(serde_json::to_value(&next)?);
    ctx.writes.record_task(record).await?;
    Ok(match requeue {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// A task being deleted: its harvest stops and, when it marks nodes, its marks come off every
/// Node before its finalizer does.
async fn finalize<K: TaskObject>(
    ctx: &Context,
    object: &K,
    name: &str,
    uid: &str,
) -> Result<Action, ReconcileError> {
    ctx.harvests.drop_task(uid);
    if has_finalizer(object) {
        let task = object.to_task();
        let removed = markers::unmark(
            &ctx.client,
            K::KIND,
            name,
            task.marker_policy(),
            &ctx.options.namespace,
        )
        .await?;
        tracing::info!(kind = %K::KIND, task = %name, nodes = removed, "removed the task's node markers");
        set_finalizer(ctx, object, false).await?;
    }
    Ok(Action::await_change())
}

/// Admission: the same rules as `kdoctor validate`, plus the objects the task names (checked
/// until its first round is planned). `Ok`: the effective task and its conditions; `Err`: what
/// the reconcile answers instead (an invalid task, a finalizer just added).
async fn admit<K: TaskObject>(
    ctx: &Context,
    object: &K,
    task: &Task,
    status: &TaskStatus,
    now: Timestamp,
) -> Result<Result<(Task, Vec<Condition>), Action>, ReconcileError> {
    let (effective, errors) = validate(ctx, task, status).await?;
    let admission = plan::admit(&Candidate {
        now,
        generation: object.meta().generation,
        status,
        errors: (!errors.is_empty()).then(|| errors.to_string()),
        marks: task.marker_policy().is_some(),
        has_finalizer: has_finalizer(object),
    });
    Ok(match (admission, effective) {
        (Admission::Valid(conditions), Some(effective)) => Ok((effective, conditions)),
        (Admission::AddFinalizer, _) => {
            set_finalizer(ctx, object, true).await?;
            Err(Action::requeue(plan::AFTER_FINALIZER))
        }
        (Admission::Invalid { status, message }, _) => {
            if let Some(status) = status {
                write_status(ctx, object, &status).await?;
                ctx.event(object, true, "InvalidTask", message.clone())
                    .await;
                tracing::warn!(kind = %K::KIND, task = object.meta().name.as_deref().unwrap_or(""), %message, "invalid task");
            }
            Err(Action::requeue(plan::INVALID_RETRY))
        }
        // Admitted without an effective task cannot happen (no errors means one); never loop.
        (Admission::Valid(_), None) => Err(Action::await_change()),
    })
}

/// Records the task's incarnation in the store (before anything is harvested into it); returns
/// what the harvest files reports under and the record, to be written again with the new status.
async fn record_incarnation<K: TaskObject>(
    ctx: &Context,
    object: &K,
    status: &TaskStatus,
    now: Timestamp,
) -> Result<(Harvestee, TaskRecord), ReconcileError> {
    let meta = object.meta();
    let spec = serde_json::to_value(object)?
        .get("spec")
        .cloned()
        .unwrap_or_default();
    let record = TaskRecord {
        kind: K::KIND,
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        created: meta.creation_timestamp.as_ref().map(|t| t.0).unwrap_or(now),
        spec,
        status: Some(serde_json::to_value(status)?),
        deleted: None,
    };
    let (id, _) = ctx.writes.record_task(record.clone()).await?;
    let harvestee = Harvestee {
        kind: K::KIND,
        name: record.name.clone(),
        uid: record.uid.clone(),
        id,
    };
    Ok((harvestee, record))
}

/// Carries out the plan's decision: the harvest's wish, the carrier's retirement, Events, the
/// status, finished rounds. Returns the status written, or `None` when the write met a newer
/// copy of the task.
async fn carry_out<K: TaskObject>(
    ctx: &Context,
    object: &K,
    harvestee: &Harvestee,
    carrier: &CarrierState,
    decision: plan::Decision,
    old_status: &TaskStatus,
) -> Result<Option<TaskStatus>, ReconcileError> {
    let uid = &harvestee.uid;
    match &decision.harvest {
        HarvestWish::Keep => {}
        HarvestWish::Want {
            agents,
            not_before,
            awaited,
        } => ctx.harvests.want(WantedHarvest {
            harvestee: harvestee.clone(),
            agents: agents.clone(),
            not_before: *not_before,
            awaited: *awaited,
        }),
        HarvestWish::Forget => ctx.harvests.forget(uid),
        HarvestWish::Drop => ctx.harvests.drop_task(uid),
    }
    if decision.retire.is_some() {
        carrier_set::delete_workload(ctx, &carrier.resource).await?;
    }
    for note in &decision.before {
        publish(ctx, object, note).await;
    }
    let next = decision.status;
    if next != *old_status && !write_status(ctx, object, &next).await? {
        return Ok(None);
    }
    for happening in &decision.after {
        if let Some(finished) = &happening.finished {
            round_finished(ctx, object, harvestee.id, &next, &carrier.agents, finished).await?;
        }
        publish(ctx, object, &happening.note).await;
    }
    Ok(Some(next))
}

/// Validates the task: its effective form (`None` when invalid) and every error, including
/// the objects it names while its first round is not planned yet; agents may read the task's
/// inputs from then on.
async fn validate(
    ctx: &Context,
    task: &Task,
    status: &TaskStatus,
) -> Result<(Option<Task>, validation::ErrorList), ReconcileError> {
    let facts = cluster_facts(ctx, task).await?;
    let mut errors = validation::ErrorList::default();
    let effective = match validation::check(task.clone(), &ctx.config, facts) {
        Ok(effective) => Some(effective),
        Err(list) => {
            errors.extend(list);
            None
        }
    };
    if status.expected_round.is_none() {
        let policy = ctx.input_policy();
        errors.extend(references::check(&ctx.client, &policy, task).await?);
        if errors.is_empty()
            && let Ok(inputs) = policy.check(task)
            && !inputs.is_empty()
        {
            ctx.grants.include(&inputs).await?;
        }
    }
    Ok((effective, errors))
}

/// A finished round: into the store, the metrics and the markers.
async fn round_finished<K: TaskObject>(
    ctx: &Context,
    object: &K,
    id: IncarnationId,
    status: &TaskStatus,
    agents: &[AgentPod],
    finished: &FinishedRound,
) -> Result<(), ReconcileError> {
    let (kind, name) = (K::KIND, object.meta().name.clone().unwrap_or_default());
    let summary = &finished.summary;
    ctx.writes.put_round(id, summary.clone()).await?;
    ctx.metrics
        .rounds
        .with_label_values(&[kind.as_str(), summary.result.as_str()])
        .inc();
    ctx.metrics.tasks.round_finished(kind, &name, summary);
    if let Some(history) = status.history.as_deref() {
        ctx.metrics
            .tasks
            .node_streaks(kind, &name, &crate::streaks::streaks(history));
        if let Some(policy) = object.to_task().marker_policy() {
            mark_nodes(ctx, object, kind, &name, policy, history, agents).await;
        }
    }
    if let Some(duration) = finished.duration {
        ctx.metrics
            .round_duration
            .with_label_values(&[kind.as_str()])
            .observe(duration.as_secs_f64());
    }
    if let Some(lag) = finished.finalise_lag {
        ctx.metrics.finalise_lag.observe(lag.as_secs_f64());
    }
    tracing::info!(%kind, task = %name, round = summary.round, result = summary.result.as_str(), "round finished");
    Ok(())
}

async fn publish<K: TaskObject>(ctx: &Context, object: &K, note: &Note) {
    ctx.event(object, note.warning, note.reason, note.message.clone())
        .await;
}

/// What the controller does after a failed reconcile: log, count, retry soon.
pub fn error_policy<K: TaskObject>(
    object: Arc<K>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    tracing::warn!(
        kind = %K::KIND,
        task = object.meta().name.as_deref().unwrap_or(""),
        %error,
        "reconcile failed"
    );
    ctx.metrics
        .reconciles
        .with_label_values(&[K::KIND.as_str(), "error"])
        .inc();
    Action::requeue(Duration::from_secs(5))
}
