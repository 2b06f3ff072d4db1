//! One replica of the replicated store: openraft over this store's log and state machine, the
//! leader's lease, writes (made by the leader; a follower forwards its clients' writes there),
//! linearizable reads, joining a cluster and serving the other replicas' calls.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{ClientWriteError, InstallSnapshotError, RaftError};
use openraft::raft::InstallSnapshotRequest;
use openraft::{ChangeMembers, Raft, ServerState, SnapshotPolicy};
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::fence::Fence;
use super::formation::{self, Next, Status};
use super::log_store::LogStore;
use super::metrics::RaftMetrics;
use super::network::{Addressed, ChunkHeader, Contact, Network, Transport};
use super::state_machine::{Shared, StateMachine};
use super::wire::{self, Rpc};
use super::{Member, NodeId, TypeConfig};
use crate::command::{Applied, Command};
use crate::error::{Result, StoreError};
use crate::store::Store;

/// How long a new replica waits for every expected replica to answer before a majority of new
/// ones start the cluster without the others (crate::raft::formation).
const FORMATION_PATIENCE: Duration = Duration::from_secs(120);

/// How often a replica that does not lead asks whether the cluster took it out.
const REMOVAL_CHECK: Duration = Duration::from_secs(5);

/// Pause before a read asks again for how far the log is committed (no leader yet).
const RETRY: Duration = Duration::from_millis(100);

/// The clocks of the cluster.
#[derive(Clone, Debug)]
pub struct Timing {
    /// How often the leader sends heartbeats (and proves its lease).
    pub heartbeat: Duration,
    /// A follower that hears nothing from a leader for a random time between these two calls
    /// an election; it refuses to vote for another candidate until the longer one has passed
    /// since it last heard the leader (openraft's leader lease).
    pub election_min: Duration,
    /// See `election_min`.
    pub election_max: Duration,
}

impl Default for Timing {
    /// Heartbeats every 250 ms; elections after 1.5–3 s of silence: a new leader leads about
    /// 3–4 s after the old one stopped, and a loaded node's scheduling delays of a few hundred
    /// milliseconds cause no election.
    fn default() -> Self {
        Timing {
            heartbeat: Duration::from_millis(250),
            election_min: Duration::from_millis(1500),
            election_max: Duration::from_millis(3000),
        }
    }
}

impl Timing {
    /// How long a proof of leadership lasts: the shortest election timeout, half of the time
    /// for which the followers that proved it refuse any other candidate.
    pub fn lease(&self) -> Duration {
        self.election_min
    }
}

/// How a replica runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// This replica.
    pub me: Member,
    /// The clocks.
    pub timing: Timing,
    /// Compact the log (snapshot, then cut) once this many bytes were appended.
    pub compact_after_bytes: u64,
    /// How long a write may take to be committed before it is given up (it may still be
    /// committed later: every command is safe to repeat).
    pub write_timeout: Duration,
    /// How long a new replica may take to catch up before it votes.
    pub join_timeout: Duration,
    /// Log entries kept behind a snapshot (a follower that far behind still catches up from
    /// the log rather than the whole snapshot).
    pub keep_log_entries: u64,
}

impl Options {
    /// Defaults for `me`.
    pub fn new(me: Member) -> Options {
        Options {
            me,
            timing: Timing::default(),
            compact_after_bytes: 256 << 20,
            write_timeout: Duration::from_secs(10),
            join_timeout: Duration::from_secs(300),
            keep_log_entries: 64,
        }
    }
}

/// Why another replica's call was not served.
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    /// The call's bytes are not a message.
    #[error(transparent)]
    Malformed(#[from] wire::WireError),
    /// A Raft message for another node (the one this pod was before its volume was lost).
    #[error("a message for node {to}, but this replica is node {me}")]
    NotMe {
        /// The node it was meant for.
        to: NodeId,
        /// This replica's node.
        me: NodeId,
    },
}

