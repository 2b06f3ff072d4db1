//! Serving from a follower's store (issue 18): a client that moves between replicas never sees
//! resourceVersions go backwards — a read that names a version this replica has not applied
//! yet waits for it (as kube-apiserver's watch cache does) — and writes go to the leader, then
//! wait until the follower has the leader's change.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use kdoctor_store::Store;

use crate::query::Query;
use crate::state::AppState;
use crate::status::ApiError;

/// How long a read waits for a resourceVersion this replica has not applied yet.
pub const VERSION_WAIT: Duration = Duration::from_secs(3);

/// How long a read that names no resourceVersion waits for a follower out of contact with its
/// leader to catch up again, before it is answered from what the follower has.
pub const SYNC_WAIT: Duration = Duration::from_secs(2);

/// How long a forwarded write waits until this replica has applied the leader's change.
pub const FORWARD_WAIT: Duration = Duration::from_secs(10);

/// A boxed future (object-safe trait methods).
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Writes a follower cannot make itself: they are made by the leader.
pub trait LeaderWrites: Send + Sync {
    /// Purges the task incarnation `uid` (one round of it with `round`) on the leader;
    /// returns the leader's resourceVersion after the purge.
    fn purge(&self, uid: String, round: Option<u64>) -> BoxFuture<Result<u64, String>>;
}

/// The resourceVersion a list or watch names, when it is a specific one.
fn named_version(query: &Query) -> Option<u64> {
    query
        .get("resourceVersion")
        .filter(|v| !v.is_empty() && *v != "0")
        .and_then(|v| v.parse().ok())
}

/// Waits until this replica may answer a read. A read that names a resourceVersion waits until
/// the store has applied it (a follower behind the leader a client has read from); 504 Timeout
/// when it does not come in time. A read that names none is served at once by the leader and by
/// a follower in contact with it (whose copy trails by the time a record takes to arrive); a
/// follower out of contact (its leader restarting, say) first waits a little for the contact to
/// come back, then answers from its copy: during a failover, it is the replica that can.
pub async fn await_version(state: &AppState, store: &Store, query: &Query) -> Result<(), ApiError> {
    if !store.is_following() {
        return Ok(());
    }
    let Some(wanted) = named_version(query) else {
        if let Some(mut in_sync) = state.follower_sync()
            && !*in_sync.borrow_and_update()
        {
            let _ = tokio::time::timeout(SYNC_WAIT, in_sync.wait_for(|s| *s)).await;
        }
        return Ok(());
    };
    if wanted <= store.resource_version() || store.wait_durable(wanted, VERSION_WAIT).await {
        return Ok(());
    }
    Err(ApiError::too_large_version(
        wanted,
        store.resource_version(),
    ))
}
