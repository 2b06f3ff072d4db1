//! The leader's care of the membership: a replica the StatefulSet no longer wants (scaled
//! down) stops being a voter, so the majority is counted among the replicas that exist.
//! Replicas that come are taken in when they ask (kdoctor_store::raft::Replica::form).

use std::time::Duration;

use kdoctor_store::raft::Replica;

use super::peers::{Peers, ordinal_of};

/// How often the leader compares the voters with the StatefulSet.
const EVERY: Duration = Duration::from_secs(10);

/// Whether `pod` is a replica the StatefulSet `set` of `replicas` wants.
pub fn wanted(pod: &str, set: &str, replicas: usize) -> bool {
    ordinal_of(pod).is_some_and(|(s, i)| s == set && i < replicas)
}

/// While this replica leads: removes voters whose pods the StatefulSet no longer wants.
pub async fn run(replica: Replica, peers: Peers) {
    let me = replica.member().pod.clone();
    let Some((set, _)) = ordinal_of(&me) else {
        return;
    };
    let set = set.to_string();
    loop {
        tokio::time::sleep(EVERY).await;
        let Some(replicas) = peers.replicas() else {
            continue;
        };
        match replica
            .retain_voters(|m| wanted(&m.pod, &set, replicas))
            .await
        {
            Ok(true) => tracing::info!(replicas, "voters follow the StatefulSet's replicas"),
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "cannot change the replicas' membership"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_beyond_the_statefulset_s_count_are_not_wanted() {
        assert!(wanted("kdoctor-controller-2", "kdoctor-controller", 3));
        assert!(!wanted("kdoctor-controller-3", "kdoctor-controller", 3));
        assert!(!wanted("other-0", "kdoctor-controller", 3));
        assert!(!wanted("laptop", "kdoctor-controller", 3));
    }
}
