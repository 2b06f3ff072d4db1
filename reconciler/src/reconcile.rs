//! One reconcile of one task: validate (with the cluster-dependent checks), record the
//! incarnation in the store, ensure the carrier, harvest the ongoing round, advance the round
//! state machine, write the status (the controller is its only writer), publish Events, and
//! delete a finished task's carrier after its grace period.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use kdoctor_api::defaults::{ClusterFacts, omitted_schedule};
use kdoctor_api::labels::FIELD_MANAGER;
use kdoctor_api::schedule::Schedule;
use kdoctor_api::task::{
    API_VERSION, AgentSpec, Marked, MarkerPolicy, RoundStatus, RuntimeStatus, StatusHistoryRecord,
    Task, TaskKind, TaskResource, TaskStatus,
};
use kdoctor_api::validation;
use kdoctor_store::{RoundResult, RoundSummary, StoreError, TaskRecord};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use crate::conditions::{self, CARRIER_READY, VALID, Wanted};
use crate::context::Context;
use crate::ensure::{self, CarrierState};
use crate::harvest::Harvestee;
use crate::harvest_loop::WantedHarvest;
use crate::markers;
use crate::readiness::AgentPod;
use crate::references;
use crate::rounds::{self, Inputs, RoundEvent, round_expected_nodes};
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
/// How long a finished task's carrier is kept past its grace period while its agents still
/// cannot be harvested.
const HARVEST_BEFORE_DELETE: SignedDuration = SignedDuration::from_mins(5);

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, ReconcileError> {
    Ok(tokio::task::spawn_blocking(f).await??)
}

/// The store's summary of a finalised round.
pub fn summary(record: &StatusHistoryRecord) -> RoundSummary {
    RoundSummary {
        round: record.round_number.max(0) as u64,
        result: match record.status {
            RoundStatus::Succeed => RoundResult::Succeed,
            RoundStatus::Fail => RoundResult::Fail,
            _ => RoundResult::Ongoing,
        },
        start: record.start_time_stamp.0,
        end: record.end_time_stamp.as_ref().map(|t| t.0),
        expected_nodes: record.expected_actor_number.unwrap_or(0).max(0) as u32,
        succeeded_nodes: record.succeed_agent_node_list.len() as u32,
        failed_nodes: record.failed_agent_node_list.len() as u32,
        not_reported: record.not_report_agent_node_list.clone(),
        failure_reason: record.failure_reason.clone(),
    }
}

/// Writes the status by server-side apply, conditional on the object's resourceVersion (a
/// reconcile that worked from a stale copy gets a conflict instead of undoing a newer status).
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

fn wait_until(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(then.duration_since(now))
        .unwrap_or(Duration::ZERO)
        .max(Duration::from_secs(1))
}

/// The ongoing round's reports as the store holds them (node → succeeded) and when the last
/// was stored; the harvest loop is asked for the agents whose node has not reported yet (it
/// wakes the reconcile when it stored something).
async fn ongoing_reports(
    ctx: &Arc<Context>,
    status: &TaskStatus,
    harvestee: &Harvestee,
    agents: &[AgentPod],
) -> Result<(BTreeMap<String, bool>, Option<Timestamp>), ReconcileError> {
    let mut reports: BTreeMap<String, bool> = BTreeMap::new();
    let mut last_stored: Option<Timestamp> = None;
    let Some(current) = rounds::ongoing(status) else {
        return Ok((reports, last_stored));
    };
    let (store, id) = (ctx.store.clone(), harvestee.id);
    let round = current.round_number.max(0) as u64;
    let stored = blocking(move || store.reports(id, round)).await?;
    let have: BTreeSet<&str> = stored.iter().map(|r| r.node.as_str()).collect();
    let pending: Vec<AgentPod> = agents
        .iter()
        .filter(|a| !have.contains(a.node.as_str()))
        .cloned()
        .collect();
    if pending.is_empty() {
        ctx.harvests.forget(&harvestee.uid);
    } else {
        ctx.harvests.want(WantedHarvest {
            harvestee: harvestee.clone(),
            agents: pending,
        });
    }
    for meta in stored {
        last_stored = last_stored.max(Some(meta.stored_at));
        reports.insert(meta.node, meta.result == RoundResult::Succeed);
    }
    Ok((reports, last_stored))
}

