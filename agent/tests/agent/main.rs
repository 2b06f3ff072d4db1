//! Integration tests of kdoctor-agent against real peers on loopback: the agent's own echo
//! servers, nginx, unbound, and hand-written misbehaving servers.

mod accuracy;
mod connections;
mod dns_probe;
mod echo;
mod http_probe;
mod peers;
mod probe_metrics;
mod report_api;
mod round;
mod support;
