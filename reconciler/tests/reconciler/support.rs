//! A real control plane (kube_sim::testcluster: kube-apiserver, kube-controller-manager,
//! kube-scheduler, kube-proxy, with kube-sim as the kubelet of simulated nodes) with the real
//! controller (reconciler, harvester, store) running in-process under the manifests'
//! ServiceAccount and RBAC, and stand-in agents: each agent pod gets the agent crate's real
//! report API on its pod address (kube-sim puts simulated pods' addresses on the node network),
//! and a round runner that spools a report of the task's own kind for every ongoing round of
//! its carrier's tasks — what the agent's task watcher does, without the probing — or the real
//! agent's task loop. Controller and agents run on a runtime inside the cluster's network
//! namespace; the test's own client reaches the API through the forwarded port.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{
    Container, Namespace, Pod, PodSpec, PodTemplateSpec, ServiceAccount, Toleration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kdoctor_agent::agent::{RunningAgent, start};
use kdoctor_agent::cluster::runner::Runner;
use kdoctor_agent::config::{AgentArgs, TaskArgs};
use kdoctor_api::config::Config;
use kdoctor_api::task::{AppHttpHealthy, NetReach, Netdns, RoundStatus, TaskKind, TaskStatus};
use kdoctor_reconciler::controller::{Setup, run};
use kdoctor_reconciler::export::ExportConfig;
use kdoctor_reconciler::options::ControllerOptions;
use kdoctor_reconciler::replica::Replication;
use kdoctor_reconciler::replica::transport::HttpsTransport;
use kdoctor_store::raft::Member;
use kdoctor_store::{Store, StoreConfig, Writes};
use kdoctor_transport::pki::Ca;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use kube_sim::testcluster::{TestCluster, TestClusterOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Namespace of the controller and the agents.
pub const NAMESPACE: &str = "kdoctor";
/// Report API port of the stand-in agents (each binds its own pod address).
pub const REPORT_PORT: u16 = 3000;

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "kdoctor-reconciler-{what}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How a stand-in agent behaves.
#[derive(Default)]
struct Behaviour {
    /// Nodes whose agents never report.
    silent: BTreeSet<String>,
    /// Nodes whose agents report a failed round.
    failing: BTreeSet<String>,
    /// Nodes whose agents accept report API connections and never answer.
    hung: BTreeSet<String>,
    /// Nodes whose agents were killed and are not started again.
    dead: BTreeSet<String>,
}

struct StandIn {
    node: String,
    carrier: String,
    agent: RunningAgent,
    written: BTreeSet<(String, i64)>,
    /// The real agent's task loop, when the cluster runs real agents.
    rounds: Option<JoinHandle<()>>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        if let Some(rounds) = &self.rounds {
            rounds.abort();
        }
    }
}

/// The stand-in agents of the cluster.
#[derive(Clone)]
pub struct Agents {
    behaviour: Arc<Mutex<Behaviour>>,
    running: Arc<Mutex<BTreeMap<String, StandIn>>>,
    /// Which agents are real: they serve the echo targets on their pod address and run the
    /// agent's task loop (watch, discover, probe through the simulated network, spool).
    real: RealAgents,
    /// The identity real agents talk to the API with (the agent ServiceAccount's user), so
    /// their requests can be counted apart from the test's own.
    agent_client: Client,
    /// Each agent's identity token file, by node.
    tokens: Arc<Mutex<BTreeMap<String, PathBuf>>>,
}

/// The user name of real agents (the agent ServiceAccount, as in a cluster).
pub const AGENT_USER: &str = "system:serviceaccount:kdoctor:kdoctor-agent";

/// Which agents of a cluster are real.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RealAgents {
    /// Every agent is a stand-in that spools fixture reports.
    None,
    /// Every agent is real.
    All,
    /// The agents on node-1 … node-N are real, the others stand-ins that still serve the
    /// echo targets (so that real agents' probes of them succeed).
    FirstNodes(usize),
}

impl RealAgents {
    fn on(self, node: &str) -> bool {
        match self {
            RealAgents::None => false,
            RealAgents::All => true,
            RealAgents::FirstNodes(n) => node
                .strip_prefix("node-")
                .and_then(|i| i.parse::<usize>().ok())
                .is_some_and(|i| (1..=n).contains(&i)),
        }
    }
}

impl Agents {
    /// The agents on `node` stop reporting.
    pub fn silence(&self, node: &str) {
        self.behaviour
            .lock()
            .unwrap()
            .silent
            .insert(node.to_string());
    }

