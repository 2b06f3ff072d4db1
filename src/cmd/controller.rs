//! `kdoctor controller`: the reconciler, the harvester and the aggregated API server in one
//! process, sharing one report store. Flags carry upstream's environment variable names
//! (§15.1) where upstream had them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use kdoctor_api::config::Config;
use kdoctor_apiserver::certs::bootstrap::{CertSettings, keep_ca_bundle};
use kdoctor_apiserver::certs::managed;
use kdoctor_apiserver::certs::renewal::serving_names;
use kdoctor_apiserver::server::{AuthMode, ServerOptions, start};
use kdoctor_reconciler::controller::{Setup, run};
use kdoctor_reconciler::export::ExportConfig;
use kdoctor_reconciler::options::{AgentPorts, ControllerOptions};
use kdoctor_reconciler::replica;
use kdoctor_reconciler::replica::start::{HealthHooks, ReplicaSettings};
use kdoctor_store::Writes;
use kdoctor_transport::limits::ServeLimits;
use kdoctor_transport::pki::{Ca, Pem};
use tokio::sync::watch;

/// Arguments of `kdoctor controller`.
#[derive(clap::Args)]
pub struct Args {
    /// The report store directory.
    #[arg(
        long = "data",
        value_name = "DIR",
        env = "ENV_CONTROLLER_REPORT_STORAGE_PATH",
        default_value = "/report"
    )]
    data: PathBuf,
    /// Address of the aggregated API server (HTTPS).
    #[arg(long = "listen", value_name = "ADDR", default_value = "0.0.0.0:6443")]
    listen: SocketAddr,
    /// Address of the plain-HTTP `/metrics` and health endpoints.
    #[arg(
        long = "metrics-listen",
        value_name = "ADDR",
        default_value = "0.0.0.0:5721"
    )]
    metrics_listen: SocketAddr,
    /// Serving certificate of the API server (PEM), reloaded when it changes; default: issued
    /// by a CA kept in the store directory.
    #[arg(
        long = "tls-cert",
        visible_alias = "tls-server-cert",
        value_name = "FILE",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,
    /// Serving key (PEM).
    #[arg(
        long = "tls-key",
        visible_alias = "tls-server-key",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,
    /// The install's CA certificate from a file (with `--tls-ca-key`); default: the CA Secret
    /// (`--ca-secret`), created when absent, with the serving certificate and the APIService
    /// caBundle managed too.
    #[arg(long = "tls-ca-cert", value_name = "FILE", requires = "tls_ca_key")]
    tls_ca_cert: Option<PathBuf>,
    /// The install's CA key from a file (signs the harvester's client certificate).
    #[arg(long = "tls-ca-key", value_name = "FILE", requires = "tls_ca_cert")]
    tls_ca_key: Option<PathBuf>,
    /// Secret of the managed serving certificate (type kubernetes.io/tls).
    #[arg(long = "serving-secret", default_value = "kdoctor-controller-cert")]
    serving_secret: String,
    /// APIService whose caBundle is kept equal to the install's CA.
    #[arg(long = "apiservice", default_value = "v1beta1.system.kdoctor.io")]
    apiservice: String,
    /// The controller's Service, named by the managed serving certificate.
    #[arg(long = "service-name", default_value = "kdoctor-controller")]
    service_name: String,
    /// Cluster DNS domain, for the fully qualified Service name.
    #[arg(
        long = "cluster-domain",
        env = "ENV_CLUSTER_DNS_DOMAIN",
        default_value = "cluster.local"
    )]
    cluster_domain: String,
    /// Renew the managed serving certificate this many days before it expires.
    #[arg(long = "cert-renew-before-days", default_value_t = 30)]
    cert_renew_before_days: u64,
    /// `conf.yml` of the `kdoctor` ConfigMap; without it, upstream's Helm defaults.
    #[arg(long = "config-path", short = 'C', value_name = "FILE")]
    config_path: Option<PathBuf>,
    /// Namespace of the controller, the default agent and every carrier.
    #[arg(
        long = "namespace",
        env = "ENV_POD_NAMESPACE",
        default_value = "kdoctor"
    )]
    namespace: String,
    /// This replica's name (its pod's: the StatefulSet's ordinal in it), for the replicated
    /// store, Events and the Lease.
    #[arg(long = "pod-name", env = "ENV_POD_NAME")]
    pod_name: Option<String>,
    /// This replica's pod UID: with the pod name, it names the replica's node in the
    /// replicated store when its volume is first used.
    #[arg(long = "pod-uid", env = "ENV_POD_UID")]
    pod_uid: Option<String>,
    /// Replicate the report store among the StatefulSet's replicas (Raft; only the leader
    /// reconciles and harvests, every replica serves reads). Needs --pod-ip; off, this process
    /// owns its store alone.
    #[arg(long = "leader-elect", default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// This replica's pod IP, where the other replicas reach it (port of
    /// --replication-listen); without it, the store is not replicated.
    #[arg(long = "pod-ip", env = "ENV_POD_IP", value_name = "IP")]
    pod_ip: Option<std::net::IpAddr>,
    /// Address where the replicas reach each other (mutual TLS, the install's CA).
    #[arg(
        long = "replication-listen",
        value_name = "ADDR",
        default_value = "0.0.0.0:5722"
    )]
    replication_listen: SocketAddr,
    /// On SIGTERM, seconds to go on serving while not ready (the Service's endpoints drop this
    /// replica), before the controller's work stops.
    #[arg(long = "shutdown-delay-seconds", default_value_t = 5)]
    shutdown_delay_seconds: u64,
    /// Compact the replicated log (write a snapshot of the store, then cut the log behind it)
    /// once this many bytes were appended to it. Smaller keeps the log short and makes
    /// snapshots more often; a replica that lacks entries the log no longer has (a new one)
    /// catches up by snapshot.
    #[arg(
        long = "raft-compact-after-bytes",
        value_name = "BYTES",
        default_value_t = 256 << 20,
        value_parser = clap::value_parser!(u64).range(4096..)
    )]
    raft_compact_after_bytes: u64,
    /// Agent image of per-task carriers.
    #[arg(long = "agent-image", env = "ENV_AGENT_IMAGE")]
    agent_image: Option<String>,
    /// Image pull policy of carrier pods.
    #[arg(long = "agent-image-pull-policy", default_value = "IfNotPresent")]
    agent_image_pull_policy: String,
    /// Service account of carrier pods.
    #[arg(long = "agent-service-account", default_value = "kdoctor-agent")]
    agent_service_account: String,
    /// Secret with the install's CA certificate (`ca.crt`), mounted into carrier agents.
    #[arg(long = "ca-secret", default_value = "kdoctor-ca")]
    ca_secret: String,
    /// ConfigMap with `conf.yml`, mounted into carrier agents.
    #[arg(long = "config-map", default_value = "kdoctor")]
    config_map: String,
    /// Type of carrier Services.
    #[arg(long = "agent-service-type", default_value = "LoadBalancer")]
    agent_service_type: String,
    /// Ingress class of carrier Ingresses.
    #[arg(long = "agent-ingress-class")]
    agent_ingress_class: Option<String>,
    /// Extra argument for carrier agents (repeatable), e.g. `--bind=$(POD_IP)`.
    #[arg(
        long = "agent-extra-arg",
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    agent_extra_args: Vec<String>,
    /// Node selector of carrier pods, KEY=VALUE (repeatable).
    #[arg(long = "agent-node-selector", value_name = "KEY=VALUE")]
    agent_node_selector: Vec<String>,
    /// Agents' HTTP echo port.
    #[arg(long, env = "ENV_AGENT_APP_HTTP_PORT", default_value_t = 80)]
    agent_http_port: u16,
    /// Agents' HTTPS echo port.
    #[arg(long, env = "ENV_AGENT_APP_HTTPS_PORT", default_value_t = 443)]
    agent_https_port: u16,
    /// Agents' UDP echo port.
    #[arg(long, env = "ENV_AGENT_APP_UDP_ECHO_PORT", default_value_t = 5712)]
    agent_udp_echo_port: u16,
    /// Agents' health port.
    #[arg(long, env = "ENV_AGENT_HEALTH_HTTP_PORT", default_value_t = 5710)]
    agent_health_port: u16,
    /// Agents' metrics port.
    #[arg(long, env = "ENV_AGENT_METRIC_HTTP_PORT", default_value_t = 5711)]
    agent_metrics_port: u16,
    /// Agents' report API port (upstream's gRPC port).
    #[arg(long, env = "ENV_AGENT_GRPC_LISTEN_PORT", default_value_t = 3000)]
    agent_report_port: u16,
    /// How often an ongoing round is looked at, in seconds (at most conf.yml's
    /// taskPollIntervalInSecond).
    #[arg(long = "poll-seconds", default_value_t = 5)]
    poll_seconds: u64,
    /// How often carrier objects whose task is gone are looked for and deleted, in seconds.
    #[arg(long = "orphan-sweep-seconds", default_value_t = 60)]
    orphan_sweep_seconds: u64,
    /// Whether an agent must prove with its pod-bound ServiceAccount token (audience
    /// kdoctor-report-api, reviewed by the API server) that it is the pod the harvester meant to
    /// reach before its reports are read. Turn off only for agents without that token volume.
    #[arg(long = "verify-agent-identity", default_value_t = true, action = clap::ArgAction::Set)]
    verify_agent_identity: bool,
    /// Extra names for the issued serving certificate.
    #[arg(long = "tls-san", value_name = "NAME")]
    tls_san: Vec<String>,
    #[command(flatten)]
    retention: super::retention::RetentionArgs,
    /// Push every stored agent report, as a signed CloudEvent, to this HTTPS URL.
    #[arg(long = "export-url", value_name = "URL")]
    export_url: Option<String>,
    /// File holding the shared secret the exported events are signed with (HMAC-SHA256);
    /// required with --export-url. Surrounding whitespace is ignored.
    #[arg(long = "export-secret-file", value_name = "FILE")]
    export_secret_file: Option<PathBuf>,
    /// CA certificate(s) (PEM) the export receiver's certificate must chain to; default: the
    /// system's trusted CAs.
    #[arg(long = "export-ca", value_name = "FILE")]
    export_ca: Option<PathBuf>,
    /// Allow a plain http:// --export-url (tests and development only).
    #[arg(long = "export-allow-http")]
    export_allow_http: bool,
    /// Reports kept for export while the receiver is slow or down (on disk, in the store, across
    /// restarts); when full, the oldest is dropped.
    #[arg(long = "export-queue", value_name = "N", default_value_t = 10_000)]
    export_queue: usize,
    /// Time allowed for one export request (connect, TLS, answer), in seconds.
    #[arg(long = "export-timeout-seconds", default_value_t = 10)]
    export_timeout_seconds: u64,
    /// Attempts per report event (exponential backoff between them, 1 s doubling up to 60 s);
    /// 0: until the receiver acknowledges it.
    #[arg(long = "export-max-attempts", default_value_t = 0)]
    export_max_attempts: u32,
}