/// A write forwarded to the leader: what it did and at which log index.
type WriteAnswer = std::result::Result<(Applied, u64), String>;

/// Why the leader did not take a replica in.
#[derive(Serialize, Deserialize, Clone, Debug)]
enum JoinRefusal {
    /// Ask the leader (if known).
    NotLeader(Option<Member>),
    /// It failed (retry later).
    Failed(String),
}

#[derive(Serialize, Deserialize, Clone, Debug)]
struct JoinRequest {
    id: NodeId,
    member: Member,
}

/// Where a read index request waits for its answer.
type ReadWaiter = oneshot::Sender<std::result::Result<u64, String>>;

/// Followers' read index requests waiting for one call to the leader: whether a call is on its
/// way, and who waits for the next.
#[derive(Default)]
struct ReadBatch {
    state: Mutex<(bool, Vec<ReadWaiter>)>,
}

struct Inner {
    raft: Raft<TypeConfig>,
    id: NodeId,
    options: Options,
    store: Arc<Store>,
    log: LogStore,
    sm: Arc<Shared>,
    transport: Arc<dyn Transport>,
    contact: Contact,
    fence: Fence,
    leading: watch::Sender<bool>,
    reads: ReadBatch,
    /// One membership change at a time (each reads the voters it changes).
    membership: tokio::sync::Mutex<()>,
    metrics: RaftMetrics,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

/// One replica (cheap to clone).
#[derive(Clone)]
pub struct Replica {
    inner: Arc<Inner>,
}

fn consensus(e: impl std::fmt::Display) -> StoreError {
    StoreError::Replication(e.to_string())
}

impl Replica {
    /// Starts the replica over `store` (whose direct writes stop from now on). `mint` makes
    /// this replica's node id the first time its volume is used.
    pub async fn start(
        store: Arc<Store>,
        options: Options,
        transport: Arc<dyn Transport>,
        mint: impl FnOnce() -> NodeId,
    ) -> Result<Replica> {
        store.set_replicated();
        let log = LogStore::open(store.clone())?;
        let id = log.node_id(mint)?;
        let sm = StateMachine::open(store.clone())?;
        let shared = sm.shared();
        let timing = &options.timing;
        let config = openraft::Config {
            cluster_name: "kdoctor".into(),
            heartbeat_interval: timing.heartbeat.as_millis() as u64,
            election_timeout_min: timing.election_min.as_millis() as u64,
            election_timeout_max: timing.election_max.as_millis() as u64,
            install_snapshot_timeout: 30_000,
            // Compaction is asked for by size (below), not by entry count.
            snapshot_policy: SnapshotPolicy::Never,
            max_in_snapshot_log_to_keep: options.keep_log_entries,
            max_payload_entries: 64,
            snapshot_max_chunk_size: 4 << 20,
            ..Default::default()
        }
        .validate()
        .map_err(consensus)?;
        let contact = Contact::default();
        let raft = Raft::new(
            id,
            Arc::new(config),
            Network::new(transport.clone(), contact.clone()),
            log.clone(),
            sm,
        )
        .await
        .map_err(consensus)?;
        let replica = Replica {
            inner: Arc::new(Inner {
                raft,
                id,
                options,
                store,
                log,
                sm: shared,
                transport,
                contact,
                fence: Fence::default(),
                leading: watch::Sender::new(false),
                reads: ReadBatch::default(),
                membership: tokio::sync::Mutex::new(()),
                metrics: RaftMetrics::default(),
                tasks: Mutex::new(Vec::new()),
            }),
        };
        let handles = vec![
            tokio::spawn(replica.clone().prove_leadership()).abort_handle(),
            tokio::spawn(replica.clone().follow_metrics()).abort_handle(),
            tokio::spawn(replica.clone().compact()).abort_handle(),
        ];
        *replica
            .inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = handles;
        tracing::info!(id, member = %replica.inner.options.me, "replica started");
        Ok(replica)
    }

