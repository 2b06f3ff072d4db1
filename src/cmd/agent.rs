//! `kdoctor agent`: the probe targets every node serves — the echo API over HTTP and HTTPS
//! (HTTP/2 by ALPN), health endpoints and `/metrics` — until SIGINT or SIGTERM. Ports and
//! environment variables as upstream (`ENV_AGENT_APP_HTTP_PORT` …), each also a flag.
//! With `--report-dir`, also the report spool and the report API for the harvester; with
//! `--default-agent` or `--task-kind/--task-name`, also the rounds of tasks: it watches them
//! through the Kubernetes API (in-cluster or `$KUBECONFIG`) and spools a report per round.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use kdoctor_agent::cluster::runner::Runner;
use kdoctor_agent::config::{AgentArgs, TaskArgs};

/// Arguments of `kdoctor agent`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    agent: AgentArgs,
    #[command(flatten)]
    tasks: TaskArgs,
}

/// Serves until stopped.
pub fn run(args: &Args) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        // Check the task flags before opening any port.
        if args.tasks.runs_tasks() && args.agent.report_dir.is_none() {
            anyhow::bail!(kdoctor_agent::cluster::runner::RunnerError::NoSpool);
        }
        let running = kdoctor_agent::agent::start(&args.agent).await?;
        eprintln!(
            "kdoctor agent: echo http {:?} https {:?}, health {:?}, metrics {:?}, reports {:?}",
            running.http, running.https, running.health, running.metrics, running.reports
        );
        let rounds = if args.tasks.runs_tasks() {
            let client = kube::Client::try_default()
                .await
                .context("cannot reach the Kubernetes API (in-cluster or $KUBECONFIG)")?;
            let runner = Runner::new(
                client.clone(),
                &args.agent,
                &args.tasks,
                running.spool.clone(),
                running.registry.clone(),
            )?;
            runner.map(|r| tokio::spawn(Arc::new(r).run(client)))
        } else {
            None
        };
        tokio::select! {
            _ = running.wait() => {}
            _ = super::stopped() => {}
        }
        if let Some(rounds) = rounds {
            rounds.abort();
        }
        Ok(ExitCode::SUCCESS)
    })
}
