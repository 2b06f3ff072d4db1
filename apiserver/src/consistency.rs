//! Reads as fresh as kube-apiserver's (issue 31). A get, list or watch that names no
//! resourceVersion sees every write acknowledged before it began: on a replica of the
//! replicated store it first asks the leader how far the log is committed and waits until this
//! replica applied that far (kdoctor_store::raft::Replica::read_barrier). One that names a
//! resourceVersion this replica has not applied yet waits for it, as kube-apiserver's watch
//! cache does. Either answers 503 or 504 with Retry-After when it cannot in time (during an
//! election, or on a replica cut off from the others): client-go retries those.

use std::time::Duration;

use kdoctor_store::Store;

use crate::kube::query::Query;
use crate::kube::status::ApiError;
use crate::state::AppState;

/// How long a read waits for a resourceVersion this replica has not applied yet.
pub const VERSION_WAIT: Duration = Duration::from_secs(3);

/// How long a read that names no resourceVersion waits to learn, and reach, how far the log is
/// committed: longer than an election takes, so reads ride through a leader's loss.
pub const BARRIER_WAIT: Duration = Duration::from_secs(8);

/// The resourceVersion a list or watch names, when it is a specific one.
fn named_version(query: &Query) -> Option<u64> {
    query
        .get("resourceVersion")
        .filter(|v| !v.is_empty() && *v != "0")
        .and_then(|v| v.parse().ok())
}

/// Waits until this replica may answer the read `query` describes (see the module).
pub async fn await_version(state: &AppState, store: &Store, query: &Query) -> Result<(), ApiError> {
    let Some(wanted) = named_version(query) else {
        // resourceVersion=0 asks for any version: served at once, as kube-apiserver serves it
        // from its cache.
        if query.get("resourceVersion") == Some("0") {
            return Ok(());
        }
        return state
            .writes()?
            .read_barrier(BARRIER_WAIT)
            .await
            .map_err(|e| {
                ApiError::unavailable(format!(
                    "this replica cannot confirm it has every acknowledged write ({e}); retry"
                ))
            });
    };
    if wanted <= store.resource_version() || store.wait_durable(wanted, VERSION_WAIT).await {
        return Ok(());
    }
    Err(ApiError::too_large_version(
        wanted,
        store.resource_version(),
    ))
}
