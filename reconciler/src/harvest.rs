//! Harvesting: check that the agent is the pod it should be (its pod-bound token, reviewed by
//! the API server), pull a task's reports from its report API, store them durably — with
//! replicas, committed by a majority of them — then acknowledge them (so an agent drops only
//! what the store holds, and a failover loses nothing it dropped). Never remote commands.
//!
//! A report names the task incarnation it belongs to (`taskUID`): one of another incarnation
//! of the same name goes to that incarnation when the store knows it, and is left on the agent
//! otherwise; it is never mixed into the current one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kdoctor_api::report::Report;
use kdoctor_api::task::TaskKind;
use kdoctor_store::{GroupCommit, IncarnationId, NewReport, Writes};
use kdoctor_transport::report_api::{Entry, RoundWait};
use kdoctor_transport::report_client::{AgentConnection, ReportClient, ReportClientError};

use crate::export::ExportHook;
use crate::identity::IdentityCheck;
use crate::metrics::ControllerMetrics;
use crate::readiness::AgentPod;

/// Agents read at once (connect, identity, list, fetch).
const CONCURRENCY: usize = 64;

/// Agents read at once while a pass awaits a round that agents may still be finishing: most of
/// them hold their answer, idle, until their report is written. Reports are written in no
/// order the pass can know, so with 64 a few slots held by agents that wrote late kept the
/// others from being asked: at 1,000 agents the pass read most reports only after the last
/// was written (finalise lag 1.5 s against 0.7 s for a bare loop over the written reports).
/// A held connection costs memory (tens of KiB), not CPU.
const HELD_CONCURRENCY: usize = 256;

/// Agents whose reports were read and wait for the store's commit before they are acknowledged
/// (each holds its connection). Apart from the reading, so that the commit's wait (a flush on a
/// majority of replicas) does not hold a reading slot: with one slot per agent for both, a pass
/// over 980 agents with a report each took 2.0–2.7 s where a bare loop reading them took 1.06.
const STORING: usize = 256;

/// The most report JSON that agents harvested together store as one write (one agent's reports
/// larger than this go alone): a few MiB per log entry, well inside what replicas send each
/// other (kdoctor_store::raft's wire bound).
pub const GROUP_COMMIT_BYTES: usize = 16 << 20;

/// The leader's lease must hold this long yet when acknowledgements go out (a few calls to one
/// agent).
const ACKNOWLEDGE_MARGIN: Duration = Duration::from_millis(500);

/// The task incarnation being harvested.
#[derive(Clone, Debug)]
pub struct Harvestee {
    /// Kind.
    pub kind: TaskKind,
    /// Name.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// The store's id of this incarnation.
    pub id: IncarnationId,
}

/// The round a pass asks agents for while they may still be finishing it: until `until` an
/// agent holds its answer until it has written its report of round `round`
/// ([`kdoctor_transport::report_api::RoundWait`]), so a report is read the moment it is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AwaitedRound {
    /// The round.
    pub round: u64,
    /// When its agents have finished probing (its start and its probing time).
    pub until: jiff::Timestamp,
}

impl AwaitedRound {
    /// How long an agent may still hold its answer at `now` (`None`: not at all).
    pub fn wait_at(&self, now: jiff::Timestamp) -> Option<Duration> {
        Duration::try_from(self.until.duration_since(now))
            .ok()
            .filter(|d| !d.is_zero())
            .map(|d| d.min(kdoctor_transport::report_api::MAX_LIST_WAIT))
    }
}

/// What a harvest pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HarvestOutcome {
    /// Reports newly stored (or stored again, harmlessly).
    pub stored: usize,
    /// Reports acknowledged.
    pub acknowledged: usize,
    /// Agents that could not be harvested, with the reason.
    pub failures: Vec<(String, String)>,
    /// Reports left on agents because they belong to an incarnation the store does not know.
    pub foreign: usize,
}

/// Everything a harvest needs.
#[derive(Clone)]
pub struct Harvester {
    /// Report API client.
    pub client: ReportClient,
    /// The store, and where its writes go.
    pub writes: Writes,
    /// Where reports are stored: with those of the other agents harvested meanwhile, one write.
    pub commits: GroupCommit,
    /// Metrics.
    pub metrics: ControllerMetrics,
    /// Report export: told when reports were stored (never waits).
    pub export: Option<ExportHook>,
    /// Checks that an agent is the pod it should be before its reports are read; `None` only
    /// where agents have no identity token (a test harness without a kubelet).
    pub identity: Option<Arc<IdentityCheck>>,
    /// The longest each stage of one agent's pass may take — reading its reports, then storing
    /// and acknowledging them (each call has the client's own timeout; an agent that answers
    /// every call slowly is cut off here).
    pub agent_deadline: Duration,
}

