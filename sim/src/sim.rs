//! `Sim`: starts the cluster, its controllers and its API server, and hands tests what they need
//! to talk to it (URL, kubeconfig, kube clients, certificates, review tables).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::alloc::Allocator;
use crate::certs::{CertError, CertPair, Pki};
use crate::cluster::Cluster;
use crate::controllers::{
    self, daemonset::DaemonSetController, deployment::DeploymentController,
    endpoints::EndpointsController, gc::GarbageCollector, loadbalancer::LoadBalancerController,
    namespace::NamespaceController, replicaset::ReplicaSetController, scheduler::Scheduler,
};
use crate::error::ApiError;
use crate::net::{dns, ingress::IngressRouter, proxy::Proxy};
use crate::reviews::Reviews;
use crate::runner::{Runner, RunnerConfig};
use crate::server::{self, App, TlsError};
use crate::stages::{CompiledStage, StageError, StageSet, default_stages};
use crate::{bootstrap, resources};

/// How to start a simulated cluster.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Address to listen on (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Serve HTTPS (with the sim's serving CA) instead of plain HTTP.
    pub tls: bool,
    /// Seed for uids, generated names and stage randomness.
    pub seed: u64,
    /// Events kept for watches to resume from (older resourceVersions get 410 Expired).
    pub history: usize,
    /// Interval of BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// Kubernetes version reported by /version (major, minor); kubectl's dispatcher picks its
    /// binary by the minor.
    pub version: (String, String),
    /// Run the built-in controllers (scheduler, workloads, endpoints, load balancers); the
    /// garbage collector and namespace controller always run.
    pub controllers: bool,
    /// Nodes created at start (`node-1` ... `node-N`).
    pub nodes: usize,
    /// The stages played (None: the default stages; `Some(vec![])`: none, objects stay as written).
    pub stages: Option<Vec<CompiledStage>>,
    /// Live traffic: the kube-proxy stand-in (ClusterIP, NodePort, LoadBalancer), the Ingress
    /// router on port 80 and the cluster DNS on the kube-dns address (UDP and TCP 53).
    pub traffic: bool,
    /// Second octet of the compact 127.k.0.0/16 address layout (None: a random k when
    /// `traffic` is on, so parallel simulated clusters never collide; the wide layout otherwise).
    pub subnet: Option<u8>,
    /// Nodes `node-1` ... `node-M` are labelled `kube-sim.kdoctor.io/processes=true`.
    pub agent_nodes: usize,
    /// Start real processes for pods on those nodes.
    pub runner: Option<RunnerConfig>,
    /// IPv6: dual-stack addresses (IPv6 twins of the IPv4 ones) for nodes, pods and Services
    /// that ask for them; with live traffic or processes they must also be routable here.
    pub ipv6: Ipv6Mode,
    /// Authenticate every request (client certificate of the client CA, or a token of the
    /// TokenReview table; otherwise 401) and authorize it with the stored RBAC objects.
    /// Off: every caller is an administrator.
    pub rbac: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: true,
            seed: 1,
            history: 50_000,
            bookmark_interval: Duration::from_secs(5),
            version: ("1".into(), "32".into()),
            controllers: true,
            nodes: 0,
            stages: None,
            traffic: false,
            subnet: None,
            agent_nodes: 0,
            runner: None,
            ipv6: Ipv6Mode::Off,
            rbac: false,
        }
    }
}

/// Whether the simulated cluster is dual-stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Ipv6Mode {
    /// IPv4 only.
    #[default]
    Off,
    /// Dual stack when this machine can route the IPv6 addresses, else IPv4 only (logged).
    Auto,
    /// Dual stack, or fail to start.
    On,
}

