//! The rounds of one task, as the controller and an agent run them together: the controller's
//! round state machine (`kdoctor_reconciler::rounds::step`) decides when a round starts and
//! ends, the agent's round executor probes, and the report and the round summary go into the
//! store as the harvester and the controller put them there. One node: this machine.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kdoctor_agent::round::execute::{RoundPlan, execute};
use kdoctor_api::report::Report;
use kdoctor_api::task::{RoundStatus, StatusHistoryRecord, TaskStatus};
use kdoctor_apiserver::tasks::TaskObjects;
use kdoctor_reconciler::plan::summary;
use kdoctor_reconciler::rounds::{self, Inputs, RoundEvent};
use kdoctor_store::{IncarnationId, RoundResult, Store};
use tokio::sync::{mpsc, watch};

use crate::LocalError;
use crate::events::{Event, Say};
use crate::task::LocalTask;

/// Why an interrupted round failed.
pub const FAILURE_REASON_STOPPED: &str = "kdoctor local stopped during the round";

/// What every task's loop shares.
pub struct Shared {
    /// The report store.
    pub store: Arc<Store>,
    /// The task objects the API server shows.
    pub objects: TaskObjects,
    /// This machine, as the one node.
    pub node: String,
    /// `crdMaxHistory`.
    pub max_history: usize,
    /// How often an ongoing round is looked at (the report's arrival wakes the loop sooner).
    pub poll: Duration,
    /// Where what happens is told.
    pub say: Say,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, kdoctor_store::StoreError> + Send + 'static,
) -> Result<T, LocalError> {
    Ok(tokio::task::spawn_blocking(f).await??)
}

/// The reports stored for the round on top of `status` when it is ongoing: node → succeeded.
fn ongoing_reports(
    store: &Store,
    id: IncarnationId,
    status: &TaskStatus,
) -> Result<BTreeMap<String, bool>, kdoctor_store::StoreError> {
    let Some(top) = status
        .history
        .as_ref()
        .and_then(|h| h.first())
        .filter(|r| r.status == RoundStatus::Ongoing)
    else {
        return Ok(BTreeMap::new());
    };
    let reports = store.reports(id, top.round_number.max(0) as u64)?;
    Ok(reports
        .into_iter()
        .map(|m| (m.node, m.result == RoundResult::Succeed))
        .collect())
}

/// The history record of round `n`.
fn record_of(status: &TaskStatus, n: i64) -> Option<&StatusHistoryRecord> {
    status
        .history
        .as_ref()
        .and_then(|h| h.iter().find(|r| r.round_number == n))
}

