//! The tasks local mode runs follow its task objects, as a cluster's controller follows the
//! API: a task created (from the files given, or by `kubectl apply` while local runs) starts,
//! a task deleted stops and keeps its reports (its incarnation is marked deleted in the store),
//! and a task re-created under the same name is a new incarnation.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use kdoctor_agent::round::execute::RoundPlan;
use kdoctor_api::config::Config;
use kdoctor_api::defaults::ClusterFacts;
use kdoctor_api::document::{DocumentError, decode_task};
use kdoctor_api::task::{Task, TaskKind};
use kdoctor_api::validation::{self, ErrorList, FieldError, FieldPath};
use kdoctor_apiserver::tasks::{Admit, Change, ChangeType};
use serde_json::Value;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinSet;

use crate::LocalError;
use crate::events::Event;
use crate::plan::{StandIns, local_plan};
use crate::runner::{self, Shared};
use crate::task::LocalTask;

/// What running a task needs besides the task.
pub struct Planner {
    /// conf.yml's defaults and limits.
    pub config: Config,
    /// This machine, as the one node.
    pub node: String,
    /// The agent pod's name.
    pub pod: String,
    /// Local stand-ins for the cluster's carrier and DNS.
    pub stand_ins: StandIns,
}

impl Planner {
    /// The effective task of an object and its round plan here, or every problem with it (the
    /// same rules as `kdoctor validate`, and what one machine cannot run).
    pub fn plan(&self, object: &Value) -> Result<(Task, RoundPlan), ErrorList> {
        let mut value = object.clone();
        // Unknown fields are reported with every other problem of the task, not alone.
        let mut unknown = ErrorList::default();
        let task = match decode_task(&mut value) {
            Ok(task) => task,
            Err(DocumentError::Schema(errors)) => return Err(errors),
            Err(DocumentError::UnknownFields { errors, task }) => {
                unknown = errors;
                *task
            }
            Err(other) => {
                return Err(ErrorList(vec![FieldError::invalid(
                    FieldPath::root(),
                    validation::BadValue::Raw("object".into()),
                    other.to_string(),
                )]));
            }
        };
        let task = match validation::check(task, &self.config, ClusterFacts::default()) {
            Ok(task) if unknown.is_empty() => task,
            Ok(_) => return Err(unknown),
            Err(errors) => {
                unknown.extend(errors);
                return Err(unknown);
            }
        };
        let plan = local_plan(&task, &self.config, &self.node, &self.pod, &self.stand_ins)
            .map_err(|e| {
                ErrorList(vec![FieldError::forbidden(
                    FieldPath::new("spec"),
                    e.to_string(),
                )])
            })?;
        Ok((task, plan))
    }

    /// The API server's admission of task objects.
    pub fn admit(self: &Arc<Self>) -> Admit {
        let planner = self.clone();
        Arc::new(move |object: &Value| planner.plan(object).map(|_| ()))
    }
}

/// A task being run.
struct Running {
    kind: TaskKind,
    name: String,
    stop: watch::Sender<bool>,
    /// Deleted while running: its incarnation ends when its loop has.
    deleted: bool,
}

/// Runs every task object until `stopped` resolves; then stops every task (recording rounds
/// cut short) and ends their incarnations.
pub async fn supervise(
    shared: Arc<Shared>,
    planner: Arc<Planner>,
    mut feed: broadcast::Receiver<Change>,
    stopped: impl std::future::Future<Output = ()>,
) -> Result<(), LocalError> {
    let mut running: BTreeMap<String, Running> = BTreeMap::new();
    let mut loops: JoinSet<(String, Result<(), LocalError>)> = JoinSet::new();
    // Objects already there when the feed started (the files given) are in the feed too: they
    // were created after it subscribed.
    tokio::pin!(stopped);
    let mut announced_idle = false;
    loop {
        tokio::select! {
            change = feed.recv() => match change {
                Ok(change) => match change.change {
                    ChangeType::Added => {
                        start(&shared, &planner, &change, &mut running, &mut loops);
                        announced_idle = false;
                    }
                    ChangeType::Deleted => {
                        let uid = uid_of(&change.object);
                        match running.get_mut(&uid) {
                            Some(task) => {
                                task.deleted = true;
                                let _ = task.stop.send(true);
                            }
                            None => end_incarnation(&shared, &uid).await?,
                        }
                        (shared.say)(Event::TaskDeleted {
                            kind: change.kind,
                            name: name_of(&change.object).to_string(),
                        });
                    }
                    ChangeType::Modified => {}
                },
                // Fell behind a burst of changes: what runs is set right from the objects.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    resync(&shared, &planner, &mut running, &mut loops).await?;
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
            Some(joined) = loops.join_next() => {
                let (uid, result) = match joined {
                    Ok(done) => done,
                    Err(e) => {
                        (shared.say)(Event::LoopFailed(e.to_string()));
                        continue;
                    }
                };
                if let Some(task) = running.remove(&uid) {
                    if let Err(e) = result {
                        (shared.say)(Event::Stopped { kind: task.kind, name: task.name.clone(), why: e.to_string() });
                    }
                    if task.deleted {
                        end_incarnation(&shared, &uid).await?;
                    }
                }
                if running.is_empty() && !announced_idle {
                    announced_idle = true;
                    (shared.say)(Event::AllFinished);
                }
            }
            _ = &mut stopped => break,
        }
    }
    (shared.say)(Event::Stopping);
    for task in running.values() {
        let _ = task.stop.send(true);
    }
    // A task loop records its interrupted round; bounded, so that a stuck store cannot hang
    // the exit.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !running.is_empty() {
        match tokio::time::timeout_at(deadline, loops.join_next()).await {
            Ok(Some(Ok((uid, result)))) => {
                if let (Some(task), Err(e)) = (running.remove(&uid), result) {
                    (shared.say)(Event::Stopped {
                        kind: task.kind,
                        name: task.name,
                        why: e.to_string(),
                    });
                }
            }
            Ok(Some(Err(_))) => {}
            Ok(None) => break,
            Err(_) => {
                for task in running.values() {
                    (shared.say)(Event::DidNotStop {
                        kind: task.kind,
                        name: task.name.clone(),
                    });
                }
                break;
            }
        }
    }
    // The tasks end with this run: their reports stay, marked as of an ended task.
    for object in shared_objects(&shared) {
        end_incarnation(&shared, &uid_of(&object)).await?;
    }
    Ok(())
}