fn read(path: &PathBuf, what: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("{what} {}", path.display()))
}

fn config(args: &Args) -> Result<Config> {
    let Some(path) = &args.config_path else {
        return Ok(Config::default());
    };
    let config = Config::from_yaml(&read(path, "cannot read --config-path")?)
        .with_context(|| format!("{}", path.display()))?;
    config
        .validate()
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    Ok(config)
}

fn export(args: &Args) -> Result<Option<ExportConfig>> {
    let Some(url) = &args.export_url else {
        return Ok(None);
    };
    let Some(secret_file) = &args.export_secret_file else {
        bail!(
            "--export-url needs --export-secret-file (the shared secret the events are signed with)"
        );
    };
    let secret = std::fs::read(secret_file)
        .with_context(|| format!("cannot read --export-secret-file {}", secret_file.display()))?;
    let secret = secret.trim_ascii();
    if secret.is_empty() {
        bail!("--export-secret-file {} is empty", secret_file.display());
    }
    let ca = match &args.export_ca {
        Some(path) => Some(
            std::fs::read(path)
                .with_context(|| format!("cannot read --export-ca {}", path.display()))?,
        ),
        None => None,
    };
    let mut config = ExportConfig::new(url, secret, ca.as_deref(), args.export_allow_http)?;
    config.queue = args.export_queue.max(1);
    config.timeout = Duration::from_secs(args.export_timeout_seconds.max(1));
    config.max_attempts = args.export_max_attempts;
    Ok(Some(config))
}