/// A finished task's own carrier: deleted after its grace period, once the harvest loop made
/// one last pass over every agent (retried for [`HARVEST_BEFORE_DELETE`] while agents fail).
/// Returns when to look again (`None`: the carrier is gone, nothing is due).
#[allow(clippy::too_many_arguments)]
async fn retire_carrier<K: TaskObject>(
    ctx: &Arc<Context>,
    object: &K,
    next: &TaskStatus,
    agent: &AgentSpec,
    resource: &mut TaskResource,
    harvestee: &Harvestee,
    agents: &[AgentPod],
    now: Timestamp,
    poll: Duration,
) -> Result<Option<Duration>, ReconcileError> {
    let uid = &harvestee.uid;
    let grace = agent
        .termination_grace_period_minutes
        .unwrap_or(ctx.config.agent_default_termination_grace_period_minutes)
        .max(0);
    let finished = next.finish_time.as_ref().map(|t| t.0).unwrap_or(now);
    let due = finished + SignedDuration::from_mins(grace);
    let last = ctx.harvests.last(uid).filter(|p| p.started >= due);
    let again = || {
        ctx.harvests.want(WantedHarvest {
            harvestee: harvestee.clone(),
            agents: agents.to_vec(),
        })
    };
    let Some(outcome) = last else {
        if now < due {
            ctx.harvests.forget(uid);
            return Ok(Some(wait_until(now, due)));
        }
        again();
        return Ok(Some(poll));
    };
    if !outcome.failures.is_empty() && now < due + HARVEST_BEFORE_DELETE {
        again();
        return Ok(Some(Duration::from_secs(10)));
    }
    ctx.harvests.forget(uid);
    if !outcome.failures.is_empty() {
        ctx.event(
            object,
            true,
            "HarvestIncomplete",
            format!(
                "deleting the carrier although {} agents could not be harvested; \
                 their nodes stay 'not reported' in the round summaries",
                outcome.failures.len()
            ),
        )
        .await;
    }
    ensure::delete_carrier(ctx, resource).await?;
    resource.runtime_status = RuntimeStatus::Deleted;
    ctx.event(
        object,
        false,
        "CarrierDeleted",
        format!(
            "{} {}/{} deleted {grace} minutes after the task finished",
            resource.runtime_type, ctx.options.namespace, resource.runtime_name
        ),
    )
    .await;
    Ok(None)
}

