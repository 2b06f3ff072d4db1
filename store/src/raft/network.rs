//! Raft's messages over whatever carries bytes between replicas ([`Transport`]: the
//! controller's mutual-TLS HTTPS, or a channel in tests). Raft's own errors travel inside the
//! answer; a transport failure is "unreachable", after which openraft backs off.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use super::wire::{self, Rpc};
use super::{Member, NodeId, TypeConfig};

/// A boxed future (object-safe transports).
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Why a call to another replica got no answer.
#[derive(Clone, Debug, thiserror::Error)]
pub enum TransportError {
    /// It cannot be reached (no address yet, refused, TLS failed).
    #[error("replica {member} unreachable: {reason}")]
    Unreachable {
        /// The replica.
        member: String,
        /// Why.
        reason: String,
    },
    /// No answer in time.
    #[error("replica {member} did not answer within {timeout:?}")]
    Timeout {
        /// The replica.
        member: String,
        /// The limit.
        timeout: Duration,
    },
}

/// Carries a call to another replica and brings back its answer's bytes.
pub trait Transport: Send + Sync + 'static {
    /// Sends `body` as `rpc` to `to`; the answer must come within `timeout`.
    fn call(
        &self,
        to: &Member,
        rpc: Rpc,
        body: Vec<u8>,
        timeout: Duration,
    ) -> BoxFuture<Result<Vec<u8>, TransportError>>;
}

/// When each other replica last answered this one (any answer, even a refusal: it is up and
/// reachable). The leader hears every follower at each heartbeat, so this is how it tells a
/// replica that stopped answering (its node died, it is cut off) long before Kubernetes does.
#[derive(Clone, Default)]
pub struct Contact {
    heard: Arc<Mutex<BTreeMap<NodeId, Instant>>>,
}

impl Contact {
    fn heard(&self, from: NodeId) {
        self.heard
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(from, Instant::now());
    }

    /// How long ago `node` last answered; None if it never did.
    pub fn since(&self, node: NodeId) -> Option<Duration> {
        self.heard
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&node)
            .map(Instant::elapsed)
    }
}

/// Makes openraft's clients of other replicas.
pub struct Network {
    transport: Arc<dyn Transport>,
    contact: Contact,
}

impl Network {
    /// Over `transport`, noting every answer in `contact`.
    pub fn new(transport: Arc<dyn Transport>, contact: Contact) -> Network {
        Network { transport, contact }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> Peer {
        Peer {
            transport: self.transport.clone(),
            contact: self.contact.clone(),
            target,
            member: node.clone(),
        }
    }
}

/// openraft's client of one replica.
pub struct Peer {
    transport: Arc<dyn Transport>,
    contact: Contact,
    target: NodeId,
    member: Member,
}

type Failed<E = openraft::error::Infallible> = RPCError<NodeId, Member, RaftError<NodeId, E>>;

impl Peer {
    async fn call<T, E>(&self, rpc: Rpc, body: Vec<u8>, option: &RPCOption) -> Result<T, Failed<E>>
    where
        T: serde::de::DeserializeOwned,
        E: std::error::Error + serde::de::DeserializeOwned,
    {
        let answer = self
            .transport
            .call(&self.member, rpc, body, option.hard_ttl())
            .await
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        self.contact.heard(self.target);
        let result: Result<T, RaftError<NodeId, E>> =
            wire::decode(&answer).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.member.clone(),
                e,
            ))
        })
    }
}

/// A Raft message with the node it is meant for: a pod name may reach a new node of the same
/// pod (a replica whose volume was lost), which must not answer for the node it replaced.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Addressed<T> {
    pub to: NodeId,
    pub message: T,
}

/// What a snapshot chunk says besides its bytes.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct ChunkHeader {
    pub to: NodeId,
    pub vote: openraft::Vote<NodeId>,
    pub meta: super::snapshot::Meta,
    pub offset: u64,
    pub done: bool,
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, Failed> {
        let message = Addressed {
            to: self.target,
            message: rpc,
        };
        self.call(Rpc::Append, wire::encode(&message), &option)
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, Failed<InstallSnapshotError>> {
        let header = ChunkHeader {
            to: self.target,
            vote: rpc.vote,
            meta: rpc.meta,
            offset: rpc.offset,
            done: rpc.done,
        };
        self.call(
            Rpc::Snapshot,
            wire::encode_with_data(&header, &rpc.data),
            &option,
        )
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, Failed> {
        let message = Addressed {
            to: self.target,
            message: rpc,
        };
        self.call(Rpc::Vote, wire::encode(&message), &option).await
    }
}