/// Runs `task`'s rounds until they are all done or `stop` turns true. `base` is the task's
/// round plan (targets, load, expectations); each round gets its number, the task's UID and
/// the time until shortly before its deadline.
pub async fn run(
    shared: Arc<Shared>,
    task: LocalTask,
    base: RoundPlan,
    mut stop: watch::Receiver<bool>,
) -> Result<(), LocalError> {
    let store = shared.store.clone();
    let (id, _) = {
        let record = task.record(&TaskStatus::default());
        let store = store.clone();
        blocking(move || store.record_task(&record)).await?
    };
    let expected_nodes = BTreeSet::from([shared.node.clone()]);
    let mut status = TaskStatus::default();
    show(&shared, &task, &status);
    let (done_tx, mut done_rx) = mpsc::channel::<Report>(1);
    let mut probing: Option<tokio::task::JoinHandle<()>> = None;
    let mut last_report: Option<Report> = None;
    let expected = task.plan.round_number;
    loop {
        let now = Timestamp::now();
        let reports = {
            let (store, status) = (store.clone(), status.clone());
            tokio::task::spawn_blocking(move || ongoing_reports(&store, id, &status)).await??
        };
        let outcome = rounds::step(
            &status,
            &Inputs {
                now,
                plan: &task.plan,
                schedule: &task.schedule,
                carrier_ready: true,
                expected_nodes: &expected_nodes,
                reports: &reports,
                max_history: shared.max_history,
                poll: shared.poll,
            },
        );
        let next = outcome.status;
        for event in &outcome.events {
            match event {
                RoundEvent::Started(n) => {
                    let deadline = record_of(&next, *n)
                        .map(|r| r.dead_line_time_stamp.0)
                        .unwrap_or(now);
                    let mut plan = base.clone();
                    plan.round = *n;
                    plan.task_uid = Some(task.uid.clone());
                    plan.round_timeout = kdoctor_agent::cluster::duty::time_box(deadline, now);
                    (shared.say)(Event::RoundStarted {
                        kind: task.kind,
                        name: task.name.clone(),
                        round: *n,
                        expected,
                        targets: plan.http.len() + plan.dns.len(),
                        qps: plan.load.qps,
                        seconds: plan.load.duration.as_secs(),
                    });
                    probing = Some(tokio::spawn(probe(
                        store.clone(),
                        id,
                        plan,
                        done_tx.clone(),
                    )));
                }
                RoundEvent::Finished(record) => {
                    let round = summary(record);
                    let store = store.clone();
                    blocking(move || store.put_round(id, &round)).await?;
                    (shared.say)(Event::RoundEnded {
                        kind: task.kind,
                        name: task.name.clone(),
                        record: Box::new(record.clone()),
                        expected,
                        report: last_report.clone().map(Box::new),
                    });
                }
            }
        }
        if next != status {
            status = next;
            let record = task.record(&status);
            let store = store.clone();
            blocking(move || store.record_task(&record)).await?;
            show(&shared, &task, &status);
            if let Some(top) = status.history.as_ref().and_then(|h| h.first())
                && top.status == RoundStatus::Notstarted
                && top.start_time_stamp.0 > now
            {
                (shared.say)(Event::RoundPlanned {
                    kind: task.kind,
                    name: task.name.clone(),
                    round: top.round_number,
                    start: top.start_time_stamp.0,
                    now,
                });
            }
        }
        let Some(wait) = outcome.requeue_after else {
            let last = status.last_round_status.as_ref().map(|s| match s {
                kdoctor_api::task::LastRoundStatus::Succeed => "succeed",
                _ => "fail",
            });
            (shared.say)(Event::TaskFinished {
                kind: task.kind,
                name: task.name.clone(),
                done: status.done_round.unwrap_or(0),
                last,
            });
            return Ok(());
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            Some(report) = done_rx.recv() => last_report = Some(report),
            _ = stop.changed() => {
                if let Some(probing) = probing.take() {
                    probing.abort();
                }
                let store = store.clone();
                blocking(move || interrupted(&store, id, &status, Timestamp::now())).await?;
                return Ok(());
            }
        }
    }
}

/// Shows `status` on the task's object (the runner is its only writer).
fn show(shared: &Shared, task: &LocalTask, status: &TaskStatus) {
    let status = serde_json::to_value(status).unwrap_or_default();
    shared
        .objects
        .set_status(task.kind, &task.name, &task.uid, status);
}

/// Probes one round and stores its report (durably) before handing it back.
async fn probe(store: Arc<Store>, id: IncarnationId, plan: RoundPlan, done: mpsc::Sender<Report>) {
    let report = execute(plan, None).await;
    let to_store = report.clone();
    match tokio::task::spawn_blocking(move || store.put_report(id, &to_store)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::error!(error = %e, "storing a round report"),
        Err(e) => tracing::error!(error = %e, "storing a round report panicked"),
    }
    let _ = done.send(report).await;
}

/// Records a round cut short by stopping as failed, keeping what was stored of it.
pub fn interrupted(
    store: &Store,
    id: IncarnationId,
    status: &TaskStatus,
    now: Timestamp,
) -> Result<(), kdoctor_store::StoreError> {
    if let Some(round) =
        kdoctor_reconciler::deletions::cut_short(store, id, status, now, FAILURE_REASON_STOPPED)?
    {
        store.put_round(id, &round)?;
    }
    Ok(())
}

