//! `kube-sim kubelet`: kube-sim as the kubelet of a real control plane's nodes (hack/cluster.sh
//! runs it inside the cluster's network namespace). It registers N nodes and renews their
//! Leases, runs the pods the real scheduler binds to them — on process nodes as real processes,
//! each in a network namespace of its own with the standard CNI plugins, its volumes mounted at
//! their paths and its ServiceAccount token projected (see [`pod`], [`launch`]); on the other
//! nodes simulated, with an address and a Running status — and provides what a cluster's
//! add-ons would: the cluster DNS, load-balancer addresses, an ingress controller and volumes
//! for claims. Services are kube-proxy's (the real one, run beside it).

pub mod address;
pub mod capabilities;
pub mod container;
pub mod dispatch;
pub mod dns;
pub mod down;
pub mod env;
pub mod ingress;
pub mod launch;
pub mod loadbalancer;
pub mod nodes;
pub mod pod;
pub mod probe;
pub mod provisioner;
pub mod sandbox;
pub mod status;
pub mod volumes;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

/// The port of the kubelet API on each node (as the kubelet's).
pub const KUBELET_PORT: u16 = 10250;

/// Resolves once `rx` says stop (or its sender is gone); holds no borrow across awaits, so
/// tasks that select on it stay `Send`.
pub async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// What `kube-sim kubelet` is told.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// A kubeconfig for the API server.
    pub kubeconfig: PathBuf,
    /// Nodes node-1..N.
    pub nodes: usize,
    /// node-1..M run real processes.
    pub process_nodes: usize,
    /// Node networks (one per family); node-i has the (10+i)-th address.
    pub node_ranges: Vec<IpNet>,
    /// The interface node addresses are added to.
    pub node_interface: String,
    /// Where the DNS server listens.
    pub dns_ips: Vec<IpAddr>,
    /// The ClusterIPs of kube-system/kube-dns.
    pub dns_service_ips: Vec<IpAddr>,
    /// The ingress controller's addresses.
    pub ingress_ips: Vec<IpAddr>,
    /// Load-balancer pools (one per family).
    pub lb_ranges: Vec<IpNet>,
    /// Images that run, and their programs.
    pub images: Vec<pod::Image>,
    /// State: pods' directories, CNI allocations, volumes.
    pub work_dir: PathBuf,
    /// Prefix of pod network namespace names.
    pub netns_prefix: String,
    /// The CNI plugins.
    pub cni_bin: PathBuf,
    /// How often node Leases are renewed.
    pub lease_renew: Duration,
}

/// Why the kubelet could not start.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    /// Reading the kubeconfig or talking to the API.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The kubeconfig.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// File.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Setting up the node network or a server.
    #[error("{0}")]
    Io(String),
}

async fn client(path: &std::path::Path) -> Result<Client, KubeletError> {
    let bad = |message: String| KubeletError::Kubeconfig {
        path: path.to_path_buf(),
        message,
    };
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    Ok(Client::try_from(config)?)
}