    /// The agents on `node` report again.
    pub fn unsilence(&self, node: &str) {
        self.behaviour.lock().unwrap().silent.remove(node);
    }

    /// The agents on `node` report failed rounds.
    pub fn fail(&self, node: &str) {
        self.behaviour
            .lock()
            .unwrap()
            .failing
            .insert(node.to_string());
    }

    /// The agent on `node` shows the identity token of the agent on `other` instead of its own
    /// (a process that took over an agent's address with a stolen token).
    pub fn impersonate(&self, node: &str, other: &str) {
        let tokens = self.tokens.lock().unwrap();
        let stolen = std::fs::read(&tokens[other]).expect("the other agent's token");
        std::fs::write(&tokens[node], stolen).expect("overwrite the token");
    }

    /// The agent on `node` dies: its servers close (connections are refused) and it is not
    /// started again, while its pod stays as it was.
    pub fn kill(&self, node: &str) {
        self.behaviour.lock().unwrap().dead.insert(node.to_string());
        assert!(!self.stop(node).is_empty(), "no agent serving on {node}");
    }

    /// Stops the agents on `node`; returns them (their servers close when they are dropped).
    fn stop(&self, node: &str) -> Vec<StandIn> {
        let mut running = self.running.lock().unwrap();
        let names: Vec<String> = running
            .iter()
            .filter(|(_, s)| s.node == node)
            .map(|(n, _)| n.clone())
            .collect();
        names.iter().filter_map(|n| running.remove(n)).collect()
    }

    /// Every report an agent was told it may drop (its acknowledgement record), as (node,
    /// task name, round): the reference for "no acknowledged report is lost".
    pub fn acknowledged(&self) -> BTreeSet<(String, String, u64)> {
        let running = self.running.lock().unwrap();
        running
            .values()
            .filter_map(|s| s.agent.spool.as_ref().map(|spool| (s, spool)))
            .flat_map(|(s, spool)| {
                spool
                    .list()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|e| e.acknowledged.is_some())
                    .map(|e| (s.node.clone(), e.task, e.round))
            })
            .collect()
    }

    /// How many agents serve (stand-ins and real ones).
    pub fn serving(&self) -> usize {
        self.running.lock().unwrap().len()
    }
}

/// A real control plane with the controller running in-process.
pub struct Cluster {
    /// The control plane (taken down when the cluster is dropped).
    pub kube: TestCluster,
    /// An admin client for the test (through the forwarded port).
    pub client: Client,
    /// The controller's identity: the manifests' ServiceAccount, with its RBAC (for the
    /// runtime in the cluster's namespace).
    pub controller_client: Client,
    pub store: Arc<Store>,
    pub agents: Agents,
    pub ca: Ca,
    pub options: ControllerOptions,
    pub config: Config,
    /// The first controller's metrics (a restarted one's series go to a fresh registry).
    pub registry: prometheus::Registry,
    /// The controllers: one on its own store, or one per replica of the replicated store.
    pub replicas: Vec<Replica>,
    /// Whether the cluster's first controller leads.
    pub leading: watch::Receiver<bool>,
    /// Report export of every controller started.
    pub export: Option<ExportConfig>,
    /// Where each replica's endpoint is, by name (the transport's resolver).
    endpoints: Arc<Mutex<BTreeMap<String, std::net::SocketAddr>>>,
    _dir: TempDir,
    tasks: Vec<JoinHandle<()>>,
    /// The runtime inside the cluster's namespace (controller, agents, receivers).
    net: Option<tokio::runtime::Runtime>,
}

/// Watches `flag` from now on: the task ends, with `true`, once the flag is `value` — so that a
/// test asks after a whole phase whether it ever was (not only when it looked).
pub fn ever_is(flag: &watch::Receiver<bool>, value: bool) -> JoinHandle<bool> {
    let mut flag = flag.clone();
    tokio::spawn(async move {
        loop {
            if *flag.borrow_and_update() == value {
                return true;
            }
            if flag.changed().await.is_err() {
                return false;
            }
        }
    })
}

/// A controller started by a test, with its replica of the store when replicated.
pub struct Replica {
    /// Its name.
    pub name: String,
    /// Stops it gracefully.
    pub stop: watch::Sender<bool>,
    /// Whether its controller runs (it leads).
    pub leading: watch::Receiver<bool>,
    /// Its controller's task (abort: a crash).
    pub handle: JoinHandle<()>,
    /// Its store.
    pub store: Arc<Store>,
    /// Its replica of the replicated store.
    pub raft: Option<kdoctor_store::raft::Replica>,
    /// The endpoint where it serves the other replicas.
    endpoint: Option<JoinHandle<()>>,
}

