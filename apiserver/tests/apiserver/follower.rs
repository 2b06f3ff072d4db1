//! Serving from a follower's store (issue 18): a read naming a resourceVersion the follower
//! has not applied yet waits for it (504 Timeout with Retry-After when it does not come), and
//! a DELETE is made by the leader, answered once the follower has applied it.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use kdoctor_apiserver::follower::{BoxFuture, LeaderWrites};
use kdoctor_store::{Store, StoreConfig};

use crate::support::{BASE, fill, get, scratch, send, server};

/// Applies the leader's records to the follower until it has them all.
fn sync(leader: &Store, follower: &Store) {
    loop {
        let records = leader
            .records_after("test", follower.position(), 1 << 20)
            .expect("within the window");
        if records.is_empty() {
            return;
        }
        for record in records {
            follower.apply_record(&record).expect("applies");
        }
    }
}

/// A leader in the same process: purges there, then (a little later, as the network would)
/// the follower applies the purge.
struct Leader {
    store: Arc<Store>,
    follower: Arc<Store>,
}

impl LeaderWrites for Leader {
    fn purge(&self, uid: String, round: Option<u64>) -> BoxFuture<Result<u64, String>> {
        let leader = self.store.clone();
        let follower = self.follower.clone();
        Box::pin(async move {
            let task = leader.by_uid(&uid).ok_or("unknown uid")?;
            match round {
                Some(round) => leader.purge_round(task.id, round).map(|_| ()),
                None => leader.purge_task(task.id).map(|_| ()),
            }
            .map_err(|e| e.to_string())?;
            let rv = leader.resource_version();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                sync(&leader, &follower);
            });
            Ok(rv)
        })
    }
}

fn leader(test: &str) -> Arc<Store> {
    let store = Arc::new(Store::open(StoreConfig::new(scratch(test))).expect("leader store"));
    // Keeps its history for followers from here.
    store.lead();
    fill(&store);
    store
}

#[tokio::test]
async fn a_read_naming_a_newer_version_waits_until_the_follower_has_it() {
    let leader = leader("follower-reads-leader");
    let s = server("follower-reads");
    s.store.follow();
    sync(&leader, &s.store);
    // The leader writes once more; a client that saw it reads from the follower.
    leader
        .record_task(&crate::support::record(
            kdoctor_api::task::TaskKind::Netdns,
            "late",
            "1a7e0000-0000-0000-0000-000000000000",
        ))
        .expect("write");
    let seen = leader.resource_version();
    assert!(s.store.resource_version() < seen);
    let catching_up = {
        let (leader, follower) = (leader.clone(), s.store.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            sync(&leader, &follower);
        })
    };
    let reply = get(&s.router, &format!("{BASE}?resourceVersion={seen}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let list = reply.json();
    assert_eq!(list["metadata"]["resourceVersion"], seen.to_string());
    assert!(
        list["items"]
            .as_array()
            .expect("items")
            .iter()
            .any(|o| o["metadata"]["name"] == "netdns-late"),
        "{list}"
    );
    catching_up.await.expect("synced");

    // A version this replica will not reach in time: kube-apiserver's answer, retryable.
    let ahead = seen + 100;
    let reply = get(&s.router, &format!("{BASE}?resourceVersion={ahead}")).await;
    assert_eq!(
        reply.status,
        StatusCode::GATEWAY_TIMEOUT,
        "{}",
        reply.text()
    );
    assert_eq!(reply.json()["reason"], "Timeout");
    assert_eq!(reply.headers["retry-after"], "1");
    let reply = get(
        &s.router,
        &format!("{BASE}?watch=true&resourceVersion={ahead}"),
    )
    .await;
    assert_eq!(
        reply.status,
        StatusCode::GATEWAY_TIMEOUT,
        "{}",
        reply.text()
    );
}

#[tokio::test]
async fn a_delete_on_a_follower_is_made_by_the_leader() {
    let leader = leader("follower-delete-leader");
    let s = server("follower-delete");
    s.store.follow();
    sync(&leader, &s.store);
    let uri = format!("{BASE}/netdns-dns");
    let delete = || send(&s.router, Method::DELETE, &uri, Some("admin-token"), None);
    // Without a way to the leader: 503, retryable, nothing changed.
    let reply = delete().await;
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        reply.text()
    );
    assert_eq!(reply.headers["retry-after"], "1");
    assert_eq!(
        get(&s.router, &format!("{BASE}/netdns-dns")).await.status,
        StatusCode::OK
    );

    s.state.set_leader_writes(Arc::new(Leader {
        store: leader.clone(),
        follower: s.store.clone(),
    }));
    let reply = delete().await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.json()["metadata"]["name"], "netdns-dns");
    // Answered once the follower applied it: a GET right after does not see it.
    assert_eq!(
        get(&s.router, &format!("{BASE}/netdns-dns")).await.status,
        StatusCode::NOT_FOUND
    );
    assert!(
        leader
            .find(kdoctor_api::task::TaskKind::Netdns, "dns")
            .is_empty()
    );
    assert_eq!(s.store.resource_version(), leader.resource_version());
}
