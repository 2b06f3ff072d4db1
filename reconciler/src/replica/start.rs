//! Starting this process's replica of the report store: its certificates from the install's
//! CA, the watch of the other replicas, the endpoint they reach it at, its readiness, and its
//! way into the replicas' cluster (started or joined in the background).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kdoctor_store::Store;
use kdoctor_store::raft::{Member, Options, Replica};
use kdoctor_transport::pki::{Ca, PkiError};
use kdoctor_transport::tls::{TlsError, parse_roots};
use tokio::task::JoinSet;

use super::peers::Peers;
use super::transport::HttpsTransport;
use super::{REPLICA_NAME, Replication};

/// Why the replica could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Its certificates could not be issued.
    #[error("issuing the replication certificates: {0}")]
    Pki(#[from] PkiError),
    /// Its certificates or the CA are unusable for TLS.
    #[error("replication TLS: {0}")]
    Tls(#[from] TlsError),
    /// The replicated store refused to start.
    #[error("starting the replicated store: {0}")]
    Store(#[from] kdoctor_store::StoreError),
    /// Its metrics could not be registered.
    #[error("registering the replicated store's metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The endpoint for the other replicas could not listen.
    #[error("serving the other replicas: {0}")]
    Serve(#[from] super::serve::ServeError),
}

/// How this replica runs.
pub struct ReplicaSettings {
    /// Its certificates and addresses ([`replication`]).
    pub replication: Replication,
    /// The controller's namespace (where the other replicas' pods are).
    pub namespace: String,
    /// Its member name (the pod's name).
    pub identity: String,
    /// Its pod's UID, for a new node id.
    pub pod_uid: Option<String>,
    /// The store's directory (marked to be discarded when the cluster takes it out).
    pub data: PathBuf,
    /// Compact Raft's log after this many bytes.
    pub compact_after_bytes: u64,
    /// How long it stays out of the endpoints before it exits when taken out.
    pub leave_delay: Duration,
}

/// What the replica tells the process's health endpoints.
#[derive(Clone)]
pub struct HealthHooks {
    /// Ready (it reached the leader lately) or not.
    pub ready: Arc<dyn Fn(bool) + Send + Sync>,
    /// Stopping: out of the Service's endpoints.
    pub stopping: Arc<dyn Fn() + Send + Sync>,
}

/// The certificates and addresses of replication: a serving certificate for the pod IP and a
/// client certificate named [`REPLICA_NAME`], both from the install's CA.
pub fn replication(listen: SocketAddr, ip: IpAddr, ca: &Ca) -> Result<Replication, StartError> {
    let server = ca.serving(&[ip.to_string()])?;
    let client = ca.client(REPLICA_NAME, &[])?;
    Ok(Replication {
        listen,
        port: listen.port(),
        roots: parse_roots(ca.pem.cert.as_bytes(), "the install CA")?,
        server: server.identity()?,
        client: client.identity()?,
    })
}

/// Starts the replica; its background work goes into `background`.
pub async fn start(
    settings: ReplicaSettings,
    client: &kube::Client,
    registry: &prometheus::Registry,
    store: Arc<Store>,
    health: HealthHooks,
    background: &mut JoinSet<()>,
) -> Result<(Replica, Peers), StartError> {
    let identity = settings.identity.as_str();
    let peers = Peers::start(client, &settings.namespace, identity, background);
    let transport = HttpsTransport::new(&settings.replication, peers.clone())?;
    let uid = settings.pod_uid.clone();
    let mut options = Options::new(Member::new(identity));
    options.compact_after_bytes = settings.compact_after_bytes;
    let replica = Replica::start(store, options, Arc::new(transport), || {
        node_id(identity, uid.as_deref())
    })
    .await?;
    replica.metrics().register(registry)?;
    background.spawn(super::serve::serve(replica.clone(), &settings.replication).await?);
    (health.ready)(false);
    background.spawn(keep_ready(replica.clone(), health.ready.clone()));
    background.spawn(leave_when_removed(
        replica.clone(),
        peers.clone(),
        settings.data.clone(),
        health.stopping.clone(),
        settings.leave_delay,
    ));
    let (forming, expected) = (replica.clone(), peers.clone());
    background.spawn(async move {
        expected.ready().await;
        if let Err(e) = forming.form(|| expected.expected()).await {
            tracing::error!(error = %e, "this replica could not get into the replicas' cluster");
        }
    });
    tracing::info!(node = replica.id(), member = %identity, "replica of the report store");
    Ok((replica, peers))
}

/// The node id of a replica whose store is new (kept in the store from then on): from its
/// pod's name and UID and the time, FNV-1a. A re-created pod that lost its volume is another
/// node, and so is a replica that discarded the store of a node the cluster took out, even in
/// the same pod.
fn node_id(pod: &str, uid: Option<&str>) -> u64 {
    let nanos = jiff::Timestamp::now().as_nanosecond();
    let text = format!("{pod}/{}/{nanos}", uid.unwrap_or_default());
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Keeps the replica's readiness: ready while it could confirm lately that it has every
/// acknowledged write (it reaches the leader), so a replica cut off from the others leaves the
/// Service's endpoints.
async fn keep_ready(replica: Replica, ready: Arc<dyn Fn(bool) + Send + Sync>) {
    let mut last_ok: Option<tokio::time::Instant> = None;
    loop {
        if replica.read_barrier(Duration::from_secs(2)).await.is_ok() {
            last_ok = Some(tokio::time::Instant::now());
        }
        ready(last_ok.is_some_and(|t| t.elapsed() < Duration::from_secs(5)));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Once the cluster took this replica out (scaled down, then up again with its old volume, it
/// is sent nothing and would never be ready): marks its store to be discarded and exits, out of
/// the endpoints first as on SIGTERM; the pod restarts and the replica joins as a new node.
async fn leave_when_removed(
    replica: Replica,
    peers: Peers,
    data: PathBuf,
    stopping: Arc<dyn Fn() + Send + Sync>,
    delay: Duration,
) {
    let leader = replica.removed(|| peers.expected()).await;
    let why = format!("{leader}, which leads, follows a membership without this replica's node");
    tracing::warn!(%leader, node = replica.id(), "the replicas' cluster took this replica out: its store is discarded at the next start and it joins as a new node");
    if let Err(e) = kdoctor_store::raft::removal::mark(&data, &why) {
        tracing::error!(error = %e, "cannot mark the store to be discarded; this replica stays out of the cluster");
        return;
    }
    stopping();
    tokio::time::sleep(delay).await;
    std::process::exit(1);
}
