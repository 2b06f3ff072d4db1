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

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;

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
    /// Whether this replica's copy is current (a follower that caught up, and stays so while
    /// its leader is unreachable); the API server's readiness follows it.
    pub current: watch::Sender<bool>,
    /// Whether this follower is in contact with its leader and caught up: reads that name no
    /// resourceVersion wait a little for it.
    pub in_sync: watch::Sender<bool>,
}

impl Replication {
    /// The Lease annotation value.
    pub fn address(&self) -> String {
        format!("https://{}", self.advertise)
    }
}

/// Whether a candidate leaves the leader Lease to another replica for now, so that the replica
/// with the newest data leads: a follower whose copy is current never defers; before any
/// leader has replicated (a fresh install) nobody does; a replica restarted under the Lease's
/// own name defers only with an empty store (a lost volume: the follower has the data); any
/// other copy that is not current leaves a free Lease to a current follower first.
pub fn should_defer(
    lease: &Lease,
    identity: &str,
    current: bool,
    store_rv: u64,
    now: Timestamp,
    lease_duration: Duration,
) -> bool {
    if current {
        return false;
    }
    let replicated = lease
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ADDRESS_ANNOTATION));
    if !replicated {
        return false;
    }
    let holder = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or_default();
    if holder == identity {
        return store_rv == 0;
    }
    crate::leader::expired(lease, lease_duration, now)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    use super::*;

    fn lease(holder: &str, renewed_ago: i64, replicated: bool) -> Lease {
        let now: Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
        let mut lease = Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.to_string()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(
                    now.checked_sub(jiff::SignedDuration::from_secs(renewed_ago))
                        .expect("time"),
                )),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        };
        if replicated {
            lease.metadata.annotations = Some(BTreeMap::from([(
                ADDRESS_ANNOTATION.to_string(),
                "https://10.0.0.1:5722".to_string(),
            )]));
        }
        lease
    }

    #[test]
    fn the_replica_with_the_newest_data_leads() {
        let now: Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
        // (holder, renewed seconds ago, replicated before, candidate, current, store rv,
        // defers, why)
        let cases = [
            (
                "c-0",
                60,
                true,
                "c-1",
                true,
                10,
                false,
                "a current follower takes a free Lease",
            ),
            (
                "c-0",
                60,
                true,
                "c-1",
                false,
                10,
                true,
                "one behind leaves a free Lease first",
            ),
            (
                "c-0",
                1,
                true,
                "c-1",
                false,
                10,
                false,
                "a held Lease is not its to take anyway",
            ),
            (
                "c-0",
                1,
                true,
                "c-0",
                false,
                10,
                false,
                "a restarted leader keeps it with its data",
            ),
            (
                "c-0",
                1,
                true,
                "c-0",
                false,
                0,
                true,
                "…but not with an empty volume",
            ),
            (
                "c-0",
                60,
                false,
                "c-1",
                false,
                0,
                false,
                "a fresh install: nobody waits",
            ),
        ];
        for (holder, ago, replicated, candidate, current, rv, defers, why) in cases {
            let lease = lease(holder, ago, replicated);
            let got = should_defer(&lease, candidate, current, rv, now, Duration::from_secs(15));
            assert_eq!(got, defers, "{why}");
        }
    }
}
