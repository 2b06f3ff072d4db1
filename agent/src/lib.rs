//! kdoctor-agent: the probe targets every agent serves (echo API over HTTP and HTTPS, health,
//! metrics) and the constant-rate HTTP and DNS prober that measures them.

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
pub mod udp_echo;
