//! The kdoctor-apiserver test suite (one binary).

mod access;
mod discovery;
mod frontproxy;
mod kube_client;
mod kubectl;
mod reports;
mod support;
mod watch;
