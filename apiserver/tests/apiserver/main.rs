//! The kdoctor-apiserver test suite (one binary).

mod access;
mod certs;
mod connections;
mod delegated;
mod discovery;
mod fake_kube;
mod frontproxy;
mod hostile;
mod kube_client;
mod kubectl;
mod real_rbac;
mod replicas;
mod reports;
mod support;
mod watch;
