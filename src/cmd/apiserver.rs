//! `kdoctor apiserver`: the aggregated API server on its own.
//!
//! Standalone (default): serves a store with no cluster — to read a backed-up store, or for
//! tests. It keeps a CA in `<data>/pki`, issues its serving certificate and a client
//! certificate from it, writes a kubeconfig kubectl can use as is, and accepts only clients of
//! that CA. With `--delegated-auth` it authenticates and authorizes like an aggregated API
//! server in a cluster (the extension-apiserver-authentication ConfigMap, TokenReview,
//! SubjectAccessReview) using the in-cluster or `$KUBECONFIG` credentials.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kdoctor_apiserver::server::{AuthMode, ServerOptions, start};
use kdoctor_transport::pki::write_private;

/// Arguments of `kdoctor apiserver`.
#[derive(clap::Args)]
pub struct Args {
    /// The store directory.
    #[arg(long = "data", value_name = "DIR", default_value = "./kdoctor-data")]
    data: PathBuf,
    /// Address to serve HTTPS on.
    #[arg(long = "listen", value_name = "ADDR", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Write a kubeconfig for this server (a system:masters client certificate) to FILE.
    #[arg(long = "kubeconfig-out", value_name = "FILE")]
    kubeconfig_out: Option<PathBuf>,
    /// Serving certificate (PEM); reloaded when it changes. Default: issued by the server's CA.
    #[arg(long = "tls-cert", value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Serving key (PEM).
    #[arg(long = "tls-key", value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// More CAs whose client certificates are accepted (standalone mode), PEM.
    #[arg(long = "client-ca", value_name = "FILE")]
    client_ca: Option<PathBuf>,
    /// Extra names for the issued serving certificate (e.g. kdoctor-controller.kdoctor.svc).
    #[arg(long = "tls-san", value_name = "NAME")]
    tls_san: Vec<String>,
    /// Authenticate and authorize through the cluster, as an aggregated API server.
    #[arg(long = "delegated-auth")]
    delegated_auth: bool,
    #[command(flatten)]
    retention: super::retention::RetentionArgs,
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(args: &Args) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve_until_stopped(args))
}

async fn serve_until_stopped(args: &Args) -> Result<ExitCode> {
    let auth = if args.delegated_auth {
        let client = kube::Client::try_default()
            .await
            .context("cannot reach the Kubernetes API for delegated authentication")?;
        AuthMode::Delegated(client)
    } else {
        AuthMode::Standalone
    };
    let extra_client_ca = match &args.client_ca {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?,
        ),
        None => None,
    };
    let options = ServerOptions {
        tls_files: args.tls_cert.clone().zip(args.tls_key.clone()),
        tls_sans: args.tls_san.clone(),
        extra_client_ca,
        auth,
        retention_every: args.retention.every(),
        retention: args.retention.policy(),
        ..ServerOptions::standalone(&args.data, args.listen)
    };
    let server = start(options).await?;
    eprintln!(
        "kdoctor apiserver: serving {} from the store in {}",
        server.url(),
        args.data.display()
    );
    if let Some(path) = &args.kubeconfig_out {
        write_private(path, server.kubeconfig()?.as_bytes())?;
        eprintln!("  kubeconfig: {}", path.display());
        eprintln!(
            "  try: kubectl --kubeconfig {} get kdoctorreports",
            path.display()
        );
    }
    super::stopped().await;
    eprintln!("kdoctor apiserver: stopping");
    server.stop().await;
    Ok(ExitCode::SUCCESS)
}
