//! kube-sim: a simulated Kubernetes cluster for kdoctor's system tests.
//!
//! An in-memory API server (discovery, CRUD, patch and server-side apply, watch, selectors,
//! finalizers, garbage collection, CRDs, TokenReview/SubjectAccessReview tables) served over
//! HTTP or HTTPS on loopback, so kube-rs and kubectl talk to it as to a real cluster.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kube_sim::SimError> {
//! let sim = kube_sim::Sim::start(kube_sim::SimConfig::default()).await?;
//! let client = sim.client().await?;
//! # let _ = client; Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod aggregator;
pub mod alloc;
pub mod apply;
pub mod bench;
pub mod bootstrap;
pub mod certs;
pub mod clock;
pub mod cluster;
pub mod controllers;
pub mod convert;
pub mod echo;
pub mod error;
pub mod kinds;
pub mod kubelet;
pub mod listtype;
pub mod net;
pub mod netns;
pub mod patch;
pub mod rbac;
pub mod requests;
pub mod resources;
pub mod reviews;
pub mod rng;
pub mod runner;
pub mod selector;
pub mod server;
pub mod stages;
pub mod store;
pub mod testcluster;

mod sim;

pub use certs::{CertPair, Pki};
pub use cluster::Cluster;
pub use error::ApiError;
pub use reviews::{Reviews, SarRule, UserInfo};
pub use sim::{Ipv6Mode, Sim, SimConfig, SimError};
