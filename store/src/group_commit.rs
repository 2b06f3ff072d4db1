//! Group commit of agent reports: the harvest stores each agent's reports as soon as it has
//! them, 64 agents at a time, and each write is one entry of the replicated log — appended,
//! flushed and applied one after another by the leader (openraft handles one client write per
//! turn of its loop). At 1,000 agents that serial work, not the network, is most of a round's
//! harvest. Writes that arrive while one is being committed wait and go together as one
//! command: one log entry, one flush per replica, one atomic batch; each writer gets back the
//! outcomes of its own reports, and returns only once they are durable, as before.
//!
//! A group is all or none, so when a group is refused as a whole (one writer's report the store
//! cannot take) each writer writes its reports again on its own: only the writer at fault sees
//! the error. The writers do it from their own reports, so the committer keeps no copy of a
//! group while it commits.

use tokio::sync::{mpsc, oneshot};

use crate::command::{Applied, ReportEntry};
use crate::error::{Result, StoreError};
use crate::model::Outcome;
use crate::store::{NewReport, unexpected};
use crate::writes::Writes;

/// Writers that may wait for the group being committed.
const QUEUE: usize = 1024;

/// What a writer is answered.
enum Answer {
    /// Its reports' outcomes, in order, or why they were not stored.
    Stored(Result<Vec<Outcome>>),
    /// Its group was refused as a whole: it writes its reports again, alone.
    Alone,
}

/// One writer's reports and where its answer goes.
struct Request {
    reports: Vec<ReportEntry>,
    answer: oneshot::Sender<Answer>,
}

impl Request {
    /// Report JSON it carries.
    fn bytes(&self) -> usize {
        self.reports.iter().map(|r| r.json.get().len()).sum()
    }
}

/// Where reports are put to be committed together (cheap to clone).
#[derive(Clone)]
pub struct GroupCommit {
    queue: mpsc::Sender<Request>,
    writes: Writes,
}

impl GroupCommit {
    /// The writers' side, and the future that commits (run it as a task; when it stops,
    /// writes fail). A group holds at most `max_bytes` of report JSON, or one writer's
    /// reports when they alone are larger.
    pub fn new(
        writes: Writes,
        max_bytes: usize,
    ) -> (GroupCommit, impl std::future::Future<Output = ()> + Send) {
        let (queue, waiting) = mpsc::channel(QUEUE);
        let committing = run(writes.clone(), waiting, max_bytes);
        (GroupCommit { queue, writes }, committing)
    }

    /// Stores `reports` (one writer's: all or none), with whatever other writers put meanwhile;
    /// returns their outcomes, in order, once they are durable.
    pub async fn put_reports(&self, reports: &[NewReport<'_>]) -> Result<Vec<Outcome>> {
        let (answer, answered) = oneshot::channel();
        let stopped = || StoreError::Stopped("the report group commit stopped".to_string());
        self.queue
            .send(Request {
                reports: NewReport::entries(reports)?,
                answer,
            })
            .await
            .map_err(|_| stopped())?;
        match answered.await.map_err(|_| stopped())? {
            Answer::Stored(outcomes) => outcomes,
            Answer::Alone => put(&self.writes, NewReport::entries(reports)?).await,
        }
    }
}

async fn run(writes: Writes, mut waiting: mpsc::Receiver<Request>, max_bytes: usize) {
    let mut next: Option<Request> = None;
    loop {
        let first = match next.take() {
            Some(request) => request,
            None => match waiting.recv().await {
                Some(request) => request,
                None => return,
            },
        };
        let mut bytes = first.bytes();
        let mut group = vec![first];
        while let Ok(request) = waiting.try_recv() {
            let more = request.bytes();
            if bytes + more > max_bytes {
                next = Some(request);
                break;
            }
            bytes += more;
            group.push(request);
        }
        commit(&writes, group).await;
    }
}

/// Writes `group` as one command and answers each writer with its share of the outcomes; when
/// the group is refused, each writer is told to write alone.
async fn commit(writes: &Writes, mut group: Vec<Request>) {
    let counts: Vec<usize> = group.iter().map(|r| r.reports.len()).collect();
    let total: usize = counts.iter().sum();
    let reports = group
        .iter_mut()
        .flat_map(|r| std::mem::take(&mut r.reports))
        .collect();
    match put(writes, reports).await {
        Ok(mut outcomes) if outcomes.len() == total => {
            for (request, count) in group.into_iter().zip(counts) {
                let rest = outcomes.split_off(count);
                let _ = request.answer.send(Answer::Stored(Ok(outcomes)));
                outcomes = rest;
            }
        }
        // Written, but not to be split among the writers: a defect, not to be written again.
        Ok(outcomes) => {
            for request in group {
                let _ = request
                    .answer
                    .send(Answer::Stored(Err(StoreError::Invalid(format!(
                        "a group of {total} reports was answered with {} outcomes",
                        outcomes.len()
                    )))));
            }
        }
        // A writer alone is answered with why; a group's writers each try on their own.
        Err(e) if group.len() == 1 => {
            if let Some(request) = group.pop() {
                let _ = request.answer.send(Answer::Stored(Err(e)));
            }
        }
        Err(_) => {
            for request in group {
                let _ = request.answer.send(Answer::Alone);
            }
        }
    }
}

async fn put(writes: &Writes, reports: Vec<ReportEntry>) -> Result<Vec<Outcome>> {
    match writes
        .execute(writes.store().reports_command(reports))
        .await?
    {
        Applied::Outcomes(outcomes) => Ok(outcomes),
        other => Err(unexpected(&other)),
    }
}
