//! How a replica that is not yet part of a cluster gets into one (pure: decided from what it
//! and the other expected replicas say of themselves, tested without a network).
//!
//! A replica never starts a cluster while an expected replica already belongs to one (then it
//! joins through it). When every expected replica answers that it is new, one starts the
//! cluster: the one with the most data (an upgrade keeps the store that has the reports), the
//! lowest name among equals. The others then join it, and the leader takes them in one by one
//! as learners first, voters once caught up. While some do not answer, the others wait — one
//! that does not answer may hold the cluster — unless they have waited long (a replica that
//! cannot be scheduled, say) and a majority of the expected replicas answered that they are new:
//! a cluster with a majority of new volumes has lost what only those held anyway, and waiting
//! for ever would keep every report out.

use serde::{Deserialize, Serialize};

use super::{Member, NodeId};

/// What a replica says of itself.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Its node id.
    pub id: NodeId,
    /// Its pod.
    pub member: Member,
    /// Whether it belongs to a cluster (it has a vote or a log).
    pub initialized: bool,
    /// The resourceVersion of its store (how much data it holds).
    pub resource_version: u64,
    /// The leader it knows of.
    pub leader: Option<Member>,
    /// The node ids of the membership it follows (voters and learners); empty from a replica
    /// of a version that did not say.
    #[serde(default)]
    pub members: Vec<NodeId>,
    /// The log index at which that membership was decided.
    #[serde(default)]
    pub membership_index: Option<u64>,
}

/// What a new replica does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Start the cluster with itself as its only member.
    Start,
    /// Ask this replica (the leader, or one that knows it) to be taken in.
    Join(Member),
    /// Nothing yet, for this reason.
    Wait(String),
}

/// Decides for `me` (not yet in a cluster) from the other expected replicas' answers (`None`:
/// no answer); `patient`: whether it may still wait for those that do not answer.
pub fn next(me: &Status, others: &[(Member, Option<Status>)], patient: bool) -> Next {
    if let Some(member) = others.iter().find_map(|(member, status)| {
        status
            .as_ref()
            .filter(|s| s.initialized)
            .map(|s| s.leader.clone().unwrap_or_else(|| member.clone()))
    }) {
        return Next::Join(member);
    }
    let answered = 1 + others.iter().filter(|(_, s)| s.is_some()).count();
    let expected = others.len() + 1;
    let majority = expected / 2 + 1;
    if let Some((member, _)) = others.iter().find(|(_, status)| status.is_none())
        && (patient || answered < majority)
    {
        return Next::Wait(format!(
            "replica {member} does not answer; it may already hold the cluster"
        ));
    }
    let best = others
        .iter()
        .filter_map(|(_, s)| s.as_ref())
        .chain(std::iter::once(me))
        .max_by(|a, b| {
            a.resource_version
                .cmp(&b.resource_version)
                .then_with(|| b.member.pod.cmp(&a.member.pod))
        });
    match best {
        Some(best) if best.member == me.member => Next::Start,
        Some(best) => Next::Wait(format!(
            "replica {} holds the most data and starts the cluster",
            best.member
        )),
        None => Next::Start,
    }
}

