//! The agent's task loop: watch the tasks in scope, start each due round once, probe, and spool
//! the report for the harvester. The agent never writes a task's status; the controller learns
//! of the round from the spooled report.

use std::sync::{Arc, Mutex};

use futures::stream::{BoxStream, SelectAll};
use futures::{StreamExt, TryStreamExt};
use jiff::{SignedDuration, Timestamp};
use kdoctor_api::config::Config;
use kdoctor_api::task::{AppHttpHealthy, NetReach, Netdns, Task, TaskKind};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::task::JoinSet;

use super::discover::Discovery;
use super::duty::{Duty, Ledger, Scope, due, time_box};
use super::plan::{Actor, plan};
use crate::config::{AgentArgs, TaskArgs};
use crate::metrics::Metrics;
use crate::probe_metrics::{RoundLabels, target_pod};
use crate::round::execute::{RoundPlan, execute_with};
use crate::spool::Spool;

/// Why the task loop cannot start; names the flag.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// Rounds need somewhere to put their reports.
    #[error("--default-agent and --task-kind need --report-dir: rounds spool their reports there")]
    NoSpool,
    /// Reports must name the node.
    #[error(
        "--default-agent and --task-kind need the node name (--node-name or ENV_LOCAL_NODE_NAME)"
    )]
    NoNode,
    /// `--config-path` is unreadable or invalid.
    #[error("--config-path {path}: {problem}")]
    Config {
        /// The file.
        path: String,
        /// What is wrong.
        problem: String,
    },
}

/// Runs the rounds of the tasks in scope.
pub struct Runner {
    scope: Scope,
    actor: Actor,
    discovery: Discovery,
    spool: Arc<Spool>,
    metrics: Metrics,
    report_expiry: SignedDuration,
    ledger: Mutex<Ledger>,
}

impl Runner {
    /// Checks the flags and reads `conf.yml`; `None` when the agent runs no rounds.
    pub fn new(
        client: Client,
        agent: &AgentArgs,
        tasks: &TaskArgs,
        spool: Option<Arc<Spool>>,
        metrics: Metrics,
    ) -> Result<Option<Runner>, RunnerError> {
        let Some(scope) = Scope::from_args(tasks) else {
            return Ok(None);
        };
        let spool = spool.ok_or(RunnerError::NoSpool)?;
        let node = agent.node_name.clone().ok_or(RunnerError::NoNode)?;
        let config = match &tasks.config_path {
            Some(path) => {
                let fail = |problem: String| RunnerError::Config {
                    path: path.display().to_string(),
                    problem,
                };
                let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
                Config::from_yaml(&text).map_err(|e| fail(e.to_string()))?
            }
            None => Config::default(),
        };
        let pod = agent
            .pod_name
            .clone()
            .unwrap_or_else(crate::config::host_name);
        Ok(Some(Runner {
            scope,
            actor: Actor {
                node: node.clone(),
                pod,
                resources: crate::resource::Source::own_cgroup_or_process(),
            },
            discovery: Discovery::new(
                client,
                node,
                agent.app_http_port,
                agent.udp_echo_port,
                tasks.clone(),
                config,
            ),
            spool,
            metrics,
            report_expiry: SignedDuration::from_hours(
                i64::try_from(tasks.report_expiry_hours)
                    .unwrap_or(24)
                    .max(1),
            ),
            ledger: Mutex::new(Ledger::default()),
        }))
    }

