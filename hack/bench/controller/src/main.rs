//! The controller on a real control plane (kube_sim::testcluster: kube-apiserver and the other
//! components of Kubernetes v1.34.4, kube-sim as the kubelet of `--nodes` simulated nodes):
//! `kdoctor controller` runs as `--replicas` processes, the pods of a StatefulSet, under the
//! manifests' ServiceAccount (one process that owns its store with `--replicas 1`), and the
//! default-agent pods are stand-ins (the real report API on every pod address, which kube-sim
//! puts on the node network; each round's report spooled once the round's probing time is over,
//! as an agent's is) but
//! for `--agent-nodes` real agents ([`real_agents`]), whose API requests are counted too. The
//! benchmark runs inside the cluster's network namespace, and counts requests in
//! kube-apiserver's audit log. Per round: the controller's API requests and status writes, the
//! time from the last report to the finalised round, the replicas' CPU seconds and RSS,
//! kube-apiserver's RSS. The floor in the same run: the same reports harvested by a bare loop
//! over the same report API into plain files. Then kubectl reads the round through the
//! aggregation layer ([`aggregated`]). A list of node counts runs a cluster each and prints
//! them side by side ([`summary`]). Prints markdown.
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kdoctor_agent::spool::Spool;
use kdoctor_api::task::{NetReach, RoundStatus, TaskKind};
use kdoctor_transport::pki::Ca;
use kdoctor_transport::report_client::ReportClient;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube_sim::testcluster::{TestCluster, TestClusterOptions};

mod aggregated;
mod nginx;
mod peaks;
mod real_agents;
mod replicas;
mod seed;
mod summary;
mod watchers;

use real_agents::RealAgents;

const NAMESPACE: &str = "kdoctor";
const REPORT_PORT: u16 = 3000;
/// How many peers each stand-in's report probed.
const PEERS: usize = 5;
/// The task's `durationInSecond`: how long the real agents probe in a round.
const PROBING: Duration = Duration::from_secs(1);
/// The task's `perRequestTimeoutInMS`. Not upstream's 500: the real agents' probes and the
/// stand-ins' echo targets they ask share this process and two cores with thousands of
/// simulated pods' servers and the whole control plane; at 500 ms, 5 to 15 of the 100 probes
/// at a round's start timed out at 2,500 nodes, failing rounds the controller under
/// measurement had nothing to do with. (At 2,000 ms some still did at 5,000 nodes while the
/// stand-ins' echo targets shared the bench's threads with the harvested report APIs; they
/// have a thread of their own now: docs/benchmarks.md#controller.)
const PROBE_TIMEOUT_MS: u64 = 2000;
const CONTROLLER_USER: &str = "system:serviceaccount:kdoctor:kdoctor-controller";
const AGENT_USER: &str = "system:serviceaccount:kdoctor:kdoctor-agent";

/// Which part runs in this process (each part has a cluster, and the process lives in its
/// network namespace).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    All,
    Scale,
    /// The table by node count of the scale runs in `--summary FILE`.
    Table,
}

struct Options {
    kdoctor: PathBuf,
    /// Node counts, one scale run each (the last given when a part runs).
    nodes: Vec<usize>,
    rounds: i64,
    /// Real agents among the nodes (the first agent pods).
    agent_nodes: usize,
    /// Controller replicas (1: one process that owns its store alone, no StatefulSet).
    replicas: usize,
    /// Finished tasks with a report each in the store before the replicas start (listed as a
    /// Table through the aggregation layer with the round's own).
    seed_tasks: u64,
    /// Concurrent watchers of the reports through the aggregation layer (0: none).
    watchers: usize,
    part: Part,
    summary: Option<PathBuf>,
}

fn options() -> Options {
    let mut o = Options {
        kdoctor: PathBuf::from("kdoctor"),
        nodes: vec![1000],
        rounds: 3,
        agent_nodes: 20,
        replicas: 3,
        seed_tasks: 10_000,
        watchers: 1000,
        part: Part::All,
        summary: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--kdoctor" => o.kdoctor = value.into(),
            "--nodes" => {
                o.nodes = value
                    .split(',')
                    .map(|n| n.trim().parse().expect("--nodes N[,N...]"))
                    .collect()
            }
            "--replicas" => o.replicas = value.parse().expect("--replicas N"),
            "--seed-tasks" => o.seed_tasks = value.parse().expect("--seed-tasks N"),
            "--watchers" => o.watchers = value.parse().expect("--watchers N"),
            "--summary" => o.summary = Some(value.into()),
            "--rounds" => o.rounds = value.parse().expect("--rounds N"),
            "--agent-nodes" => o.agent_nodes = value.parse().expect("--agent-nodes N"),
            "--part" => {
                o.part = match value.as_str() {
                    "scale" => Part::Scale,
                    "table" => Part::Table,
                    other => panic!("--part scale|table, not {other}"),
                }
            }
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    o
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn default_agent() -> DaemonSet {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kdoctor-agent", "namespace": NAMESPACE,
                     "labels": {"app.kubernetes.io/name": "kdoctor-agent", "app.kubernetes.io/component": "agent"}},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "kdoctor-agent"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "kdoctor-agent", "app.kubernetes.io/component": "agent"}},
                "spec": {"containers": [{"name": "agent", "image": "kdoctor"}],
                         "tolerations": [{"operator": "Exists"}]}
            }
        }
    }))
    .expect("DaemonSet")
}