fn reason(e: &ReportClientError) -> &'static str {
    match e {
        ReportClientError::Connect { .. } => "connect",
        ReportClientError::Handshake { .. } | ReportClientError::Tls(_) => "tls",
        ReportClientError::Http { .. } | ReportClientError::Status { .. } => "http",
        ReportClientError::Timeout { .. } => "timeout",
        ReportClientError::Decode { .. } => "decode",
    }
}

/// An agent's reports, read and checked, to be stored then acknowledged on the same connection.
struct Fetched {
    agent: AgentConnection,
    reports: Vec<(String, IncarnationId, Report)>,
}

/// One agent between the two stages of a pass.
struct Read {
    pod: AgentPod,
    started: Instant,
    outcome: HarvestOutcome,
    fetched: Option<Fetched>,
}

fn wanted(entry: &Entry, task: &Harvestee, pod: &AgentPod) -> bool {
    entry.acknowledged.is_none()
        && entry.kind == task.kind.as_str()
        && entry.task == task.name
        && entry.node == pod.node
}

impl Harvester {
    /// Harvests `task`'s reports from every agent in `pods`, concurrently; each agent is asked
    /// to hold its answer for the `awaited` round while it may still be probing.
    pub async fn harvest(
        &self,
        task: &Harvestee,
        pods: &[AgentPod],
        awaited: Option<AwaitedRound>,
    ) -> HarvestOutcome {
        let mut outcome = HarvestOutcome::default();
        let held = awaited.is_some_and(|a| a.wait_at(jiff::Timestamp::now()).is_some());
        // Owned pods: a stream of futures borrowing from the slice is not `Send` for every
        // lifetime the controller's runtime asks for.
        let mut passes = futures::stream::iter(pods.to_vec())
            .map(|pod| async move { self.read_one(task, pod, awaited).await })
            .buffer_unordered(if held { HELD_CONCURRENCY } else { CONCURRENCY })
            .map(|read| async move { self.store_one(task, read).await })
            .buffer_unordered(STORING);
        while let Some(one) = passes.next().await {
            outcome.stored += one.stored;
            outcome.acknowledged += one.acknowledged;
            outcome.foreign += one.foreign;
            outcome.failures.extend(one.failures);
        }
        outcome
    }

    /// The first stage of an agent's pass: its reports read, within the agent's deadline.
    async fn read_one(
        &self,
        task: &Harvestee,
        pod: AgentPod,
        awaited: Option<AwaitedRound>,
    ) -> Read {
        let started = Instant::now();
        let mut outcome = HarvestOutcome::default();
        let wait = awaited.and_then(|a| {
            let wait = a.wait_at(jiff::Timestamp::now())?;
            Some(RoundWait {
                kind: task.kind.as_str().to_string(),
                task: task.name.clone(),
                round: a.round,
                wait,
            })
        });
        let deadline = self.agent_deadline + wait.as_ref().map_or(Duration::ZERO, |w| w.wait);
        let read = self
            .bounded(
                &pod,
                deadline,
                self.read(task, &pod, wait.as_ref(), &mut outcome),
            )
            .await;
        let fetched = match read {
            Ok(fetched) => fetched,
            Err(failure) => {
                self.failed(task, &pod, failure, &mut outcome);
                None
            }
        };
        Read {
            pod,
            started,
            outcome,
            fetched,
        }
    }

    /// The second stage: the reports read stored, then acknowledged, within the agent's
    /// deadline again.
    async fn store_one(&self, task: &Harvestee, read: Read) -> HarvestOutcome {
        let Read {
            pod,
            started,
            mut outcome,
            fetched,
        } = read;
        if let Some(fetched) = fetched {
            let stored = self
                .bounded(
                    &pod,
                    self.agent_deadline,
                    self.store(task, fetched, &mut outcome),
                )
                .await;
            if let Err(failure) = stored {
                self.failed(task, &pod, failure, &mut outcome);
            }
        }
        self.metrics
            .harvest_duration
            .observe(started.elapsed().as_secs_f64());
        outcome
    }