fn options(args: &Args) -> Result<ControllerOptions> {
    let mut options = ControllerOptions::new(&args.namespace);
    options.service_name = args.service_name.clone();
    if let Some(image) = &args.agent_image {
        options.agent_image = image.clone();
    }
    options.image_pull_policy = args.agent_image_pull_policy.clone();
    options.agent_service_account = args.agent_service_account.clone();
    options.ca_secret = args.ca_secret.clone();
    options.serving_secret = args.serving_secret.clone();
    options.config_map = args.config_map.clone();
    options.service_type = args.agent_service_type.clone();
    options.ingress_class = args.agent_ingress_class.clone();
    options.agent_extra_args = args.agent_extra_args.clone();
    options.agent_node_selector = args
        .agent_node_selector
        .iter()
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| anyhow!("--agent-node-selector {pair:?}: expected KEY=VALUE"))
        })
        .collect::<Result<BTreeMap<_, _>>>()?;
    options.ports = AgentPorts {
        http: args.agent_http_port,
        https: args.agent_https_port,
        udp_echo: args.agent_udp_echo_port,
        health: args.agent_health_port,
        metrics: args.agent_metrics_port,
        report: args.agent_report_port,
    };
    options.poll = Duration::from_secs(args.poll_seconds.max(1));
    options.orphan_sweep = Duration::from_secs(args.orphan_sweep_seconds.max(1));
    options.verify_agent_identity = args.verify_agent_identity;
    Ok(options)
}