/// Whether the cluster took `me` out: `other` says it leads, and follows a membership without
/// `me`'s node that was decided after the last one `me` saw. The StatefulSet scaled down, then
/// up again: the pod is back with the volume of a node that is no longer a member, which no
/// leader will ever send anything (a removed node id is never taken in again) — its data is
/// not needed by any majority, and it can only come back as a new node.
///
/// A leader of an older term that has not yet learnt it was replaced follows an older
/// membership, decided before `me`'s own: it is not believed. Nor is a replica that does not say
/// which membership it follows.
pub fn removed(me: &Status, other: &Status) -> bool {
    let (Some(mine), Some(theirs)) = (me.membership_index, other.membership_index) else {
        return false;
    };
    me.initialized
        && other.leader.as_ref() == Some(&other.member)
        && !other.members.is_empty()
        && !other.members.contains(&me.id)
        && theirs > mine
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(pod: &str, initialized: bool, rv: u64, leader: Option<&str>) -> Status {
        Status {
            id: pod.len() as u64,
            member: Member::new(pod),
            initialized,
            resource_version: rv,
            leader: leader.map(Member::new),
            members: Vec::new(),
            membership_index: None,
        }
    }

    #[test]
    fn a_replica_is_removed_only_by_a_leader_s_later_membership_without_it() {
        let with = |pod: &str, leader: &str, members: &[u64], index: u64| Status {
            members: members.to_vec(),
            membership_index: Some(index),
            ..status(pod, true, 9, Some(leader))
        };
        // c-3 (id 3) last saw the membership of index 40, where it was a voter.
        let me = Status {
            id: 3,
            ..with("c-3", "c-0", &[1, 2, 3], 40)
        };
        assert!(removed(&me, &with("c-0", "c-0", &[1, 2, 4], 55)));
        // (other, why it is not believed)
        let cases = [
            (
                with("c-0", "c-0", &[1, 2, 3], 55),
                "the leader's membership has it",
            ),
            (with("c-1", "c-0", &[1, 2, 4], 55), "a follower's word"),
            (
                with("c-0", "c-0", &[1, 2, 4], 40),
                "a membership no later than its own",
            ),
            (
                with("c-0", "c-0", &[1, 2, 4], 12),
                "a deposed leader's older membership",
            ),
            (
                with("c-0", "c-0", &[], 55),
                "a replica that does not say its members",
            ),
            (
                Status {
                    membership_index: None,
                    ..with("c-0", "c-0", &[1, 2, 4], 55)
                },
                "a replica that does not say when its membership was decided",
            ),
        ];
        for (other, why) in cases {
            assert!(!removed(&me, &other), "{why}");
        }
        let new = Status {
            initialized: false,
            ..me.clone()
        };
        assert!(
            !removed(&new, &with("c-0", "c-0", &[1, 2, 4], 55)),
            "a new replica is joining, not removed"
        );
    }

    #[test]
    fn a_cluster_is_started_once_and_joined_otherwise() {
        let me = status("c-0", false, 0, None);
        let new = |pod| (Member::new(pod), Some(status(pod, false, 0, None)));
        // (others, what c-0 does, why)
        type Answers = Vec<(Member, Option<Status>)>;
        let cases: Vec<(Answers, Next, &str)> = vec![
            (vec![], Next::Start, "a single replica starts alone"),
            (
                vec![new("c-1"), new("c-2")],
                Next::Start,
                "every replica new: the lowest name starts",
            ),
            (
                vec![(Member::new("c-1"), None), new("c-2")],
                Next::Wait("replica c-1 does not answer; it may already hold the cluster".into()),
                "one out of reach may hold the cluster",
            ),
            (
                vec![
                    (Member::new("c-1"), None),
                    (
                        Member::new("c-2"),
                        Some(status("c-2", true, 9, Some("c-1"))),
                    ),
                ],
                Next::Join(Member::new("c-1")),
                "a member of the cluster names its leader: join there",
            ),
            (
                vec![(Member::new("c-2"), Some(status("c-2", true, 9, None)))],
                Next::Join(Member::new("c-2")),
                "a member that knows no leader yet is asked itself",
            ),
            (
                vec![
                    new("c-1"),
                    (Member::new("c-2"), Some(status("c-2", false, 40, None))),
                ],
                Next::Wait("replica c-2 holds the most data and starts the cluster".into()),
                "an upgrade: the replica with the most data starts",
            ),
        ];
        for (others, expected, why) in cases {
            assert_eq!(next(&me, &others, true), expected, "{why}");
        }
        // The lowest name is not special with more data than the others.
        let me = status("c-1", false, 50, None);
        assert_eq!(next(&me, &[new("c-0")], true), Next::Start);
        // Out of patience: a majority of new replicas starts without the one that never came;
        // a minority never does.
        let me = status("c-0", false, 0, None);
        let absent = (Member::new("c-2"), None);
        assert_eq!(next(&me, &[new("c-1"), absent.clone()], false), Next::Start);
        assert!(matches!(
            next(&me, &[(Member::new("c-1"), None), absent.clone()], false),
            Next::Wait(_)
        ));
        // A replica that belongs to a cluster is joined, patient or not.
        let member = (
            Member::new("c-1"),
            Some(status("c-1", true, 9, Some("c-1"))),
        );
        assert_eq!(
            next(&me, &[member, absent], false),
            Next::Join(Member::new("c-1"))
        );
    }
}
