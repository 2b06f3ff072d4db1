//! kdoctor-reconciler: the controller's task reconcilers — validation against the cluster,
//! carriers (server-side applied), the round state machine, the status (written only here),
//! harvesting agent reports into the store, and clean-up.

pub mod announce;
pub mod carrier;
pub mod carrier_set;
pub mod conditions;
pub mod context;
pub mod controller;
pub mod deletions;
pub mod drift;
pub mod ensure;
pub mod export;
pub mod fenced;
pub mod grants;
pub mod harvest;
pub mod harvest_loop;
pub mod identity;
pub mod markers;
pub mod metrics;
pub mod options;
pub mod plan;
pub mod pod_security;
pub mod readiness;
pub mod reconcile;
pub mod references;
pub mod replica;
pub mod rounds;
pub mod streaks;
pub mod task;
pub mod task_metrics;
pub mod watch_backoff;