/// Ends the tasks an earlier run left live (a killed run could not end them itself): a round it
/// left ongoing is recorded failed, then the incarnation is marked deleted. Returns how many.
pub fn end_earlier_runs(store: &Store, now: Timestamp) -> Result<usize, kdoctor_store::StoreError> {
    let mut ended = 0;
    for task in store.tasks() {
        if task.deleted.is_some() {
            continue;
        }
        let status: TaskStatus = store
            .task_record(task.id)?
            .and_then(|r| r.status)
            .and_then(|s| serde_json::from_value(s).ok())
            .unwrap_or_default();
        interrupted(store, task.id, &status, now)?;
        store.mark_deleted(task.id, now)?;
        ended += 1;
    }
    Ok(ended)
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kdoctor_agent::config::AgentArgs;
    use kdoctor_api::config::Config;
    use kdoctor_api::defaults::ClusterFacts;
    use kdoctor_api::task::{LastRoundStatus, Task};
    use kdoctor_store::StoreConfig;

    use super::*;
    use crate::plan::{StandIns, local_plan, loopback_carrier};

    fn store(test: &str) -> (Arc<Store>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "kdoctor-local-runner-{}-{test}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(StoreConfig::new(&dir)).unwrap();
        (Arc::new(store), dir)
    }

    fn task(yaml: &str) -> Task {
        let document = kdoctor_api::document::parse_tasks(yaml).remove(0);
        kdoctor_api::validation::check(
            document.task.unwrap(),
            &Config::default(),
            ClusterFacts::default(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_task_runs_its_round_into_the_store_and_the_shown_status() {
        let agent = kdoctor_agent::agent::start(&AgentArgs::ephemeral(vec![IpAddr::V4(
            Ipv4Addr::LOCALHOST,
        )]))
        .await
        .unwrap();
        let (store, dir) = store("run");
        let shared = Arc::new(Shared {
            store: store.clone(),
            objects: TaskObjects::new(std::sync::Arc::new(|_| Ok(()))),
            node: "node-a".into(),
            max_history: 10,
            poll: Duration::from_secs(1),
            say: Arc::new(|_| {}),
        });
        let nr = task(
            "apiVersion: kdoctor.io/v1beta1\nkind: NetReach\nmetadata: {name: nr}\nspec:\n  \
             target: {endpoint: true, ipv4: true}\n  \
             request: {qps: 10, durationInSecond: 1, perRequestTimeoutInMS: 1000}\n  \
             schedule: {schedule: '0 1', roundNumber: 1, roundTimeoutMinute: 1}\n",
        );
        let stand_ins = StandIns {
            local: None,
            carrier: Some(loopback_carrier(
                "kdoctor-local",
                agent.http[0].port(),
                agent.udp_echo[0].port(),
                false,
            )),
            resolvers: None,
        };
        let plan = local_plan(
            &nr,
            &Config::default(),
            "node-a",
            "kdoctor-local",
            &stand_ins,
        )
        .unwrap();
        let object = shared
            .objects
            .create(
                kdoctor_api::task::TaskKind::NetReach,
                serde_json::to_value(&nr).unwrap(),
                false,
            )
            .unwrap();
        let uid = object["metadata"]["uid"].as_str().unwrap().to_string();
        let local = LocalTask::new(nr, uid.clone(), Timestamp::now()).unwrap();
        let (_stop, stop_rx) = watch::channel(false);
        tokio::time::timeout(
            Duration::from_secs(30),
            run(shared.clone(), local, plan, stop_rx),
        )
        .await
        .expect("the round ends in time")
        .unwrap();

        let stored = store.by_uid(&uid).expect("the incarnation is stored");
        assert_eq!(stored.progress.done_round, Some(1));
        assert!(stored.progress.finished);
        let round = store.round(stored.id, 1).unwrap().expect("round 1");
        assert_eq!(round.reports, 1);
        let summary = round.summary.expect("summarised");
        assert_eq!(summary.result, RoundResult::Succeed);
        assert_eq!(summary.succeeded_nodes, 1);
        let report = store.report(stored.id, 1, "node-a").unwrap().unwrap();
        assert_eq!(report.task_uid.as_deref(), Some(uid.as_str()));
        assert_eq!(report.pod_name, "kdoctor-local");
        let shown = shared
            .objects
            .get(kdoctor_api::task::TaskKind::NetReach, "nr");
        let status: TaskStatus = serde_json::from_value(shown.unwrap()["status"].clone()).unwrap();
        assert!(status.finish);
        assert_eq!(status.last_round_status, Some(LastRoundStatus::Succeed));
        // Every request the report counts reached the echo server.
        let requests: i64 = report
            .task_net_reach
            .iter()
            .flat_map(|r| &r.round_task_detail)
            .map(|d| d.request_target_metrics.requests.request_counts)
            .sum();
        assert!(requests >= 10, "{requests}");
        assert_eq!(agent.echo.count("default"), requests as u64);
        drop(store);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_interrupted_round_is_recorded_failed() {
        let (store, dir) = store("interrupted");
        let nr = task(
            "apiVersion: kdoctor.io/v1beta1\nkind: NetReach\nmetadata: {name: nr}\nspec: {}\n",
        );
        let local = LocalTask::new(
            nr,
            kdoctor_apiserver::tasks::uid::new_uid(),
            Timestamp::now(),
        )
        .unwrap();
        let now = Timestamp::now();
        let status = TaskStatus {
            expected_round: Some(1),
            done_round: Some(0),
            history: Some(vec![StatusHistoryRecord {
                status: RoundStatus::Ongoing,
                failure_reason: None,
                round_number: 1,
                start_time_stamp: Time(now),
                end_time_stamp: None,
                duration: None,
                dead_line_time_stamp: Time(now),
                expected_actor_number: Some(1),
                failed_agent_node_list: vec![],
                succeed_agent_node_list: vec![],
                not_report_agent_node_list: vec!["node-a".into()],
            }]),
            ..Default::default()
        };
        let (id, _) = store.record_task(&local.record(&status)).unwrap();
        interrupted(&store, id, &status, now).unwrap();
        let summary = store.round(id, 1).unwrap().unwrap().summary.unwrap();
        assert_eq!(summary.result, RoundResult::Fail);
        assert_eq!(
            summary.failure_reason.as_deref(),
            Some(FAILURE_REASON_STOPPED)
        );
        assert_eq!(summary.not_reported, ["node-a"]);
        // Nothing ongoing: nothing to record.
        interrupted(&store, id, &TaskStatus::default(), now).unwrap();
        // A killed run's task: ended at the next start, once.
        let mut status = status;
        let other = LocalTask::new(task("apiVersion: kdoctor.io/v1beta1\nkind: Netdns\nmetadata: {name: d}\nspec: {target: {targetUser: {server: 127.0.0.1, port: 53}}}\n"), kdoctor_apiserver::tasks::uid::new_uid(), now).unwrap();
        status.history.as_mut().unwrap()[0].round_number = 1;
        let (other_id, _) = store.record_task(&other.record(&status)).unwrap();
        assert_eq!(end_earlier_runs(&store, now).unwrap(), 2);
        assert!(store.task(other_id).unwrap().deleted.is_some());
        let summary = store.round(other_id, 1).unwrap().unwrap().summary.unwrap();
        assert_eq!(
            summary.failure_reason.as_deref(),
            Some(FAILURE_REASON_STOPPED)
        );
        assert_eq!(end_earlier_runs(&store, now).unwrap(), 0);
        drop(store);
        let _ = std::fs::remove_dir_all(dir);
    }
}
