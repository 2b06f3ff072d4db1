//! Group commit: agents' reports written while another write commits go together as one entry
//! of the replicated log, each writer getting its own outcomes; a group refused as a whole is
//! written again writer by writer, so only the writer at fault fails.

use futures::future::join_all;
use kdoctor_api::fixtures::net_reach_report;
use kdoctor_api::report::Report;
use kdoctor_store::raft::Replica;
use kdoctor_store::raft::testing::{Cluster, applied_everywhere, leader_of};
use kdoctor_store::{Applied, Command, GroupCommit, IncarnationId, NewReport, Outcome, Writes};

use crate::support::{content, scratch, task};

const WRITERS: u64 = 64;

/// Three replicas, their leader's writes and a task recorded through them.
struct Replicated {
    cluster: Cluster,
    replicas: Vec<Replica>,
    leader: Replica,
    writes: Writes,
    id: IncarnationId,
}

impl Replicated {
    async fn start(name: &str) -> Replicated {
        let cluster = Cluster::new(&scratch(&format!("group-commit-{name}")), 3);
        let replicas = cluster.start_all(3).await;
        let leader = leader_of(&replicas).await;
        let writes = Writes::Replicated(leader.clone());
        let id = task_id(&writes, name).await;
        Replicated {
            cluster,
            replicas,
            leader,
            writes,
            id,
        }
    }

    async fn stop(self) {
        for r in self.replicas {
            self.cluster.stop(r).await;
        }
    }
}

async fn task_id(writes: &Writes, name: &str) -> IncarnationId {
    let record = Command::RecordTask {
        record: task(name, &format!("uid-{name}")),
    };
    match writes.execute(record).await.expect("task recorded") {
        Applied::Task(id, _) => id,
        other => panic!("recording a task answered {other:?}"),
    }
}

/// Each writer's reports: one agent's, two rounds of its node.
fn agents(n: u64) -> Vec<Vec<Report>> {
    (0..n)
        .map(|agent| {
            (1..=2)
                .map(|round| net_reach_report(&format!("node-{agent}"), round, 5, agent * 7))
                .collect()
        })
        .collect()
}

/// Every writer puts its reports at once, all queued before the first group is taken.
async fn put_all(
    writes: &Writes,
    per_agent: &[Vec<Report>],
    task_of: impl Fn(usize) -> IncarnationId,
) -> Vec<kdoctor_store::Result<Vec<Outcome>>> {
    let (commits, committing) = GroupCommit::new(writes.clone(), 16 << 20);
    let batches: Vec<Vec<NewReport<'_>>> = per_agent
        .iter()
        .enumerate()
        .map(|(i, reports)| {
            reports
                .iter()
                .map(|report| NewReport {
                    task: task_of(i),
                    report,
                })
                .collect()
        })
        .collect();
    let writers = join_all(batches.iter().map(|batch| commits.put_reports(batch)));
    tokio::select! {
        biased;
        answers = writers => answers,
        _ = committing => panic!("the group commit stopped while writers waited"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_share_one_log_entry_and_each_gets_its_own_outcomes() {
    let set = Replicated::start("grouped").await;
    let (leader, id) = (&set.leader, set.id);
    let per_agent = agents(WRITERS);
    let before = leader.applied_index();
    let answers = put_all(&set.writes, &per_agent, |_| id).await;
    let entries = leader.applied_index() - before;
    for (agent, answer) in answers.iter().enumerate() {
        assert_eq!(
            answer.as_ref().expect("stored"),
            &vec![Outcome::Created; 2],
            "agent {agent}'s outcomes"
        );
    }
    // Without grouping, one entry per writer. Every writer is queued before the committer
    // first looks (a join polls a few dozen futures per turn, so two groups at most).
    assert!(entries <= 2, "{WRITERS} writers made {entries} log entries");
    for round in 1..=2 {
        assert_eq!(
            leader.store().reports(id, round).expect("reports").len(),
            WRITERS as usize,
            "round {round}"
        );
    }
    applied_everywhere(&set.replicas, leader.applied_index()).await;
    let first = content(set.replicas[0].store());
    for replica in &set.replicas[1..] {
        assert_eq!(content(replica.store()), first, "replicas hold the same");
    }
    set.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_refused_for_one_writer_s_report_fails_only_that_writer() {
    let set = Replicated::start("refused").await;
    let id = set.id;
    let per_agent = agents(8);
    // Writer 3 names an incarnation the store does not have.
    let unknown = IncarnationId(id.0 + 1000);
    let answers = put_all(
        &set.writes,
        &per_agent,
        |i| if i == 3 { unknown } else { id },
    )
    .await;
    for (agent, answer) in answers.iter().enumerate() {
        if agent == 3 {
            assert!(
                matches!(answer, Err(kdoctor_store::StoreError::UnknownTask(_))),
                "the writer at fault: {answer:?}"
            );
        } else {
            assert_eq!(
                answer.as_ref().expect("stored"),
                &vec![Outcome::Created; 2],
                "agent {agent}"
            );
        }
    }
    assert_eq!(set.leader.store().reports(id, 1).expect("reports").len(), 7);
    set.stop().await;
}
