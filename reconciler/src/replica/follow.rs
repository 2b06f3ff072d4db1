//! The follower's loop: find the leader in the Lease, ask it for the records after this
//! store's position (a long poll that is also the acknowledgement of what came before), apply
//! them, and load a snapshot when the leader says the position cannot be resumed. The copy is
//! current — and the replica ready — once it has applied what the leader had when it answered.
//! It stays current while the leader is unreachable: during a failover the followers are the
//! only replicas able to answer reads.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use k8s_openapi::api::coordination::v1::Lease;
use kdoctor_store::Store;
use kdoctor_store::replica::{Frame, decode};
use kube::Api;
use prometheus::{IntCounter, IntGauge, Registry};
use tokio::sync::watch;

use super::client::{PeerClient, PeerConnection, PeerError, next_chunk, read_all};
use super::serve::LEADER_RV_HEADER;
use super::{ADDRESS_ANNOTATION, LONG_POLL, MAX_ANSWER_BYTES};
use crate::controller::LEASE_NAME;

/// Pause after a failed exchange before the Lease is read again.
const RETRY: Duration = Duration::from_secs(1);

/// Time allowed between two pieces of a snapshot.
const SNAPSHOT_STALL: Duration = Duration::from_secs(30);

/// Replication metrics of a follower.
#[derive(Clone)]
pub struct FollowMetrics {
    /// resourceVersions the follower is behind the leader's last answer.
    pub lag: IntGauge,
    /// Records applied.
    pub records: IntCounter,
    /// Snapshots loaded.
    pub snapshots: IntCounter,
}

impl FollowMetrics {
    /// Registers the metrics in `registry` (a second registration keeps the first).
    pub fn new(registry: &Registry) -> FollowMetrics {
        let metrics = FollowMetrics {
            lag: IntGauge::new(
                "kdoctor_controller_replication_lag",
                "resourceVersions this follower's store is behind the leader's last answer.",
            )
            .expect("valid metric"),
            records: IntCounter::new(
                "kdoctor_controller_replication_records_total",
                "Records of the leader's store applied by this follower.",
            )
            .expect("valid metric"),
            snapshots: IntCounter::new(
                "kdoctor_controller_replication_snapshots_total",
                "Snapshots of the leader's store loaded by this follower (it started empty, fell behind the leader's window, or had history the leader lost).",
            )
            .expect("valid metric"),
        };
        let _ = registry.register(Box::new(metrics.lag.clone()));
        let _ = registry.register(Box::new(metrics.records.clone()));
        let _ = registry.register(Box::new(metrics.snapshots.clone()));
        metrics
    }
}

/// The leader's replication address from the Lease, unless this replica holds it.
pub async fn leader_address(leases: &Api<Lease>, identity: &str) -> Option<SocketAddr> {
    let lease = leases.get_opt(LEASE_NAME).await.ok()??;
    let holder = lease.spec.as_ref()?.holder_identity.clone()?;
    if holder.is_empty() || holder == identity {
        return None;
    }
    let address = lease
        .metadata
        .annotations
        .as_ref()?
        .get(ADDRESS_ANNOTATION)?;
    address.strip_prefix("https://")?.parse().ok()
}

