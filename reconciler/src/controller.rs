//! Running the reconciler: caches of agent objects, one kube-runtime controller per task kind,
//! deletion tracking, all while this replica leads (with replicas: the Raft leader, its
//! Kubernetes writes fenced by its lease).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kdoctor_api::config::Config;
use kdoctor_api::labels::APP_COMPONENT;
use kdoctor_api::task::{AppHttpHealthy, NetReach, Netdns, TaskKind};
use kdoctor_store::{GroupCommit, Writes};
use kdoctor_transport::report_client::ReportClient;
use kdoctor_transport::tls::Identity;
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use prometheus::Registry;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::carrier::AGENT_COMPONENT;
use crate::carrier_set::{self, made_for};
use crate::context::{Caches, Context};
use crate::deletions;
use crate::export::{self, ExportConfig};
use crate::grants::Grants;
use crate::harvest::{GROUP_COMMIT_BYTES, Harvester};
use crate::harvest_loop::{self, Harvests};
use crate::identity::IdentityCheck;
use crate::metrics::ControllerMetrics;
use crate::options::ControllerOptions;
use crate::readiness;
use crate::reconcile::{error_policy, reconcile};
use crate::replica::peers::Peers;
use crate::task::TaskObject;

/// Everything the reconciler needs to run.
pub struct Setup {
    /// Kubernetes client (fenced by the leader's lease when the store is replicated:
    /// crate::fenced).
    pub client: Client,
    /// The report store (shared with the API server), and where its writes go.
    pub writes: Writes,
    /// `conf.yml`.
    pub config: Config,
    /// Controller settings.
    pub options: ControllerOptions,
    /// The client certificate presented to agents' report APIs.
    pub harvest_identity: Identity,
    /// Where metrics are registered.
    pub registry: Registry,
    /// This replica's name (pod name), for the Lease and Events.
    pub identity: String,
    /// Where stored reports are exported to; `None`: nowhere.
    pub export: Option<ExportConfig>,
    /// The other replicas, when the store is replicated (the leader keeps the membership).
    pub peers: Option<Peers>,
}

/// Why the reconciler stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The report client could not be built.
    #[error(transparent)]
    Tls(#[from] kdoctor_transport::tls::TlsError),
}

fn agent_watch_config() -> watcher::Config {
    watcher::Config::default().labels(&format!("{APP_COMPONENT}={AGENT_COMPONENT}"))
}

/// A cache of `K` in `namespace`, filled by a watch that runs in `tasks`; each object `trim`med
/// of what the controller never reads before it is kept. With `wake`, every object the watch
/// changes or deletes wakes the reconcile of the task it was made for, after the cache holds
/// the change: a reconcile woken by a second watch of its own could read this cache before
/// the deletion reached it, find the object still there and never declare it again.
fn cache<K>(
    client: &Client,
    namespace: &str,
    trim: fn(&mut K),
    wake: Option<harvest_loop::Trigger>,
    tasks: &mut JoinSet<()>,
) -> reflector::Store<K>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, agent_watch_config()).modify(trim))
        .backoff(crate::watch_backoff::Prompt::default())
        .touched_objects();
    tasks.spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(object) => {
                    if let Some((wake, (kind, task))) = wake.as_ref().zip(made_for(object.meta())) {
                        wake(kind, &task);
                    }
                }
                Err(e) => tracing::debug!(error = %e, "agent cache watch (retrying)"),
            }
        }
    });
    reader
}

async fn run_kind<K: TaskObject>(
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    woken: futures::channel::mpsc::UnboundedReceiver<ObjectRef<K>>,
) {
    let client = ctx.client.clone();
    let metrics = ctx.metrics.clone();
    Controller::new(Api::<K>::all(client.clone()), watcher::Config::default())
        .trigger_backoff(crate::watch_backoff::Prompt::default())
        // Woken by the harvest loop and by the caches of carrier objects: a carrier's changed
        // readiness is looked at, an edited or deleted Service or Ingress declared again, at once.
        .reconcile_on(woken)
        .graceful_shutdown_on(shutdown)
        .run(reconcile::<K>, error_policy::<K>, ctx)
        .for_each(|result| {
            if result.is_ok() {
                metrics
                    .reconciles
                    .with_label_values(&[K::KIND.as_str(), "ok"])
                    .inc();
            }
            futures::future::ready(())
        })
        .await;
}

