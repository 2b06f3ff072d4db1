//! kdoctor-agent: the probe targets every agent serves (echo API over HTTP and HTTPS, health,
//! metrics) and the constant-rate HTTP and DNS prober that measures them.

// The TLS helpers and the report API's client live in kdoctor-transport (the controller uses
// them without the probers); re-exported so the agent's paths stay.
pub use kdoctor_transport::{report_client, tls};

pub mod agent;
pub mod cluster;
pub mod config;
pub mod dns_server;
pub mod duration;
pub mod echo;
pub mod fine_timer;
pub mod histogram;
pub mod judge;
pub mod metrics;
pub mod oneshot;
pub mod pacer;
pub mod probe;
pub mod probe_metrics;
pub mod report;
pub mod report_api;
pub mod resource;
pub mod round;
pub mod server;
pub mod spool;
