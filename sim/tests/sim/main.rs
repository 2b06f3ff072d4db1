//! kube-sim's integration tests: API semantics through kube-rs and kubectl.

mod aggregation;
mod api;
mod auth;
mod cli;
mod kubectl;
mod stages;
mod support;
mod traffic;
mod workloads;
