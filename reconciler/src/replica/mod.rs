//! The controller's replicas (issue 31). Each keeps a replica of the report store under Raft
//! (kdoctor_store::raft, on openraft); this module is the Kubernetes side of it: where the
//! other replicas are (their pods, [`peers`]), the mutual-TLS HTTPS that carries Raft between
//! them ([`transport`], [`serve`]: certificates of the install's CA, the replica name checked
//! on both ends), the leader's care of the membership when the StatefulSet is scaled
//! ([`members`]) and of the report API's endpoints ([`endpoints`]), and how a process starts
//! its replica ([`start`]).

pub mod endpoints;
pub mod members;
pub mod peers;
pub mod serve;
pub mod start;
pub mod transport;

use std::net::SocketAddr;

use kdoctor_transport::tls::Identity;
use rustls::RootCertStore;

/// The common name of the certificates replicas present to each other.
pub const REPLICA_NAME: &str = "kdoctor-controller-replica";

/// What a replica needs to talk to the others.
#[derive(Clone)]
pub struct Replication {
    /// Where this replica serves the others.
    pub listen: SocketAddr,
    /// The port the others reach it at (on its pod IP).
    pub port: u16,
    /// The install's CA: both ends' certificates chain to it.
    pub roots: RootCertStore,
    /// Serving certificate for this replica's pod IP.
    pub server: Identity,
    /// Client certificate named [`REPLICA_NAME`].
    pub client: Identity,
}
