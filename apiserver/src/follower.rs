//! Serving from a follower's store (issue 18): a client that moves between replicas never sees
//! resourceVersions go backwards — a read that names a version this replica has not applied
//! yet waits for it (as kube-apiserver's watch cache does) — and writes go to the leader, then
//! wait until the follower has the leader's change.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use kdoctor_store::Store;

use crate::query::Query;
use crate::status::ApiError;

/// How long a read waits for a resourceVersion this replica has not applied yet.
pub const VERSION_WAIT: Duration = Duration::from_secs(3);

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

/// Waits until the store has applied the resourceVersion the request names (a follower behind
/// the leader a client has read from); 504 Timeout when it does not come in time.
pub async fn await_version(store: &Store, query: &Query) -> Result<(), ApiError> {
    let Some(wanted) = named_version(query) else {
        return Ok(());
    };
    if wanted <= store.resource_version() || !store.is_following() {
        return Ok(());
    }
    if store.wait_durable(wanted, VERSION_WAIT).await {
        return Ok(());
    }
    Err(ApiError::too_large_version(
        wanted,
        store.resource_version(),
    ))
}