/// Adds the nodes' addresses to the node interface (`ip -batch`, one call for all).
async fn add_node_addresses(
    interface: &str,
    nodes: &[nodes::NodeSpec],
) -> Result<(), KubeletError> {
    let mut batch = String::new();
    for n in nodes {
        for ip in &n.ips {
            let len = if ip.is_ipv4() { 32 } else { 128 };
            let nodad = if ip.is_ipv6() { " nodad" } else { "" };
            batch.push_str(&format!(
                "address replace {ip}/{len} dev {interface}{nodad}\n"
            ));
        }
    }
    let mut child = tokio::process::Command::new("ip")
        .args(["-batch", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| KubeletError::Io(format!("running ip (iproute2): {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        use tokio::io::AsyncWriteExt;
        stdin
            .write_all(batch.as_bytes())
            .await
            .map_err(|e| KubeletError::Io(e.to_string()))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| KubeletError::Io(e.to_string()))?;
    if !out.status.success() {
        return Err(KubeletError::Io(format!(
            "adding the node addresses to {interface}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// A store kept current by a watch of every object of the kind.
fn mirror<K>(client: &Client) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher::watcher(Api::<K>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .applied_objects();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(r) = stream.next().await {
            if let Err(e) = r {
                tracing::debug!(error = %e, "watch (retrying)");
            }
        }
    });
    store
}

/// Follows the nodes' pod CIDRs.
fn follow_cidrs(
    client: &Client,
    names: Vec<String>,
) -> watch::Receiver<BTreeMap<String, Vec<IpNet>>> {
    let (tx, rx) = watch::channel(BTreeMap::new());
    let stream = watcher::watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .applied_objects();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(r) = stream.next().await {
            let Ok(node) = r else { continue };
            let name = node.metadata.name.clone().unwrap_or_default();
            if !names.contains(&name) {
                continue;
            }
            let cidrs = nodes::pod_cidrs(&node);
            tx.send_if_modified(|m| {
                if m.get(&name) == Some(&cidrs) {
                    return false;
                }
                m.insert(name.clone(), cidrs.clone());
                true
            });
        }
    });
    rx
}

/// Runs until `shutdown`; then stops every pod before returning.
pub async fn run(cfg: KubeletConfig, shutdown: watch::Receiver<bool>) -> Result<(), KubeletError> {
    let client = client(&cfg.kubeconfig).await?;
    let version = client.apiserver_version().await?.git_version;
    let node_ranges = address::primary_first(cfg.node_ranges.clone());
    let plan = nodes::plan(cfg.nodes, cfg.process_nodes, &node_ranges);
    add_node_addresses(&cfg.node_interface, &plan).await?;
    tracing::info!(nodes = plan.len(), process_nodes = cfg.process_nodes, %version, "registering nodes");
    nodes::register(&client, &plan, &version).await?;
    let names: Vec<String> = plan.iter().map(|n| n.name.clone()).collect();
    let down = down::Down::follow(cfg.work_dir.join("down-nodes"));
    tokio::spawn(nodes::heartbeat(
        client.clone(),
        names.clone(),
        cfg.lease_renew,
        down.clone(),
        shutdown.clone(),
    ));
    let cidrs = follow_cidrs(&client, names);

    let services: Store<Service> = mirror(&client);
    let slices: Store<EndpointSlice> = mirror(&client);
    let ingresses: Store<Ingress> = mirror(&client);

    dns::publish(&client, &cfg.dns_service_ips, &cfg.dns_ips).await?;
    {
        let (services, slices, ips, stop) = (
            services.clone(),
            slices.clone(),
            cfg.dns_ips.clone(),
            shutdown.clone(),
        );
        tokio::spawn(async move {
            if let Err(e) = dns::serve(services, slices, ips, stop).await {
                tracing::error!(error = %e, "the cluster DNS stopped");
            }
        });
    }
    tokio::spawn(loadbalancer::run(
        client.clone(),
        cfg.lb_ranges.clone(),
        shutdown.clone(),
    ));
    {
        let (client, ingresses, services, ips, stop) = (
            client.clone(),
            ingresses.clone(),
            services.clone(),
            cfg.ingress_ips.clone(),
            shutdown.clone(),
        );
        tokio::spawn(async move {
            if let Err(e) = ingress::run(client, ingresses, services, ips, stop).await {
                tracing::error!(error = %e, "the ingress controller stopped");
            }
        });
    }
    tokio::spawn(provisioner::run(
        client.clone(),
        cfg.work_dir.join("volumes"),
        shutdown.clone(),
    ));

    let init_program =
        std::env::current_exe().map_err(|e| KubeletError::Io(format!("locating kube-sim: {e}")))?;
    let nameservers = cfg.dns_service_ips.clone();
    let ctx = Arc::new(pod::Ctx {
        client: client.clone(),
        cni: sandbox::CniConfig {
            bin_dir: cfg.cni_bin.clone(),
            data_dir: cfg.work_dir.join("cni"),
            netns_prefix: cfg.netns_prefix.clone(),
        },
        work_dir: cfg.work_dir.clone(),
        images: cfg.images.clone(),
        init_program,
        nameservers,
        cluster_domain: dns::CLUSTER_DOMAIN.to_string(),
        cidrs,
        services,
        simulated: Mutex::new(BTreeMap::new()),
        simulated_interface: cfg.node_interface.clone(),
        down,
    });
    dispatch::run(ctx, plan, shutdown).await;
    Ok(())
}
