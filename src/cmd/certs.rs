//! `kdoctor certs`: the install's certificates as Kubernetes objects — the CA Secret
//! `kdoctor-ca` (agents trust it; the controller signs the harvester's client certificate with
//! it), the controller's serving certificate `kdoctor-controller-cert` for
//! `kdoctor-controller.<namespace>.svc`, and the APIService with that CA as its caBundle. The
//! controller makes these itself when they are missing; this is for bringing your own CA: pipe
//! it to `kubectl apply -f -` before the controller starts.
//!
//! With `--dir`, the CA is kept there (`ca.crt`, `ca.key`, created on first use) so running the
//! command again renews the serving certificate under the same CA instead of replacing the CA.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kdoctor_apiserver::certs::bootstrap::{
    apiservice_object, ca_secret_object, serving_secret_object,
};
use kdoctor_apiserver::certs::renewal::serving_names;
use kdoctor_transport::pki::Ca;
use serde_json::Value;

use super::output::{Format, render};

/// Arguments of `kdoctor certs`.
#[derive(clap::Args)]
pub struct Args {
    /// Namespace of the controller (the serving certificate names its Service there).
    #[arg(long, default_value = "kdoctor")]
    namespace: String,
    /// Cluster DNS domain, for the fully qualified Service name.
    #[arg(long, default_value = "cluster.local")]
    cluster_domain: String,
    /// Keep (or reuse) the CA in DIR instead of generating a new one each time.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Output format (yaml or json).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Yaml)]
    output: Format,
}

/// The objects, for `namespace`.
pub fn objects(ca: &Ca, namespace: &str, cluster_domain: &str) -> Result<Vec<Value>> {
    let service = "kdoctor-controller";
    let serving = ca
        .serving(&serving_names(service, namespace, cluster_domain))
        .context("issuing the controller's serving certificate")?;
    Ok(vec![
        ca_secret_object(ca, namespace, "kdoctor-ca"),
        serving_secret_object(&serving, ca, namespace, "kdoctor-controller-cert"),
        apiservice_object(ca, "v1beta1.system.kdoctor.io", namespace, service),
    ])
}

/// Prints the objects.
pub fn run(args: &Args) -> Result<ExitCode> {
    let ca = match &args.dir {
        Some(dir) => Ca::load_or_create(dir, "kdoctor-ca")
            .with_context(|| format!("the CA in {}", dir.display()))?,
        None => Ca::generate("kdoctor-ca")?,
    };
    let objects = objects(&ca, &args.namespace, &args.cluster_domain)?;
    super::output::print(&render(&objects, args.output)?)?;
    Ok(ExitCode::SUCCESS)
}
