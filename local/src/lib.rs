//! kdoctor-local: the engine of `kdoctor local`, the whole system in one process with no
//! cluster. Each task object (from the files given, or `kubectl apply` while it runs) is
//! planned as one machine can run it (`plan`: the local echo server stands in for the agents,
//! the system resolver for the cluster DNS), supervised as a cluster's controller follows the
//! API (`supervisor`), and run round by round (`runner`): the controller's round state machine
//! decides, the agent's round executor probes, and the report and the round summary go into the
//! store as the harvester and the controller put them there. What happens is told as
//! [`events::Event`]s: the binary says them on the terminal.

pub mod error;
pub mod events;
pub mod plan;
pub mod runner;
pub mod supervisor;
pub mod task;

pub use error::LocalError;
