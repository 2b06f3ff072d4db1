//! Noticing deleted tasks: the store marks the incarnation deleted (its reports stay served until
//! retention) and a round that was running is recorded as failed. Tasks deleted while the
//! controller was down are found when the watch's initial list completes.

use std::collections::BTreeSet;

use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use kdoctor_api::task::{TaskKind, TaskStatus};
use kdoctor_store::{IncarnationId, RoundResult, RoundSummary, Store, StoreError, Writes};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};

use crate::plan::summary;
use crate::reconcile::FAILURE_REASON_TASK_DELETED;
use crate::task::TaskObject;
use crate::task_metrics::TaskMetrics;

/// Records that the task with `uid` is gone. `last_status`: its status as last seen, when known.
pub async fn task_deleted(
    writes: &Writes,
    uid: &str,
    last_status: Option<&TaskStatus>,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let Some(task) = writes.store().by_uid(uid) else {
        return Ok(false);
    };
    if task.deleted.is_some() {
        return Ok(false);
    }
    if let Some(status) = last_status
        && let Some(round) = cut_short(
            writes.store(),
            task.id,
            status,
            now,
            FAILURE_REASON_TASK_DELETED,
        )?
    {
        writes.put_round(task.id, round).await?;
    }
    writes.mark_deleted(task.id, now).await?;
    Ok(true)
}

/// The ongoing round of `status`, if any, recorded as failed for `reason`, keeping the nodes
/// whose reports were stored (a task deleted mid-round, a local run stopped mid-round): the
/// summary to store.
pub fn cut_short(
    store: &Store,
    id: IncarnationId,
    status: &TaskStatus,
    now: Timestamp,
    reason: &str,
) -> Result<Option<RoundSummary>, StoreError> {
    let Some(record) = crate::rounds::ongoing(status) else {
        return Ok(None);
    };
    let mut round = summary(record);
    let reported = store.reports(id, round.round)?;
    round.result = RoundResult::Fail;
    round.end = Some(now);
    round.succeeded_nodes = reported
        .iter()
        .filter(|r| r.result == RoundResult::Succeed)
        .count() as u32;
    round.failed_nodes = reported.len() as u32 - round.succeeded_nodes;
    let have: BTreeSet<&str> = reported.iter().map(|r| r.node.as_str()).collect();
    round.not_reported.retain(|n| !have.contains(n.as_str()));
    round.failure_reason = Some(reason.to_string());
    Ok(Some(round))
}

/// Marks every incarnation of `kind` the store holds as live but whose UID is not in `live`.
pub async fn sweep(
    writes: &Writes,
    kind: TaskKind,
    live: &BTreeSet<String>,
) -> Result<usize, StoreError> {
    let now = Timestamp::now();
    let mut swept = 0;
    for task in writes.store().tasks() {
        if task.kind == kind && task.deleted.is_none() && !live.contains(&task.uid) {
            writes.mark_deleted(task.id, now).await?;
            swept += 1;
        }
    }
    Ok(swept)
}

/// Watches tasks of kind `K` and records deletions in the store, until the watch ends.
pub async fn track<K: TaskObject>(client: Client, writes: Writes, metrics: TaskMetrics) {
    let api: Api<K> = Api::all(client);
    let mut live: BTreeSet<String> = BTreeSet::new();
    let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
    loop {
        let event = match events.try_next().await {
            Ok(Some(event)) => event,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(kind = %K::KIND, error = %e, "task watch (retrying)");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        let result = match event {
            Event::Init => {
                live.clear();
                Ok(())
            }
            Event::InitApply(object) => {
                live.extend(object.meta().uid.clone());
                Ok(())
            }
            Event::InitDone => sweep(&writes, K::KIND, &live).await.map(|n| {
                if n > 0 {
                    tracing::info!(kind = %K::KIND, tasks = n, "tasks deleted while the controller was away");
                }
            }),
            Event::Apply(_) => Ok(()),
            Event::Delete(object) => {
                metrics.forget(K::KIND, &object.name_any());
                let uid = object.meta().uid.clone().unwrap_or_default();
                let status = object.task_status().cloned();
                task_deleted(&writes, &uid, status.as_ref(), Timestamp::now())
                    .await
                    .map(drop)
            }
        };
        if let Err(e) = result {
            tracing::warn!(kind = %K::KIND, error = %e, "recording a deleted task");
        }
    }
}
