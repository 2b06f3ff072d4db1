//! `kdoctor`: one binary for every role (controller, agent, local mode) and its tools.
//! This file only wires the command line to the subcommands in `cmd/`.

mod cmd;
mod logging;
mod plugin;
mod plural;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Kubernetes network inspector: probes pods, Services, Ingress and DNS, and serves the reports
/// through the Kubernetes aggregation layer.
#[derive(Parser)]
#[command(name = "kdoctor", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the task CRDs (NetReach, AppHttpHealthy, Netdns).
    Crd(cmd::crd::Args),
    /// Check task files offline: apply defaults and print every problem with its field path.
    Validate(cmd::validate::Args),
    /// Back up, restore, migrate and inspect a report store.
    Store(cmd::store::Args),
    /// Serve the KdoctorReport API from a store (standalone, or delegated in a cluster).
    Apiserver(cmd::apiserver::Args),
    /// Print the install's certificates (CA, controller serving certificate, APIService caBundle)
    /// as Kubernetes objects, for `kubectl apply -f -`.
    Certs(cmd::certs::Args),
    /// Run the controller: task reconcilers, harvester and the aggregated API server.
    Controller(Box<cmd::controller::Args>),
    /// Serve the probe targets (echo API over HTTP/HTTPS), health endpoints and metrics.
    Agent(cmd::agent::Args),
    /// Probe an HTTP(S) URL, a TCP, UDP or ICMP address, or a DNS server once from here, at a
    /// fixed rate.
    Probe(cmd::probe::Args),
    /// Run task files for real on this machine, no cluster: echo targets, the report store and
    /// the API server in one process; `kubectl get kdoctorreport` reads the reports.
    Local(cmd::local::Args),
    /// Views of reports through the aggregated API (also `kubectl kdoctor …` when this binary
    /// is installed as `kubectl-kdoctor`).
    Kubectl(cmd::kubectl::Args),
}

/// The name kubectl finds this binary under as a plugin (`kubectl kdoctor …`).
const PLUGIN_NAME: &str = "kubectl-kdoctor";

fn main() -> ExitCode {
    let invoked_as = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    if invoked_as.as_deref() == Some(PLUGIN_NAME) {
        logging::init("warn", false);
        let plugin = cmd::kubectl::Plugin::parse();
        return finish(cmd::kubectl::run(plugin.args()));
    }
    let cli = Cli::parse();
    // Before any thread starts: glibc fixes its arena limit once.
    let arenas = kdoctor_transport::malloc_arenas::cap(hot_threads(&cli.command));
    match &cli.command {
        // Servers in a cluster log JSON at info (ENV_LOG_LEVEL, as upstream; RUST_LOG wins).
        Command::Controller(_) | Command::Agent(_) => logging::init(
            &std::env::var("ENV_LOG_LEVEL").unwrap_or_else(|_| "info".to_string()),
            true,
        ),
        _ => logging::init("warn", false),
    }
    if let Some(arenas) = arenas {
        tracing::debug!(arenas, "malloc arenas capped");
    }
    let outcome = match cli.command {
        Command::Crd(args) => cmd::crd::run(&args),
        Command::Validate(args) => cmd::validate::run(&args),
        Command::Store(args) => cmd::store::run(&args),
        Command::Apiserver(args) => cmd::apiserver::run(&args),
        Command::Certs(args) => cmd::certs::run(&args),
        Command::Controller(args) => cmd::controller::run_command(&args),
        Command::Agent(args) => cmd::agent::run(&args),
        Command::Probe(args) => cmd::probe::run(&args),
        Command::Local(args) => cmd::local::run(&args),
        Command::Kubectl(args) => cmd::kubectl::run(&args),
    };
    finish(outcome)
}

/// The threads a command serves connections or runs probes on (the API server's connection
/// threads, the agent's prober threads), to size glibc's malloc arenas to.
fn hot_threads(command: &Command) -> usize {
    use kdoctor_transport::runtime_threads::per_core;
    let connections = per_core(kdoctor_apiserver::server::CONNECTION_THREADS_CAP);
    let probes = per_core(kdoctor_agent::probe::threads::PROBER_THREADS_CAP);
    match command {
        Command::Controller(_) | Command::Apiserver(_) => connections,
        Command::Agent(_) | Command::Probe(_) => probes,
        Command::Local(_) => connections.max(probes),
        _ => 1,
    }
}

/// The exit code of a subcommand's outcome; an error is printed on one line.
fn finish(outcome: anyhow::Result<ExitCode>) -> ExitCode {
    match outcome {
        Ok(code) => code,
        // The reader of our output went away (`kdoctor crd | head`): end quietly with the
        // status a shell reports for a command killed by SIGPIPE, as kubectl does.
        Err(e) if reader_gone(&e) => ExitCode::from(141),
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            cmd::exit_usage()
        }
    }
}

/// Whether an error is a write to a pipe whose reader has closed it.
fn reader_gone(error: &anyhow::Error) -> bool {
    let broken = Some(std::io::ErrorKind::BrokenPipe);
    error.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().map(|e| e.kind()) == broken
            // serde_json's writer errors hide the io::Error they wrap from `source`.
            || cause
                .downcast_ref::<serde_json::Error>()
                .and_then(|e| e.io_error_kind())
                == broken
    })
}

/// An error and its causes on one line, as `{:#}` prints them, but without a cause whose text a
/// message before it already includes (many errors name their cause in their own message, and
/// `cannot read x: No such file or directory (os error 2): No such file or directory (os error
/// 2)` says it twice).
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[derive(Debug, thiserror::Error)]
    #[error("{path}: {source}")]
    struct Read {
        path: String,
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let error = anyhow::Error::new(Read {
            path: "/x".into(),
            source: io(),
        })
        .context("starting the server");
        assert_eq!(
            one_line(&error),
            format!("starting the server: /x: {}", io())
        );
        let plain = anyhow::Error::new(io()).context("cannot read /y");
        assert_eq!(one_line(&plain), format!("cannot read /y: {}", io()));
    }
}