/// Reconciles one task.
pub async fn reconcile<K: TaskObject>(
    object: Arc<K>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let kind = K::KIND;
    let meta = object.meta();
    let name = meta.name.clone().unwrap_or_default();
    let uid = meta.uid.clone().unwrap_or_default();
    if name.is_empty() || uid.is_empty() {
        return Ok(Action::await_change());
    }
    if meta.deletion_timestamp.is_some() {
        ctx.harvests.drop_task(&uid);
        // A task with markers goes once its marks are off every Node.
        if has_finalizer(object.as_ref()) {
            let task = object.to_task();
            let removed = markers::unmark(
                &ctx.client,
                kind,
                &name,
                task.marker_policy(),
                &ctx.options.namespace,
            )
            .await?;
            tracing::info!(%kind, task = %name, nodes = removed, "removed the task's node markers");
            set_finalizer(&ctx, object.as_ref(), false).await?;
        }
        return Ok(Action::await_change());
    }
    if ctx.store.by_uid(&uid).is_some_and(|t| t.deleted.is_some()) {
        // Seen deleted already: a late copy from the cache.
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let task = object.to_task();
    let old_status = object.task_status().cloned().unwrap_or_default();
    let mut status = old_status.clone();
    let mut conds = status.conditions.take().unwrap_or_default();
    let generation = meta.generation;

    // 1. Validation: the same rules as `kdoctor validate`, plus the objects the task names
    //    (checked until its first round is planned).
    let facts = cluster_facts(&ctx, &task).await?;
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
        errors.extend(references::check(&ctx.client, &policy, &task).await?);
        // Agents may read the task's inputs before its first round is planned.
        if errors.is_empty()
            && let Ok(inputs) = policy.check(&task)
            && !inputs.is_empty()
        {
            ctx.grants.include(&inputs).await?;
        }
    }
    let effective = match effective {
        Some(effective) if errors.is_empty() => effective,
        _ => {
            let message = errors.to_string();
            let changed = conditions::set(
                &mut conds,
                Wanted {
                    type_: VALID,
                    ok: false,
                    reason: "InvalidSpec",
                    message: message.clone(),
                },
                generation,
                now,
            );
            if changed {
                status.conditions = Some(conds);
                write_status(&ctx, object.as_ref(), &status).await?;
                ctx.event(object.as_ref(), true, "InvalidTask", message.clone())
                    .await;
                tracing::warn!(%kind, task = %name, %message, "invalid task");
            }
            // A missing Secret or ConfigMap may appear: look again now and then.
            return Ok(Action::requeue(Duration::from_secs(60)));
        }
    };
    conditions::set(
        &mut conds,
        Wanted {
            type_: VALID,
            ok: true,
            reason: "Validated",
            message: "the task passed validation".to_string(),
        },
        generation,
        now,
    );
    if task.marker_policy().is_some() && !has_finalizer(object.as_ref()) {
        // Before any Node is marked, so that deleting the task always cleans up.
        set_finalizer(&ctx, object.as_ref(), true).await?;
        return Ok(Action::requeue(Duration::from_millis(100)));
    }

    // 2. The incarnation in the store (before anything is harvested into it).
    let spec = serde_json::to_value(object.as_ref())?
        .get("spec")
        .cloned()
        .unwrap_or_default();
    let record = TaskRecord {
        kind,
        name: name.clone(),
        uid: uid.clone(),
        created: meta.creation_timestamp.as_ref().map(|t| t.0).unwrap_or(now),
        spec,
        status: Some(serde_json::to_value(&old_status)?),
        deleted: None,
    };
    let store = ctx.store.clone();
    let to_record = record.clone();
    let (id, _) = blocking(move || store.record_task(&to_record)).await?;

    // 3. The carrier.
    let agent_spec = effective.agent_spec().cloned();
    let carrier: CarrierState = match &agent_spec {
        None => ensure::default_carrier(&ctx),
        Some(agent) => {
            let carrier =
                ensure::own_carrier(&ctx, &effective, &uid, agent, status.resource.as_ref())
                    .await?;
            if carrier.applied && status.resource.is_none() {
                ctx.event(
                    object.as_ref(),
                    false,
                    "CarrierCreated",
                    format!(
                        "{} {}/{} created",
                        carrier.resource.runtime_type,
                        ctx.options.namespace,
                        carrier.resource.runtime_name
                    ),
                )
                .await;
            }
            carrier
        }
    };
    let mut resource = carrier.resource.clone();
    if resource.runtime_status != RuntimeStatus::Deleted {
        conditions::set(
            &mut conds,
            Wanted {
                type_: CARRIER_READY,
                ok: carrier.ready,
                reason: if carrier.ready {
                    "AgentsReady"
                } else {
                    "AgentsNotReady"
                },
                message: carrier
                    .not_ready_reason
                    .clone()
                    .unwrap_or_else(|| format!("{} agents ready", carrier.agents.len())),
            },
            generation,
            now,
        );
    }

    // 4. The ongoing round as the store holds it; the harvest loop is asked for the agents
    //    whose node has not reported yet (it wakes this reconcile when it stored something).
    let harvestee = Harvestee {
        kind,
        name: name.clone(),
        uid: uid.clone(),
        id,
    };
    let (reports, last_stored) =
        ongoing_reports(&ctx, &status, &harvestee, &carrier.agents).await?;

    // 5. Rounds.
    let plan = effective
        .schedule()
        .cloned()
        .unwrap_or_else(omitted_schedule);
    let schedule: Schedule = match plan.schedule.as_deref().unwrap_or("0 1").parse() {
        Ok(schedule) => schedule,
        // Validation accepted it, so this cannot happen; never loop on it.
        Err(_) => return Ok(Action::await_change()),
    };
    let expected = crate::readiness::ready_nodes(&carrier.agents);
    let poll = Duration::from_secs(ctx.config.task_poll_interval_in_second.max(1) as u64)
        .min(ctx.options.poll);
    let outcome = rounds::step(
        &status,
        &Inputs {
            now,
            plan: &plan,
            schedule: &schedule,
            carrier_ready: carrier.ready,
            expected_nodes: &expected,
            reports: &reports,
            max_history: ctx.config.crd_max_history.max(1) as usize,
            poll,
        },
    );
    let mut next = outcome.status;
    let mut requeue = outcome.requeue_after;
    if !carrier.ready && resource.runtime_status != RuntimeStatus::Deleted && !next.finish {
        requeue = Some(requeue.map_or(poll, |r| r.min(poll)));
    }

    // 6. A finished task's own carrier goes after its grace period, once harvested.
    if let (true, Some(agent)) = (next.finish, &agent_spec)
        && resource.runtime_status != RuntimeStatus::Deleted
    {
        let wait = retire_carrier(
            &ctx,
            object.as_ref(),
            &next,
            agent,
            &mut resource,
            &harvestee,
            &carrier.agents,
            now,
            poll,
        )
        .await?;
        if let Some(wait) = wait {
            requeue = Some(requeue.map_or(wait, |r| r.min(wait)));
        }
    }
    // Nothing left to harvest: no ongoing round, no last harvest before a carrier goes.
    let ongoing = rounds::ongoing(&next).is_some();
    let last_harvest_due =
        next.finish && agent_spec.is_some() && resource.runtime_status != RuntimeStatus::Deleted;
    if !ongoing && !last_harvest_due {
        ctx.harvests.drop_task(&uid);
    }

    ctx.track_carrier(&uid, agent_spec.as_ref().map(|_| resource.runtime_status));
    next.resource = Some(resource);
    next.conditions = Some(conds);
    let mut written = true;
    if next != old_status {
        written = write_status(&ctx, object.as_ref(), &next).await?;
    }
    if !written {
        // Worked from a stale copy: the newer one is on its way.
        return Ok(Action::requeue(Duration::from_secs(1)));
    }

    // 7. What happened, for the store, Events and metrics.
    for event in &outcome.events {
        match event {
            RoundEvent::Started(n) => {
                let nodes = next
                    .history
                    .as_ref()
                    .and_then(|h| h.iter().find(|r| r.round_number == *n))
                    .map(|r| round_expected_nodes(r).len())
                    .unwrap_or(0);
                ctx.event(
                    object.as_ref(),
                    false,
                    "RoundStarted",
                    format!("round {n} started; {nodes} nodes are expected to report"),
                )
                .await;
            }
            RoundEvent::Finished(record) => {
                let summary = summary(record);
                let store = ctx.store.clone();
                let to_store = summary.clone();
                blocking(move || store.put_round(id, &to_store)).await?;
                let result = summary.result.as_str();
                ctx.metrics
                    .rounds
                    .with_label_values(&[kind.as_str(), result])
                    .inc();
                ctx.metrics.tasks.round_finished(kind, &name, &summary);
                if let Some(history) = next.history.as_deref() {
                    ctx.metrics
                        .tasks
                        .node_streaks(kind, &name, &crate::streaks::streaks(history));
                    if let Some(policy) = task.marker_policy() {
                        mark_nodes(
                            &ctx,
                            object.as_ref(),
                            kind,
                            &name,
                            policy,
                            history,
                            &carrier.agents,
                        )
                        .await;
                    }
                }
                if let Ok(d) = Duration::try_from(now.duration_since(summary.start)) {
                    ctx.metrics
                        .round_duration
                        .with_label_values(&[kind.as_str()])
                        .observe(d.as_secs_f64());
                }
                if summary.not_reported.is_empty()
                    && let Some(Ok(lag)) =
                        last_stored.map(|at| Duration::try_from(now.duration_since(at)))
                {
                    ctx.metrics.finalise_lag.observe(lag.as_secs_f64());
                }
                let (warning, reason) = match summary.result {
                    RoundResult::Succeed => (false, "RoundSucceeded"),
                    _ => (true, "RoundFailed"),
                };
                let why = summary
                    .failure_reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                ctx.event(
                    object.as_ref(),
                    warning,
                    reason,
                    format!(
                        "round {} {result}{why} ({} succeeded, {} failed, {} not reported)",
                        summary.round,
                        summary.succeeded_nodes,
                        summary.failed_nodes,
                        summary.not_reported.len()
                    ),
                )
                .await;
                tracing::info!(%kind, task = %name, round = summary.round, result, "round finished");
            }
        }
    }
    let mut record = record;
    record.status = Some(serde_json::to_value(&next)?);
    let store = ctx.store.clone();
    blocking(move || store.record_task(&record)).await?;

    Ok(match requeue {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
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
