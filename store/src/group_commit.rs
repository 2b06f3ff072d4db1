//! Group commit of agent reports: the harvest stores each agent's reports as soon as it has
//! them, 64 agents at a time, and each write is one entry of the replicated log — appended,
//! flushed and applied one after another by the leader (openraft handles one client write per
//! turn of its loop). At 1,000 agents that serial work, not the network, is most of a round's
//! harvest. Writes that arrive while one is being committed wait and go together as one
//! command: one log entry, one flush per replica, one atomic batch; each writer gets back the
//! outcomes of its own reports, and returns only once they are durable, as before.
//!
//! A group is all or none, so a group refused as a whole (one writer's report the store cannot
//! take) is written again writer by writer: only the writer at fault sees the error.

use tokio::sync::{mpsc, oneshot};

use crate::command::{Applied, ReportEntry};
use crate::error::{Result, StoreError};
use crate::model::Outcome;
use crate::store::{NewReport, unexpected};
use crate::writes::Writes;

/// Writers that may wait for the group being committed.
const QUEUE: usize = 1024;

/// One writer's reports and where its outcomes go.
struct Request {
    reports: Vec<ReportEntry>,
    bytes: usize,
    answer: oneshot::Sender<Result<Vec<Outcome>>>,
}

/// Where reports are put to be committed together (cheap to clone).
#[derive(Clone)]
pub struct GroupCommit {
    queue: mpsc::Sender<Request>,
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
        (GroupCommit { queue }, run(writes, waiting, max_bytes))
    }

    /// Stores `reports` (one writer's: all or none), with whatever other writers put meanwhile;
    /// returns their outcomes, in order, once they are durable.
    pub async fn put_reports(&self, reports: &[NewReport<'_>]) -> Result<Vec<Outcome>> {
        let reports = reports
            .iter()
            .map(|new| ReportEntry::of(new.task, new.report))
            .collect::<Result<Vec<_>>>()?;
        let bytes = reports.iter().map(|r| r.json.get().len()).sum();
        let (answer, outcomes) = oneshot::channel();
        let stopped = || StoreError::Stopped("the report group commit stopped".to_string());
        self.queue
            .send(Request {
                reports,
                bytes,
                answer,
            })
            .await
            .map_err(|_| stopped())?;
        outcomes.await.map_err(|_| stopped())?
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
        let mut bytes = first.bytes;
        let mut group = vec![first];
        while let Ok(request) = waiting.try_recv() {
            if bytes + request.bytes > max_bytes {
                next = Some(request);
                break;
            }
            bytes += request.bytes;
            group.push(request);
        }
        commit(&writes, group).await;
    }
}

/// Writes `group` as one command; when that fails, each writer's reports on their own.
async fn commit(writes: &Writes, group: Vec<Request>) {
    if group.len() > 1 {
        let counts: Vec<usize> = group.iter().map(|r| r.reports.len()).collect();
        let total: usize = counts.iter().sum();
        let reports = group.iter().flat_map(|r| r.reports.clone()).collect();
        match put(writes, reports).await {
            Ok(mut outcomes) if outcomes.len() == total => {
                for (request, count) in group.into_iter().zip(counts) {
                    let rest = outcomes.split_off(count);
                    let _ = request.answer.send(Ok(outcomes));
                    outcomes = rest;
                }
                return;
            }
            // Written, but not to be split among the writers: a defect, not to be written
            // again.
            Ok(outcomes) => {
                for request in group {
                    let _ = request.answer.send(Err(StoreError::Invalid(format!(
                        "a group of {total} reports was answered with {} outcomes",
                        outcomes.len()
                    ))));
                }
                return;
            }
            Err(_) => {}
        }
    }
    for request in group {
        let outcome = put(writes, request.reports).await;
        let _ = request.answer.send(outcome);
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