/// The user name of the controller (the manifests' ServiceAccount).
pub const CONTROLLER_USER: &str = "system:serviceaccount:kdoctor:kdoctor-controller";

fn default_agent() -> DaemonSet {
    let labels = BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "kdoctor-agent".to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            "agent".to_string(),
        ),
    ]);
    DaemonSet {
        metadata: ObjectMeta {
            name: Some("kdoctor-agent".into()),
            namespace: Some(NAMESPACE.into()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "agent".into(),
                        image: Some("kdoctor".into()),
                        ..Container::default()
                    }],
                    // As manifests/agent.yaml: every node, tainted or not (kube-sim's
                    // simulated nodes are).
                    tolerations: Some(vec![Toleration {
                        operator: Some("Exists".into()),
                        ..Toleration::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..DaemonSetSpec::default()
        }),
        ..DaemonSet::default()
    }
}

/// Raises this process's open-file limit to its hard limit and returns it: a cluster of a
/// thousand in-process agents holds thousands of sockets, more than a default soft limit of
/// 1,024 allows.
pub fn raise_open_files() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
    }
    limit.rlim_cur
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `limit` with `what`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A task's ongoing round, as a stand-in agent sees it.
struct OngoingRound {
    task: String,
    uid: String,
    round: i64,
    carrier: String,
    /// When an agent's report is due: the round's start plus its `durationInSecond`.
    report_due: jiff::Timestamp,
}

async fn ongoing_rounds<K>(client: &Client) -> Vec<OngoingRound>
where
    K: Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + kdoctor_reconciler::task::TaskObject,
{
    let api: Api<K> = Api::all(client.clone());
    let Ok(list) = api.list(&ListParams::default()).await else {
        return Vec::new();
    };
    list.items
        .iter()
        .filter_map(|task| {
            let status: &TaskStatus = task.task_status()?;
            let top = status.history.as_ref()?.first()?;
            (top.status == RoundStatus::Ongoing).then(|| {
                let carrier = status
                    .resource
                    .as_ref()
                    .map(|r| r.runtime_name.clone())
                    .unwrap_or_default();
                let probing = task.to_task().duration_in_second().unwrap_or(0).max(0);
                OngoingRound {
                    task: task.name_any(),
                    uid: task.meta().uid.clone().unwrap_or_default(),
                    round: top.round_number,
                    carrier,
                    report_due: top.start_time_stamp.0 + jiff::SignedDuration::from_secs(probing),
                }
            })
        })
        .collect()
}

/// A token of `pod`'s ServiceAccount for the report API's audience, bound to the pod (what the
/// kubelet writes into the agents' projected volume).
pub async fn identity_token(client: &Client, pod: &Pod) -> Option<String> {
    let account = pod
        .spec
        .as_ref()?
        .service_account_name
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let request: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(serde_json::json!({"spec": {
            "audiences": [kdoctor_transport::report_api::TOKEN_AUDIENCE],
            "expirationSeconds": 3600,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                "name": pod.name_any(), "uid": pod.metadata.uid.clone()?},
        }}))
        .ok()?;
    match Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .create_token_request(&account, &PostParams::default(), &request)
        .await
    {
        Ok(issued) => issued.status.map(|s| s.token),
        Err(e) => {
            eprintln!("no identity token for pod {}: {e}", pod.name_any());
            None
        }
    }
}