/// What went wrong in one exchange.
#[derive(Debug, thiserror::Error)]
enum FollowError {
    #[error(transparent)]
    Peer(#[from] PeerError),
    #[error("the leader answered {0}: {1}")]
    Status(StatusCode, String),
    #[error(transparent)]
    Wire(#[from] kdoctor_store::replica::WireError),
    #[error(transparent)]
    Store(#[from] kdoctor_store::StoreError),
    #[error("the snapshot ended early")]
    Truncated,
    #[error("the store leads now")]
    Leading,
}

/// Follows the leader until this store leads.
pub async fn run(
    store: Arc<Store>,
    leases: Api<Lease>,
    identity: String,
    client: PeerClient,
    signals: Signals,
    metrics: FollowMetrics,
) {
    let Signals { current, in_sync } = signals;
    while store.is_following() {
        in_sync.send_replace(false);
        let Some(leader) = leader_address(&leases, &identity).await else {
            tokio::time::sleep(RETRY).await;
            continue;
        };
        let mut connection = match client.connect(leader).await {
            Ok(connection) => connection,
            Err(e) => {
                tracing::debug!(error = %e, "cannot reach the leader");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        tracing::info!(%leader, "following the leader");
        loop {
            match exchange(&store, &mut connection, &identity, &current, &metrics).await {
                Ok(behind) => set(&in_sync, behind == 0),
                Err(FollowError::Leading) => return,
                Err(FollowError::Status(StatusCode::GONE, reason)) => {
                    tracing::info!(%reason, "loading a snapshot of the leader's store");
                    let _ = current.send(false);
                    in_sync.send_replace(false);
                    if let Err(e) = load_snapshot(&store, &mut connection).await {
                        tracing::warn!(error = %e, "loading the leader's snapshot failed");
                        break;
                    }
                    metrics.snapshots.inc();
                }
                Err(e) => {
                    tracing::debug!(error = %e, "replication interrupted");
                    in_sync.send_replace(false);
                    break;
                }
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// What a follower tells the rest of its process.
pub struct Signals {
    /// Caught up (and staying so while the leader is unreachable): readiness.
    pub current: watch::Sender<bool>,
    /// In contact with the leader and caught up: fresh reads.
    pub in_sync: watch::Sender<bool>,
}

/// One long poll: the records after this store's position, applied; returns how many
/// resourceVersions this store is still behind the leader's answer.
async fn exchange(
    store: &Arc<Store>,
    connection: &mut PeerConnection,
    identity: &str,
    current: &watch::Sender<bool>,
    metrics: &FollowMetrics,
) -> Result<u64, FollowError> {
    if !store.is_following() {
        return Err(FollowError::Leading);
    }
    let at = store.position();
    let path = format!(
        "/replication/v1/records?rv={}&term={}&wait={}&replica={}",
        at.rv,
        at.term,
        LONG_POLL.as_secs(),
        identity
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
            .collect::<String>()
    );
    let addr = connection.addr();
    let (status, headers, body) = connection
        .call(Method::GET, &path, LONG_POLL + Duration::from_secs(10))
        .await?;
    let body = read_all(body, MAX_ANSWER_BYTES, addr).await?;
    if status != StatusCode::OK {
        return Err(FollowError::Status(
            status,
            String::from_utf8_lossy(&body).chars().take(512).collect(),
        ));
    }
    let leader_rv: Option<u64> = headers
        .get(LEADER_RV_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let mut records = Vec::new();
    let mut at_byte = 0;
    while at_byte < body.len() {
        match decode(&body[at_byte..])? {
            Some((Frame::Record(record), used)) => {
                records.push(record);
                at_byte += used;
            }
            Some(_) | None => {
                return Err(FollowError::Status(
                    status,
                    "an answer of records holds something else".into(),
                ));
            }
        }
    }
    if !records.is_empty() {
        let count = records.len() as u64;
        let applying = store.clone();
        tokio::task::spawn_blocking(move || -> Result<(), kdoctor_store::StoreError> {
            for record in &records {
                applying.apply_record(record)?;
            }
            Ok(())
        })
        .await
        .map_err(|e| FollowError::Status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| {
            if store.is_following() {
                FollowError::Store(e)
            } else {
                FollowError::Leading
            }
        })?;
        metrics.records.inc_by(count);
    }
    let mine = store.position().rv;
    let behind = leader_rv.map_or(0, |l| l.saturating_sub(mine));
    metrics.lag.set(behind as i64);
    set(current, behind == 0);
    Ok(behind)
}

/// Sets a flag, waking its watchers only when it changes.
fn set(flag: &watch::Sender<bool>, value: bool) {
    flag.send_if_modified(|old| std::mem::replace(old, value) != value);
}

/// Replaces this store's content with the leader's snapshot.
async fn load_snapshot(
    store: &Arc<Store>,
    connection: &mut PeerConnection,
) -> Result<(), FollowError> {
    let addr = connection.addr();
    let (status, _, mut body) = connection
        .call(Method::GET, "/replication/v1/snapshot", SNAPSHOT_STALL)
        .await?;
    if status != StatusCode::OK {
        let text = read_all(body, 4096, addr).await?;
        return Err(FollowError::Status(
            status,
            String::from_utf8_lossy(&text).into_owned(),
        ));
    }
    let mut buf: Vec<u8> = Vec::new();
    let mut loader = None;
    loop {
        // Whole frames first, then more bytes.
        let mut used_total = 0;
        while let Some((frame, used)) = decode(&buf[used_total..])? {
            used_total += used;
            match frame {
                Frame::SnapshotStart(at) => loader = Some(store.load_snapshot(at)?),
                Frame::Pair(key, value) => loader
                    .as_mut()
                    .ok_or(FollowError::Truncated)?
                    .pair(&key, &value)?,
                Frame::SnapshotEnd(pairs) => {
                    let loader = loader.take().ok_or(FollowError::Truncated)?;
                    loader.finish(pairs)?;
                    return Ok(());
                }
                Frame::Record(_) => return Err(FollowError::Truncated),
            }
        }
        buf.drain(..used_total);
        match next_chunk(&mut body, SNAPSHOT_STALL, addr).await? {
            Some(chunk) => buf.extend_from_slice(&chunk),
            None => return Err(FollowError::Truncated),
        }
    }
}
