//! Replication between controller replicas (issue 18). The leader serves its store's history
//! to followers over mutual TLS (certificates of the install's CA, the follower's common name
//! checked); each follower applies it to its own store and serves reads from that copy, ready
//! only once it has caught up. The leader's address travels in an annotation of the leader
//! Lease, so a follower always asks the current leader. A write a client sends to a follower
//! (a DELETE) is made by the leader ([`client::PeerClient::purge`]).

pub mod client;
pub mod follow;
pub mod serve;

use std::net::SocketAddr;
use std::time::Duration;

use kdoctor_transport::tls::Identity;
use rustls::RootCertStore;
use tokio::sync::watch;

/// The common name of the certificate a follower presents to the leader.
pub const REPLICA_NAME: &str = "kdoctor-controller-replica";

/// Annotation of the leader Lease naming where the leader serves its history.
pub const ADDRESS_ANNOTATION: &str = "kdoctor.io/replication-address";

/// Records of one answer, in bytes (a follower far behind takes several).
pub const MAX_ANSWER_RECORDS: usize = 8 << 20;

/// The most a follower reads of one answer of records.
pub const MAX_ANSWER_BYTES: usize = 256 << 20;

/// How long the leader holds a request for records when there is nothing new.
pub const LONG_POLL: Duration = Duration::from_secs(10);

/// How long the harvester waits for a follower to have a round's reports before it
/// acknowledges them to the agent (so that a failover does not lose what agents dropped).
pub const REPLICATION_ACK_WAIT: Duration = Duration::from_secs(5);

/// What a replica needs to replicate.
#[derive(Clone)]
pub struct Replication {
    /// Where this replica serves its history when it leads.
    pub listen: SocketAddr,
    /// The address followers reach that listener at (the pod IP and the port).
    pub advertise: SocketAddr,
    /// The install's CA: both ends' certificates chain to it.
    pub roots: RootCertStore,
    /// Serving certificate for `advertise`'s IP.
    pub server: Identity,
    /// Client certificate with [`REPLICA_NAME`].
    pub client: Identity,
    /// Whether this replica's copy is current (a follower that caught up); the API server's
    /// readiness follows it.
    pub current: watch::Sender<bool>,
}

impl Replication {
    /// The Lease annotation value.
    pub fn address(&self) -> String {
        format!("https://{}", self.advertise)
    }
}