/// Runs the reconciler until `shutdown` completes: at once when this process owns its store
/// alone, else whenever this replica leads (it stops when leadership is lost and starts again
/// when it comes back). `leading` says whether the reconciler runs.
pub async fn run(
    setup: Setup,
    leading: watch::Sender<bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let metrics = ControllerMetrics::new(&setup.registry);
    let client = ReportClient::new(
        setup.harvest_identity.clone(),
        setup.options.ports.report,
        setup.options.harvest_timeout,
    )?;
    let mut shutdown = std::pin::pin!(shutdown);
    let mut leadership = setup.writes.replica().map(|r| r.leading());
    loop {
        if let Some(leadership) = &mut leadership {
            tracing::info!(identity = %setup.identity, "waiting for this replica to lead");
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                led = leadership.wait_for(|l| *l) => {
                    if led.is_err() {
                        return Ok(());
                    }
                }
            }
        }
        let _ = leading.send(true);
        metrics.leader.set(1);
        let lost = async {
            match &mut leadership {
                Some(leadership) => {
                    let _ = leadership.wait_for(|l| !*l).await;
                }
                None => std::future::pending().await,
            }
        };
        let shut = lead(&setup, &metrics, &client, &mut shutdown, lost).await;
        let _ = leading.send(false);
        metrics.leader.set(0);
        if shut {
            return Ok(());
        }
        tracing::warn!(
            "no longer leading: the controller's work stopped until this replica leads again"
        );
    }
}

/// The controller's work for one leadership: caches, the task controllers, deletions, the
/// harvest loop, export, clean-up. Returns when `shutdown` (true) or `lost` (false) completes.
async fn lead(
    setup: &Setup,
    metrics: &ControllerMetrics,
    client: &ReportClient,
    shutdown: &mut std::pin::Pin<&mut (impl Future<Output = ()> + Send)>,
    lost: impl Future<Output = ()>,
) -> bool {
    // Every background task of this leadership; dropping the set (return, or the run being
    // aborted) stops them all.
    let mut tasks = JoinSet::new();
    spawn_replication(setup, &mut tasks);
    let (kube_client, writes) = (&setup.client, &setup.writes);
    tasks.spawn(deletions::track::<NetReach>(
        kube_client.clone(),
        writes.clone(),
        metrics.tasks.clone(),
    ));
    tasks.spawn(deletions::track::<AppHttpHealthy>(
        kube_client.clone(),
        writes.clone(),
        metrics.tasks.clone(),
    ));
    tasks.spawn(deletions::track::<Netdns>(
        kube_client.clone(),
        writes.clone(),
        metrics.tasks.clone(),
    ));
    // The harvest loop (when a task's store holds something new) and the caches of carrier
    // objects wake a task's reconcile.
    let (net_reach_tx, net_reach_rx) = futures::channel::mpsc::unbounded();
    let (app_http_tx, app_http_rx) = futures::channel::mpsc::unbounded();
    let (netdns_tx, netdns_rx) = futures::channel::mpsc::unbounded();
    let trigger: harvest_loop::Trigger = Arc::new(move |kind: TaskKind, name: &str| {
        let _ = match kind {
            TaskKind::NetReach => net_reach_tx.unbounded_send(ObjectRef::new(name)).is_ok(),
            TaskKind::AppHttpHealthy => app_http_tx.unbounded_send(ObjectRef::new(name)).is_ok(),
            TaskKind::Netdns => netdns_tx.unbounded_send(ObjectRef::new(name)).is_ok(),
        };
    });
    let caches = watch_agents(setup, &trigger, &mut tasks).await;
    let ctx = context(setup, metrics, client, caches, &mut tasks);
    tasks.spawn(carrier_set::run(ctx.clone(), ctx.options.orphan_sweep));
    let every = Duration::from_secs(ctx.config.task_poll_interval_in_second.max(1) as u64)
        .min(ctx.options.poll);
    let store = ctx.store().clone();
    tasks.spawn(harvest_loop::run(
        ctx.harvests.clone(),
        ctx.harvester.clone(),
        every,
        trigger,
        move |uid| store.by_uid(uid).is_none_or(|t| t.deleted.is_some()),
    ));
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let controllers = futures::future::join3(
        run_kind::<NetReach>(ctx.clone(), stopped(stop_rx.clone()), net_reach_rx),
        run_kind::<AppHttpHealthy>(ctx.clone(), stopped(stop_rx.clone()), app_http_rx),
        run_kind::<Netdns>(ctx.clone(), stopped(stop_rx.clone()), netdns_rx),
    );
    let mut controllers = std::pin::pin!(controllers);
    tracing::info!(namespace = %ctx.options.namespace, "reconciling NetReach, AppHttpHealthy and Netdns tasks");
    let shut = tokio::select! {
        _ = shutdown => true,
        _ = lost => false,
        _ = &mut controllers => true,
    };
    let _ = stop_tx.send(true);
    // Let in-flight reconciles finish (bounded; without the lease their writes are refused).
    let _ = tokio::time::timeout(Duration::from_secs(10), &mut controllers).await;
    tasks.abort_all();
    shut
}

