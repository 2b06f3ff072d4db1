//! The subcommands. Each returns its exit code; an `Err` is a usage or environment problem.

pub mod agent;
pub mod apiserver;
pub mod certs;
pub mod controller;
pub mod crd;
pub mod kubectl;
pub mod local;
pub mod output;
pub mod probe;
pub mod retention;
pub mod store;
pub mod validate;

use std::process::ExitCode;

/// The checked thing failed (an invalid task, a failed round): exit code 1.
pub fn exit_failed() -> ExitCode {
    ExitCode::from(1)
}

/// Usage or environment error: exit code 2.
pub fn exit_usage() -> ExitCode {
    ExitCode::from(2)
}

/// Completes on SIGINT or SIGTERM.
pub async fn stopped() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}