fn uid_of(object: &Value) -> String {
    object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn name_of(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn shared_objects(shared: &Shared) -> Vec<Value> {
    TaskKind::ALL
        .into_iter()
        .flat_map(|kind| shared.objects.list(kind).0)
        .map(|o| (*o).clone())
        .collect()
}

/// Starts the task of an object just created (admission checked it: a failure here is
/// reported, never silently dropped).
fn start(
    shared: &Arc<Shared>,
    planner: &Planner,
    change: &Change,
    running: &mut BTreeMap<String, Running>,
    loops: &mut JoinSet<(String, Result<(), LocalError>)>,
) {
    let uid = uid_of(&change.object);
    if running.contains_key(&uid) {
        return;
    }
    let name = name_of(&change.object).to_string();
    let started = planner
        .plan(&change.object)
        .map_err(LocalError::from)
        .and_then(|(task, plan)| {
            let created = change
                .object
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(Timestamp::now);
            Ok((LocalTask::new(task, uid.clone(), created)?, plan))
        });
    let (task, plan) = match started {
        Ok(started) => started,
        Err(e) => {
            (shared.say)(Event::CannotRun {
                kind: change.kind,
                name,
                why: e.to_string(),
            });
            return;
        }
    };
    let (stop, stop_rx) = watch::channel(false);
    running.insert(
        uid.clone(),
        Running {
            kind: change.kind,
            name,
            stop,
            deleted: false,
        },
    );
    let shared = shared.clone();
    loops.spawn(async move { (uid, runner::run(shared, task, plan, stop_rx).await) });
}

/// Sets what runs right from the objects (after the feed fell behind).
async fn resync(
    shared: &Arc<Shared>,
    planner: &Planner,
    running: &mut BTreeMap<String, Running>,
    loops: &mut JoinSet<(String, Result<(), LocalError>)>,
) -> Result<(), LocalError> {
    let objects = shared_objects(shared);
    let present: std::collections::BTreeSet<String> = objects.iter().map(uid_of).collect();
    for (uid, task) in running.iter_mut() {
        if !present.contains(uid) {
            task.deleted = true;
            let _ = task.stop.send(true);
        }
    }
    for object in objects {
        let Ok(kind) = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .parse::<TaskKind>()
        else {
            continue;
        };
        // A task that already ran to its end has an incarnation in the store: not restarted.
        let uid = uid_of(&object);
        if shared.store.by_uid(&uid).is_some() {
            continue;
        }
        let change = Change {
            version: 0,
            kind,
            change: ChangeType::Added,
            object: Arc::new(object),
        };
        start(shared, planner, &change, running, loops);
    }
    Ok(())
}

/// Marks the incarnation `uid` deleted in the store (its reports stay).
async fn end_incarnation(shared: &Shared, uid: &str) -> Result<(), LocalError> {
    let store = shared.store.clone();
    let uid = uid.to_string();
    tokio::task::spawn_blocking(move || {
        if let Some(task) = store.by_uid(&uid)
            && task.deleted.is_none()
            && let Err(e) = store.mark_deleted(task.id, Timestamp::now())
        {
            tracing::warn!(error = %e, "marking a task ended");
        }
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_reports_every_error_and_what_one_machine_cannot_run() {
        let planner = Planner {
            config: Config::default(),
            node: "n".into(),
            pod: "p".into(),
            stand_ins: StandIns::default(),
        };
        let object = serde_json::json!({
            "apiVersion": "kdoctor.io/v1beta1",
            "kind": "AppHttpHealthy",
            "metadata": {"name": "web"},
            "spec": {"target": {"host": "http://127.0.0.1:1/", "method": "GET", "bodyConfigmapName": "b", "bodyConfigmapNamespace": "default"}},
        });
        let errors = planner.plan(&object).unwrap_err();
        assert!(errors.to_string().contains("need the cluster"), "{errors}");
        let object = serde_json::json!({
            "apiVersion": "kdoctor.io/v1beta1",
            "kind": "AppHttpHealthy",
            "metadata": {"name": "web"},
            "spec": {"target": {"host": "http://127.0.0.1:1/", "method": "NOPE"}, "nonsense": 1},
        });
        let errors = planner.plan(&object).unwrap_err();
        assert!(errors.0.len() >= 2, "{errors}");
    }
}