impl Agents {
    async fn tick(&self, client: &Client, dir: &Path, ca_file: &Path) {
        let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
        let Ok(list) = pods
            .list(&ListParams::default().labels("app.kubernetes.io/component=agent"))
            .await
        else {
            return;
        };
        let mut live = BTreeSet::new();
        for pod in &list.items {
            let Some(agent) = kdoctor_reconciler::readiness::agent_pod(pod) else {
                continue;
            };
            live.insert(agent.name.clone());
            // Real agents start as soon as their pod has an address, as a real agent process
            // would be serving by the time its pod turns Ready: a round that starts at once
            // must not find a peer's echo server missing.
            let real = self.real.on(&agent.node);
            if self.running.lock().unwrap().contains_key(&agent.name)
                || !(agent.ready || real)
                || self.behaviour.lock().unwrap().hung.contains(&agent.node)
                || self.behaviour.lock().unwrap().dead.contains(&agent.node)
            {
                continue;
            }
            // Every address of the pod, as `--bind=$(POD_IPS)` gives a real agent.
            let mut ips: Vec<std::net::IpAddr> = pod
                .status
                .iter()
                .flat_map(|s| s.pod_ips.iter().flatten())
                .filter_map(|p| p.ip.parse().ok())
                .collect();
            if ips.is_empty() {
                ips.push(agent.ip);
            }
            let mut args = AgentArgs::ephemeral(ips);
            args.report_dir = Some(dir.join(&agent.name));
            args.report_port = REPORT_PORT;
            args.tls_ca_cert = ca_file.to_path_buf();
            args.node_name = Some(agent.node.clone());
            args.pod_name = Some(agent.name.clone());
            // The pod's identity token, as the kubelet projects it: without it the harvester
            // refuses the agent.
            let Some(token) = identity_token(client, pod).await else {
                continue;
            };
            let token_file = dir.join(format!("{}.token", agent.name));
            let written =
                std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&token_file, token));
            if let Err(e) = written {
                eprintln!("cannot write {}: {e}", token_file.display());
                continue;
            }
            self.tokens
                .lock()
                .unwrap()
                .insert(agent.node.clone(), token_file.clone());
            args.report_token = token_file;
            if self.real != RealAgents::None {
                // The ports the carrier's Services and probes name (upstream's defaults).
                let ports = ControllerOptions::new(NAMESPACE).ports;
                args.app_http_port = ports.http;
                args.app_https_port = ports.https;
                args.health_port = ports.health;
                args.metrics_port = ports.metrics;
            }
            let Ok(running) = start(&args).await else {
                continue;
            };
            let rounds = if real {
                let labels = pod.labels();
                let tasks = TaskArgs {
                    default_agent: !labels.contains_key(kdoctor_api::labels::TASK_KIND),
                    task_kind: labels
                        .get(kdoctor_api::labels::TASK_KIND)
                        .and_then(|k| k.parse().ok()),
                    task_name: labels.get(kdoctor_api::labels::TASK_NAME).cloned(),
                    namespace: NAMESPACE.to_string(),
                    dns_service_label_key: "kubernetes.io/name".to_string(),
                    dns_service_label_value: "CoreDNS".to_string(),
                    report_expiry_hours: 1,
                    ..TaskArgs::default()
                };
                let runner = Runner::new(
                    self.agent_client.clone(),
                    &args,
                    &tasks,
                    running.spool.clone(),
                    running.registry.clone(),
                )
                .expect("agent task loop");
                let agent_client = self.agent_client.clone();
                runner.map(|r| tokio::spawn(Arc::new(r).run(agent_client)))
            } else {
                None
            };
            let carrier = pod
                .labels()
                .get("app.kubernetes.io/name")
                .cloned()
                .unwrap_or_default();
            self.running.lock().unwrap().insert(
                agent.name.clone(),
                StandIn {
                    node: agent.node,
                    carrier,
                    agent: running,
                    written: BTreeSet::new(),
                    rounds,
                },
            );
        }
        self.running
            .lock()
            .unwrap()
            .retain(|name, _| live.contains(name));

        let mut rounds = Vec::new();
        for (kind, list) in [
            (TaskKind::NetReach, ongoing_rounds::<NetReach>(client).await),
            (
                TaskKind::AppHttpHealthy,
                ongoing_rounds::<AppHttpHealthy>(client).await,
            ),
            (TaskKind::Netdns, ongoing_rounds::<Netdns>(client).await),
        ] {
            rounds.extend(list.into_iter().map(|r| (kind, r)));
        }
        // As an agent does: its report once the round's probing time is over (and not while
        // real agents probe the stand-ins' echo targets); the fsynced writes of a thousand
        // stand-ins off the runtime that serves those targets.
        let now = jiff::Timestamp::now();
        rounds.retain(|(_, r)| r.report_due <= now);
        if rounds.is_empty() {
            return;
        }
        tokio::task::block_in_place(|| self.spool_reports(rounds));
    }

    /// Spools, for each of `rounds`, every stand-in's report of the task's own kind.
    fn spool_reports(&self, rounds: Vec<(TaskKind, OngoingRound)>) {
        let behaviour = self.behaviour.lock().unwrap();
        let mut running = self.running.lock().unwrap();
        for (
            kind,
            OngoingRound {
                task,
                uid,
                round,
                carrier,
                ..
            },
        ) in rounds
        {
            for (pod, standin) in running.iter_mut() {
                if standin.rounds.is_some()
                    || standin.carrier != carrier
                    || behaviour.silent.contains(&standin.node)
                    || standin.written.contains(&(uid.clone(), round))
                {
                    continue;
                }
                // The report of the task's own kind, as its agent would write.
                let mut report =
                    kdoctor_api::fixtures::report_of(kind, &standin.node, round, 2, round as u64);
                report.pod_name = pod.clone();
                report.task_uid = Some(uid.clone());
                if behaviour.failing.contains(&standin.node) {
                    report.round_result = "fail".into();
                    report.failed_reason = Some("test AgentPodV4IP: failed".into());
                }
                let expiry = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
                if let Some(spool) = &standin.agent.spool
                    && spool
                        .write(kind, &task, &standin.node, &report, expiry)
                        .is_ok()
                {
                    standin.written.insert((uid.clone(), round));
                }
            }
        }
    }
}

