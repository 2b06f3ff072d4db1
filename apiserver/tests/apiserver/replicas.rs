//! The API server over a replica of the replicated store (issue 31), three replicas in one
//! process: a read that names no resourceVersion sees every write acknowledged before it, on
//! any replica; one naming a version this replica does not reach in time answers 504 with
//! Retry-After; a DELETE on a follower is made by the leader and answered once the follower
//! has it; a replica cut off from the others answers 503 with Retry-After (client-go retries
//! both) instead of a stale list.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use kdoctor_api::fixtures::net_reach_report;
use kdoctor_api::task::TaskKind;
use kdoctor_store::raft::Replica;
use kdoctor_store::raft::testing::{Cluster, applied_everywhere, leader_of};
use kdoctor_store::{Command, ReportEntry, Writes};

use crate::support::{BASE, Server, get, record, scratch, send, server};

/// A server over `replica`'s store, its writes through the replicated log.
fn server_on(test: &str, replica: &Replica) -> Server {
    let mut s = server(test);
    s.state.set_store(replica.store().clone());
    s.state.set_writes(Writes::Replicated(replica.clone()));
    s.store = replica.store().clone();
    s
}

async fn write_task(leader: &Replica, name: &str, uid: &str) {
    let id = match leader
        .write(Command::RecordTask {
            record: record(TaskKind::NetReach, name, uid),
        })
        .await
        .expect("task")
    {
        kdoctor_store::Applied::Task(id, _) => id,
        other => panic!("{other:?}"),
    };
    leader
        .write(Command::PutReports {
            reports: vec![
                ReportEntry::of(id, &net_reach_report("node-a", 1, 2, 1)).expect("report"),
            ],
            at: jiff::Timestamp::now(),
            outbox: None,
        })
        .await
        .expect("report");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_serves_every_acknowledged_write_and_deletes_through_the_leader() {
    let cluster = Cluster::new(&scratch("replicas-reads"), 3);
    let replicas = cluster.start_all(3).await;
    let leader = leader_of(&replicas).await;
    let follower = replicas
        .iter()
        .find(|r| r.id() != leader.id())
        .expect("follower")
        .clone();
    let s = server_on("replicas-reads-api", &follower);
    for i in 0..5 {
        let name = format!("task-{i}");
        write_task(
            &leader,
            &name,
            &format!("0000000{i}-0000-0000-0000-000000000000"),
        )
        .await;
        // Acknowledged on the leader: the follower's answer has it at once.
        let reply = get(&s.router, &format!("{BASE}/netreach-{name}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    }
    let list = get(&s.router, BASE).await.json();
    let rv: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .parse()
        .expect("number");
    assert_eq!(
        rv,
        leader.store().resource_version(),
        "the same versions on every replica"
    );

    // A version this replica will not reach in time: kube-apiserver's answer, retryable.
    let ahead = rv + 100;
    for uri in [
        format!("{BASE}?resourceVersion={ahead}"),
        format!("{BASE}?watch=true&resourceVersion={ahead}"),
    ] {
        let reply = get(&s.router, &uri).await;
        assert_eq!(
            reply.status,
            StatusCode::GATEWAY_TIMEOUT,
            "{}",
            reply.text()
        );
        assert_eq!(reply.json()["reason"], "Timeout");
        assert_eq!(reply.headers["retry-after"], "1");
    }

    // A DELETE on the follower: made by the leader, and gone here when answered.
    let reply = send(
        &s.router,
        Method::DELETE,
        &format!("{BASE}/netreach-task-0"),
        Some("admin-token"),
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(
        get(&s.router, &format!("{BASE}/netreach-task-0"))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert!(leader.store().find(TaskKind::NetReach, "task-0").is_empty());
    applied_everywhere(&replicas, leader.applied_index()).await;
    for r in replicas {
        cluster.stop(r).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_from_the_others_answers_retryable_errors_not_stale_lists() {
    let cluster = Cluster::new(&scratch("replicas-cut"), 3);
    let replicas = cluster.start_all(3).await;
    let leader = leader_of(&replicas).await;
    let follower = replicas
        .iter()
        .find(|r| r.id() != leader.id())
        .expect("follower")
        .clone();
    let s = server_on("replicas-cut-api", &follower);
    write_task(&leader, "before", "00000001-0000-0000-0000-000000000000").await;
    assert_eq!(
        get(&s.router, &format!("{BASE}/netreach-before"))
            .await
            .status,
        StatusCode::OK
    );
    cluster.isolate(&follower.member().pod);
    write_task(&leader, "after", "00000002-0000-0000-0000-000000000000").await;
    let started = tokio::time::Instant::now();
    let reply = get(&s.router, BASE).await;
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a replica that cannot reach the leader does not answer from its stale copy: {}",
        reply.text()
    );
    assert_eq!(reply.headers["retry-after"], "1");
    assert!(started.elapsed() < Duration::from_secs(15));
    let reply = send(
        &s.router,
        Method::DELETE,
        &format!("{BASE}/netreach-before"),
        Some("admin-token"),
        None,
    )
    .await;
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        reply.text()
    );
    cluster.heal();
    let reply = get(&s.router, &format!("{BASE}/netreach-after")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    for r in replicas {
        cluster.stop(r).await;
    }
}