/// A real control plane with the CRDs, the install's RBAC and the default agent's pods Ready.
struct Cluster {
    kube: TestCluster,
    admin: kube::Client,
    dir: PathBuf,
    ca: Ca,
    /// (pod, node, pod IP) of every agent pod.
    agents: Vec<(String, String, IpAddr)>,
    /// From the default agent's DaemonSet created to every one of its pods Ready.
    ready_after: Duration,
}

/// kubectl `args` as the admin, inside the cluster's namespace.
fn kubectl(kube: &TestCluster, args: &[&str]) -> Command {
    let mut command = Command::new(kube.kubectl());
    command
        .arg("--kubeconfig")
        .arg(kube.inner_kubeconfig())
        .args(args);
    command
}

/// `kubectl apply` of files of manifests/, as shipped.
fn apply_manifests(kube: &TestCluster, files: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../manifests");
    let mut apply = kubectl(kube, &["apply"]);
    for file in files {
        apply.arg("-f").arg(root.join(file));
    }
    let applied = apply.output().expect("kubectl");
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
}

/// Waits until APIService `name` is Available, at most `timeout`.
fn await_available(kube: &TestCluster, name: &str, timeout: Duration) {
    let available = kubectl(
        kube,
        &[
            "wait",
            &format!("apiservice/{name}"),
            "--for=condition=Available",
            &format!("--timeout={}s", timeout.as_secs()),
        ],
    )
    .output()
    .expect("kubectl");
    assert!(
        available.status.success(),
        "APIService {name} not Available after {} s: {}",
        timeout.as_secs(),
        String::from_utf8_lossy(&available.stderr)
    );
}