/// Errors starting the simulated cluster.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Binding the listen address failed.
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// Certificates could not be generated.
    #[error(transparent)]
    Cert(#[from] CertError),
    /// TLS configuration failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Creating the initial objects failed.
    #[error("bootstrapping the cluster: {0}")]
    Bootstrap(#[from] ApiError),
    /// The kube client could not be built.
    #[error("building a kube client: {0}")]
    Client(String),
    /// The default stages did not load.
    #[error(transparent)]
    Stages(#[from] StageError),
    /// Reading or writing a file failed.
    #[error("{0}: {1}")]
    Write(String, std::io::Error),
    /// IPv6 was required and this machine cannot provide it.
    #[error("IPv6 unavailable: {0}")]
    Ipv6(String),
}

/// A running simulated cluster; it stops when dropped.
pub struct Sim {
    cluster: Arc<Cluster>,
    stages: Arc<StageSet>,
    dns: Option<SocketAddr>,
    work_dir: Option<std::path::PathBuf>,
    pids: crate::runner::process::Pids,
    pki: Arc<Pki>,
    addr: SocketAddr,
    tls: bool,
    shutdown: tokio::sync::watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// Resolves the IPv6 mode: whether the cluster is dual-stack. Addresses alone need nothing
/// from the machine; live traffic and processes need the IPv6 twins routed.
fn dual_stack(cfg: &SimConfig) -> Result<bool, SimError> {
    if cfg.ipv6 == Ipv6Mode::Off {
        tracing::info!("kube-sim is IPv4-only: every address is on 127.0.0.0/8");
        return Ok(false);
    }
    if !cfg.traffic && cfg.runner.is_none() {
        return Ok(true);
    }
    match crate::net::ipv6::prepare() {
        Ok(()) => {
            tracing::info!(
                prefix = %format!("{}/{}", crate::net::ipv6::PREFIX, crate::net::ipv6::PREFIX_LEN),
                "kube-sim is dual-stack: every IPv4 address has an IPv6 twin in the prefix"
            );
            Ok(true)
        }
        Err(why) if cfg.ipv6 == Ipv6Mode::Auto => {
            tracing::warn!(reason = %why, "kube-sim is IPv4-only: IPv6 is unavailable here");
            Ok(false)
        }
        Err(why) => Err(SimError::Ipv6(why)),
    }
}

impl Sim {
    /// Starts the cluster: store, controllers, bootstrap objects and the API server.
    pub async fn start(cfg: SimConfig) -> Result<Sim, SimError> {
        let subnet = cfg.subnet.or_else(|| {
            cfg.traffic.then(|| {
                // A different /16 per cluster and process: parallel tests bind distinct addresses.
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0);
                let mut r =
                    crate::rng::Rng::new(u64::from(nanos) ^ (u64::from(std::process::id()) << 32));
                30 + r.below(220) as u8
            })
        });
        let alloc = match subnet {
            Some(k) => Allocator::subnet(k),
            None => Allocator::default(),
        };
        let mut alloc = alloc;
        alloc.ipv6 = dual_stack(&cfg)?;
        let cluster = Arc::new(Cluster::with_allocator(cfg.history, cfg.seed, alloc));
        let pki = Arc::new(Pki::generate()?);
        let (shutdown, shutdown_rx) = tokio::sync::watch::channel(false);
        let mut tasks = vec![
            controllers::spawn(cluster.clone(), GarbageCollector, shutdown_rx.clone()),
            controllers::spawn(cluster.clone(), NamespaceController, shutdown_rx.clone()),
        ];
        if cfg.controllers {
            tasks.push(controllers::spawn(
                cluster.clone(),
                Scheduler::default(),
                shutdown_rx.clone(),
            ));
            tasks.push(controllers::spawn(
                cluster.clone(),
                DaemonSetController::default(),
                shutdown_rx.clone(),
            ));
            tasks.push(controllers::spawn(
                cluster.clone(),
                ReplicaSetController::default(),
                shutdown_rx.clone(),
            ));
            tasks.push(controllers::spawn(
                cluster.clone(),
                DeploymentController::default(),
                shutdown_rx.clone(),
            ));
            tasks.push(controllers::spawn(
                cluster.clone(),
                EndpointsController::default(),
                shutdown_rx.clone(),
            ));
            tasks.push(controllers::spawn(
                cluster.clone(),
                LoadBalancerController,
                shutdown_rx.clone(),
            ));
        }
        let stages = Arc::new(StageSet::new(match cfg.stages.clone() {
            Some(s) => s,
            None => default_stages()?,
        }));
        tasks.push(crate::stages::engine::spawn(
            cluster.clone(),
            stages.clone(),
            shutdown_rx.clone(),
        ));
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| SimError::Bind(cfg.listen, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| SimError::Bind(cfg.listen, e))?;
        bootstrap::run(&cluster, &pki, addr)?;
        bootstrap::nodes(&cluster, 1..=cfg.nodes, cfg.agent_nodes)?;
        let mut dns_addr = None;
        if cfg.traffic {
            tasks.push(controllers::spawn(
                cluster.clone(),
                Proxy::new(cluster.clone(), shutdown_rx.clone()),
                shutdown_rx.clone(),
            ));
            tasks.push(controllers::spawn(
                cluster.clone(),
                IngressRouter::new(cluster.clone(), shutdown_rx.clone()),
                shutdown_rx.clone(),
            ));
            let (dns_v4, dual) = {
                let alloc = cluster.alloc();
                (alloc.dns_ip(), alloc.ipv6)
            };
            let mut dns_ips = vec![std::net::IpAddr::from(dns_v4)];
            if dual {
                dns_ips.push(crate::net::ipv6::twin(dns_v4).into());
            }
            for ip in dns_ips {
                let dns_at = SocketAddr::new(ip, 53);
                let (c2, sd) = (cluster.clone(), shutdown_rx.clone());
                tasks.push(tokio::spawn(async move {
                    if let Err(e) = dns::serve(c2, dns_at, sd).await {
                        tracing::warn!(addr = %dns_at, error = %e, "cluster DNS cannot listen");
                    }
                }));
                dns_addr.get_or_insert(dns_at);
            }
        }
        let url = format!("{}://{addr}", if cfg.tls { "https" } else { "http" });
        let work_dir = cfg.runner.as_ref().map(|r| r.work_dir.clone());
        let pids = crate::runner::process::Pids::default();
        if let Some(rc) = cfg.runner.clone() {
            let (pki2, url2, tls) = (pki.clone(), url.clone(), cfg.tls);
            let kubeconfig = Arc::new(move |ns: &str, sa: &str| -> String {
                let user = format!("system:serviceaccount:{ns}:{sa}");
                match pki2
                    .client_ca
                    .client_cert(&user, &["system:serviceaccounts", "system:authenticated"])
                {
                    Ok(cert) => kubeconfig_yaml(
                        &url2,
                        tls.then_some(pki2.server_ca.cert_pem.as_str()),
                        &cert,
                    ),
                    Err(_) => String::new(),
                }
            });
            let runner = Runner::new(cluster.clone(), rc, kubeconfig, pids.clone())
                .map_err(SimError::Bootstrap)?;
            tasks.push(controllers::spawn(
                cluster.clone(),
                runner,
                shutdown_rx.clone(),
            ));
        }
        let aggregator = Arc::new(crate::aggregator::Aggregator::new(
            pki.front_proxy_client.clone(),
        ));
        tasks.push(crate::aggregator::spawn(
            cluster.clone(),
            aggregator.clone(),
            shutdown_rx.clone(),
        ));
        let app = Arc::new(App {
            cluster: cluster.clone(),
            version: json!({
                "major": cfg.version.0,
                "minor": cfg.version.1,
                "gitVersion": format!("v{}.{}.0-kube-sim", cfg.version.0, cfg.version.1),
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.23.0",
                "compiler": "gc",
                "platform": "linux/amd64",
            }),
            bookmark_interval: cfg.bookmark_interval,
            shutdown: shutdown_rx.clone(),
            rbac: cfg.rbac,
            logs_dir: cfg.runner.as_ref().map(|r| r.work_dir.clone()),
            aggregator,
        });
        let router = server::router(app);
        if cfg.tls {
            let tls = server::tls_config(
                &pki.serving.cert_pem,
                &pki.serving.key_pem,
                &pki.client_ca.cert_pem,
            )?;
            tasks.push(tokio::spawn(server::serve_https(
                listener,
                tls,
                router,
                shutdown_rx,
            )));
        } else {
            tasks.push(tokio::spawn(server::serve_http(
                listener,
                router,
                shutdown_rx,
            )));
        }
        Ok(Sim {
            cluster,
            stages,
            dns: dns_addr,
            work_dir,
            pids,
            pki,
            addr,
            tls: cfg.tls,
            shutdown,
            tasks,
        })
    }

    /// `https://127.0.0.1:PORT` (or http).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The cluster state, for tests that look behind the API.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// TokenReview/SubjectAccessReview tables and the record of reviews asked.
    pub fn reviews(&self) -> &Reviews {
        &self.cluster.reviews
    }

    /// Server-side applies every document of a (multi-document) YAML text, as
    /// `kubectl apply --server-side` would, with field manager `kube-sim-apply`; returns the
    /// stored objects. Unknown kinds (e.g. a CR before its CRD) are an error.
    pub fn apply_yaml(&self, yaml: &str) -> Result<Vec<serde_json::Value>, ApiError> {
        use serde::Deserialize;
        let mut out = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(yaml) {
            let v = serde_json::Value::deserialize(doc)
                .map_err(|e| ApiError::bad_request(format!("YAML: {e}")))?;
            if v.is_null() {
                continue;
            }
            let api_version = v
                .get("apiVersion")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("");
            let kind = v
                .get("kind")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("");
            let info = self
                .cluster
                .catalogue
                .by_kind(api_version, kind)
                .ok_or_else(|| {
                    ApiError::bad_request(format!("no kind {kind:?} is served in {api_version:?}"))
                })?;
            let name = v
                .pointer("/metadata/name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_string();
            let ns = if info.namespaced {
                v.pointer("/metadata/namespace")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("default")
                    .to_string()
            } else {
                String::new()
            };
            let body = serde_json::to_vec(&v).map_err(|e| ApiError::internal(e.to_string()))?;
            let opts = crate::cluster::WriteOptions {
                field_manager: Some("kube-sim-apply".into()),
                force: true,
                ..Default::default()
            };
            out.push(self.cluster.patch(
                &info,
                &ns,
                &name,
                crate::patch::PatchType::Apply,
                &body,
                &opts,
            )?);
        }
        Ok(out)
    }

    /// Applies a YAML file, or every `.yaml`/`.yml` file of a directory in name order.
    pub fn apply_path(&self, path: &Path) -> Result<Vec<serde_json::Value>, SimError> {
        let mut files = Vec::new();
        if path.is_dir() {
            let entries = std::fs::read_dir(path)
                .map_err(|e| SimError::Write(path.display().to_string(), e))?;
            for e in entries.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                    files.push(p);
                }
            }
            files.sort();
        } else {
            files.push(path.to_path_buf());
        }
        let mut out = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(&f)
                .map_err(|e| SimError::Write(f.display().to_string(), e))?;
            out.extend(self.apply_yaml(&text)?);
        }
        Ok(out)
    }

    /// Replaces the stages played from now on (e.g. a test's fault stages).
    pub fn set_stages(&self, stages: Vec<CompiledStage>) {
        self.stages.set(stages);
    }

    /// The sim's CAs and standard certificates.
    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// A client certificate from the sim's client CA (listed as `client-ca-file` in the
    /// authentication ConfigMap) for user `cn` with groups `orgs`.
    pub fn client_cert(&self, cn: &str, orgs: &[&str]) -> Result<CertPair, SimError> {
        Ok(self.pki.client_ca.client_cert(cn, orgs)?)
    }

    /// A kubeconfig (YAML) for the admin user, with the client certificate inline.
    pub fn kubeconfig_yaml(&self) -> String {
        self.kubeconfig_for(&self.pki.admin)
    }

    /// A kubeconfig (YAML) authenticating with the given client certificate.
    pub fn kubeconfig_for(&self, cert: &CertPair) -> String {
        kubeconfig_yaml(
            &self.url(),
            self.tls.then_some(self.pki.server_ca.cert_pem.as_str()),
            cert,
        )
    }

    /// The cluster DNS address (when traffic is on).
    pub fn dns_addr(&self) -> Option<SocketAddr> {
        self.dns
    }

    /// Whether the cluster is dual-stack (see [`SimConfig::ipv6`]).
    pub fn dual_stack(&self) -> bool {
        self.cluster.alloc().ipv6
    }

    /// Kills a pod's process with SIGKILL (an agent crash); the runner restarts it with
    /// back-off and the pod's status shows the restart. False when no process runs for it.
    pub fn crash_pod_process(&self, namespace: &str, name: &str) -> bool {
        let pid = self
            .pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(namespace.to_string(), name.to_string()))
            .copied();
        pid.is_some_and(|pid| {
            std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .is_ok_and(|s| s.success())
        })
    }

    /// What a pod's process wrote so far (when the runner is on).
    pub fn pod_log(&self, namespace: &str, name: &str) -> Option<String> {
        let dir = self.work_dir.as_ref()?;
        std::fs::read_to_string(crate::runner::process::log_path(dir, namespace, name)).ok()
    }

    /// Writes the admin kubeconfig to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), SimError> {
        std::fs::write(path, self.kubeconfig_yaml())
            .map_err(|e| SimError::Write(path.display().to_string(), e))
    }

    /// A kube client authenticated as the admin.
    pub async fn client(&self) -> Result<kube::Client, SimError> {
        self.client_with(&self.kubeconfig_yaml()).await
    }

    /// A kube client from kubeconfig YAML (e.g. `kubeconfig_for` with another user's cert).
    pub async fn client_with(&self, kubeconfig: &str) -> Result<kube::Client, SimError> {
        let kc = kube::config::Kubeconfig::from_yaml(kubeconfig)
            .map_err(|e| SimError::Client(e.to_string()))?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| SimError::Client(e.to_string()))?;
        kube::Client::try_from(config).map_err(|e| SimError::Client(e.to_string()))
    }

    /// Kinds served right now (built-ins plus registered CRDs), as `group/version/plural`.
    pub fn served(&self) -> Vec<String> {
        self.cluster
            .catalogue
            .all()
            .iter()
            .map(|r: &Arc<resources::ResourceInfo>| {
                format!("{}/{}/{}", r.group, r.version, r.plural)
            })
            .collect()
    }

    /// Stops the server and the controllers and waits for them.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A kubeconfig for `url` with an optional CA and a client certificate.
pub fn kubeconfig_yaml(url: &str, ca_pem: Option<&str>, cert: &CertPair) -> String {
    let ca = ca_pem
        .map(|p| format!("    certificate-authority-data: {}\n", b64(p)))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-sim\n  cluster:\n    server: {url}\n{ca}contexts:\n- name: kube-sim\n  context:\n    cluster: kube-sim\n    user: kube-sim-user\n    namespace: default\ncurrent-context: kube-sim\nusers:\n- name: kube-sim-user\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\n",
        cert = b64(&cert.cert_pem),
        key = b64(&cert.key_pem),
    )
}