/// Runs the controller until SIGINT or SIGTERM (exit 0).
pub fn run_command(args: &Args) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(controller(args))
}

fn cert_settings(args: &Args) -> CertSettings {
    let mut names = serving_names(&args.service_name, &args.namespace, &args.cluster_domain);
    names.extend(args.tls_san.iter().cloned());
    CertSettings {
        namespace: args.namespace.clone(),
        ca_secret: args.ca_secret.clone(),
        serving_secret: args.serving_secret.clone(),
        apiservice: args.apiservice.clone(),
        names,
        renew_before: Duration::from_secs(args.cert_renew_before_days * 86_400),
    }
}

/// The install's CA and the serving certificate's files: from files (provided by the operator),
/// or managed through the API and kept from then on (the APIService's caBundle, and the serving
/// certificate unless its files are given).
async fn certificates(
    args: &Args,
    client: &kube::Client,
) -> Result<(Ca, Option<(PathBuf, PathBuf)>)> {
    match (&args.tls_ca_cert, &args.tls_ca_key) {
        (Some(cert), Some(key)) => {
            let ca = Ca::from_pem(Pem {
                cert: read(cert, "cannot read the install CA certificate --tls-ca-cert")?,
                key: read(key, "cannot read the install CA key --tls-ca-key")?,
            })
            .context("the install CA (--tls-ca-cert, --tls-ca-key)")?;
            Ok((ca, args.tls_cert.clone().zip(args.tls_key.clone())))
        }
        _ => {
            let settings = cert_settings(args);
            let issued = managed::ensure_patiently(client, &settings)
                .await
                .context("managing the install's certificates (--ca-secret, --serving-secret)")?;
            let files = match args.tls_cert.clone().zip(args.tls_key.clone()) {
                Some(files) => files,
                None => {
                    let files = managed::write_serving(&args.data, &issued.serving)?;
                    tokio::spawn(managed::keep_certificates(
                        client.clone(),
                        settings.clone(),
                        args.data.clone(),
                    ));
                    files
                }
            };
            tokio::spawn(keep_ca_bundle(
                client.clone(),
                settings,
                issued.ca.pem.cert.clone(),
            ));
            Ok((issued.ca, Some(files)))
        }
    }
}

/// A store stopped on an I/O error (a full disk) takes nothing more until reopened, and sled
/// would hang closing it: the process exits, and the pod restarts and reopens it once the cause
/// is gone (meanwhile the other replicas serve, and lead). Not at once: first out of the
/// endpoints, as on SIGTERM, so that no request is sent to a process that is gone (it answers
/// meanwhile, with 503 and Retry-After where the store is needed).
async fn exit_when_store_fails(
    store: Arc<kdoctor_store::Store>,
    health: Arc<kdoctor_apiserver::health::Health>,
    delay: Duration,
) {
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        if let Some(failure) = store.failure() {
            tracing::error!(%failure, delay = ?delay, "the report store stopped; exiting so that the pod restarts and reopens it");
            health.set_stopping();
            tokio::time::sleep(delay).await;
            std::process::exit(1);
        }
    }
}

/// This process's replica of the report store, its health told to the server's endpoints.
async fn start_replica(
    args: &Args,
    replication: replica::Replication,
    client: &kube::Client,
    identity: &str,
    state: &kdoctor_apiserver::AppState,
    store: Arc<kdoctor_store::Store>,
    background: &mut tokio::task::JoinSet<()>,
) -> Result<(kdoctor_store::raft::Replica, replica::peers::Peers)> {
    let settings = ReplicaSettings {
        replication,
        namespace: args.namespace.clone(),
        identity: identity.to_string(),
        pod_uid: args.pod_uid.clone(),
        data: args.data.clone(),
        compact_after_bytes: args.raft_compact_after_bytes,
        leave_delay: Duration::from_secs(args.shutdown_delay_seconds),
    };
    let (ready, stopping) = (state.health.clone(), state.health.clone());
    let health = HealthHooks {
        ready: Arc::new(move |ok| ready.set_replica_ready(ok)),
        stopping: Arc::new(move || stopping.set_stopping()),
    };
    Ok(replica::start::start(
        settings,
        client,
        &state.metrics.registry,
        store,
        health,
        background,
    )
    .await?)
}