    /// This replica's node id.
    pub fn id(&self) -> NodeId {
        self.inner.id
    }

    /// This replica.
    pub fn member(&self) -> &Member {
        &self.inner.options.me
    }

    /// The store it keeps (read from it; write through [`Replica::write`]).
    pub fn store(&self) -> &Arc<Store> {
        &self.inner.store
    }

    /// openraft's handle (tests, diagnostics).
    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.inner.raft
    }

    /// The leader's lease: every action of the controller checks it.
    pub fn fence(&self) -> &Fence {
        &self.inner.fence
    }

    /// Whether this replica leads: true once it proved its leadership, false once it is not
    /// the leader any more or could not prove it for an election timeout.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.inner.leading.subscribe()
    }

    /// The metrics (register them with [`RaftMetrics::register`]).
    pub fn metrics(&self) -> &RaftMetrics {
        &self.inner.metrics
    }

    /// The last log index applied to the store.
    pub fn applied_index(&self) -> u64 {
        self.inner.sm.applied().map_or(0, |l| l.index)
    }

    /// The leader this replica knows of.
    pub fn leader(&self) -> Option<(NodeId, Member)> {
        let metrics = self.inner.raft.metrics().borrow().clone();
        let id = metrics.current_leader?;
        let member = metrics
            .membership_config
            .membership()
            .get_node(&id)
            .cloned()?;
        Some((id, member))
    }

    /// The pods of the voters that answered this replica within the leader's lease (this one
    /// among them). Only the leader hears every replica all the time (its heartbeats, every
    /// [`Timing::heartbeat`]): on the leader, a replica missing here stopped answering (its
    /// node died, it is paused or cut off) long before Kubernetes can tell.
    pub fn answering(&self) -> BTreeSet<String> {
        let within = self.inner.options.timing.lease();
        self.voters()
            .into_iter()
            .filter(|(id, _)| {
                *id == self.inner.id || self.inner.contact.since(*id).is_some_and(|d| d <= within)
            })
            .map(|(_, m)| m.pod)
            .collect()
    }

    /// The voting members.
    pub fn voters(&self) -> BTreeMap<NodeId, Member> {
        let metrics = self.inner.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership().clone();
        membership
            .voter_ids()
            .filter_map(|id| membership.get_node(&id).map(|m| (id, m.clone())))
            .collect()
    }

    fn is_leader(&self) -> bool {
        self.inner.raft.metrics().borrow().state == ServerState::Leader
    }

    // ---- writes --------------------------------------------------------------------------

    async fn propose(&self, command: Command) -> Result<(Applied, u64)> {
        let timeout = self.inner.options.write_timeout;
        match tokio::time::timeout(timeout, self.inner.raft.client_write(command)).await {
            Ok(Ok(response)) => Ok((response.data, response.log_id.index)),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
                Err(StoreError::NotLeader {
                    leader: forward.leader_node.map(|m| m.pod),
                })
            }
            Ok(Err(e)) => Err(consensus(e)),
            Err(_) => Err(StoreError::Replication(format!(
                "the write was not committed within {timeout:?} (a majority of replicas is \
                 out of reach)"
            ))),
        }
    }

    /// Makes `command` on this replica, which must lead; returns once it is committed (held by
    /// a majority of replicas) and applied here.
    pub async fn write(&self, command: Command) -> Result<Applied> {
        self.propose(command).await?.0.accepted()
    }

    /// Makes `command` through the leader, wherever it is; returns once this replica applied
    /// it too (a client reading here next sees it).
    pub async fn write_via_leader(&self, command: Command) -> Result<Applied> {
        if self.is_leader() {
            return self.write(command).await;
        }
        let (_, leader) = self
            .leader()
            .ok_or(StoreError::NotLeader { leader: None })?;
        let timeout = self.inner.options.write_timeout;
        let answer = self
            .inner
            .transport
            .call(&leader, Rpc::Write, wire::encode(&command), timeout)
            .await
            .map_err(consensus)?;
        let (applied, index) = wire::decode::<WriteAnswer>(&answer)
            .map_err(consensus)?
            .map_err(StoreError::Replication)?;
        self.wait_applied(index, timeout).await?;
        applied.accepted()
    }

    async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<()> {
        if self.applied_index() >= index {
            return Ok(());
        }
        self.inner
            .raft
            .wait(Some(timeout))
            .applied_index_at_least(Some(index), "read")
            .await
            .map(drop)
            .map_err(|e| {
                StoreError::Replication(format!(
                    "this replica has not applied log index {index} yet: {e}"
                ))
            })
    }

    // ---- reads -------------------------------------------------------------------------

    /// The log index a read that starts now must see, asked of this replica as the leader: its
    /// commit index while its lease holds and it committed in its own term, else a round of
    /// heartbeats (openraft's read index).
    async fn leader_read_index(&self, timeout: Duration) -> Result<u64> {
        if self.inner.fence.valid() {
            let state = self
                .inner
                .raft
                .with_raft_state(|st| (st.committed, st.vote_ref().leader_id().term))
                .await
                .map_err(consensus)?;
            if let (Some(committed), term) = state
                && committed.leader_id.term == term
            {
                return Ok(committed.index);
            }
        }
        match tokio::time::timeout(timeout, self.inner.raft.get_read_log_id()).await {
            Ok(Ok((read, _))) => Ok(read.map_or(0, |l| l.index)),
            Ok(Err(e)) => Err(consensus(e)),
            Err(_) => Err(StoreError::Replication(format!(
                "leadership not confirmed within {timeout:?}"
            ))),
        }
    }

    /// Asks the leader for the read index; requests that arrive while one is on its way wait
    /// for the next (one call serves them all, and each is answered by a call that started
    /// after it).
    async fn follower_read_index(&self, timeout: Duration) -> Result<u64> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut state = self
                .inner
                .reads
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            state.1.push(tx);
            !std::mem::replace(&mut state.0, true)
        };
        if start {
            let replica = self.clone();
            tokio::spawn(async move { replica.read_rounds(timeout).await });
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result.map_err(StoreError::Replication),
            _ => Err(StoreError::Replication(format!(
                "no read index from the leader within {timeout:?}"
            ))),
        }
    }

    async fn read_rounds(&self, timeout: Duration) {
        loop {
            let waiting = {
                let mut state = self
                    .inner
                    .reads
                    .state
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if state.1.is_empty() {
                    state.0 = false;
                    return;
                }
                std::mem::take(&mut state.1)
            };
            let result = self.ask_leader_read_index(timeout).await;
            for tx in waiting {
                let _ = tx.send(result.clone());
            }
        }
    }

    async fn ask_leader_read_index(&self, timeout: Duration) -> std::result::Result<u64, String> {
        let (_, leader) = self.leader().ok_or("no leader is known")?;
        let answer = self
            .inner
            .transport
            .call(&leader, Rpc::ReadIndex, wire::encode(&()), timeout)
            .await
            .map_err(|e| e.to_string())?;
        wire::decode::<std::result::Result<u64, String>>(&answer).map_err(|e| e.to_string())?
    }

    /// Waits until this replica's store holds every write committed before the call
    /// (linearizable reads); fails when that cannot be known within `timeout` (no leader, or
    /// this replica cut off from it). During an election it waits for the new leader.
    pub async fn read_barrier(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let index = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let asked = if self.is_leader() {
                self.leader_read_index(left).await
            } else if self.leader().is_some() {
                self.follower_read_index(left).await
            } else {
                Err(StoreError::NotLeader { leader: None })
            };
            match asked {
                Ok(index) => break index,
                Err(e) if Instant::now() + RETRY >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(RETRY).await,
            }
        };
        self.wait_applied(index, deadline.saturating_duration_since(Instant::now()))
            .await
    }

    // ---- forming a cluster ---------------------------------------------------------------

    /// What this replica says of itself.
    pub fn status(&self) -> Result<Status> {
        let membership = self.inner.raft.metrics().borrow().membership_config.clone();
        Ok(Status {
            id: self.inner.id,
            member: self.inner.options.me.clone(),
            initialized: self.inner.log.is_initialized()?,
            resource_version: self.inner.store.resource_version(),
            leader: self.leader().map(|(_, m)| m),
            members: membership.membership().nodes().map(|(id, _)| *id).collect(),
            membership_index: membership.log_id().map(|l| l.index),
        })
    }

    /// Returns once this replica learns that the cluster took it out (the StatefulSet was
    /// scaled down, then up again, and its pod came back with its old volume): a replica that
    /// leads said so twice, [`REMOVAL_CHECK`] apart ([`formation::removed`]). Such a replica is
    /// sent nothing ever again; it can only come back as a new node, with a fresh store. Asks
    /// the `expected` replicas (the others) while it is not the leader itself. Returns the
    /// leader that said so.
    pub async fn removed(&self, expected: impl Fn() -> Vec<Member>) -> Member {
        let mut said_by: Option<Member> = None;
        loop {
            tokio::time::sleep(REMOVAL_CHECK).await;
            let Ok(me) = self.status() else { continue };
            if self.is_leader() || !me.initialized {
                said_by = None;
                continue;
            }
            let leader = self
                .statuses(expected())
                .await
                .into_iter()
                .filter_map(|(_, status)| status)
                .find(|other| formation::removed(&me, other))
                .map(|other| other.member);
            match (leader, said_by.take()) {
                (Some(now), Some(before)) if now == before => return now,
                (now, _) => said_by = now,
            }
        }
    }

    /// What each of `members` but this replica says of itself (`None`: no answer within 2 s).
    async fn statuses(&self, members: Vec<Member>) -> Vec<(Member, Option<Status>)> {
        let mut answers = Vec::new();
        for member in members {
            if member == self.inner.options.me {
                continue;
            }
            let answer = self
                .inner
                .transport
                .call(
                    &member,
                    Rpc::Status,
                    wire::encode(&()),
                    Duration::from_secs(2),
                )
                .await
                .ok()
                .and_then(|a| wire::decode::<Status>(&a).ok());
            answers.push((member, answer));
        }
        answers
    }

    /// Gets this replica into a cluster, if it is not in one: starts it, or joins it, as
    /// [`formation::next`] decides from what the `expected` replicas (the others) say. Returns
    /// once it belongs to one.
    pub async fn form(&self, expected: impl Fn() -> Vec<Member>) -> Result<()> {
        let mut said = Instant::now() - Duration::from_secs(60);
        let began = Instant::now();
        loop {
            if self.inner.log.is_initialized()? {
                return Ok(());
            }
            let me = self.status()?;
            let others = self.statuses(expected()).await;
            let patient = began.elapsed() < FORMATION_PATIENCE;
            match formation::next(&me, &others, patient) {
                Next::Start => return self.start_cluster().await,
                Next::Join(via) => match self.join(&via).await {
                    Ok(()) => return Ok(()),
                    Err(e) => tracing::info!(via = %via, error = %e, "joining the cluster"),
                },
                Next::Wait(why) => {
                    if said.elapsed() >= Duration::from_secs(10) {
                        tracing::info!(%why, "waiting to form the replicas' cluster");
                        said = Instant::now();
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn start_cluster(&self) -> Result<()> {
        let members = BTreeMap::from([(self.inner.id, self.inner.options.me.clone())]);
        self.inner
            .raft
            .initialize(members)
            .await
            .map_err(consensus)?;
        tracing::info!(id = self.inner.id, "started the replicas' cluster");
        self.inner
            .raft
            .wait(Some(Duration::from_secs(30)))
            .state(ServerState::Leader, "start")
            .await
            .map_err(consensus)?;
        if self.inner.store.resource_version() > 0 {
            // Data from before the cluster is in no log entry: replicas that join must take it
            // by snapshot, so the log is cut at once.
            self.inner
                .raft
                .trigger()
                .snapshot()
                .await
                .map_err(consensus)?;
            let applied = self
                .inner
                .raft
                .metrics()
                .borrow()
                .last_applied
                .map_or(0, |l| l.index);
            let metrics = self
                .inner
                .raft
                .wait(Some(Duration::from_secs(600)))
                .metrics(
                    |m| m.snapshot.is_some_and(|s| s.index >= applied),
                    "the first snapshot",
                )
                .await
                .map_err(consensus)?;
            let upto = metrics.snapshot.map_or(applied, |s| s.index);
            self.inner
                .raft
                .trigger()
                .purge_log(upto)
                .await
                .map_err(consensus)?;
            tracing::info!(
                resource_version = self.inner.store.resource_version(),
                "the store's data from before the cluster is in its first snapshot"
            );
        }
        Ok(())
    }

    async fn join(&self, via: &Member) -> Result<()> {
        // What this replica holds from before is not the cluster's: it starts empty, and the
        // leader sends it everything (a snapshot, or the whole log).
        if self.inner.store.resource_version() > 0 {
            tracing::info!("clearing this replica's store before it joins the cluster");
            self.inner.store.replace_content(|_| Ok(()))?;
        }
        let mut via = via.clone();
        for _ in 0..3 {
            let request = JoinRequest {
                id: self.inner.id,
                member: self.inner.options.me.clone(),
            };
            let answer = self
                .inner
                .transport
                .call(
                    &via,
                    Rpc::Join,
                    wire::encode(&request),
                    self.inner.options.join_timeout,
                )
                .await
                .map_err(consensus)?;
            match wire::decode::<std::result::Result<(), JoinRefusal>>(&answer)
                .map_err(consensus)?
            {
                Ok(()) => {
                    tracing::info!(id = self.inner.id, via = %via, "joined the replicas' cluster");
                    return Ok(());
                }
                Err(JoinRefusal::NotLeader(Some(leader))) => via = leader,
                Err(JoinRefusal::NotLeader(None)) => {
                    return Err(StoreError::NotLeader { leader: None });
                }
                Err(JoinRefusal::Failed(why)) => return Err(StoreError::Replication(why)),
            }
        }
        Err(StoreError::NotLeader {
            leader: Some(via.pod),
        })
    }

    /// As the leader, takes `id` in: a learner until it caught up, then a voter in place of any
    /// earlier node of the same pod (a replica whose volume was lost comes back as a new node).
    async fn take_in(&self, request: JoinRequest) -> std::result::Result<(), JoinRefusal> {
        if !self.is_leader() {
            return Err(JoinRefusal::NotLeader(self.leader().map(|(_, m)| m)));
        }
        let failed = |e: &dyn std::fmt::Display| JoinRefusal::Failed(e.to_string());
        let _one_at_a_time = self.inner.membership.lock().await;
        if self.voters().contains_key(&request.id) {
            return Ok(());
        }
        tracing::info!(id = request.id, member = %request.member, "taking a replica in: catching it up as a learner");
        match tokio::time::timeout(
            self.inner.options.join_timeout,
            self.inner
                .raft
                .add_learner(request.id, request.member.clone(), true),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(failed(&e)),
            Err(_) => return Err(failed(&"the new replica did not catch up in time")),
        }
        let voters = self.voters();
        let replaced: BTreeSet<NodeId> = voters
            .iter()
            .filter(|(_, m)| **m == request.member)
            .map(|(id, _)| *id)
            .collect();
        let next: BTreeSet<NodeId> = voters
            .keys()
            .copied()
            .filter(|id| !replaced.contains(id))
            .chain([request.id])
            .collect();
        self.inner
            .raft
            .change_membership(ChangeMembers::ReplaceAllVoters(next), false)
            .await
            .map_err(|e| failed(&e))?;
        tracing::info!(id = request.id, member = %request.member, replaced = ?replaced, "replica is a voter");
        Ok(())
    }

    /// As the leader, removes the voters `keep` rejects (replicas scaled away). At least one
    /// voter stays.
    pub async fn retain_voters(&self, keep: impl Fn(&Member) -> bool) -> Result<bool> {
        let _one_at_a_time = self.inner.membership.lock().await;
        let voters = self.voters();
        let next: BTreeSet<NodeId> = voters
            .iter()
            .filter(|(_, m)| keep(m))
            .map(|(id, _)| *id)
            .collect();
        if next.len() == voters.len() || next.is_empty() {
            return Ok(false);
        }
        tracing::info!(from = ?voters, to = ?next, "removing replicas that are gone from the cluster");
        self.inner
            .raft
            .change_membership(ChangeMembers::ReplaceAllVoters(next), false)
            .await
            .map_err(consensus)?;
        Ok(true)
    }

    // ---- serving the other replicas --------------------------------------------------------

    /// Serves another replica's call; the answer's bytes.
    pub async fn handle(&self, rpc: Rpc, body: &[u8]) -> std::result::Result<Vec<u8>, HandleError> {
        let raft = &self.inner.raft;
        let me = self.inner.id;
        let for_me = |to: NodeId| {
            if to == me {
                Ok(())
            } else {
                Err(HandleError::NotMe { to, me })
            }
        };
        Ok(match rpc {
            Rpc::Append => {
                let Addressed { to, message } = wire::decode(body)?;
                for_me(to)?;
                wire::encode(&raft.append_entries(message).await)
            }
            Rpc::Vote => {
                let Addressed { to, message } = wire::decode(body)?;
                for_me(to)?;
                wire::encode(&raft.vote(message).await)
            }
            Rpc::Snapshot => {
                let (header, data) = wire::decode_with_data::<ChunkHeader>(body)?;
                for_me(header.to)?;
                let request = InstallSnapshotRequest {
                    vote: header.vote,
                    meta: header.meta,
                    offset: header.offset,
                    data: data.to_vec(),
                    done: header.done,
                };
                let result: std::result::Result<_, RaftError<NodeId, InstallSnapshotError>> =
                    raft.install_snapshot(request).await;
                wire::encode(&result)
            }
            Rpc::Write => {
                let command: Command = wire::decode(body)?;
                let answer: WriteAnswer = if self.is_leader() {
                    self.propose(command).await.map_err(|e| e.to_string())
                } else {
                    Err("this replica does not lead".into())
                };
                wire::encode(&answer)
            }
            Rpc::ReadIndex => {
                let answer: std::result::Result<u64, String> = if self.is_leader() {
                    self.leader_read_index(self.inner.options.timing.election_max)
                        .await
                        .map_err(|e| e.to_string())
                } else {
                    Err("this replica does not lead".into())
                };
                wire::encode(&answer)
            }
            Rpc::Status => {
                let status = self
                    .status()
                    .map_err(|e| wire::WireError::Malformed(e.to_string()))?;
                wire::encode(&status)
            }
            Rpc::Join => wire::encode(&self.take_in(wire::decode(body)?).await),
        })
    }

    // ---- background ------------------------------------------------------------------------

    /// Proves leadership every heartbeat while this replica leads (the lease), and says when it
    /// starts and stops leading.
    async fn prove_leadership(self) {
        let timing = self.inner.options.timing.clone();
        let mut since_proof = Instant::now();
        loop {
            let leader = self.is_leader();
            if leader {
                let sent = Instant::now();
                if let Ok(Ok(_)) =
                    tokio::time::timeout(timing.lease(), self.inner.raft.get_read_log_id()).await
                {
                    self.inner.fence.proven(sent, timing.lease());
                    since_proof = Instant::now();
                }
            } else {
                self.inner.fence.revoke();
            }
            let valid = self.inner.fence.valid();
            let leading = *self.inner.leading.borrow();
            if !leading && leader && valid {
                tracing::info!(id = self.inner.id, "leading");
                self.inner.leading.send_replace(true);
            } else if leading && (!leader || since_proof.elapsed() >= timing.election_max) {
                tracing::warn!(id = self.inner.id, "no longer leading");
                self.inner.leading.send_replace(false);
            }
            self.inner.metrics.lease_valid.set(i64::from(valid));
            tokio::time::sleep(timing.heartbeat).await;
        }
    }

    /// Follows openraft's view into the metrics.
    async fn follow_metrics(self) {
        let mut metrics = self.inner.raft.metrics();
        let mut last_leader = None;
        loop {
            {
                let m = metrics.borrow_and_update().clone();
                let gauges = &self.inner.metrics;
                gauges.term.set(m.current_term as i64);
                gauges
                    .last_log_index
                    .set(m.last_log_index.unwrap_or(0) as i64);
                gauges
                    .applied_index
                    .set(m.last_applied.map_or(0, |l| l.index) as i64);
                gauges
                    .snapshot_index
                    .set(m.snapshot.map_or(0, |l| l.index) as i64);
                gauges
                    .is_leader
                    .set(i64::from(m.state == ServerState::Leader));
                gauges
                    .voters
                    .set(m.membership_config.membership().voter_ids().count() as i64);
                gauges.replication_lag.reset();
                if let Some(replication) = &m.replication {
                    let last = m.last_log_index.unwrap_or(0);
                    for (id, matched) in replication {
                        if *id == self.inner.id {
                            continue;
                        }
                        let member = m
                            .membership_config
                            .membership()
                            .get_node(id)
                            .map_or_else(|| id.to_string(), |m| m.pod.clone());
                        let lag = last.saturating_sub(matched.map_or(0, |l| l.index));
                        gauges
                            .replication_lag
                            .with_label_values(&[&member])
                            .set(lag as i64);
                    }
                }
                if m.current_leader != last_leader {
                    if m.current_leader.is_some() {
                        gauges.leader_changes.inc();
                    }
                    last_leader = m.current_leader;
                }
                if let Err(e) = &m.running_state {
                    tracing::error!(error = %e, "the replicated log stopped");
                    self.inner
                        .store
                        .record_failure(format!("the replicated log stopped: {e}"));
                    return;
                }
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    }

    /// Snapshots (and so cuts) the log once it grew by the configured bytes; keeps the commit
    /// index gauge (openraft's metrics do not carry it).
    async fn compact(self) {
        loop {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                match self
                    .inner
                    .raft
                    .with_raft_state(|st| st.committed.map_or(0, |c| c.index))
                    .await
                {
                    Ok(committed) => self.inner.metrics.commit_index.set(committed as i64),
                    Err(_) => return,
                }
            }
            if self.inner.log.appended_bytes() >= self.inner.options.compact_after_bytes {
                tracing::info!(
                    bytes = self.inner.log.appended_bytes(),
                    "compacting the replicated log"
                );
                if self.inner.raft.trigger().snapshot().await.is_err() {
                    return;
                }
                // Counted again from the next cut (crate::raft::log_store).
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
        }
    }

    /// Stops the replica (its store stays open).
    pub async fn shutdown(&self) {
        for task in self
            .inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
        self.inner.fence.revoke();
        self.inner.leading.send_replace(false);
        if let Err(e) = self.inner.raft.shutdown().await {
            tracing::warn!(error = %e, "the replicated log did not stop cleanly");
        }
    }
}