/// Settings of a test cluster.
pub struct ClusterConfig {
    pub nodes: usize,
    pub default_agent: bool,
    /// Controllers, each with a replica of the replicated store (Raft over mutual-TLS HTTPS on
    /// the namespace's loopback); 0: one controller on a store of its own.
    pub replicas: usize,
    /// Real agents probing through the simulated network instead of fixture reports.
    pub real_agents: bool,
    /// Real agents on node-1 … node-N only (the rest stand-ins); 0: as `real_agents` says.
    pub real_agent_nodes: usize,
    /// Report export of the controller.
    pub export: Option<ExportConfig>,
    /// A dual-stack cluster (the machine must route the simulated IPv6 addresses) and
    /// `enableIPv6` in the controller's configuration.
    pub ipv6: bool,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            nodes: 3,
            default_agent: true,
            replicas: 0,
            real_agents: false,
            real_agent_nodes: 0,
            export: None,
            ipv6: false,
        }
    }
}

impl Cluster {
    /// Starts a cluster, its stand-in agents and the controller.
    pub async fn start(settings: ClusterConfig) -> Cluster {
        // Controller logs in the test's output (shown for failing tests); RUST_LOG overrides.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "kdoctor_reconciler=debug".into()),
            )
            .with_test_writer()
            .try_init();
        let opts = TestClusterOptions {
            nodes: settings.nodes,
            process_nodes: 0,
            ipv6: settings.ipv6,
            ..Default::default()
        };
        let kube = tokio::task::spawn_blocking(move || TestCluster::start(&opts))
            .await
            .expect("starting the test cluster")
            .expect("a test cluster (hack/test.sh builds what it needs)");
        let net = kube
            .runtime(2)
            .expect("a runtime in the cluster's namespace");
        let client = kube.client().await.expect("client");
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: ObjectMeta {
                        name: Some(NAMESPACE.into()),
                        ..ObjectMeta::default()
                    },
                    ..Namespace::default()
                },
            )
            .await
            .expect("namespace");
        // The ServiceAccounts and RBAC of the install, exactly as shipped.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let applied = tokio::process::Command::new(kube.kubectl())
            .arg("--kubeconfig")
            .arg(kube.kubeconfig())
            .args(["apply", "-f"])
            .arg(root.join("manifests/rbac.yaml"))
            .arg("-f")
            .arg(root.join("manifests/apiserver-rbac.yaml"))
            .output()
            .await
            .expect("kubectl apply");
        assert!(
            applied.status.success(),
            "applying the manifests' RBAC: {}",
            String::from_utf8_lossy(&applied.stderr)
        );
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in kdoctor_api::crd::crds() {
            crds.create(&PostParams::default(), &crd)
                .await
                .expect("CRD");
            let name = crd.metadata.name.clone().unwrap_or_default();
            let established = kube::runtime::wait::await_condition(
                crds.clone(),
                &name,
                kube::runtime::wait::conditions::is_crd_established(),
            );
            tokio::time::timeout(Duration::from_secs(30), established)
                .await
                .expect("the CRD is established within 30 s")
                .expect("CRD watch");
        }
        if settings.default_agent {
            let dss: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
            dss.create(&PostParams::default(), &default_agent())
                .await
                .expect("default agent");
        }
        let dir = TempDir::new("cluster");
        let ca = Ca::generate("kdoctor-test-ca").expect("CA");
        let ca_file = dir.0.join("ca.crt");
        std::fs::write(&ca_file, &ca.pem.cert).expect("CA file");
        let store = Arc::new(Store::open(StoreConfig::new(dir.0.join("store"))).expect("store"));
        // Clients for the runtime in the cluster's namespace, made there.
        let inner = {
            let kubeconfig = kube.inner_kubeconfig();
            net.spawn(async move { kube_sim::testcluster::client_from(&kubeconfig).await })
                .await
                .expect("inner client task")
                .expect("inner client")
        };
        let controller_client =
            service_account_client(&net, &client, &kube, "kdoctor-controller").await;
        let agents = Agents {
            behaviour: Arc::default(),
            running: Arc::default(),
            real: match (settings.real_agents, settings.real_agent_nodes) {
                (true, _) => RealAgents::All,
                (false, 0) => RealAgents::None,
                (false, n) => RealAgents::FirstNodes(n),
            },
            agent_client: service_account_client(&net, &client, &kube, "kdoctor-agent").await,
            tokens: Arc::default(),
        };
        let runner = {
            let agents = agents.clone();
            let spool_dir = dir.0.join("agents");
            net.spawn(async move {
                loop {
                    // No faster than a tick takes: on a large cluster the lists are slow, and
                    // the controller under test needs the cores more.
                    let started = tokio::time::Instant::now();
                    agents.tick(&inner, &spool_dir, &ca_file).await;
                    tokio::time::sleep(started.elapsed().max(Duration::from_millis(100))).await;
                }
            })
        };
        let mut options = ControllerOptions::new(NAMESPACE);
        options.ports.report = REPORT_PORT;
        options.poll = Duration::from_millis(300);
        options.harvest_timeout = Duration::from_secs(2);
        options.orphan_sweep = Duration::from_secs(1);
        let config = Config {
            task_poll_interval_in_second: 1,
            enable_ipv6: settings.ipv6,
            ..Config::default()
        };
        let mut cluster = Cluster {
            kube,
            controller_client,
            client,
            store,
            agents,
            ca,
            options,
            config,
            registry: prometheus::Registry::new(),
            replicas: Vec::new(),
            leading: watch::channel(false).1,
            export: settings.export,
            endpoints: Arc::default(),
            _dir: dir,
            tasks: vec![runner],
            net: Some(net),
        };
        if settings.replicas == 0 {
            cluster.start_controller("controller-0");
        } else {
            cluster.start_replicas(settings.replicas).await;
        }
        cluster
    }

    /// Starts a controller named `identity` over `writes`; `registry` gets its metrics.
    fn spawn_controller(
        &self,
        identity: &str,
        writes: Writes,
        registry: prometheus::Registry,
    ) -> (watch::Sender<bool>, watch::Receiver<bool>, JoinHandle<()>) {
        let harvester = self
            .ca
            .client(kdoctor_agent::report_api::HARVESTER_NAME, &[])
            .expect("client cert");
        let config = self.config.clone();
        let options = self.options.clone();
        let export = self.export.clone();
        let client = self.controller_client.clone();
        let identity = identity.to_string();
        let harvest_identity = harvester.identity().expect("identity");
        let (stop_tx, mut stop_rx) = watch::channel(false);
        let (leading_tx, leading_rx) = watch::channel(false);
        let handle = self.net().spawn(async move {
            // Made here: kube's client spawns its request buffer on the runtime that makes it.
            let client = match &writes {
                Writes::Replicated(_) => kdoctor_reconciler::fenced::wrap(client, writes.clone()),
                Writes::Local(_) => client,
            };
            let setup = Setup {
                client,
                writes,
                config,
                options,
                harvest_identity,
                registry,
                identity,
                export,
                peers: None,
            };
            let stopped = async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            };
            let _ = run(setup, leading_tx, stopped).await;
        });
        (stop_tx, leading_rx, handle)
    }

    /// Replication settings of replica `name`: its own port on the namespace's loopback,
    /// certificates of the install's CA.
    fn replication(&self, port: u16) -> Replication {
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        let server = self.ca.serving(&["127.0.0.1".into()]).expect("server cert");
        let client = self
            .ca
            .client(kdoctor_reconciler::replica::REPLICA_NAME, &[])
            .expect("client cert");
        Replication {
            listen: addr,
            port,
            roots: kdoctor_transport::tls::parse_roots(self.ca.pem.cert.as_bytes(), "test CA")
                .expect("roots"),
            server: server.identity().expect("identity"),
            client: client.identity().expect("identity"),
        }
    }

    /// Starts replica `i` (`controller-<i>`) on `store`: its endpoint, its replica of the
    /// store and its controller (which runs while it leads).
    async fn start_replica(&self, i: usize, store: Arc<Store>) -> Replica {
        let name = format!("controller-{i}");
        let replication = self.replication(5722 + i as u16);
        self.endpoints
            .lock()
            .unwrap()
            .insert(name.clone(), replication.listen);
        let endpoints = self.endpoints.clone();
        let transport = HttpsTransport::resolving(
            &replication,
            Arc::new(move |pod| endpoints.lock().unwrap().get(pod).copied()),
        )
        .expect("transport");
        let member = Member::new(&name);
        let id = 1 + i as u64;
        let started = store.clone();
        let (raft, endpoint) = self
            .inside(async move {
                let raft = kdoctor_store::raft::Replica::start(
                    started,
                    kdoctor_store::raft::Options::new(member),
                    Arc::new(transport),
                    || id,
                )
                .await
                .expect("replica starts");
                let serving = kdoctor_reconciler::replica::serve::serve(raft.clone(), &replication)
                    .await
                    .expect("replica endpoint");
                (raft, tokio::spawn(serving))
            })
            .await;
        let registry = if i == 0 {
            self.registry.clone()
        } else {
            prometheus::Registry::new()
        };
        let (stop, leading, handle) =
            self.spawn_controller(&name, Writes::Replicated(raft.clone()), registry);
        Replica {
            name,
            stop,
            leading,
            handle,
            store,
            raft: Some(raft),
            endpoint: Some(endpoint),
        }
    }

    /// Starts `n` replicas (the first on the cluster's store) and forms their cluster.
    async fn start_replicas(&mut self, n: usize) {
        for i in 0..n {
            let store = if i == 0 {
                self.store.clone()
            } else {
                let dir = self._dir.0.join(format!("store-{i}"));
                Arc::new(Store::open(StoreConfig::new(dir)).expect("store"))
            };
            let replica = self.start_replica(i, store).await;
            self.replicas.push(replica);
        }
        let expected: Vec<Member> = (0..n)
            .map(|i| Member::new(format!("controller-{i}")))
            .collect();
        for replica in &self.replicas {
            let (raft, expected) = (replica.raft.clone().expect("raft"), expected.clone());
            self.net().spawn(async move {
                if let Err(e) = raft.form(|| expected.clone()).await {
                    panic!("replica could not form the cluster: {e}");
                }
            });
        }
        self.leading = self.replicas[0].leading.clone();
    }

    /// The replica that leads, once one does (within `limit`).
    pub async fn leader(&self, limit: Duration) -> usize {
        eventually(limit, "a replica leads", || async {
            self.replicas.iter().position(|r| *r.leading.borrow())
        })
        .await
    }

    /// Crashes replica `i`: its controller, its endpoint and its replica of the store stop at
    /// once, nothing handed over (its store stays as the crash left it).
    pub async fn crash(&mut self, i: usize) {
        let replica = &mut self.replicas[i];
        replica.handle.abort();
        // Its last word stays in the receiver: a crashed controller leads nothing.
        replica.leading = watch::channel(false).1;
        if let Some(endpoint) = replica.endpoint.take() {
            endpoint.abort();
        }
        self.endpoints.lock().unwrap().remove(&replica.name);
        if let Some(raft) = replica.raft.take() {
            self.net()
                .spawn(async move { raft.shutdown().await })
                .await
                .expect("replica stops");
        }
    }

    /// Replaces every running replica's controller with a new one (the same replica of the
    /// store), configured as the cluster now is (its export, say).
    pub async fn restart_controllers(&mut self) {
        for i in 0..self.replicas.len() {
            let Some(raft) = self.replicas[i].raft.clone() else {
                continue;
            };
            self.replicas[i].handle.abort();
            let name = self.replicas[i].name.clone();
            let registry = if i == 0 {
                self.registry.clone()
            } else {
                prometheus::Registry::new()
            };
            let (stop, leading, handle) =
                self.spawn_controller(&name, Writes::Replicated(raft), registry);
            let replica = &mut self.replicas[i];
            (replica.stop, replica.leading, replica.handle) = (stop, leading, handle);
        }
        self.leading = self.replicas[0].leading.clone();
    }

    fn start_controller(&mut self, identity: &str) {
        let (stop, leading, handle) = self.spawn_controller(
            identity,
            Writes::Local(self.store.clone()),
            self.registry.clone(),
        );
        self.replicas = vec![Replica {
            name: identity.to_string(),
            stop,
            leading: leading.clone(),
            handle,
            store: self.store.clone(),
            raft: None,
            endpoint: None,
        }];
        self.leading = leading;
    }

    /// The controller's metrics in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        let mut out = Vec::new();
        let _ = prometheus::Encoder::encode(
            &prometheus::TextEncoder::new(),
            &self.registry.gather(),
            &mut out,
        );
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Kills the controller (no graceful stop: as a crash).
    pub async fn kill_controller(&mut self) {
        for replica in self.replicas.drain(..) {
            replica.handle.abort();
            let _ = replica.handle.await;
        }
    }

    /// Starts the controller again (same store).
    pub fn restart_controller(&mut self) {
        self.start_controller("controller-1");
    }

    /// Replaces the controller with one that exports reports to `export` (a receiver started
    /// inside the cluster's namespace after the cluster, where the controller reaches it).
    pub async fn restart_controller_with_export(&mut self, export: ExportConfig) {
        self.kill_controller().await;
        self.export = Some(export);
        // Its metrics, not the stopped one's.
        self.registry = prometheus::Registry::new();
        self.start_controller("controller-export");
    }

    /// The agent workloads and pods of the namespace, for failure messages.
    pub async fn dump(&self) -> String {
        use k8s_openapi::api::apps::v1::Deployment;
        let mut out = String::new();
        let params = ListParams::default();
        if let Ok(list) = Api::<DaemonSet>::namespaced(self.client.clone(), NAMESPACE)
            .list(&params)
            .await
        {
            for ds in list.items {
                out += &format!(
                    "DaemonSet {} generation {:?} status {:?}\n",
                    ds.name_any(),
                    ds.metadata.generation,
                    ds.status
                );
            }
        }
        if let Ok(list) = Api::<Deployment>::namespaced(self.client.clone(), NAMESPACE)
            .list(&params)
            .await
        {
            for d in list.items {
                out += &format!(
                    "Deployment {} generation {:?} status {:?}\n",
                    d.name_any(),
                    d.metadata.generation,
                    d.status
                );
            }
        }
        if let Ok(list) = Api::<Pod>::namespaced(self.client.clone(), NAMESPACE)
            .list(&params)
            .await
        {
            for pod in list.items {
                out += &format!(
                    "Pod {} annotations {:?} status {:?}\n",
                    pod.name_any(),
                    pod.metadata.annotations,
                    pod.status
                );
            }
        }
        out
    }

    /// The task of kind `K` named `name`.
    pub async fn task<K>(&self, name: &str) -> Option<K>
    where
        K: Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned,
    {
        Api::<K>::all(self.client.clone())
            .get_opt(name)
            .await
            .ok()
            .flatten()
    }
}

