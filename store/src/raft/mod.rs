//! The replicated store (issue 31): the controller's replicas keep equal stores through Raft.
//! The consensus engine is openraft (elections, log replication, membership changes, snapshot
//! transfer); this crate gives it sled — each replica's one database — as its log
//! ([`LogStore`]) and state machine ([`StateMachine`]), and [`Replica`] puts them together
//! with the leader's lease, linearizable reads and how a replica joins a cluster.
//!
//! Every change of the store is a [`crate::Command`] in the log. A command applies the same on
//! every replica (crate::command), so replicas hold the same data under the same
//! resourceVersions: a resourceVersion names the same content on every replica, and never
//! another after a leader change. A write is answered once its entry is committed (held by a
//! majority) and applied on the leader.

mod fence;
mod formation;
mod log_store;
mod metrics;
mod network;
pub mod removal;
mod replica;
mod snapshot;
mod state_machine;
#[cfg(feature = "testing")]
pub mod testing;
mod wire;

use serde::{Deserialize, Serialize};

pub use fence::{Fence, Fenced};
pub use formation::{Next, Status, next};
pub use log_store::LogStore;
pub use metrics::RaftMetrics;
pub use network::{BoxFuture, Contact, Network, Transport, TransportError};
pub use replica::{HandleError, Options, Replica, Timing};
pub use state_machine::StateMachine;
pub use wire::{MAX_MESSAGE, Rpc, WireError};

/// A replica's node id: minted when its volume is first used (super::LogStore::node_id).
pub type NodeId = u64;

/// What the cluster records of a member: its pod, by which the transport finds its address
/// (a pod's IP changes when it restarts; its name does not).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    /// The pod name.
    pub pod: String,
}

impl Member {
    /// The member for `pod`.
    pub fn new(pod: impl Into<String>) -> Member {
        Member { pod: pod.into() }
    }
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.pod)
    }
}

openraft::declare_raft_types!(
    /// The types of kdoctor's replicated log.
    pub TypeConfig:
        D = crate::command::Command,
        R = crate::command::Applied,
        NodeId = NodeId,
        Node = Member,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);