async fn controller(args: &Args) -> Result<ExitCode> {
    let config = config(args)?;
    let options = options(args)?;
    let export = export(args)?;
    let client = kube::Client::try_default()
        .await
        .context("cannot reach the Kubernetes API (in-cluster or $KUBECONFIG)")?;
    let (ca, tls_files) = certificates(args, &client).await?;
    let harvester = ca
        .client(kdoctor_agent::report_api::HARVESTER_NAME, &[])
        .context("issuing the harvester's client certificate")?;
    let harvest_identity = harvester.identity()?;
    let identity = args
        .pod_name
        .clone()
        .unwrap_or_else(kdoctor_agent::config::host_name);

    // Before the store opens: a replica the cluster took out comes back empty (see
    // leave_when_removed).
    if let Some(why) = kdoctor_store::raft::removal::discard_if_marked(&args.data)
        .context("cannot discard the store of a replica taken out of the cluster")?
    {
        tracing::warn!(store = %args.data.display(), %why, "discarded the store of a replica the cluster had taken out; it joins as a new node");
    }
    let server = start(ServerOptions {
        tls_files,
        tls_sans: args.tls_san.clone(),
        auth: AuthMode::Delegated(client.clone()),
        retention_every: args.retention.every(),
        retention: args.retention.policy(),
        ..ServerOptions::standalone(&args.data, args.listen)
    })
    .await?;
    let state = server.state.clone();
    if state.store().is_err() {
        tracing::info!(store = %args.data.display(), "waiting for the report store to open");
    }
    let store = state.wait_store().await;
    tokio::spawn(exit_when_store_fails(
        store.clone(),
        state.health.clone(),
        Duration::from_secs(args.shutdown_delay_seconds),
    ));
    let ops =
        kdoctor_apiserver::ops::serve(args.metrics_listen, state.clone(), ServeLimits::default())
            .await
            .with_context(|| {
                format!("cannot listen on --metrics-listen {}", args.metrics_listen)
            })?;
    tracing::info!(api = %server.url(), metrics = %ops, store = %args.data.display(), "kdoctor controller serving");

    let mut background = tokio::task::JoinSet::new();
    let (writes, peers) = match (args.leader_elect, args.pod_ip) {
        (true, Some(ip)) => {
            let replication = replica::start::replication(args.replication_listen, ip, &ca)?;
            let (replica, peers) = start_replica(
                args,
                replication,
                &client,
                &identity,
                &state,
                store.clone(),
                &mut background,
            )
            .await?;
            let writes = Writes::Replicated(replica);
            state.set_writes(writes.clone());
            (writes, Some(peers))
        }
        _ => (Writes::Local(store.clone()), None),
    };
    // The reconciler's writes leave only while this replica's leader lease holds.
    let reconciler_client = match &writes {
        Writes::Replicated(_) => kdoctor_reconciler::fenced::wrap(client.clone(), writes.clone()),
        Writes::Local(_) => client.clone(),
    };
    let setup = Setup {
        client: reconciler_client,
        writes: writes.clone(),
        config,
        options,
        harvest_identity,
        registry: state.metrics.registry.clone(),
        identity,
        export,
        peers,
    };
    // On SIGTERM: out of the Service's endpoints at once, still answering for a while, then
    // the controller's work stops, then the replica leaves, then the server.
    let health = state.health.clone();
    let delay = Duration::from_secs(args.shutdown_delay_seconds);
    let shutdown = async move {
        super::stopped().await;
        tracing::info!(delay = ?delay, "stopping: not ready from now on");
        health.set_stopping();
        tokio::time::sleep(delay).await;
    };
    let (leading, _) = watch::channel(false);
    let result = run(setup, leading, shutdown).await;
    if let Some(replica) = writes.replica() {
        replica.shutdown().await;
    }
    background.abort_all();
    server.stop().await;
    result?;
    tracing::info!("kdoctor controller stopped");
    Ok(ExitCode::SUCCESS)
}
