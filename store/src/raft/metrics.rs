//! Prometheus metrics of the replicated log, as openraft sees it.

use prometheus::{IntCounter, IntGauge, IntGaugeVec, Opts, Registry};

/// Gauges and counters the replica keeps up to date.
#[derive(Clone, Debug)]
pub struct RaftMetrics {
    /// The current term.
    pub term: IntGauge,
    /// The last log index this replica holds.
    pub last_log_index: IntGauge,
    /// The last log index this replica knows committed (held by a majority).
    pub commit_index: IntGauge,
    /// The last log index applied to the store.
    pub applied_index: IntGauge,
    /// The last log index in this replica's snapshot.
    pub snapshot_index: IntGauge,
    /// 1 while this replica is the Raft leader.
    pub is_leader: IntGauge,
    /// 1 while this replica holds a valid leader lease (it may act as the controller).
    pub lease_valid: IntGauge,
    /// Voting members.
    pub voters: IntGauge,
    /// Entries each follower is behind the leader (on the leader only).
    pub replication_lag: IntGaugeVec,
    /// Leader changes this replica saw.
    pub leader_changes: IntCounter,
}

impl Default for RaftMetrics {
    fn default() -> Self {
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("valid metric");
        RaftMetrics {
            term: gauge("kdoctor_raft_term", "The current Raft term."),
            last_log_index: gauge(
                "kdoctor_raft_last_log_index",
                "The last index of this replica's Raft log.",
            ),
            commit_index: gauge(
                "kdoctor_raft_commit_index",
                "The last Raft log index this replica knows committed (held by a majority).",
            ),
            applied_index: gauge(
                "kdoctor_raft_applied_index",
                "The last Raft log index applied to this replica's report store.",
            ),
            snapshot_index: gauge(
                "kdoctor_raft_snapshot_index",
                "The last Raft log index in this replica's snapshot.",
            ),
            is_leader: gauge(
                "kdoctor_raft_is_leader",
                "1 while this replica is the Raft leader.",
            ),
            lease_valid: gauge(
                "kdoctor_raft_leader_lease_valid",
                "1 while this replica holds a valid leader lease and may act as the controller.",
            ),
            voters: gauge("kdoctor_raft_voters", "Voting members of the Raft cluster."),
            replication_lag: IntGaugeVec::new(
                Opts::new(
                    "kdoctor_raft_replication_lag_entries",
                    "Log entries a follower is behind the leader (exported by the leader).",
                ),
                &["follower"],
            )
            .expect("valid metric"),
            leader_changes: IntCounter::new(
                "kdoctor_raft_leader_changes_total",
                "Changes of the Raft leader seen by this replica.",
            )
            .expect("valid metric"),
        }
    }
}

impl RaftMetrics {
    /// Registers every metric with `registry` (once; a second registration fails).
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.term.clone()))?;
        registry.register(Box::new(self.last_log_index.clone()))?;
        registry.register(Box::new(self.commit_index.clone()))?;
        registry.register(Box::new(self.applied_index.clone()))?;
        registry.register(Box::new(self.snapshot_index.clone()))?;
        registry.register(Box::new(self.is_leader.clone()))?;
        registry.register(Box::new(self.lease_valid.clone()))?;
        registry.register(Box::new(self.voters.clone()))?;
        registry.register(Box::new(self.replication_lag.clone()))?;
        registry.register(Box::new(self.leader_changes.clone()))?;
        Ok(())
    }
}