/// Requests by verb and resource, as markdown.
fn by_verb(requests: &BTreeMap<String, u64>) -> String {
    requests
        .iter()
        .map(|(k, v)| format!("`{k}` {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A client from a kubeconfig, with `token` instead of its credentials when given.
async fn client_from(kubeconfig: &Path, token: Option<String>) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kube config");
    if let Some(token) = token {
        config.auth_info = kube::config::AuthInfo {
            token: Some(token.into()),
            ..Default::default()
        };
    }
    kube::Client::try_from(config).expect("client")
}

impl Cluster {
    /// Runs inside `kube`'s network namespace (the process entered it before its runtime).
    async fn start(kube: TestCluster, nodes: usize, name: &str) -> Cluster {
        let admin = client_from(&kube.inner_kubeconfig(), None).await;
        Api::<Namespace>::all(admin.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}}))
                    .expect("namespace"),
            )
            .await
            .expect("namespace");
        apply_manifests(&kube, &["rbac.yaml", "apiserver-rbac.yaml"]);
        let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
        for crd in kdoctor_api::crd::crds() {
            crds.create(&PostParams::default(), &crd)
                .await
                .expect("CRD");
        }
        // Established before tasks are applied.
        tokio::time::sleep(Duration::from_secs(2)).await;
        Api::<DaemonSet>::namespaced(admin.clone(), NAMESPACE)
            .create(&PostParams::default(), &default_agent())
            .await
            .expect("default agent");
        let started = Instant::now();
        let pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
        let agents = loop {
            let list = pods.list(&ListParams::default()).await.expect("pods");
            let ready: Vec<(String, String, IpAddr)> = list
                .items
                .iter()
                .filter_map(|p| {
                    let status = p.status.as_ref()?;
                    let ready = status
                        .conditions
                        .as_ref()?
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True");
                    if !ready {
                        return None;
                    }
                    let ip = status.pod_ip.as_ref()?.parse().ok()?;
                    let node = p.spec.as_ref()?.node_name.clone()?;
                    Some((p.metadata.name.clone().unwrap_or_default(), node, ip))
                })
                .collect();
            if ready.len() == nodes {
                break ready;
            }
            assert!(
                started.elapsed() < Duration::from_secs(300 + nodes as u64 / 10),
                "only {} of {nodes} agent pods Ready",
                ready.len()
            );
            // A list of thousands of pods is megabytes for kube-apiserver to encode: not too
            // often, or the wait itself slows the cluster it waits for.
            tokio::time::sleep(Duration::from_secs(2)).await;
        };
        let ready_after = started.elapsed();
        eprintln!(
            "{name}: {nodes} nodes, agent pods Ready after {:.1} s",
            ready_after.as_secs_f64()
        );
        let dir = std::env::temp_dir().join(format!(
            "kdoctor-bench-controller-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("work dir");
        let ca = Ca::generate("kdoctor-bench-ca").expect("CA");
        std::fs::write(dir.join("ca.crt"), &ca.pem.cert).expect("ca.crt");
        std::fs::write(dir.join("ca.key"), &ca.pem.key).expect("ca.key");
        Cluster {
            kube,
            admin,
            dir,
            ca,
            agents,
            ready_after,
        }
    }

    /// A token of the install's ServiceAccount `name`.
    async fn token(&self, name: &str) -> String {
        kube_sim::testcluster::service_account_token(&self.admin, NAMESPACE, name, 86400)
            .await
            .expect("token")
    }

    /// `kdoctor controller` as a process with the controller ServiceAccount's identity:
    /// `replicas` of them as a StatefulSet's pods, or one that owns its store alone.
    /// The controllers, the first of them holding `seeded` earlier tasks' reports.
    async fn controllers(&self, kdoctor: &Path, replicas: usize, seeded: u64) -> Controllers {
        let token = self.token("kdoctor-controller").await;
        let kubeconfig = self.dir.join("controller.kubeconfig");
        // The admin kubeconfig's server and CA, the ServiceAccount's token as the user.
        let mut kc =
            kube::config::Kubeconfig::read_from(self.kube.inner_kubeconfig()).expect("kubeconfig");
        for user in &mut kc.auth_infos {
            user.auth_info = Some(kube::config::AuthInfo {
                token: Some(token.clone().into()),
                ..Default::default()
            });
        }
        std::fs::write(&kubeconfig, serde_json::to_string(&kc).expect("json")).expect("kubeconfig");
        if replicas <= 1 {
            let args = vec![
                format!("--tls-ca-cert={}", self.dir.join("ca.crt").display()),
                format!("--tls-ca-key={}", self.dir.join("ca.key").display()),
                format!("--listen=127.0.0.1:{}", free_port()),
                format!("--metrics-listen=127.0.0.1:{}", free_port()),
                "--leader-elect=false".into(),
                "--pod-name=bench-controller".into(),
            ];
            self.seed("bench-controller", seeded).await;
            return Controllers(vec![self.spawn_controller(
                kdoctor,
                "bench-controller",
                args,
            )]);
        }
        // As installed: the certificates managed through the API (the serving certificate's
        // Secret, the APIService's caBundle) under the install's CA, here one the operator
        // provided (`kdoctor certs` or Helm would), the bench's, which the stand-ins trust.
        let secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(kdoctor_apiserver::certs::bootstrap::ca_secret_object(
                &self.ca,
                NAMESPACE,
                "kdoctor-ca",
            ))
            .expect("CA Secret");
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(self.admin.clone(), NAMESPACE)
            .create(&PostParams::default(), &secret)
            .await
            .expect("the install's CA Secret");
        let pods = replicas::create(&self.admin, replicas).await;
        if let Some(first) = pods.first() {
            self.seed(&first.name, seeded).await;
        }
        Controllers(
            pods.iter()
                .map(|pod| self.spawn_controller(kdoctor, &pod.name, replicas::args(pod)))
                .collect(),
        )
    }

    fn store_dir(&self, name: &str) -> PathBuf {
        self.dir.join(format!("store-{name}"))
    }

    /// `tasks` earlier tasks' reports in the store of the controller `name`, before it starts.
    async fn seed(&self, name: &str, tasks: u64) {
        if tasks == 0 {
            return;
        }
        let dir = self.store_dir(name);
        let started = Instant::now();
        tokio::task::spawn_blocking(move || seed::seed(&dir, tasks))
            .await
            .expect("seeding");
        eprintln!(
            "scale: {tasks} earlier tasks' reports stored for {name} in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }

    fn spawn_controller(&self, kdoctor: &Path, name: &str, args: Vec<String>) -> Controller {
        let data = self.store_dir(name);
        // KDOCTOR_BENCH_LOGS=DIR keeps each replica's log there (the bench's own folder goes
        // at its end); RUST_LOG, passed through, says how much they log.
        let log_dir =
            std::env::var_os("KDOCTOR_BENCH_LOGS").map_or_else(|| self.dir.clone(), PathBuf::from);
        std::fs::create_dir_all(&log_dir).expect("the replicas' log folder");
        let log_path = log_dir.join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path).expect("log file");
        // A heap profile of each replica when asked (KDOCTOR_BENCH_HEAPTRACK=DIR): heaptrack
        // runs it, in a process group of its own so that the replica is stopped with it.
        let mut command = match std::env::var_os("KDOCTOR_BENCH_HEAPTRACK") {
            Some(dir) => {
                let mut c = Command::new("heaptrack");
                c.arg("-o")
                    .arg(Path::new(&dir).join(name))
                    .arg(kdoctor)
                    .process_group(0);
                c
            }
            None => Command::new(kdoctor),
        };
        let child = command
            .args(["controller", "--data"])
            .arg(&data)
            .args(["--namespace", NAMESPACE, "--poll-seconds=1"])
            .args(args)
            .env("KUBECONFIG", self.dir.join("controller.kubeconfig"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("ENV_LOG_LEVEL", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start kdoctor controller");
        Controller {
            child,
            name: name.to_string(),
            data,
            log: log_path,
        }
    }

    /// kube-apiserver's process.
    fn apiserver_pid(&self) -> u32 {
        std::fs::read_to_string(self.kube.dir.join("pids/kube-apiserver.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .expect("kube-apiserver's pid")
    }

    fn requests(&self, user: &str) -> BTreeMap<String, u64> {
        // The audit log of a large cluster is a hundred megabytes by the second round: parsed
        // on a worker of the runtime that serves the stand-ins' echo targets, it stalled the
        // real agents' probes past their 500 ms timeout (rounds failed by the bench itself).
        let started = Instant::now();
        let requests = tokio::task::block_in_place(|| self.kube.requests(user));
        if started.elapsed() > Duration::from_millis(200) {
            eprintln!(
                "scale: the audit log took {:.2} s to count {user}'s requests",
                started.elapsed().as_secs_f64()
            );
        }
        requests
    }

    /// Every agent pod's identity token for the report API (what the kubelet projects into
    /// real agents), written to a file each; by pod name.
    async fn identity_tokens(&self) -> BTreeMap<String, PathBuf> {
        let pods = Api::<Pod>::namespaced(self.admin.clone(), NAMESPACE)
            .list(&ListParams::default())
            .await
            .expect("pods");
        let dir = self.dir.join("tokens");
        std::fs::create_dir_all(&dir).expect("token dir");
        let accounts = Api::<ServiceAccount>::namespaced(self.admin.clone(), NAMESPACE);
        let mut minted = futures::stream::iter(pods.items)
            .map(|pod| {
                let (accounts, dir) = (accounts.clone(), dir.clone());
                async move {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    let request: k8s_openapi::api::authentication::v1::TokenRequest =
                        serde_json::from_value(serde_json::json!({"spec": {
                            "audiences": [kdoctor_transport::report_api::TOKEN_AUDIENCE],
                            "expirationSeconds": 3600,
                            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                "name": name, "uid": pod.metadata.uid},
                        }}))
                        .expect("token request");
                    let account = pod
                        .spec
                        .and_then(|s| s.service_account_name)
                        .unwrap_or_else(|| "default".into());
                    let token = accounts
                        .create_token_request(&account, &PostParams::default(), &request)
                        .await
                        .expect("identity token")
                        .status
                        .expect("token")
                        .token;
                    let path = dir.join(&name);
                    std::fs::write(&path, token).expect("token file");
                    (name, path)
                }
            })
            .buffer_unordered(16);
        let mut tokens = BTreeMap::new();
        while let Some((pod, path)) = minted.next().await {
            tokens.insert(pod, path);
        }
        tokens
    }

    async fn apply_task(&self, name: &str, rounds: i64, target: serde_json::Value) {
        let task = serde_json::json!({
            "apiVersion": "kdoctor.io/v1beta1", "kind": "NetReach",
            "metadata": {"name": name},
            "spec": {
                "schedule": {"schedule": "0 1", "roundTimeoutMinute": 1, "roundNumber": rounds},
                "request": {"durationInSecond": PROBING.as_secs(), "qps": 1, "perRequestTimeoutInMS": PROBE_TIMEOUT_MS},
                "target": target,
            }
        });
        Api::<NetReach>::all(self.admin.clone())
            .patch(name, &PatchParams::apply("bench"), &Patch::Apply(&task))
            .await
            .expect("apply task");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Controller {
    child: Child,
    /// Its replica's name (its pod's).
    name: String,
    /// Its store's directory.
    data: PathBuf,
    /// Its log (stderr).
    log: PathBuf,
}

/// (CPU seconds so far, RSS KiB, peak RSS KiB) of process `pid` (zeros once it is gone).
fn usage(pid: u32) -> (f64, u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (ticks / 100.0, kib("VmRSS:"), kib("VmHWM:"))
}

/// Bytes of the files under `dir`.
fn disk_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The controller's processes (its replicas).
struct Controllers(Vec<Controller>);

impl Controllers {
    /// (CPU seconds of all, the largest RSS KiB, the largest peak RSS KiB).
    fn usage(&self) -> (f64, u64, u64) {
        self.0.iter().fold((0.0, 0, 0), |(cpu, rss, peak), c| {
            let (c_cpu, c_rss, c_peak) = usage(c.child.id());
            (cpu + c_cpu, rss.max(c_rss), peak.max(c_peak))
        })
    }

    fn named(&self, name: &str) -> Option<&Controller> {
        self.0.iter().find(|c| c.name == name)
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if std::env::var_os("KDOCTOR_BENCH_HEAPTRACK").is_some() {
            // The group: heaptrack's script and the replica it runs, stopped as a pod is so
            // that the profile is written out.
            let _ = Command::new("kill")
                .args(["-TERM", "--"])
                .arg(format!("-{}", self.child.id()))
                .status();
            let _ = self.child.wait();
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One agent pod's spool: its place in the cluster's order (a node's peers are the pods after
/// its own), its pod and node.
#[derive(Clone)]
pub struct Spooled {
    pub index: usize,
    pub pod: String,
    pub node: String,
    pub spool: Arc<Spool>,
}

/// Stand-in agents: the real report API and spool on every pod address but the first `skip`
/// (the real agents'), and, beside real agents, the agent's echo target their probes ask.
struct StandIns {
    spools: Vec<Spooled>,
    /// Every agent pod (name, address), in the cluster's order.
    pods: Arc<Vec<(String, IpAddr)>>,
    servers: Vec<tokio::task::JoinHandle<()>>,
    /// The echo targets' own thread: each agent's target runs on its own node, where the
    /// thousands of report APIs harvested meanwhile are not (on one runtime, a real agent's
    /// probe of a stand-in waited behind the harvest's handshakes: timeouts at 5,000 nodes).
    echo: Option<tokio::runtime::Runtime>,
}

impl StandIns {
    async fn start(cluster: &Cluster, skip: usize) -> StandIns {
        let identity =
            kdoctor_transport::tls::Identity::self_signed(&["kdoctor-agent".to_string()])
                .expect("cert");
        let roots = kdoctor_transport::tls::parse_roots(cluster.ca.pem.cert.as_bytes(), "CA")
            .expect("CA roots");
        // A server configuration per stand-in, as each agent has its own: one shared by all
        // would keep 256 TLS sessions for thousands of agents, and no harvest could resume one.
        let tls = || {
            Arc::new(
                kdoctor_transport::tls::server_config(identity.clone(), Some(roots.clone()))
                    .expect("server config"),
            )
        };
        // One registry for all: thousands of registries would be the bench's memory, not theirs.
        let metrics = kdoctor_agent::metrics::Metrics::new();
        let limits = kdoctor_transport::limits::ServeLimits::default();
        let mut spools = Vec::new();
        let mut servers = Vec::new();
        let echo_runtime = (skip > 0).then(|| {
            cluster
                .kube
                .runtime(1)
                .expect("the echo targets' runtime in the cluster's namespace")
        });
        let tokens = cluster.identity_tokens().await;
        for (index, (pod, node, ip)) in cluster.agents.iter().enumerate().skip(skip) {
            let spool = Arc::new(Spool::open(cluster.dir.join("spools").join(pod)).expect("spool"));
            let listener =
                kdoctor_agent::server::bind("report API", SocketAddr::new(*ip, REPORT_PORT))
                    .await
                    .expect("bind the report API on the pod address");
            servers.push(kdoctor_agent::server::serve(
                listener,
                kdoctor_agent::report_api::router(spool.clone(), &tokens[pod]),
                Some(tls()),
                metrics.clone(),
                limits,
            ));
            if let Some(runtime) = &echo_runtime {
                let (pod, ip, metrics) = (pod.clone(), *ip, metrics.clone());
                // Its handle, not its end, is what the block yields: the bench aborts it.
                #[allow(clippy::async_yields_async)]
                let bound = runtime.spawn(async move {
                    let echo = kdoctor_agent::server::bind(
                        "HTTP echo target",
                        SocketAddr::new(ip, real_agents::ECHO_PORT),
                    )
                    .await
                    .expect("bind the echo target on the pod address");
                    kdoctor_agent::server::serve(
                        echo,
                        kdoctor_agent::echo::Echo::new(&pod, metrics.clone()).router(),
                        None,
                        metrics,
                        limits,
                    )
                });
                servers.push(bound.await.expect("the echo target started"));
            }
            spools.push(Spooled {
                index,
                pod: pod.clone(),
                node: node.clone(),
                spool,
            });
        }
        let pods = cluster
            .agents
            .iter()
            .map(|(pod, _, ip)| (pod.clone(), *ip))
            .collect();
        StandIns {
            spools,
            servers,
            pods: Arc::new(pods),
            echo: echo_runtime,
        }
    }

    /// Spools every stand-in's report of `round`, and into the spools of `also` (concurrently,
    /// each one fsynced as agents do): each node probed the agent pods of the [`PEERS`] nodes
    /// after its own, as a round with `maxPeers` samples them.
    async fn write(&self, task: &str, uid: &str, round: i64, also: &[Spooled]) {
        let expiry = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
        let spools = self.spools.iter().chain(also).cloned().collect::<Vec<_>>();
        let mut writes = futures::stream::iter(spools)
            .map(
                |Spooled {
                     index,
                     pod,
                     node,
                     spool,
                 }| {
                    let (task, uid, pods) = (task.to_string(), uid.to_string(), self.pods.clone());
                    tokio::task::spawn_blocking(move || {
                        let mut report = kdoctor_api::fixtures::net_reach_report(
                            &node,
                            round,
                            PEERS,
                            round as u64,
                        );
                        for (k, detail) in kdoctor_api::fixtures::net_reach_details(&mut report)
                            .iter_mut()
                            .enumerate()
                        {
                            let (peer, ip) = &pods[(index + 1 + k) % pods.len()];
                            detail.name = format!("AgentPodV4IP_{peer}_{ip}");
                            detail.url = format!("http://{ip}:80");
                        }
                        report.pod_name = pod;
                        report.task_uid = Some(uid);
                        spool
                            .write(TaskKind::NetReach, &task, &node, &report, expiry)
                            .expect("spool write");
                    })
                },
            )
            .buffer_unordered(16);
        while writes.next().await.is_some() {}
    }
}

impl Drop for StandIns {
    fn drop(&mut self) {
        for server in &self.servers {
            server.abort();
        }
        // Dropped inside the bench's runtime: a runtime may only be let go of without waiting.
        if let Some(runtime) = self.echo.take() {
            runtime.shutdown_background();
        }
    }
}

/// One round as the benchmark saw it.
#[derive(Debug, Default, Clone)]
struct Round {
    number: i64,
    ongoing: Option<Instant>,
    /// The round's start as the controller wrote it.
    started_at: Option<jiff::Timestamp>,
    written: Option<Instant>,
    finalised: Option<Instant>,
    result: String,
    cpu_at_start: f64,
    cpu: f64,
    peak_rss_kib: u64,
    /// kube-apiserver's largest RSS sampled during the round.
    apiserver_rss_kib: u64,
    requests_at_start: BTreeMap<String, u64>,
    requests: BTreeMap<String, u64>,
    agent_requests_at_start: BTreeMap<String, u64>,
    /// The real agents' requests in the round.
    agent_requests: BTreeMap<String, u64>,
    /// Why it failed, as its status says (the failed nodes and the reason).
    failure: Option<String>,
}

fn diff(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// Runs `rounds` rounds of task `name`, writing the stand-ins' reports as each begins, until
/// the task finishes; samples the controller every 100 ms. A round's last report is the later
/// of the stand-ins' written and every real agent's spooled.
async fn run_rounds(
    cluster: &Cluster,
    controllers: &Controllers,
    name: &str,
    rounds: i64,
    stand_ins: &StandIns,
    real: &RealAgents,
) -> Vec<Round> {
    let api: Api<NetReach> = Api::all(cluster.admin.clone());
    let mut seen: BTreeMap<i64, Round> = BTreeMap::new();
    let started = Instant::now();
    let apiserver = cluster.apiserver_pid();
    loop {
        let (cpu, _, peak) = controllers.usage();
        let (_, apiserver_rss, _) = usage(apiserver);
        for round in seen.values_mut() {
            if round.finalised.is_none() {
                round.peak_rss_kib = round.peak_rss_kib.max(peak);
                round.apiserver_rss_kib = round.apiserver_rss_kib.max(apiserver_rss);
            }
        }
        let task = api.get(name).await.expect("task");
        let uid = task.metadata.uid.clone().unwrap_or_default();
        let status = task.status.clone().unwrap_or_default();
        for record in status.history.iter().flatten() {
            let round = seen.entry(record.round_number).or_insert_with(|| Round {
                number: record.round_number,
                ..Round::default()
            });
            if record.status == RoundStatus::Ongoing && round.ongoing.is_none() {
                round.ongoing = Some(Instant::now());
                round.started_at = Some(record.start_time_stamp.0);
                round.cpu_at_start = cpu;
                round.requests_at_start = cluster.requests(CONTROLLER_USER);
                round.agent_requests_at_start = cluster.requests(AGENT_USER);
                // As an agent does: its report once the round's probing time is over (and not
                // while the real agents' probes of the stand-ins' echo targets are under way).
                tokio::time::sleep(PROBING).await;
                stand_ins.write(name, &uid, record.round_number, &[]).await;
                let written = Instant::now();
                round.written = Some(if real.len() == 0 {
                    written
                } else {
                    let spooled = real
                        .reported(name, record.round_number, Duration::from_secs(90))
                        .await
                        .unwrap_or_else(|| {
                            panic!(
                                "round {}: a real agent spooled no report",
                                record.round_number
                            )
                        });
                    spooled.max(written)
                });
            }
            if record.status.is_finished() && round.ongoing.is_some() && round.finalised.is_none() {
                round.finalised = Some(Instant::now());
                round.cpu = cpu - round.cpu_at_start;
                round.result = format!("{:?}", record.status).to_lowercase();
                if !record.failed_agent_node_list.is_empty() || record.failure_reason.is_some() {
                    round.failure = Some(format!(
                        "{} nodes failed ({}…): {}",
                        record.failed_agent_node_list.len(),
                        record
                            .failed_agent_node_list
                            .iter()
                            .take(3)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", "),
                        record
                            .failure_reason
                            .as_deref()
                            .unwrap_or("no reason given")
                    ));
                }
                round.requests = diff(&cluster.requests(CONTROLLER_USER), &round.requests_at_start);
                round.agent_requests = diff(
                    &cluster.requests(AGENT_USER),
                    &round.agent_requests_at_start,
                );
            }
        }
        if status.finish {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180 * rounds as u64 + 120),
            "the task did not finish: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen.into_values()
        .filter(|r| r.finalised.is_some())
        .collect()
}

/// The floor's client: one for all its runs, as the controller keeps one (and so its TLS
/// sessions) for all its rounds.
fn raw_client(cluster: &Cluster) -> Arc<ReportClient> {
    let pem = cluster
        .ca
        .client(kdoctor_agent::report_api::HARVESTER_NAME, &[])
        .expect("client cert");
    Arc::new(
        ReportClient::new(
            pem.identity().expect("identity"),
            REPORT_PORT,
            Duration::from_secs(10),
        )
        .expect("report client"),
    )
}

/// The floor: every stand-in's reports listed, fetched, written to a plain file and
/// acknowledged by a bare loop, 64 agents at a time (the agents the controller reads at once).
async fn raw_harvest(cluster: &Cluster, client: &Arc<ReportClient>) -> Duration {
    let out = cluster.dir.join("raw");
    std::fs::create_dir_all(&out).expect("raw dir");
    let started = Instant::now();
    let mut passes = futures::stream::iter(cluster.agents.clone())
        .map(|(pod, _, ip)| {
            let client = client.clone();
            let out = out.join(pod);
            async move {
                let mut connection = client.connect(ip).await.expect("connect");
                for entry in connection.list().await.expect("list") {
                    if entry.acknowledged.is_some() {
                        continue;
                    }
                    let body = connection.fetch(&entry.name).await.expect("fetch");
                    tokio::fs::write(&out, &body).await.expect("write");
                    connection.acknowledge(&entry.name).await.expect("ack");
                }
            }
        })
        .buffer_unordered(64);
    while passes.next().await.is_some() {}
    started.elapsed()
}

fn secs(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

fn status_writes(requests: &BTreeMap<String, u64>) -> u64 {
    requests
        .iter()
        .filter(|(k, _)| {
            (k.starts_with("patch ") || k.starts_with("update ")) && k.ends_with("/status")
        })
        .map(|(_, v)| v)
        .sum()
}

fn main() {
    let o = options();
    match o.part {
        Part::All => {
            // Each part in a process of its own: a process lives in one cluster's namespace.
            println!("## Controller (hack/bench/controller/run.sh)\n");
            let me = std::env::current_exe().expect("this program");
            let summaries = std::env::temp_dir().join(format!(
                "kdoctor-bench-controller-{}.jsonl",
                std::process::id()
            ));
            let _ = std::fs::remove_file(&summaries);
            for nodes in &o.nodes {
                let status = Command::new(&me)
                    .args(std::env::args().skip(1))
                    .args(["--part", "scale", "--nodes", &nodes.to_string()])
                    .env(summary::FILE_ENV, &summaries)
                    .status()
                    .expect("a part of the benchmark");
                assert!(status.success(), "the scale part on {nodes} nodes failed");
            }
            if o.nodes.len() > 1 {
                summary::print(&summaries);
            }
            let _ = std::fs::remove_file(&summaries);
            let nodes: Vec<String> = o.nodes.iter().map(|n| n.to_string()).collect();
            println!(
                "\nReproduce: `hack/bench/controller/run.sh --nodes {} --replicas {} --rounds {} --agent-nodes {}`",
                nodes.join(","),
                o.replicas,
                o.rounds,
                o.agent_nodes
            );
        }
        Part::Scale => {
            let nodes = *o.nodes.last().expect("a node count");
            in_cluster(nodes, |kube| scale(o, kube))
        }
        // Runs of separate invocations side by side (each `--part scale` appends to the file
        // KDOCTOR_BENCH_SUMMARY names).
        Part::Table => summary::print(o.summary.as_deref().expect("--summary FILE")),
    }
}

/// Starts a cluster of `nodes` and runs `f` on a runtime whose threads live in its network
/// namespace (and so the processes they start). The main thread stays outside: taking the
/// cluster down ends whatever process is left inside.
fn in_cluster<F, Fut>(nodes: usize, f: F)
where
    F: FnOnce(TestCluster) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let kube = TestCluster::start(&TestClusterOptions {
        nodes,
        process_nodes: 0,
        ipv6: false,
        // kube-sim simulates every node's kubelet: a debug build's CPU would be taken from the
        // controllers and agents being measured (run.sh builds it).
        release: true,
    })
    .expect("a test cluster (built by hack/test.sh or hack/cluster.sh up first; as root)");
    let runtime = kube
        .runtime(2)
        .expect("a runtime in the cluster's namespace");
    runtime
        .block_on(runtime.spawn(f(kube)))
        .expect("the benchmark part");
}

/// Scale: the controller against stand-in agents.
async fn scale(o: Options, kube: TestCluster) {
    let nodes = *o.nodes.last().expect("a node count");
    let cluster = Cluster::start(kube, nodes, "scale").await;
    let agents_before = cluster.requests(AGENT_USER);
    let real = RealAgents::start(&cluster, o.agent_nodes.min(nodes)).await;
    let stand_ins = StandIns::start(&cluster, real.len()).await;
    let controllers = cluster
        .controllers(&o.kdoctor, o.replicas, o.seed_tasks)
        .await;
    let leader = if o.replicas > 1 {
        let logs: Vec<PathBuf> = controllers.0.iter().map(|c| c.log.clone()).collect();
        replicas::leader(&cluster.admin, Duration::from_secs(180), &logs).await
    } else {
        "bench-controller".to_string()
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, idle_rss, _) = controllers.usage();
    let store_before: u64 = controllers.0.iter().map(|c| disk_bytes(&c.data)).sum();
    let before = cluster.requests(CONTROLLER_USER);
    cluster
        .apply_task(
            "scale",
            o.rounds,
            serde_json::json!({
                "endpoint": true, "clusterIP": false, "nodePort": false,
                "maxPeers": PEERS,
            }),
        )
        .await;
    let rounds = run_rounds(&cluster, &controllers, "scale", o.rounds, &stand_ins, &real).await;
    let whole = diff(&cluster.requests(CONTROLLER_USER), &before);
    let agents_whole = diff(&cluster.requests(AGENT_USER), &agents_before);
    let store_after: u64 = controllers.0.iter().map(|c| disk_bytes(&c.data)).sum();
    let leader_peak = controllers
        .named(&leader)
        .map(|c| usage(c.child.id()).2)
        .unwrap_or(0);
    // kubectl through the aggregation layer: the replicas behind the APIService.
    let reads = if o.replicas > 1 {
        Some(aggregated::measure(&cluster, &o.kdoctor, "scale", &controllers).await)
    } else {
        None
    };
    // Watchers behind the same APIService, which the reads registered.
    let watched = if o.replicas > 1 && o.watchers > 0 {
        Some(watchers::measure(&cluster, &controllers, o.watchers).await)
    } else {
        None
    };
    let (cpu_total, _, peak_total) = controllers.usage();
    drop(controllers);
    // The floor: a fresh round of the same reports, harvested by a bare loop.
    let uid = Api::<NetReach>::all(cluster.admin.clone())
        .get("scale")
        .await
        .expect("task")
        .metadata
        .uid
        .unwrap_or_default();
    // As many floor runs as rounds, the median: one run moved by half between runs.
    let mut floors = Vec::new();
    let client = raw_client(&cluster);
    for run in 0..o.rounds {
        stand_ins
            .write("scale", &uid, 1000 + run, &real.spools)
            .await;
        floors.push(raw_harvest(&cluster, &client).await.as_secs_f64());
    }
    let floor = Duration::from_secs_f64(median(floors));

    let replicas = if o.replicas > 1 {
        format!(
            "{} replicas of `kdoctor controller` (release) as a StatefulSet's pods, their stores \
             replicated by Raft ({leader} led)",
            o.replicas
        )
    } else {
        "one `kdoctor controller` (release) that owns its store".to_string()
    };
    println!(
        "### {nodes} nodes\n\n{nodes} nodes (agent pods Ready {:.0} s after the DaemonSet), {} rounds \
         of a NetReach task on the default agent (`maxPeers: {PEERS}`); {} real agents (the \
         agent's report API, echo target and task loop, in-process) and {} stand-ins (the \
         agent's report API and spool; a report of {PEERS} peers spooled once the round's \
         `durationInSecond` ({}s) is over, as an agent's); {replicas}, `--poll-seconds=1`.\n",
        cluster.ready_after.as_secs_f64(),
        rounds.len(),
        real.len(),
        stand_ins.spools.len(),
        PROBING.as_secs(),
    );
    println!(
        "| round | result | last report → finalised (s) | controllers' CPU (s) | largest replica RSS (MiB) | kube-apiserver RSS (MiB) | API requests | status writes | real agents' API requests |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut lags = Vec::new();
    for r in &rounds {
        let lag = match (r.written, r.finalised) {
            (Some(w), Some(f)) => f.saturating_duration_since(w),
            _ => Duration::ZERO,
        };
        lags.push(lag.as_secs_f64());
        let total: u64 = r.requests.values().sum();
        println!(
            "| {} | {} | {} | {:.2} | {:.0} | {:.0} | {} | {} | {} |",
            r.number,
            r.result,
            secs(lag),
            r.cpu,
            mib(r.peak_rss_kib),
            mib(r.apiserver_rss_kib),
            total,
            status_writes(&r.requests),
            r.agent_requests.values().sum::<u64>()
        );
    }
    for r in &rounds {
        if let Some(failure) = &r.failure {
            println!("\nRound {}: {failure}", r.number);
            for probe in real.failed_probes("scale", r.number, r.started_at.unwrap_or_default(), 5)
            {
                println!("- a real agent's failed probe: {probe}");
            }
        }
    }
    let whole_total: u64 = whole.values().sum();
    let reviews = whole.get("create tokenreviews").copied().unwrap_or(0);
    let per_round = (whole_total - reviews) as f64 / rounds.len().max(1) as f64;
    let lag = median(lags);
    let store_per_round = store_after.saturating_sub(store_before) as f64
        / o.replicas.max(1) as f64
        / rounds.len().max(1) as f64;
    println!();
    println!(
        "- Controller API requests over the whole run (task created → finished, all replicas): \
         {whole_total}: {reviews} TokenReviews (one per agent, at its first harvest) and \
         {per_round:.1} per round besides, {:.4} per round per node; status writes {} ({:.1} \
         per round). By verb and resource: {}.",
        per_round / nodes as f64,
        status_writes(&whole),
        status_writes(&whole) as f64 / rounds.len().max(1) as f64,
        by_verb(&whole)
    );
    println!(
        "- Median time from the last report spooled to the round finalised in the status: {lag:.2} s; \
         the bare harvest loop over the same {nodes} report APIs (list, fetch, write a file, ack; 64 at \
         a time; one client, and so its TLS sessions, for all runs; median of {} runs): {} s — ratio {:.1}× (the controller's includes the agents' \
         identity checks, the store's commit on a majority of replicas and the status write; its pass begins \
         at the round's start plus durationInSecond, each agent holding its answer until its report is written).",
        o.rounds,
        secs(floor),
        lag / floor.as_secs_f64().max(1e-9)
    );
    println!(
        "- Controller processes: largest RSS {:.0} MiB idle before the task, peak {:.0} MiB (the \
         leader's {:.0} MiB); {:.1} CPU s of all replicas over the whole run; store on disk \
         {:.1} MB per round per replica.",
        mib(idle_rss),
        mib(peak_total),
        mib(leader_peak),
        cpu_total,
        store_per_round / 1e6
    );
    // The first round's requests come before the benchmark sees it ongoing (agents react to the
    // watch event at once): only later rounds' windows are clean.
    let agents_later: u64 = rounds
        .iter()
        .skip(1)
        .map(|r| r.agent_requests.values().sum::<u64>())
        .sum();
    let agents_total: u64 = agents_whole.values().sum();
    if real.len() > 0 {
        println!(
            "- Real agents' API requests over the whole run (agents started → task finished): \
             {agents_total}, {:.2} per agent; in rounds 2 to {}: {agents_later}. By verb and \
             resource: {}.",
            agents_total as f64 / real.len() as f64,
            rounds.len(),
            by_verb(&agents_whole)
        );
    }
    if let Some(reads) = &reads {
        reads.print();
    }
    if let Some(watched) = &watched {
        watched.print();
    }
    summary::append(&summary::Row {
        nodes,
        replicas: o.replicas,
        ready_s: cluster.ready_after.as_secs_f64(),
        reviews,
        requests_per_round: per_round,
        status_writes_per_round: status_writes(&whole) as f64 / rounds.len().max(1) as f64,
        lag_s: lag,
        floor_s: floor.as_secs_f64(),
        cpu_per_round_s: median(rounds.iter().map(|r| r.cpu).collect()),
        controller_peak_mib: mib(peak_total),
        apiserver_peak_mib: mib(rounds
            .iter()
            .map(|r| r.apiserver_rss_kib)
            .max()
            .unwrap_or(0))
        .max(reads.as_ref().map_or(0.0, |r| r.apiserver_peak_mib))
        .max(watched.as_ref().map_or(0.0, |w| w.apiserver_peak_mib)),
        store_mb_per_round: store_per_round / 1e6,
        reads: reads.clone(),
        watched: watched.clone(),
        real_agents: real.len(),
        agent_requests_per_agent: (real.len() > 0).then(|| agents_total as f64 / real.len() as f64),
        agent_requests_later_rounds: (real.len() > 0 && rounds.len() > 1)
            .then(|| agents_later as f64 / (rounds.len() - 1) as f64),
    });
    drop(real);
    drop(stand_ins);
    drop(cluster);
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
