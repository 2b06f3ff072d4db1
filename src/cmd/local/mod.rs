//! `kdoctor local -f TASK.yaml...`: the whole system in one process, no cluster. The agent's
//! echo targets (and its DNS test server) on loopback, the report store, and the API server
//! with its own CA and a client-certificate kubeconfig; every task runs for real on its
//! schedule, its reports go into the store as the controller's harvester puts them there, and
//! `kubectl get kdoctorreport` / `get netreach` read them. docs/local.md says what each target
//! means on one machine.

pub mod plan;
pub mod progress;
pub mod runner;
pub mod supervisor;
pub mod task;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use jiff::Timestamp;
use kdoctor_agent::config::AgentArgs;
use kdoctor_apiserver::pki::write_private;
use kdoctor_apiserver::server::{ServerOptions, start};
use kdoctor_apiserver::tasks::TaskObjects;
use kdoctor_store::{Store, StoreConfig};

use self::plan::{StandIns, local_plan, loopback_carrier, resolvers_of};
use self::runner::Shared;
use self::supervisor::{Planner, supervise};

/// The agent pod's name in reports and echo answers.
pub const POD_NAME: &str = "kdoctor-local";

/// Arguments of `kdoctor local`.
#[derive(clap::Args)]
pub struct Args {
    /// Task files or directories of them (`.yaml`, `.yml`, `.json`); `-` reads standard input.
    /// Without any, local starts empty: `kubectl apply -f` adds tasks while it runs.
    #[arg(short = 'f', long = "filename", num_args = 1..)]
    files: Vec<PathBuf>,
    /// The report store directory (kept across runs).
    #[arg(long = "data", value_name = "DIR", default_value = "./kdoctor-data")]
    data: PathBuf,
    /// Address of the API server (HTTPS).
    #[arg(long = "listen", value_name = "ADDR", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Where to write the kubeconfig for the API server (a client certificate of its CA).
    #[arg(
        long = "kubeconfig-out",
        value_name = "FILE",
        default_value = "./kdoctor-local.kubeconfig"
    )]
    kubeconfig_out: PathBuf,
    /// The kdoctor configuration (`conf.yml`) whose defaults and limits apply.
    #[arg(long = "config", short = 'C', value_name = "FILE")]
    config: Option<PathBuf>,
    /// Port of the local HTTP echo target on 127.0.0.1 and ::1 (NetReach probes it; tasks may
    /// name it, e.g. AppHttpHealthy `http://127.0.0.1:18080/`); 0: any free port.
    #[arg(long, value_name = "PORT", default_value_t = 18080)]
    app_http_port: u16,
    /// Port of the local HTTPS echo target (HTTP/2 by ALPN, self-signed certificate).
    #[arg(long, value_name = "PORT", default_value_t = 18443)]
    app_https_port: u16,
    /// UDP and TCP port of the local DNS test server (`netdns-e2e*` names answered, others
    /// forwarded to the system resolver); Netdns `targetUser` may name it.
    #[arg(long, value_name = "PORT", default_value_t = 15353)]
    dns_port: u16,
    /// The node name reports carry (default: the host name).
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,
}

/// Whether this machine can bind the IPv6 loopback.
fn ipv6_available() -> bool {
    std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_ok()
}

/// A port free on every address of `ips` (one port for both families, so that a NetReach
/// carrier has one echo port, as an agent does); `port` itself unless it is 0.
fn common_port(port: u16, ips: &[IpAddr]) -> Result<u16> {
    if port != 0 {
        return Ok(port);
    }
    for _ in 0..20 {
        let first = std::net::TcpListener::bind((ips[0], 0))?;
        let candidate = first.local_addr()?.port();
        if ips[1..]
            .iter()
            .all(|ip| std::net::TcpListener::bind((*ip, candidate)).is_ok())
        {
            return Ok(candidate);
        }
    }
    bail!("no port free on every loopback address")
}

