//! `kdoctor certs`: the install's certificates as Kubernetes objects — the CA Secret
//! `kdoctor-ca` (agents trust it; the controller signs the harvester's client certificate with
//! it), the controller's serving certificate `kdoctor-controller-cert` for
//! `kdoctor-controller.<namespace>.svc`, and the APIService with that CA as its caBundle. Pipe
//! it to `kubectl apply -f -` after `kubectl apply -f manifests/`.
//!
//! With `--dir`, the CA is kept there (`ca.crt`, `ca.key`, created on first use) so running the
//! command again renews the serving certificate under the same CA instead of replacing the CA.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use base64::Engine;
use kdoctor_apiserver::pki::Ca;
use serde_json::{Value, json};

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

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text.as_bytes())
}

fn labels(component: &str) -> Value {
    json!({
        "app.kubernetes.io/name": "kdoctor",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "kdoctor",
    })
}

/// The objects, for `namespace`.
pub fn objects(ca: &Ca, namespace: &str, cluster_domain: &str) -> Result<Vec<Value>> {
    let service = "kdoctor-controller";
    let names = vec![
        format!("{service}.{namespace}.svc"),
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc.{cluster_domain}"),
    ];
    let serving = ca
        .serving(&names)
        .context("issuing the controller's serving certificate")?;
    Ok(vec![
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "kdoctor-ca", "namespace": namespace, "labels": labels("ca")},
            "type": "Opaque",
            "data": {"ca.crt": b64(&ca.pem.cert), "ca.key": b64(&ca.pem.key)},
        }),
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "kdoctor-controller-cert", "namespace": namespace, "labels": labels("controller")},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": b64(&serving.cert), "tls.key": b64(&serving.key), "ca.crt": b64(&ca.pem.cert)},
        }),
        json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1beta1.system.kdoctor.io", "labels": labels("apiserver")},
            "spec": {
                "group": kdoctor_apiserver::GROUP,
                "version": kdoctor_apiserver::VERSION,
                "groupPriorityMinimum": 1000,
                "versionPriority": 100,
                "service": {"namespace": namespace, "name": service, "port": 443},
                "caBundle": b64(&ca.pem.cert),
            },
        }),
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
    print!("{}", render(&objects, args.output)?);
    Ok(ExitCode::SUCCESS)
}