    /// `work` on `pod`, cut off after `deadline`.
    async fn bounded<T>(
        &self,
        pod: &AgentPod,
        deadline: Duration,
        work: impl Future<Output = Result<T, (&'static str, String)>>,
    ) -> Result<T, (&'static str, String)> {
        tokio::time::timeout(deadline, work)
            .await
            .unwrap_or_else(|_| {
                Err((
                    "timeout",
                    format!("agent pod {} not harvested within {deadline:?}", pod.name),
                ))
            })
    }

    fn failed(
        &self,
        task: &Harvestee,
        pod: &AgentPod,
        (why, error): (&'static str, String),
        outcome: &mut HarvestOutcome,
    ) {
        self.metrics
            .harvest_failures
            .with_label_values(&[why])
            .inc();
        tracing::debug!(task = %task.name, pod = %pod.name, %error, "harvest failed");
        outcome.failures.push((pod.name.clone(), error));
    }

    /// Connects, checks the agent's identity and reads the task's unacknowledged reports (once
    /// the agent has the `wait`ed round's, or the wait is over); `None` when there is nothing to
    /// store.
    async fn read(
        &self,
        task: &Harvestee,
        pod: &AgentPod,
        wait: Option<&RoundWait>,
        outcome: &mut HarvestOutcome,
    ) -> Result<Option<Fetched>, (&'static str, String)> {
        let client_error = |e: ReportClientError| (reason(&e), e.to_string());
        let mut agent = self.client.connect(pod.ip).await.map_err(client_error)?;
        if let Some(check) = &self.identity {
            let token = agent.identity().await.map_err(client_error)?;
            check.verify(&token, pod).await.map_err(|e| {
                (
                    "identity",
                    format!("{} is not agent pod {}: {e}", agent.addr(), pod.name),
                )
            })?;
        }
        let listed = match wait {
            Some(wait) => agent.list_waiting(wait).await,
            None => agent.list().await,
        };
        let entries: Vec<Entry> = listed
            .map_err(client_error)?
            .into_iter()
            .filter(|e| wanted(e, task, pod))
            .collect();
        if entries.is_empty() {
            return Ok(None);
        }
        let mut fetched: Vec<(String, IncarnationId, Report)> = Vec::new();
        for entry in &entries {
            let body = match agent.fetch(&entry.name).await {
                Ok(body) => body,
                // Swept by the agent meanwhile: nothing to store.
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(client_error(e)),
            };
            let report: Report = serde_json::from_slice(&body).map_err(|e| {
                (
                    "decode",
                    format!("{} report {}: {e}", agent.addr(), entry.name),
                )
            })?;
            if report.node_name != pod.node {
                return Err((
                    "decode",
                    format!(
                        "{} report {} names node {:?}, but the agent runs on {:?}",
                        agent.addr(),
                        entry.name,
                        report.node_name,
                        pod.node
                    ),
                ));
            }
            let id = match report.task_uid.as_deref() {
                None => task.id,
                Some(uid) if uid == task.uid => task.id,
                Some(uid) => match self.writes.store().by_uid(uid) {
                    Some(other) if other.kind == task.kind && other.name == task.name => other.id,
                    _ => {
                        outcome.foreign += 1;
                        continue;
                    }
                },
            };
            fetched.push((entry.name.clone(), id, report));
        }
        if fetched.is_empty() {
            return Ok(None);
        }
        Ok(Some(Fetched {
            agent,
            reports: fetched,
        }))
    }

    /// Stores an agent's reports (with those of the agents stored meanwhile, one write) and,
    /// once they are durable, acknowledges them.
    async fn store(
        &self,
        task: &Harvestee,
        Fetched {
            mut agent,
            reports: fetched,
        }: Fetched,
        outcome: &mut HarvestOutcome,
    ) -> Result<(), (&'static str, String)> {
        let client_error = |e: ReportClientError| (reason(&e), e.to_string());
        let batch: Vec<NewReport<'_>> = fetched
            .iter()
            .map(|(_, id, report)| NewReport { task: *id, report })
            .collect();
        let stored = self
            .commits
            .put_reports(&batch)
            .await
            .map_err(|e| ("store", e.to_string()))?
            .len();
        if let Some(export) = &self.export {
            // Their outbox entries were written with them.
            export.stored();
        }
        // Only a leader that can still prove it leads tells agents to drop what they sent.
        self.writes
            .may_act(ACKNOWLEDGE_MARGIN)
            .map_err(|e| ("fenced", e.to_string()))?;
        outcome.stored += stored;
        self.metrics
            .reports_stored
            .with_label_values(&[task.kind.as_str()])
            .inc_by(stored as u64);
        // Durable (committed by a majority, with replicas) now: the agent may drop them.
        for (name, _, _) in &fetched {
            match agent.acknowledge(name).await {
                Ok(()) => outcome.acknowledged += 1,
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(client_error(e)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kdoctor_transport::report_api::MAX_LIST_WAIT;

    #[test]
    fn an_awaited_round_is_waited_for_until_its_probing_ends_and_never_longer_than_agents_hold() {
        let now = jiff::Timestamp::from_second(1_000).unwrap();
        let awaited = |secs| AwaitedRound {
            round: 1,
            until: now + jiff::SignedDuration::from_secs(secs),
        };
        assert_eq!(awaited(2).wait_at(now), Some(Duration::from_secs(2)));
        assert_eq!(awaited(0).wait_at(now), None);
        assert_eq!(awaited(-5).wait_at(now), None);
        assert_eq!(awaited(3_600).wait_at(now), Some(MAX_LIST_WAIT));
    }
}