/// The replicated store's leader duties: announcing the leader, and (with peers) its members
/// and the Service's endpoints.
fn spawn_replication(setup: &Setup, tasks: &mut JoinSet<()>) {
    let Some(replica) = setup.writes.replica() else {
        return;
    };
    tasks.spawn(crate::announce::run(
        setup.client.clone(),
        setup.options.namespace.clone(),
        setup.identity.clone(),
    ));
    if let Some(peers) = &setup.peers {
        tasks.spawn(crate::replica::members::run(replica.clone(), peers.clone()));
        tasks.spawn(crate::replica::endpoints::run(
            setup.client.clone(),
            setup.options.namespace.clone(),
            setup.options.service_name.clone(),
            replica.clone(),
            peers.clone(),
        ));
    }
}

/// A few objects per task: kept as they are.
fn keep_whole<K>(_: &mut K) {}

/// The caches of agent objects in the controller's namespace, once they are filled.
async fn watch_agents(
    setup: &Setup,
    wake: &harvest_loop::Trigger,
    tasks: &mut JoinSet<()>,
) -> Caches {
    let namespace = &setup.options.namespace;
    let carrier = || Some(wake.clone());
    let caches = Caches {
        // One agent pod a node: thousands, each kept only as far as it is read.
        pods: cache(&setup.client, namespace, readiness::trim_pod, None, tasks),
        daemonsets: cache::<DaemonSet>(&setup.client, namespace, keep_whole, carrier(), tasks),
        deployments: cache::<Deployment>(&setup.client, namespace, keep_whole, carrier(), tasks),
        slices: cache::<EndpointSlice>(&setup.client, namespace, keep_whole, None, tasks),
        services: cache::<Service>(&setup.client, namespace, keep_whole, carrier(), tasks),
        ingresses: cache::<Ingress>(&setup.client, namespace, keep_whole, carrier(), tasks),
        routed_since: Default::default(),
    };
    for ready in [
        caches.pods.wait_until_ready().await.is_ok(),
        caches.daemonsets.wait_until_ready().await.is_ok(),
        caches.deployments.wait_until_ready().await.is_ok(),
        caches.services.wait_until_ready().await.is_ok(),
        caches.ingresses.wait_until_ready().await.is_ok(),
    ] {
        if !ready {
            tracing::warn!("an agent cache did not become ready");
        }
    }
    caches
}

/// What every reconcile of this leadership shares; starts the export and the grants' upkeep.
fn context(
    setup: &Setup,
    metrics: &ControllerMetrics,
    client: &ReportClient,
    caches: Caches,
    tasks: &mut JoinSet<()>,
) -> Arc<Context> {
    let writes = &setup.writes;
    // Only the leader harvests, so only the leader exports.
    let export = setup.export.clone().map(|config| {
        let (hook, sender) = export::start(config, &setup.registry, writes.clone());
        tasks.spawn(sender);
        hook
    });
    let input_policy = kdoctor_api::inputs::InputPolicy::new(
        &setup.options.namespace,
        &setup.config.task_input_namespaces,
        &[&setup.options.ca_secret, &setup.options.serving_secret],
    );
    let grants = Arc::new(Grants::new(
        setup.client.clone(),
        input_policy,
        &setup.options.namespace,
        &setup.options.agent_service_account,
    ));
    tasks.spawn(grants.clone().run());
    let (commits, committing) = GroupCommit::new(writes.clone(), GROUP_COMMIT_BYTES);
    tasks.spawn(committing);
    let identity = setup.options.verify_agent_identity.then(|| {
        Arc::new(IdentityCheck::new(
            setup.client.clone(),
            &setup.options.namespace,
        ))
    });
    Arc::new(Context {
        client: setup.client.clone(),
        writes: writes.clone(),
        config: Arc::new(setup.config.clone()),
        options: setup.options.clone(),
        caches,
        harvester: Harvester {
            client: client.clone(),
            writes: writes.clone(),
            commits,
            metrics: metrics.clone(),
            export,
            identity,
            agent_deadline: setup.options.harvest_timeout * 6,
        },
        harvests: Arc::new(Harvests::default()),
        recorder: Recorder::new(
            setup.client.clone(),
            Reporter {
                controller: "kdoctor-controller".to_string(),
                instance: Some(setup.identity.clone()),
            },
        ),
        metrics: metrics.clone(),
        carriers: Mutex::new(BTreeMap::new()),
        grants,
    })
}
