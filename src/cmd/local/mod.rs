//! `kdoctor local -f TASK.yaml...`: the whole system in one process, no cluster. The agent's
//! echo targets (and its DNS test server) on loopback, the report store, and the API server
//! with its own CA and a client-certificate kubeconfig; every task runs for real on its
//! schedule, its reports go into the store as the controller's harvester puts them there, and
//! `kubectl get kdoctorreport` / `get netreach` read them. docs/local.md says what each target
//! means on one machine.

pub mod progress;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use jiff::Timestamp;
use kdoctor_agent::config::AgentArgs;
use kdoctor_apiserver::server::{ServerOptions, start};
use kdoctor_apiserver::tasks::TaskObjects;
use kdoctor_store::{Store, StoreConfig};
use kdoctor_transport::pki::write_private;

use kdoctor_local::plan::{LocalPorts, StandIns, local_plan, loopback_carrier, resolvers_of};
use kdoctor_local::runner::{self, Shared};
use kdoctor_local::supervisor::{Planner, supervise};

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
    /// Address of the API server (HTTPS) [default: 127.0.0.1:6443, or a free port when that
    /// is taken].
    #[arg(long = "listen", value_name = "ADDR")]
    listen: Option<SocketAddr>,
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
    /// Port of the local HTTP echo target on 127.0.0.1 and ::1 (NetReach probes it; tasks name
    /// it `http://kdoctor.localhost/`); 0: any free port [default: 18080, or a free port when
    /// that is taken].
    #[arg(long, value_name = "PORT")]
    app_http_port: Option<u16>,
    /// Port of the local HTTPS echo target (HTTP/2 by ALPN, self-signed certificate; tasks name
    /// it `https://kdoctor.localhost/`) [default: 18443, or a free port when that is taken].
    #[arg(long, value_name = "PORT")]
    app_https_port: Option<u16>,
    /// UDP and TCP port of the local DNS test server (`netdns-e2e*` names answered, others
    /// forwarded to the system resolver; Netdns `targetUser.server: kdoctor.localhost` names
    /// it) [default: 15353, or a free port when that is taken].
    #[arg(long, value_name = "PORT")]
    dns_port: Option<u16>,
    /// Port of the local UDP echo target (NetReach `target.udp` sends it datagrams)
    /// [default: 17007, or a free port when that is taken].
    #[arg(long, value_name = "PORT")]
    udp_echo_port: Option<u16>,
    /// The node name reports carry (default: the host name).
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,
}

/// Whether this machine can bind the IPv6 loopback.
fn ipv6_available() -> bool {
    std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_ok()
}

/// Whether `port` is free for TCP (and UDP when `udp`) on every address of `ips`.
fn free_everywhere(port: u16, ips: &[IpAddr], udp: bool) -> bool {
    ips.iter().all(|ip| {
        std::net::TcpListener::bind((*ip, port)).is_ok()
            && (!udp || std::net::UdpSocket::bind((*ip, port)).is_ok())
    })
}

/// A port free on every address of `ips` (one port for both families, so that a NetReach
/// carrier has one echo port, as an agent does; for TCP and UDP when `udp`).
fn any_free_port(ips: &[IpAddr], udp: bool) -> Result<u16> {
    for _ in 0..50 {
        let candidate = std::net::TcpListener::bind((ips[0], 0))?
            .local_addr()?
            .port();
        if free_everywhere(candidate, ips, udp) {
            return Ok(candidate);
        }
    }
    bail!("no port free on every loopback address")
}

/// The port of one local target: the one asked for (0: any free one), else `default` when it
/// is free, else any free one — said on standard error, so that nobody wonders where it went.
fn pick_port(
    asked: Option<u16>,
    default: u16,
    what: &str,
    ips: &[IpAddr],
    udp: bool,
) -> Result<u16> {
    match asked {
        Some(0) => any_free_port(ips, udp),
        Some(port) => Ok(port),
        None if free_everywhere(default, ips, udp) => Ok(default),
        None => {
            let port = any_free_port(ips, udp)?;
            eprintln!("kdoctor local: port {default} is taken: the {what} uses {port}");
            Ok(port)
        }
    }
}

