//! The `kdoctor` command line, run as a user would (one test binary).

mod closed_pipe;
mod docs;
mod image;
mod krew;
mod local;
mod manifests;
mod plugin;
mod store;
mod support;
mod tasks;
