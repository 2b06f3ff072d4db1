//! `kube-sim`: the kubelet of a real control plane's nodes (`kube-sim kubelet`, started by
//! hack/cluster.sh), the program that starts each container (`kube-sim pod-init`), and a port
//! on the host forwarded into the cluster's network namespace (`kube-sim forward`).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// kube-sim: the kubelet of kdoctor's test clusters (development only; hack/cluster.sh).
#[derive(Parser, Debug)]
#[command(name = "kube-sim", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
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
    if let Command::PodInit { launch } = &args.command {
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
    match args.command {
        Command::Kubelet(k) => kubelet(k).await,
        Command::Forward {
            netns,
            listen,
            to,
            port_file,
        } => kube_sim::netns::forward::serve(&netns, listen, to, port_file.as_deref())
            .await
            .with_context(|| format!("forwarding {listen} to {to} in {}", netns.display())),
        Command::PodInit { .. } => Ok(()),
    }
}
