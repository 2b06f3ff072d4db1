//! The kdoctor-apiserver test suite (one binary).

mod access;
mod discovery;
mod kubectl;
mod reports;
mod support;
mod watch;