impl Cluster {
    /// The runtime inside the cluster's namespace.
    pub fn net(&self) -> &tokio::runtime::Handle {
        self.net.as_ref().expect("the cluster's runtime").handle()
    }

    /// Runs `f` inside the cluster's namespace (to reach pods' addresses, or to serve on the
    /// namespace's own loopback as something the controller calls).
    pub async fn inside<F>(&self, f: F) -> F::Output
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.net()
            .spawn(f)
            .await
            .expect("a task inside the cluster")
    }

    /// The agent on `node` hangs: its report API accepts connections and never answers (not
    /// even the TLS handshake), as a wedged process would.
    pub async fn hang_agent(&self, node: &str) {
        self.agents
            .behaviour
            .lock()
            .unwrap()
            .hung
            .insert(node.to_string());
        let addrs: Vec<std::net::SocketAddr> = self
            .agents
            .stop(node)
            .into_iter()
            .flat_map(|s| s.agent.reports.clone())
            .collect();
        assert!(!addrs.is_empty(), "no agent serving on {node}");
        for addr in addrs {
            self.inside(async move {
                // The stopped server's socket goes as its task is dropped.
                let listener = loop {
                    match tokio::net::TcpListener::bind(addr).await {
                        Ok(l) => break l,
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                };
                tokio::spawn(async move {
                    let mut held = Vec::new();
                    while let Ok((socket, _)) = listener.accept().await {
                        held.push(socket);
                    }
                });
            })
            .await;
        }
    }

    /// The requests of `user` so far, by "verb resource[/subresource]" (the audit log).
    pub fn requests(&self, user: &str) -> BTreeMap<String, u64> {
        self.kube.requests(user)
    }
}

/// A client of the ServiceAccount `name` of the install's namespace (a token from
/// TokenRequest), made on `net` for use there.
async fn service_account_client(
    net: &tokio::runtime::Runtime,
    admin: &Client,
    kube: &TestCluster,
    name: &str,
) -> Client {
    let token = kube_sim::testcluster::service_account_token(admin, NAMESPACE, name, 86400)
        .await
        .expect("a token for the ServiceAccount");
    let kubeconfig = kube.inner_kubeconfig();
    net.spawn(async move { kube_sim::testcluster::client_with_token(&kubeconfig, token).await })
        .await
        .expect("client task")
        .expect("client")
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for replica in &self.replicas {
            replica.handle.abort();
            if let Some(endpoint) = &replica.endpoint {
                endpoint.abort();
            }
        }
        for task in &self.tasks {
            task.abort();
        }
        // Dropped in an async test: the runtime goes without waiting for its tasks.
        if let Some(net) = self.net.take() {
            net.shutdown_background();
        }
    }
}
