//! Why local mode cannot run a task, or stopped running one.

use kdoctor_api::task::TaskKind;

/// Why a task cannot run from this machine, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The task needs the cluster (a Secret, a ConfigMap, the agents, the cluster DNS).
    #[error("{0}")]
    NeedsTheCluster(String),
    /// A target of the task cannot be built.
    #[error(transparent)]
    Target(#[from] kdoctor_agent::round::targets::TargetError),
    /// The task is not valid (the admission's errors).
    #[error("{0}")]
    Invalid(#[from] kdoctor_api::validation::ErrorList),
    /// The schedule did not parse (validation accepted it: a bug, reported rather than hidden).
    #[error("{kind} {name:?}: schedule {text:?}: {problem}")]
    Schedule {
        /// The task's kind.
        kind: TaskKind,
        /// The task's name.
        name: String,
        /// The schedule's text.
        text: String,
        /// Why it did not parse.
        problem: String,
    },
    /// The report store failed.
    #[error("report store: {0}")]
    Store(#[from] kdoctor_store::StoreError),
    /// A blocking store call did not finish.
    #[error("a store call panicked: {0}")]
    Join(#[from] tokio::task::JoinError),
}
