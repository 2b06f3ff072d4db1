//! Where this process's changes to the store go: straight into its own store (a process that
//! owns its store alone: `kdoctor local`, a controller without replicas), or through the
//! replicated log (the controller's replicas, crate::raft). The API server and the reconciler
//! write through this one type, so neither knows which.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use crate::command::{Applied, Command};
use crate::error::{Result, StoreError};
use crate::model::{IncarnationId, Outcome, RoundSummary, TaskRecord};
use crate::raft::{Fenced, Replica};
use crate::store::{Store, unexpected};

/// The store as this process may change it (cheap to clone).
#[derive(Clone)]
pub enum Writes {
    /// This process's own store.
    Local(Arc<Store>),
    /// A replica of the replicated store.
    Replicated(Replica),
}

impl Writes {
    /// The store, to read from.
    pub fn store(&self) -> &Arc<Store> {
        match self {
            Writes::Local(store) => store,
            Writes::Replicated(replica) => replica.store(),
        }
    }

    /// The replica, when the store is replicated.
    pub fn replica(&self) -> Option<&Replica> {
        match self {
            Writes::Local(_) => None,
            Writes::Replicated(replica) => Some(replica),
        }
    }

    /// Whether this process may act as the controller now, for an action that takes effect
    /// within `margin` (the leader's lease holds that long; a store of its own always may).
    pub fn may_act(&self, margin: Duration) -> std::result::Result<(), Fenced> {
        match self {
            Writes::Local(_) => Ok(()),
            Writes::Replicated(replica) => replica.fence().check(margin),
        }
    }

    /// Makes `command`, as the writer (the leader, when replicated); returns once it is
    /// durable (committed by a majority and applied here).
    pub async fn execute(&self, command: Command) -> Result<Applied> {
        match self {
            Writes::Local(store) => {
                let store = store.clone();
                tokio::task::spawn_blocking(move || store.execute(&command))
                    .await
                    .map_err(|e| StoreError::Invalid(format!("a store write panicked: {e}")))?
            }
            Writes::Replicated(replica) => replica.write(command).await,
        }
    }

    /// Makes `command` wherever the writer is (a client's DELETE served by a follower);
    /// returns once this process's store has it too.
    pub async fn execute_via_leader(&self, command: Command) -> Result<Applied> {
        match self {
            Writes::Local(_) => self.execute(command).await,
            Writes::Replicated(replica) => replica.write_via_leader(command).await,
        }
    }

    /// Waits until this process's store holds every write acknowledged before the call (a
    /// replica behind asks the leader how far to catch up); fails when that cannot be known
    /// within `timeout`.
    pub async fn read_barrier(&self, timeout: Duration) -> Result<()> {
        match self {
            Writes::Local(_) => Ok(()),
            Writes::Replicated(replica) => replica.read_barrier(timeout).await,
        }
    }

    /// See [`Store::record_task`].
    pub async fn record_task(&self, record: TaskRecord) -> Result<(IncarnationId, Outcome)> {
        match self.execute(Command::RecordTask { record }).await? {
            Applied::Task(id, outcome) => Ok((id, outcome)),
            other => Err(unexpected(&other)),
        }
    }

    /// See [`Store::mark_deleted`].
    pub async fn mark_deleted(&self, task: IncarnationId, at: Timestamp) -> Result<Outcome> {
        match self.execute(Command::MarkDeleted { task, at }).await? {
            Applied::Outcome(outcome) => Ok(outcome),
            other => Err(unexpected(&other)),
        }
    }

    /// See [`Store::put_round`].
    pub async fn put_round(&self, task: IncarnationId, summary: RoundSummary) -> Result<Outcome> {
        let command = Command::PutRound {
            task,
            summary,
            at: Timestamp::now(),
        };
        match self.execute(command).await? {
            Applied::Outcome(outcome) => Ok(outcome),
            other => Err(unexpected(&other)),
        }
    }

    /// See [`Store::purge_task`]; made by the writer wherever it is.
    pub async fn purge_task(&self, task: IncarnationId) -> Result<bool> {
        match self.execute_via_leader(Command::PurgeTask { task }).await? {
            Applied::TaskPurged(gone) => {
                if gone {
                    self.store().metrics().tasks_purged.inc();
                }
                Ok(gone)
            }
            other => Err(unexpected(&other)),
        }
    }

    /// See [`Store::purge_round`]; made by the writer wherever it is.
    pub async fn purge_round(&self, task: IncarnationId, round: u64) -> Result<u64> {
        match self
            .execute_via_leader(Command::PurgeRound { task, round })
            .await?
        {
            Applied::RoundPurged(bytes) => Ok(bytes),
            other => Err(unexpected(&other)),
        }
    }

    /// See [`Store::outbox_done`].
    pub async fn outbox_done(&self, seqs: Vec<u64>) -> Result<()> {
        self.execute(Command::OutboxDone { seqs }).await.map(drop)
    }

    /// Whether this process writes now: always for its own store; for a replica, while it
    /// leads.
    pub fn is_writer(&self) -> bool {
        match self {
            Writes::Local(_) => true,
            Writes::Replicated(replica) => *replica.leading().borrow(),
        }
    }
}
