//! `kube-sim`: start a simulated cluster, write a kubeconfig, serve until stopped; or run the
//! scale benchmark.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// A simulated Kubernetes cluster for kdoctor's system tests (development only).
#[derive(Parser, Debug)]
#[command(name = "kube-sim", version)]
struct Args {
    /// Address of the API server.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Write an admin kubeconfig here.
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
    /// Serve plain HTTP instead of HTTPS.
    #[arg(long)]
    insecure_http: bool,
    /// Seed for uids, generated names and stage randomness.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Number of simulated nodes (`node-1` ... `node-N`).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Stage files (kwok Stage YAML) replacing the default stages; repeatable.
    #[arg(long = "stages")]
    stages: Vec<PathBuf>,
    /// Authenticate callers (client certificates, TokenReview-table tokens) and enforce RBAC.
    #[arg(long)]
    rbac: bool,
    /// Live traffic: Service proxy, Ingress router and cluster DNS on loopback addresses.
    #[arg(long)]
    traffic: bool,
    /// IPv6: `auto` makes the cluster dual-stack when this machine can route the IPv6
    /// addresses (root: one local route on lo), `on` fails otherwise, `off` is IPv4 only.
    #[arg(long, value_enum, default_value = "auto")]
    ipv6: kube_sim::Ipv6Mode,
    /// Nodes node-1..M whose pods run as real processes (needs --agent-program).
    #[arg(long, default_value_t = 0)]
    agent_nodes: usize,
    /// Program started for each pod on those nodes (default: the kdoctor binary next to
    /// kube-sim).
    #[arg(long)]
    agent_program: Option<PathBuf>,
    /// Arguments of the program ($(POD_IP) and the pod's other variables expanded); without
    /// them the pod's container args are used.
    #[arg(long = "agent-arg", allow_hyphen_values = true)]
    agent_args: Vec<String>,
    /// Which pods on those nodes run (label selector).
    #[arg(long, default_value = "")]
    agent_selector: String,
    /// Where pod process logs and kubeconfigs go.
    #[arg(long, default_value = "kube-sim-pods")]
    work_dir: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve an HTTP echo (a stand-in pod process for tests).
    Echo {
        /// Address to listen on (repeatable).
        #[arg(long)]
        listen: Vec<SocketAddr>,
        /// Addresses to listen on at `--port`, comma-separated (`$(POD_IPS)`).
        #[arg(long, value_delimiter = ',')]
        ips: Vec<std::net::IpAddr>,
        /// Port for `--ips`.
        #[arg(long, default_value_t = 8080)]
        port: u16,
    },
    /// Be the kubelet of a real control plane's nodes (hack/cluster.sh runs it).
    Kubelet(KubeletArgs),
    /// Start one container of a pod (the kubelet runs this; see kubelet::launch).
    #[command(hide = true)]
    PodInit {
        /// The launch file (JSON).
        launch: PathBuf,
    },
    /// Forward a port on this host to an address inside a network namespace.
    Forward {
        /// The namespace (e.g. /var/run/netns/kdoctor-cluster).
        #[arg(long)]
        netns: PathBuf,
        /// Where to listen (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// The address inside the namespace.
        #[arg(long)]
        to: SocketAddr,
        /// Write the port listened on here once listening.
        #[arg(long)]
        port_file: Option<PathBuf>,
    },
    /// Time N nodes with a DaemonSet until every pod is Ready, with W pod watchers.
    Bench {
        /// Nodes.
        #[arg(long, default_value_t = 1000)]
        nodes: usize,
        /// Pod watchers (kube-rs over HTTPS).
        #[arg(long, default_value_t = 10)]
        watchers: usize,
    },
}

/// `kube-sim kubelet`'s flags (hack/cluster.sh passes them; the address plan is its).
#[derive(clap::Args, Debug)]
struct KubeletArgs {
    /// A kubeconfig for the real API server.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Nodes node-1..N.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// How many of them (node-1..M) run pods as real processes.
    #[arg(long, default_value_t = 3)]
    process_nodes: usize,
    /// A node network (repeat per family); node-i gets its (10+i)-th address.
    #[arg(long = "node-range", required = true)]
    node_ranges: Vec<ipnet::IpNet>,
    /// The interface the node addresses go on.
    #[arg(long, default_value = "kdc0")]
    node_interface: String,
    /// Where the cluster DNS listens (repeat per family).
    #[arg(long = "dns-ip", required = true)]
    dns_ips: Vec<std::net::IpAddr>,
    /// The ClusterIPs of kube-system/kube-dns (repeat per family).
    #[arg(long = "dns-service-ip", required = true)]
    dns_service_ips: Vec<std::net::IpAddr>,
    /// The ingress controller's addresses (repeat per family).
    #[arg(long = "ingress-ip")]
    ingress_ips: Vec<std::net::IpAddr>,
    /// A load-balancer address pool (repeat per family).
    #[arg(long = "lb-range")]
    lb_ranges: Vec<ipnet::IpNet>,
    /// An image that runs: REPOSITORY=PROGRAM (any tag; the program is its entrypoint).
    #[arg(long = "image")]
    images: Vec<String>,
    /// Where pods' files, CNI state and volumes live.
    #[arg(long)]
    work_dir: PathBuf,
    /// Prefix of the pods' network namespace names.
    #[arg(long, default_value = "kube-sim-")]
    netns_prefix: String,
    /// The CNI plugins' directory.
    #[arg(long, default_value = "/usr/lib/cni")]
    cni_bin: PathBuf,
    /// Seconds between renewals of a node's Lease.
    #[arg(long, default_value_t = 10)]
    lease_renew_seconds: u64,
}

