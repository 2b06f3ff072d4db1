//! One round of a task on one agent: the targets it probes (pure mapping from the task spec and
//! what the caller discovered), and the execution that probes them all at once, time-boxed, into
//! one agent report. Watching tasks and discovering carrier addresses need the Kubernetes API
//! and live with the caller.

pub mod execute;
pub mod peers;
pub mod prepare;
pub mod targets;
