//! `kdoctor agent`: the probe targets every node serves — the echo API over HTTP and HTTPS
//! (HTTP/2 by ALPN), health endpoints and `/metrics` — until SIGINT or SIGTERM. Ports and
//! environment variables as upstream (`ENV_AGENT_APP_HTTP_PORT` …), each also a flag.
//! With `--report-dir`, also the report spool and the report API for the harvester. Watching
//! tasks and running rounds come with the simulated cluster (issue 6).

use std::process::ExitCode;

use anyhow::{Context, Result};
use kdoctor_agent::config::AgentArgs;

/// Arguments of `kdoctor agent`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    agent: AgentArgs,
}

/// Serves until stopped.
pub fn run(args: &Args) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let running = kdoctor_agent::agent::start(&args.agent).await?;
        eprintln!(
            "kdoctor agent: echo http {:?} https {:?}, health {:?}, metrics {:?}, reports {:?}",
            running.http, running.https, running.health, running.metrics, running.reports
        );
        tokio::select! {
            _ = running.wait() => {}
            _ = stopped() => {}
        }
        Ok(ExitCode::SUCCESS)
    })
}

async fn stopped() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