    /// The tasks in scope, as one stream of applied objects over every watched kind.
    fn watch(
        &self,
        client: &Client,
    ) -> SelectAll<BoxStream<'static, Result<Task, watcher::Error>>> {
        let config = match &self.scope {
            Scope::Task { name, .. } => {
                watcher::Config::default().fields(&format!("metadata.name={name}"))
            }
            Scope::Default => watcher::Config::default(),
        };
        let mut streams = SelectAll::new();
        for kind in self.scope.kinds() {
            let stream: BoxStream<'static, Result<Task, watcher::Error>> = match kind {
                TaskKind::NetReach => applied::<NetReach>(client, config.clone(), Task::NetReach),
                TaskKind::AppHttpHealthy => {
                    applied::<AppHttpHealthy>(client, config.clone(), Task::AppHttpHealthy)
                }
                TaskKind::Netdns => applied::<Netdns>(client, config.clone(), Task::Netdns),
            };
            streams.push(stream);
        }
        streams
    }

    /// Watches tasks and runs due rounds until the watch ends (it retries on its own, so only
    /// when the runtime stops).
    pub async fn run(self: Arc<Self>, client: Client) {
        tracing::info!(scope = ?self.scope, node = %self.actor.node, "watching tasks");
        let mut tasks = self.watch(&client);
        let mut rounds = JoinSet::new();
        loop {
            tokio::select! {
                next = tasks.next() => match next {
                    Some(Ok(task)) => {
                        if let Some(duty) = self.claim(&task) {
                            let me = self.clone();
                            rounds.spawn(async move { me.run_round(task, duty).await });
                        }
                    }
                    Some(Err(error)) => {
                        tracing::warn!(%error, "task watch failed; retrying");
                    }
                    None => break,
                },
                Some(_) = rounds.join_next(), if !rounds.is_empty() => {}
            }
        }
    }

    /// The round `task` owes now, recorded as started; `None` when it owes none or it was
    /// started already (by this process, or before a restart: the spool has its report).
    fn claim(&self, task: &Task) -> Option<Duty> {
        let now = Timestamp::now();
        let duty = due(&self.scope, task, &self.actor.node, now)?;
        let mut ledger = self.ledger.lock().ok()?;
        ledger.prune(now);
        if !ledger.start(&duty) {
            return None;
        }
        if self.spooled(&duty) {
            tracing::debug!(task = %duty.name, round = duty.round, "round already spooled");
            return None;
        }
        Some(duty)
    }

    /// Whether the spool holds this incarnation's report of the round (an agent restarted
    /// mid-round does not probe it twice).
    fn spooled(&self, duty: &Duty) -> bool {
        let Ok(entries) = self.spool.list() else {
            return false;
        };
        entries
            .iter()
            .filter(|e| {
                e.kind == duty.kind.as_str()
                    && e.task == duty.name
                    && e.round == u64::try_from(duty.round).unwrap_or(0)
                    && e.node == self.actor.node
            })
            .any(|e| {
                self.spool
                    .read(&e.name)
                    .ok()
                    .and_then(|bytes| {
                        serde_json::from_slice::<kdoctor_api::report::Report>(&bytes).ok()
                    })
                    .is_some_and(|r| r.task_uid.as_deref() == Some(duty.uid.as_str()))
            })
    }

    /// The labels of the round's per-probe series: the task's, this node and its zone and —
    /// when this node has a zone — the zones of the pods probed.
    async fn metric_labels(&self, task: &Task, plan: &RoundPlan) -> RoundLabels {
        let zone = self.discovery.node_zone(&self.actor.node).await;
        let mut labels = RoundLabels::of_task(task, &self.actor.node, &zone);
        if let (Task::NetReach(t), false) = (task, zone.is_empty()) {
            let pods: Vec<&str> = plan
                .http
                .iter()
                .filter_map(|target| target_pod(&target.name))
                .collect();
            let resource = t.status.as_ref().and_then(|s| s.resource.as_ref());
            labels.pod_zones = self.discovery.pod_zones(resource, &pods).await;
        }
        labels
    }

    async fn run_round(self: Arc<Self>, task: Task, duty: Duty) {
        let started = Timestamp::now();
        tracing::info!(kind = %duty.kind, task = %duty.name, round = duty.round, deadline = %duty.deadline, "round started");
        let plan = plan(
            &task,
            &duty,
            &self.discovery,
            &self.actor,
            time_box(duty.deadline, started),
        )
        .await;
        // Zones are read once per node; a slow API server costs the round at most this.
        let labels = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            self.metric_labels(&task, &plan),
        )
        .await
        .unwrap_or_else(|_| RoundLabels::of_task(&task, &self.actor.node, ""));
        let report = execute_with(plan, Some(self.metrics.clone()), Some(labels)).await;
        let result = report.round_result.clone();
        let expiry = Timestamp::now() + self.report_expiry;
        let spool = self.spool.clone();
        let node = self.actor.node.clone();
        let (kind, name) = (duty.kind, duty.name.clone());
        let written =
            tokio::task::spawn_blocking(move || spool.write(kind, &name, &node, &report, expiry))
                .await;
        self.metrics
            .rounds
            .with_label_values(&[duty.kind.as_str(), result.as_str()])
            .inc();
        match written {
            Ok(Ok(file)) => tracing::info!(
                kind = %duty.kind, task = %duty.name, round = duty.round, %result, report = %file,
                seconds = Timestamp::now().duration_since(started).as_secs_f64(), "round spooled"
            ),
            Ok(Err(error)) => {
                tracing::error!(kind = %duty.kind, task = %duty.name, round = duty.round, %error, "cannot spool the round's report");
                // Let a later status event retry while the round is still open.
                if let Ok(mut ledger) = self.ledger.lock() {
                    ledger.forget(&duty);
                }
            }
            Err(error) => tracing::error!(%error, "spooling panicked"),
        }
    }
}

/// A watch of one task kind as applied `Task`s, retrying with backoff.
fn applied<K>(
    client: &Client,
    config: watcher::Config,
    wrap: fn(K) -> Task,
) -> BoxStream<'static, Result<Task, watcher::Error>>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let api: Api<K> = Api::all(client.clone());
    watcher(api, config)
        .default_backoff()
        .applied_objects()
        .map_ok(wrap)
        .boxed()
}