/// The local targets' ports and the API server's address: those asked for, else the defaults
/// where free, else free ones.
fn choose_ports(args: &Args, loopback: &[IpAddr]) -> Result<(LocalPorts, SocketAddr)> {
    let ports = LocalPorts {
        http: pick_port(
            args.app_http_port,
            18080,
            "HTTP echo target",
            loopback,
            false,
        )?,
        https: pick_port(
            args.app_https_port,
            18443,
            "HTTPS echo target",
            loopback,
            false,
        )?,
        dns: pick_port(args.dns_port, 15353, "DNS test server", loopback, true)?,
        udp_echo: pick_port(args.udp_echo_port, 17007, "UDP echo target", loopback, true)?,
    };
    let listen = match args.listen {
        Some(listen) => listen,
        None => {
            let ip = [IpAddr::V4(Ipv4Addr::LOCALHOST)];
            SocketAddr::new(ip[0], pick_port(None, 6443, "API server", &ip, false)?)
        }
    };
    Ok((ports, listen))
}

/// Says where everything is and how to look at it.
fn announce(
    args: &Args,
    tasks: usize,
    node: &str,
    running: &kdoctor_agent::agent::RunningAgent,
    api: &str,
) {
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
        tasks,
        args.data.display()
    );
    eprintln!(
        "  echo targets: http {}, https {}, udp {}; DNS test server udp {} tcp {}",
        list(&running.http),
        list(&running.https),
        list(&running.udp_echo),
        list(&running.dns[0]),
        list(&running.dns[1])
    );
    eprintln!(
        "  tasks name them kdoctor.localhost (e.g. https://kdoctor.localhost/, targetUser.server: kdoctor.localhost)"
    );
    eprintln!("  API server: {} (kubeconfig {kubeconfig})", api);
    eprintln!("  look: kubectl --kubeconfig {kubeconfig} get kdoctorreport");
    eprintln!("        kubectl --kubeconfig {kubeconfig} get netreach,apphttphealthy,netdns");
    eprintln!("  add:  kubectl --kubeconfig {kubeconfig} apply -f TASK.yaml");
    eprintln!("  Ctrl-C stops.");
}

/// The report store, with the tasks an earlier run left live ended and retention running.
async fn open_store(data: &std::path::Path) -> Result<Arc<Store>> {
    let dir = data.to_path_buf();
    let store = tokio::task::spawn_blocking(move || Store::open(StoreConfig::new(&dir)))
        .await?
        .with_context(|| format!("cannot open the report store in {}", data.display()))?;
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
    let retained = store.clone();
    tokio::spawn(kdoctor_store::run_retention(
        move || kdoctor_store::Writes::Local(retained.clone()),
        Duration::from_secs(600),
    ));
    Ok(store)
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
    let (ports, listen) = choose_ports(args, &loopback)?;
    let http_port = ports.http;
    let resolvers = resolvers_of(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default());
    let stand_ins = StandIns {
        local: Some(ports),
        carrier: Some(loopback_carrier(POD_NAME, http_port, ports.udp_echo, ipv6)),
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
            app_https_port: ports.https,
            udp_echo_port: ports.udp_echo,
            bind: loopback.clone(),
            pod_name: Some(POD_NAME.to_string()),
            node_name: Some(node.clone()),
            dns_server: true,
            dns_udp_port: ports.dns,
            dns_tcp_port: ports.dns,
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
            .context("cannot start the local echo targets (--app-http-port, --app-https-port, --dns-port, --udp-echo-port choose others)")?;

        let store = open_store(&args.data).await?;
        let objects = TaskObjects::new(planner.admit());
        // Before any object exists, so that the files' tasks reach the supervisor too.
        let feed = objects.subscribe();
        let server = start(ServerOptions {
            store: Some(store.clone()),
            tasks: Some(objects.clone()),
            ..ServerOptions::standalone(&args.data, listen)
        })
        .await
        .context("cannot start the API server (--listen chooses another address)")?;
        write_private(&args.kubeconfig_out, server.kubeconfig()?.as_bytes())?;

        announce(args, checked.valid.len(), &node, &running, &server.url());

        let shared = Arc::new(Shared {
            store: store.clone(),
            objects: objects.clone(),
            node,
            max_history: config.crd_max_history.max(1) as usize,
            poll: Duration::from_secs(config.task_poll_interval_in_second.max(1) as u64),
            say: Arc::new(|event| eprintln!("{}", progress::line(&event))),
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