/// Runs local mode until SIGINT or SIGTERM.
pub fn run(args: &Args) -> Result<ExitCode> {
    // Everything about the task files is checked before anything starts.
    let config = super::validate::load_config(args.config.as_deref())?;
    let checked = if args.files.is_empty() {
        super::validate::Checked::default()
    } else {
        super::validate::check_files(&args.files, &config)?
    };
    if !checked.all_valid {
        eprint!("{}", checked.report);
        eprintln!("kdoctor local: not started: fix the task files above");
        return Ok(super::exit_failed());
    }
    let mut names = std::collections::BTreeSet::new();
    for task in &checked.valid {
        if !names.insert((task.kind(), task.name().to_string())) {
            bail!(
                "{} {:?} is given twice; task names are unique per kind",
                task.kind(),
                task.name()
            );
        }
    }
    let node = args
        .node_name
        .clone()
        .unwrap_or_else(kdoctor_agent::config::host_name);
    let ipv6 = ipv6_available();
    let mut loopback = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
    if ipv6 {
        loopback.push(IpAddr::V6(Ipv6Addr::LOCALHOST));
    }
    let http_port = common_port(args.app_http_port, &loopback)?;
    let resolvers = resolvers_of(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default());
    let stand_ins = StandIns {
        carrier: Some(loopback_carrier(POD_NAME, http_port, ipv6)),
        resolvers: Some(resolvers.clone()),
    };
    let planner = Arc::new(Planner {
        config: config.clone(),
        node: node.clone(),
        pod: POD_NAME.to_string(),
        stand_ins,
    });
    // What one machine cannot run is refused before anything starts, as validation is.
    for task in &checked.valid {
        local_plan(task, &config, &node, POD_NAME, &planner.stand_ins)?;
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let agent = AgentArgs {
            app_http_port: http_port,
            app_https_port: common_port(args.app_https_port, &loopback)?,
            bind: loopback.clone(),
            pod_name: Some(POD_NAME.to_string()),
            node_name: Some(node.clone()),
            dns_server: true,
            dns_udp_port: args.dns_port,
            dns_tcp_port: args.dns_port,
            // Names other than netdns-e2e* go to the system resolver, as a cluster DNS would
            // forward them.
            dns_upstream: resolvers
                .iter()
                .find(|ip| ip.is_ipv4())
                .map(|ip| SocketAddr::new(*ip, 53)),
            ..AgentArgs::ephemeral(loopback.clone())
        };
        let running = kdoctor_agent::agent::start(&agent)
            .await
            .context("cannot start the local echo targets (--app-http-port, --app-https-port, --dns-port choose others)")?;

        let data = args.data.clone();
        let store = tokio::task::spawn_blocking(move || Store::open(StoreConfig::new(&data)))
            .await?
            .with_context(|| format!("cannot open the report store in {}", args.data.display()))?;
        let store = Arc::new(store);
        // Tasks of an earlier run ended with it (a killed run could not say so itself).
        let swept = {
            let store = store.clone();
            tokio::task::spawn_blocking(move || runner::end_earlier_runs(&store, Timestamp::now()))
                .await??
        };
        if swept > 0 {
            tracing::info!(tasks = swept, "tasks of an earlier run marked ended");
        }
        tokio::spawn(kdoctor_store::run_retention(
            store.clone(),
            Duration::from_secs(600),
        ));

        let objects = TaskObjects::new(planner.admit());
        // Before any object exists, so that the files' tasks reach the supervisor too.
        let feed = objects.subscribe();
        let server = start(ServerOptions {
            store: Some(store.clone()),
            tasks: Some(objects.clone()),
            ..ServerOptions::standalone(&args.data, args.listen)
        })
        .await
        .context("cannot start the API server (--listen chooses another address)")?;
        write_private(&args.kubeconfig_out, server.kubeconfig()?.as_bytes())?;

        let kubeconfig = args.kubeconfig_out.display();
        let list = |addrs: &[SocketAddr]| {
            addrs
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        eprintln!(
            "kdoctor local: {} tasks on node {node:?}, reports in {}",
            checked.valid.len(),
            args.data.display()
        );
        eprintln!(
            "  echo targets: http {}, https {}; DNS test server udp {} tcp {}",
            list(&running.http),
            list(&running.https),
            list(&running.dns[0]),
            list(&running.dns[1])
        );
        eprintln!("  API server: {} (kubeconfig {kubeconfig})", server.url());
        eprintln!("  look: kubectl --kubeconfig {kubeconfig} get kdoctorreport");
        eprintln!(
            "        kubectl --kubeconfig {kubeconfig} get netreach,apphttphealthy,netdns"
        );
        eprintln!("  add:  kubectl --kubeconfig {kubeconfig} apply -f TASK.yaml");
        eprintln!("  Ctrl-C stops.");

        let shared = Arc::new(Shared {
            store: store.clone(),
            objects: objects.clone(),
            node,
            max_history: config.crd_max_history.max(1) as usize,
            poll: Duration::from_secs(config.task_poll_interval_in_second.max(1) as u64),
        });
        // The files' tasks are created as `kubectl create` would (they are valid: checked above).
        for document in &checked.objects {
            let kind = document
                .get("kind")
                .and_then(serde_json::Value::as_str)
                .and_then(|k| k.parse().ok())
                .context("a checked task has a kind")?;
            objects
                .create(kind, document.clone(), false)
                .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        }
        supervise(shared, planner, feed, super::stopped()).await?;
        server.stop().await;
        drop(running);
        Ok(ExitCode::SUCCESS)
    })
}
