//! `kube-sim`: start a simulated cluster, write a kubeconfig, serve until stopped.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let cfg = kube_sim::SimConfig {
        listen: args.listen,
        tls: !args.insecure_http,
        seed: args.seed,
        nodes: args.nodes,
        ..Default::default()
    };
    let sim = kube_sim::Sim::start(cfg)
        .await
        .context("starting the simulated cluster")?;
    if let Some(path) = &args.kubeconfig_out {
        sim.write_kubeconfig(path)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    tracing::info!(url = %sim.url(), "kube-sim serving; stop with Ctrl-C");
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    sim.stop().await;
    Ok(())
}