async fn kubelet(a: KubeletArgs) -> anyhow::Result<()> {
    let images = a
        .images
        .iter()
        .map(|i| {
            kube_sim::kubelet::pod::Image::parse(i)
                .with_context(|| format!("--image {i}: expected REPOSITORY=PROGRAM"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    for i in &images {
        anyhow::ensure!(
            i.program.is_file(),
            "--image {}: {} is not a file",
            i.repository,
            i.program.display()
        );
    }
    let cfg = kube_sim::kubelet::KubeletConfig {
        kubeconfig: a.kubeconfig,
        nodes: a.nodes,
        process_nodes: a.process_nodes.min(a.nodes),
        node_ranges: a.node_ranges,
        node_interface: a.node_interface,
        dns_ips: a.dns_ips,
        dns_service_ips: a.dns_service_ips,
        ingress_ips: a.ingress_ips,
        lb_ranges: a.lb_ranges,
        images,
        work_dir: std::path::absolute(&a.work_dir).context("--work-dir")?,
        netns_prefix: a.netns_prefix,
        cni_bin: a.cni_bin,
        lease_renew: std::time::Duration::from_secs(a.lease_renew_seconds.max(1)),
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut run = tokio::spawn(kube_sim::kubelet::run(cfg, stopped));
    tokio::select! {
        r = &mut run => r.context("the kubelet task")??,
        r = wait_for_stop() => {
            r?;
            let _ = stop.send(true);
            run.await.context("the kubelet task")??;
        }
    }
    Ok(())
}

/// The agent program: as given, or `kdoctor` next to this binary when agent nodes are asked
/// for (both are built into the same target directory).
fn agent_program(args: &Args) -> anyhow::Result<Option<PathBuf>> {
    if let Some(p) = &args.agent_program {
        return Ok(Some(p.clone()));
    }
    if args.agent_nodes == 0 {
        return Ok(None);
    }
    let beside = std::env::current_exe()
        .context("locating kube-sim")?
        .with_file_name("kdoctor");
    anyhow::ensure!(
        beside.exists(),
        "--agent-nodes needs --agent-program, or a kdoctor binary next to kube-sim ({}): cargo build -p kdoctor",
        beside.display()
    );
    Ok(Some(beside))
}

async fn wait_for_stop() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Command::PodInit { launch }) = &args.command {
        // Before any runtime thread exists: unsharing the mount namespace needs one thread.
        let text =
            std::fs::read(launch).with_context(|| format!("reading {}", launch.display()))?;
        let spec: kube_sim::kubelet::launch::Launch = serde_json::from_slice(&text)
            .with_context(|| format!("parsing {}", launch.display()))?;
        return Err(kube_sim::kubelet::launch::exec(&spec).into());
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Some(Command::Echo { listen, ips, port }) = args.command {
        let mut addrs = listen;
        addrs.extend(ips.into_iter().map(|ip| SocketAddr::new(ip, port)));
        anyhow::ensure!(!addrs.is_empty(), "echo: give --listen or --ips");
        kube_sim::echo::serve(&addrs)
            .await
            .with_context(|| format!("serving echo on {addrs:?}"))?;
        return Ok(());
    }
    if let Some(Command::Kubelet(k)) = args.command {
        return kubelet(k).await;
    }
    if let Some(Command::Forward {
        netns,
        listen,
        to,
        port_file,
    }) = &args.command
    {
        kube_sim::netns::forward::serve(netns, *listen, *to, port_file.as_deref())
            .await
            .with_context(|| format!("forwarding {listen} to {to} in {}", netns.display()))?;
        return Ok(());
    }
    if let Some(Command::Bench { nodes, watchers }) = args.command {
        let r = kube_sim::bench::run(nodes, watchers).await?;
        println!("nodes: {}", r.nodes);
        println!(
            "nodes ready after start: {:.2} s",
            r.nodes_ready.as_secs_f64()
        );
        println!("daemonset pods ready: {:.2} s", r.pods_ready.as_secs_f64());
        println!(
            "all {} watchers saw every pod ready: {:.2} s",
            r.watchers,
            r.watchers_caught_up.as_secs_f64()
        );
        println!(
            "watch events per watcher: {}..{}",
            r.events_per_watcher.0, r.events_per_watcher.1
        );
        println!("peak RSS: {:.1} MiB", r.peak_rss_kib as f64 / 1024.0);
        return Ok(());
    }
    let mut stages = None;
    if !args.stages.is_empty() {
        let mut all = Vec::new();
        for path in &args.stages {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            all.extend(
                kube_sim::stages::parse_stages(&text)
                    .with_context(|| format!("parsing {}", path.display()))?,
            );
        }
        stages = Some(all);
    }
    let cfg = kube_sim::SimConfig {
        listen: args.listen,
        tls: !args.insecure_http,
        seed: args.seed,
        nodes: args.nodes,
        stages,
        traffic: args.traffic,
        rbac: args.rbac,
        ipv6: args.ipv6,
        agent_nodes: args.agent_nodes,
        runner: agent_program(&args)?.map(|program| kube_sim::runner::RunnerConfig {
            program,
            args: args.agent_args.clone(),
            selector: args.agent_selector.clone(),
            work_dir: args.work_dir.clone(),
        }),
        ..Default::default()
    };
    let sim = kube_sim::Sim::start(cfg)
        .await
        .context("starting the simulated cluster")?;
    if let Some(path) = &args.kubeconfig_out {
        sim.write_kubeconfig(path)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    tracing::info!(url = %sim.url(), nodes = args.nodes, "kube-sim serving; stop with Ctrl-C or SIGTERM");
    wait_for_stop().await?;
    sim.stop().await;
    Ok(())
}
