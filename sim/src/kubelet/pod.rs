//! One pod on one of kube-sim's nodes, from the moment the scheduler binds it until it is gone:
//! on a process node its network namespace, volumes and containers (real processes); on a
//! simulated node an address and a Running status. It writes the pod's status as it changes,
//! and when the pod is deleted it stops the containers within the grace period, releases the
//! network, and removes the pod from the API, as a kubelet does.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::container::{self, Container, PodEvent, RestartPolicy};
use super::env::{self, EnvSources};
use super::launch::{Bind, Launch};
use super::nodes::NodeSpec;
use super::sandbox::{CniConfig, Sandbox};
use super::status::{PodView, status_json};
use super::volumes::{self, PodVolumes};

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

/// An image kube-sim can run: the repository (any tag) and the host program that is its
/// entrypoint, placed at `/usr/bin/<file name>` in the container, run as the distroless
/// `nonroot` user (65532) unless the pod says otherwise — as the kdoctor image is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// e.g. ghcr.io/kdoctor-io/kdoctor
    pub repository: String,
    /// The program on this host.
    pub program: PathBuf,
}

/// The user of distroless' `nonroot` images.
pub const IMAGE_USER: u32 = 65532;

impl Image {
    /// From `REPOSITORY=PROGRAM`.
    pub fn parse(s: &str) -> Option<Self> {
        let (repository, program) = s.split_once('=')?;
        Some(Image {
            repository: repository.to_string(),
            program: PathBuf::from(program),
        })
    }

    /// The entrypoint inside the container.
    pub fn entrypoint(&self) -> String {
        let name = self
            .program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        format!("/usr/bin/{name}")
    }

    /// Whether `image` (with a tag or digest) is this one.
    pub fn matches(&self, image: &str) -> bool {
        let repo = image.split('@').next().unwrap_or(image);
        // A ':' after the last '/' starts the tag (a registry's port comes before it).
        let repo = match repo.rfind(':') {
            Some(i) if i > repo.rfind('/').unwrap_or(0) => &repo[..i],
            _ => repo,
        };
        repo == self.repository
    }
}

/// Network sysctls a pod may set without the node allowing unsafe ones (Kubernetes' safe set).
pub const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// What every pod worker shares.
pub struct Ctx {
    /// The API.
    pub client: Client,
    /// CNI plugins and state.
    pub cni: CniConfig,
    /// Pods' directories live under `<work_dir>/pods/<uid>`.
    pub work_dir: PathBuf,
    /// Images that run.
    pub images: Vec<Image>,
    /// pod-init's program (this binary).
    pub init_program: PathBuf,
    /// The cluster DNS's Service addresses (the pods' nameservers) and domain.
    pub nameservers: Vec<IpAddr>,
    /// cluster.local.
    pub cluster_domain: String,
    /// Pod CIDRs per node, as kube-controller-manager allocated them.
    pub cidrs: watch::Receiver<BTreeMap<String, Vec<IpNet>>>,
    /// Every Service (for the containers' Service variables).
    pub services: Store<Service>,
    /// Addresses given to simulated pods, per node.
    pub simulated: Mutex<BTreeMap<String, BTreeSet<IpAddr>>>,
    /// The interface simulated pods' addresses are put on: they exist in the node network
    /// (a connection gets a reset, as from a pod whose container does not listen), and a test
    /// in the cluster's namespace can serve on them as a stand-in for the pod's process.
    pub simulated_interface: String,
    /// Nodes whose kubelet is silent (the chaos suite's dead nodes).
    pub down: super::down::Down,
}

impl Ctx {
    fn image(&self, name: &str) -> Option<&Image> {
        self.images.iter().find(|i| i.matches(name))
    }

    /// The next free address of `node`'s pod CIDRs, one per family (simulated pods).
    fn allocate(&self, node: &str, cidrs: &[IpNet]) -> Vec<IpAddr> {
        let mut taken = self.simulated.lock().unwrap_or_else(|e| e.into_inner());
        let used = taken.entry(node.to_string()).or_default();
        let mut out = Vec::new();
        for c in cidrs {
            // .0 is the network, .1 the gateway (as host-local leaves them).
            if let Some(ip) = (2u128..1 << 20)
                .map_while(|n| super::address::nth(c, n))
                .find(|ip| !used.contains(ip))
            {
                used.insert(ip);
                out.push(ip);
            }
        }
        out
    }

    /// Puts (or takes off, `add` false) simulated pods' addresses on the node network.
    async fn local_addresses(&self, ips: &[IpAddr], add: bool) {
        for ip in ips {
            let len = if ip.is_ipv4() { "32" } else { "128" };
            let mut cmd = tokio::process::Command::new("ip");
            cmd.args(["address", if add { "replace" } else { "del" }])
                .arg(format!("{ip}/{len}"))
                .args(["dev", &self.simulated_interface]);
            if add && ip.is_ipv6() {
                cmd.arg("nodad");
            }
            match cmd.output().await {
                Ok(out) if out.status.success() => {}
                Ok(out) => {
                    tracing::warn!(%ip, error = %String::from_utf8_lossy(&out.stderr).trim(), "a simulated pod's address")
                }
                Err(e) => {
                    tracing::warn!(%ip, error = %e, "running ip for a simulated pod's address")
                }
            }
        }
    }

    fn release(&self, node: &str, ips: &[IpAddr]) {
        let mut taken = self.simulated.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(used) = taken.get_mut(node) {
            for ip in ips {
                used.remove(ip);
            }
        }
    }

    /// Services whose variables a pod's containers get: `default/kubernetes`, then (unless
    /// enableServiceLinks is false) every Service of the pod's namespace.
    fn linked_services(&self, pod: &Value) -> Vec<Value> {
        let ns = s(pod, "/metadata/namespace");
        let links = pod
            .pointer("/spec/enableServiceLinks")
            .and_then(Value::as_bool)
            != Some(false);
        let mut all: Vec<Value> = self
            .services
            .state()
            .iter()
            .filter(|svc| {
                let svc_ns = svc.metadata.namespace.as_deref().unwrap_or("");
                let name = svc.metadata.name.as_deref().unwrap_or("");
                (svc_ns == "default" && name == "kubernetes") || (links && svc_ns == ns)
            })
            .filter_map(|svc| serde_json::to_value(svc.as_ref()).ok())
            .collect();
        all.sort_by_key(|svc| {
            !(s(svc, "/metadata/namespace") == "default"
                && s(svc, "/metadata/name") == "kubernetes")
        });
        all
    }
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The (type, status) of each of a pod status's conditions.
fn condition_states(status: &Value) -> BTreeSet<(String, String)> {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| (s(c, "/type").to_string(), s(c, "/status").to_string()))
        .collect()
}

/// A pod worker's inbox: the latest object, or None once the pod left the API.
pub type PodUpdates = watch::Receiver<Option<Pod>>;

/// Runs the pod until it is gone.
pub async fn run(ctx: Arc<Ctx>, node: NodeSpec, mut updates: PodUpdates) {
    let Some(first) = updates.borrow().clone() else {
        return;
    };
    let Ok(pod) = serde_json::to_value(&first) else {
        return;
    };
    let mut worker = Worker::new(ctx, node, pod);
    worker.live(&mut updates).await;
    worker.finish().await;
}

struct Worker {
    ctx: Arc<Ctx>,
    node: NodeSpec,
    pod: Value,
    dir: PathBuf,
    view: PodView,
    sandbox: Option<Sandbox>,
    containers: Vec<(String, String, Container)>,
    events: mpsc::UnboundedSender<PodEvent>,
    event_rx: mpsc::UnboundedReceiver<PodEvent>,
    recorder: Recorder,
    written: Value,
    /// The pod's volumes once set up (kept for refreshes).
    volumes: Option<PodVolumes>,
}

impl Worker {
    fn new(ctx: Arc<Ctx>, node: NodeSpec, pod: Value) -> Self {
        let uid = s(&pod, "/metadata/uid").to_string();
        let dir = ctx.work_dir.join("pods").join(&uid);
        let (events, event_rx) = mpsc::unbounded_channel();
        let recorder = Recorder::new(
            ctx.client.clone(),
            Reporter {
                controller: "kubelet".into(),
                instance: Some(node.name.clone()),
            },
        );
        let view = PodView {
            host_ips: node.ips.clone(),
            start_time: now(),
            ..Default::default()
        };
        Worker {
            ctx,
            node,
            pod,
            dir,
            view,
            sandbox: None,
            containers: Vec::new(),
            events,
            event_rx,
            recorder,
            written: Value::Null,
            volumes: None,
        }
    }

    fn ns(&self) -> String {
        s(&self.pod, "/metadata/namespace").to_string()
    }

    fn name(&self) -> String {
        s(&self.pod, "/metadata/name").to_string()
    }

    fn deleting(&self) -> bool {
        self.pod
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null())
    }

    async fn event(&self, reason: &str, message: &str, warning: bool) {
        let Ok(pod) = serde_json::from_value::<Pod>(self.pod.clone()) else {
            return;
        };
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(message.chars().take(1024).collect()),
            action: reason.into(),
            secondary: None,
        };
        use kube::Resource;
        if let Err(e) = self.recorder.publish(&event, &pod.object_ref(&())).await {
            tracing::debug!(pod = %self.name(), error = %e, "publishing an Event");
        }
    }

    /// Writes the status when it differs from the last one written.
    async fn write_status(&mut self) {
        if let Some(ips) = self.sandbox.as_ref().map(|s| s.ips.clone()) {
            self.view.pod_ips = ips;
        }
        // A simulated pod's containers are its view's own (always running); a process pod's
        // come from its supervisors.
        if !self.containers.is_empty() {
            self.view.containers = self
                .containers
                .iter()
                .map(|(name, image, c)| (name.clone(), image.clone(), c.status.borrow().clone()))
                .collect();
        }
        let status = status_json(&self.pod, &self.view, &now());
        let mut comparable = status.clone();
        let mut previous = self.written.clone();
        for v in [&mut comparable, &mut previous] {
            if let Some(conds) = v.get_mut("conditions").and_then(Value::as_array_mut) {
                for c in conds {
                    c["lastTransitionTime"] = Value::Null;
                }
            }
        }
        if comparable == previous {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ns());
        let mut patch = json!({"status": status});
        // The pod's addresses replace those of an earlier sandbox (a kube-sim restart gives the
        // pod a new one): a strategic merge would otherwise add to the list.
        for list in ["podIPs", "hostIPs"] {
            if let Some(ips) = patch["status"].get_mut(list).and_then(Value::as_array_mut) {
                ips.push(json!({"$patch": "replace"}));
            }
        }
        match api
            .patch_status(
                &self.name(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(p) => {
                self.written = status;
                if let Ok(v) = serde_json::to_value(&p) {
                    // Keep the newest object for condition times; the spec cannot change.
                    self.pod["status"] = v["status"].clone();
                }
            }
            Err(e) => tracing::warn!(pod = %self.name(), error = %e, "writing the pod's status"),
        }
    }

    /// Takes the newest object; false when the pod is gone or now being deleted.
    fn take_update(&mut self, updates: &mut PodUpdates) -> bool {
        let Some(p) = updates.borrow_and_update().clone() else {
            return false;
        };
        if let Ok(v) = serde_json::to_value(&p) {
            if s(&v, "/metadata/uid") != s(&self.pod, "/metadata/uid") {
                return false;
            }
            // Someone else changed the pod's conditions (the node controller marks the pods of
            // a node it lost not ready, and may do so after the node came back): written again
            // at the next tick, as the kubelet's status manager reconciles its own.
            if !self.written.is_null()
                && condition_states(&v["status"]) != condition_states(&self.written)
            {
                self.written = Value::Null;
            }
            self.pod = v;
        }
        !self.deleting()
    }

    /// Waits `d` while following the pod; false when it is gone or being deleted.
    async fn pause(&mut self, updates: &mut PodUpdates, d: Duration) -> bool {
        let deadline = tokio::time::sleep(d);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = &mut deadline => return !self.deleting(),
                changed = updates.changed() => {
                    if changed.is_err() || !self.take_update(updates) {
                        return false;
                    }
                }
            }
        }
    }

    /// From binding to deletion: sets the pod up, then follows its changes.
    async fn live(&mut self, updates: &mut PodUpdates) {
        if !self.deleting() && !self.start(updates).await {
            return;
        }
        let mut refresh = tokio::time::interval(Duration::from_secs(10));
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A process pod's containers change on their own; a simulated pod's never do.
        let mut statuses = tokio::time::interval(if self.node.processes {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(3600)
        });
        loop {
            if self.deleting() {
                return;
            }
            if self.ctx.down.is_down(&self.node.name) {
                // A dead node's kubelet writes nothing and acts on nothing until it is back;
                // then it takes the newest object (a deletion meanwhile among it).
                // (What the node controller changed meanwhile, take_update sees.)
                self.ctx.down.node(&self.node.name).wait_up().await;
                continue;
            }
            tokio::select! {
                changed = updates.changed() => {
                    if changed.is_err() || !self.take_update(updates) {
                        return;
                    }
                }
                Some((reason, message, warning)) = self.event_rx.recv() => {
                    self.event(&reason, &message, warning).await;
                }
                _ = refresh.tick() => self.refresh_volumes().await,
                _ = statuses.tick() => self.write_status().await,
            }
        }
    }

    /// Rewrites the volumes whose sources changed, and renews tokens that are due (the same
    /// PodVolumes keeps each token until 80% of its life).
    async fn refresh_volumes(&mut self) {
        let Some(mut vols) = self.volumes.take() else {
            return;
        };
        if let Err(e) = vols.sync(&self.pod).await {
            tracing::debug!(pod = %self.name(), error = %e, "refreshing volumes");
        }
        self.volumes = Some(vols);
    }

    /// Sets the pod up; false when it went away meanwhile.
    async fn start(&mut self, updates: &mut PodUpdates) -> bool {
        let cidrs = self.node_cidrs().await;
        if !self.node.processes {
            self.view.pod_ips = if self
                .pod
                .pointer("/spec/hostNetwork")
                .and_then(Value::as_bool)
                == Some(true)
            {
                self.node.ips.clone()
            } else {
                let ips = self.ctx.allocate(&self.node.name, &cidrs);
                self.ctx.local_addresses(&ips, true).await;
                ips
            };
            let containers: Vec<(String, String)> = self
                .container_specs()
                .iter()
                .map(|c| (s(c, "/name").to_string(), s(c, "/image").to_string()))
                .collect();
            self.view.containers = containers
                .into_iter()
                .map(|(n, i)| {
                    (
                        n,
                        i,
                        container::Status {
                            state: container::State::Running { started_at: now() },
                            last: None,
                            ready: true,
                            started: true,
                            restarts: 0,
                            container_id: String::new(),
                        },
                    )
                })
                .collect();
            self.write_status().await;
            return true;
        }
        if let Err((reason, message)) = self.check_sysctls() {
            self.view.rejected = Some((reason.clone(), message.clone()));
            self.event(&reason, &message, true).await;
            self.write_status().await;
            return true;
        }
        self.view.containers = self
            .container_specs()
            .iter()
            .map(|c| {
                (
                    s(c, "/name").to_string(),
                    s(c, "/image").to_string(),
                    container::Status::creating(),
                )
            })
            .collect();
        self.write_status().await;
        if let Err(e) = std::fs::create_dir_all(&self.dir) {
            tracing::warn!(pod = %self.name(), error = %e, "creating the pod's directory");
            return true;
        }
        // The network, retried until it exists (the node's CIDR may still be on its way).
        let host_network = self
            .pod
            .pointer("/spec/hostNetwork")
            .and_then(Value::as_bool)
            == Some(true);
        if !host_network {
            loop {
                match Sandbox::create(
                    &self.ctx.cni,
                    s(&self.pod, "/metadata/uid"),
                    &self.node.name,
                    &self.node_cidrs().await,
                )
                .await
                {
                    Ok(sb) => {
                        self.sandbox = Some(sb);
                        break;
                    }
                    Err(e) => {
                        self.event("FailedCreatePodSandBox", &e, true).await;
                        if !self.pause(updates, Duration::from_secs(2)).await {
                            return false;
                        }
                    }
                }
            }
        }
        self.view.pod_ips = match &self.sandbox {
            Some(sb) => sb.ips.clone(),
            None => self.node.ips.clone(),
        };
        // Volumes, retried until their sources exist (as the kubelet's FailedMount).
        let mut vols = PodVolumes::new(self.ctx.client.clone(), &self.pod, &self.dir);
        loop {
            match vols.sync(&self.pod).await {
                Ok(()) => break,
                Err(e) => {
                    self.event("FailedMount", &e, true).await;
                    if !self.pause(updates, Duration::from_secs(2)).await {
                        return false;
                    }
                }
            }
        }
        let paths = vols.paths.clone();
        self.volumes = Some(vols);
        if let Err(e) = self.write_etc() {
            tracing::warn!(pod = %self.name(), error = %e, "writing the pod's /etc files");
        }
        for c in self.container_specs() {
            let name = s(&c, "/name").to_string();
            let image = s(&c, "/image").to_string();
            let started = match self.prepare(&c, &paths).await {
                Ok(spec) => Container::start(spec, self.events.clone()),
                Err((reason, message)) => {
                    self.event("Failed", &format!("Error: {message}"), true)
                        .await;
                    failed_container(&reason, &message)
                }
            };
            self.containers.push((name, image, started));
        }
        self.write_status().await;
        true
    }

    fn container_specs(&self) -> Vec<Value> {
        self.pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    /// The node's pod CIDRs, once kube-controller-manager allocated them. Waited for as long
    /// as it takes (with thousands of nodes, minutes): a pod without an address would be
    /// Ready and unreachable, where a real kubelet's sandbox waits for the node's CIDR.
    async fn node_cidrs(&self) -> Vec<IpNet> {
        let mut rx = self.ctx.cidrs.clone();
        let name = self.node.name.clone();
        loop {
            let wait = rx.wait_for(|m| m.get(&name).is_some_and(|c| !c.is_empty()));
            match tokio::time::timeout(Duration::from_secs(60), wait).await {
                Ok(Ok(m)) => return m.get(&name).cloned().unwrap_or_default(),
                // The CIDRs' watch is gone: kube-sim is shutting down.
                Ok(Err(_)) => return Vec::new(),
                Err(_) => {
                    tracing::warn!(node = %name, "no pod CIDR for the node after 60 s; the pod waits")
                }
            }
        }
    }

    fn check_sysctls(&self) -> Result<(), (String, String)> {
        for sc in self
            .pod
            .pointer("/spec/securityContext/sysctls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = s(sc, "/name");
            if !SAFE_SYSCTLS.contains(&name) {
                return Err((
                    "SysctlForbidden".into(),
                    format!("pod forbidden sysctl: \"{name}\" not allowlisted"),
                ));
            }
        }
        Ok(())
    }

    /// /etc/hosts, /etc/resolv.conf and /etc/hostname, as the kubelet writes them.
    fn write_etc(&self) -> std::io::Result<()> {
        let etc = self.dir.join("etc");
        std::fs::create_dir_all(&etc)?;
        let hostname = match s(&self.pod, "/spec/hostname") {
            "" => self.name(),
            h => h.to_string(),
        };
        let mut hosts = String::from(
            "# Kubernetes-managed hosts file (kube-sim).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        );
        for ip in &self.view.pod_ips {
            hosts.push_str(&format!("{ip}\t{hostname}\n"));
        }
        std::fs::write(etc.join("hosts"), hosts)?;
        std::fs::write(etc.join("hostname"), format!("{hostname}\n"))?;
        let ns = self.ns();
        let domain = &self.ctx.cluster_domain;
        let mut resolv = String::new();
        let policy = s(&self.pod, "/spec/dnsPolicy");
        let config = self.pod.pointer("/spec/dnsConfig");
        if policy != "None" {
            for ip in &self.ctx.nameservers {
                resolv.push_str(&format!("nameserver {ip}\n"));
            }
            resolv.push_str(&format!(
                "search {ns}.svc.{domain} svc.{domain} {domain}\noptions ndots:5\n"
            ));
        }
        if let Some(c) = config {
            for ip in c
                .get("nameservers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                resolv.push_str(&format!("nameserver {ip}\n"));
            }
            let searches: Vec<&str> = c
                .get("searches")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if !searches.is_empty() {
                resolv.push_str(&format!("search {}\n", searches.join(" ")));
            }
        }
        std::fs::write(etc.join("resolv.conf"), resolv)?;
        std::fs::write(
            etc.join("passwd"),
            "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
        )?;
        std::fs::write(etc.join("group"), "root:x:0:\nnonroot:x:65532:\n")?;
        Ok(())
    }

    /// The pod with the addresses this kubelet gave it, which the API may not show yet (the
    /// downward API reads them).
    fn with_addresses(&self) -> Value {
        let mut pod = self.pod.clone();
        let list = |ips: &[IpAddr]| {
            json!(
                ips.iter()
                    .map(|i| json!({"ip": i.to_string()}))
                    .collect::<Vec<_>>()
            )
        };
        if pod.get("status").is_none_or(|st| !st.is_object()) {
            pod["status"] = json!({});
        }
        pod["status"]["podIP"] = json!(self.view.pod_ips.first().map(|i| i.to_string()));
        pod["status"]["podIPs"] = list(&self.view.pod_ips);
        pod["status"]["hostIP"] = json!(self.node.ips.first().map(|i| i.to_string()));
        pod["status"]["hostIPs"] = list(&self.node.ips);
        pod
    }

    /// The launch of one container, or why it cannot start (reason, message).
    async fn prepare(
        &self,
        c: &Value,
        volumes: &BTreeMap<String, PathBuf>,
    ) -> Result<container::Spec, (String, String)> {
        let name = s(c, "/name");
        let image_name = s(c, "/image");
        let image = self.ctx.image(image_name).ok_or_else(|| {
            (
                "ErrImagePull".to_string(),
                format!("kube-sim runs only the images it was given (--image): {image_name} is not one of them"),
            )
        })?;
        let pod_sc = self
            .pod
            .pointer("/spec/securityContext")
            .cloned()
            .unwrap_or(Value::Null);
        let sc = c.get("securityContext").cloned().unwrap_or(Value::Null);
        let field = |k: &str| {
            sc.get(k)
                .filter(|v| !v.is_null())
                .or_else(|| pod_sc.get(k).filter(|v| !v.is_null()))
                .cloned()
        };
        let uid = field("runAsUser")
            .and_then(|v| v.as_u64())
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(IMAGE_USER);
        let gid = field("runAsGroup")
            .and_then(|v| v.as_u64())
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(if uid == IMAGE_USER { IMAGE_USER } else { 0 });
        if field("runAsNonRoot").and_then(|v| v.as_bool()) == Some(true) && uid == 0 {
            return Err((
                "CreateContainerConfigError".into(),
                "container has runAsNonRoot and image will run as root".into(),
            ));
        }
        let capabilities = super::capabilities::kept(&sc)
            .map_err(|e| ("CreateContainerConfigError".to_string(), e))?
            .into_iter()
            .collect();
        let mut groups: Vec<u32> = vec![gid];
        if let Some(g) = pod_sc
            .get("fsGroup")
            .and_then(Value::as_u64)
            .and_then(|g| u32::try_from(g).ok())
        {
            groups.push(g);
        }
        groups.extend(
            pod_sc
                .get("supplementalGroups")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_u64)
                .filter_map(|g| u32::try_from(g).ok()),
        );
        groups.sort_unstable();
        groups.dedup();

        // The environment, with the ConfigMaps and Secrets it reads.
        let ns = self.ns();
        let (maps, secrets) = env::referenced(c);
        let mut src = EnvSources {
            services: self.ctx.linked_services(&self.pod),
            ..Default::default()
        };
        for m in maps {
            if let Ok(Some(data)) = volumes::fetch_config_map(&self.ctx.client, &ns, &m).await {
                src.config_maps.insert(
                    m,
                    data.into_iter()
                        .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
                        .collect(),
                );
            }
        }
        for sec in secrets {
            if let Ok(Some(data)) = volumes::fetch_secret(&self.ctx.client, &ns, &sec).await {
                src.secrets.insert(sec, data);
            }
        }
        let image_env = vec![
            (
                "PATH".to_string(),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
            ),
            (
                "SSL_CERT_FILE".to_string(),
                "/etc/ssl/certs/ca-certificates.crt".to_string(),
            ),
            (
                "HOME".to_string(),
                if uid == 0 {
                    "/root".into()
                } else {
                    "/home/nonroot".to_string()
                },
            ),
        ];
        let env = env::container_env(&self.with_addresses(), c, &image_env, &src)
            .map_err(|m| ("CreateContainerConfigError".to_string(), m))?;
        let strings = |k: &str| -> Vec<String> {
            c.get(k)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|a| env::expand(a, &env))
                .collect()
        };
        let mut argv = strings("command");
        if argv.is_empty() {
            argv.push(image.entrypoint());
        }
        argv.extend(strings("args"));
        if argv[0] != image.entrypoint() {
            return Err((
                "RunContainerError".into(),
                format!(
                    "exec: \"{}\": not found in the image (it holds {})",
                    argv[0],
                    image.entrypoint()
                ),
            ));
        }

        // The image's files, the pod's /etc files, then the volumes at their mount paths.
        let etc = self.dir.join("etc");
        let mut binds = vec![
            Bind {
                source: "/usr/lib".into(),
                target: "/usr/lib".into(),
                read_only: true,
            },
            Bind {
                source: image.program.clone(),
                target: image.entrypoint().into(),
                read_only: true,
            },
            Bind {
                source: "/etc/ssl/certs".into(),
                target: "/etc/ssl/certs".into(),
                read_only: true,
            },
            Bind {
                source: "/usr/share/ca-certificates".into(),
                target: "/usr/share/ca-certificates".into(),
                read_only: true,
            },
        ];
        if Path::new("/usr/lib64").exists() {
            binds.push(Bind {
                source: "/usr/lib64".into(),
                target: "/usr/lib64".into(),
                read_only: true,
            });
        }
        for f in ["passwd", "group", "hostname", "hosts", "resolv.conf"] {
            binds.push(Bind {
                source: etc.join(f),
                target: PathBuf::from("/etc").join(f),
                read_only: f != "hosts" && f != "resolv.conf",
            });
        }
        for m in c
            .get("volumeMounts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let volume = s(m, "/name");
            let Some(source) = volumes.get(volume) else {
                return Err((
                    "CreateContainerConfigError".into(),
                    format!(
                        "volume \"{volume}\" of mount {} is not defined",
                        s(m, "/mountPath")
                    ),
                ));
            };
            let source = match s(m, "/subPath") {
                "" => source.clone(),
                sub => source.join(sub),
            };
            binds.push(Bind {
                source,
                target: s(m, "/mountPath").into(),
                read_only: m.get("readOnly").and_then(Value::as_bool).unwrap_or(false),
            });
        }
        let sysctls = self
            .pod
            .pointer("/spec/securityContext/sysctls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|x| (s(x, "/name").to_string(), s(x, "/value").to_string()))
            .collect();
        let hostname = match s(&self.pod, "/spec/hostname") {
            "" => self.name(),
            h => h.to_string(),
        };
        let launch = Launch {
            netns: self.sandbox.as_ref().map(|sb| sb.netns.clone()),
            hostname,
            root: self.dir.join("roots").join(name),
            binds,
            sysctls,
            read_only_root: sc.get("readOnlyRootFilesystem").and_then(Value::as_bool) == Some(true),
            uid,
            gid,
            groups,
            no_new_privs: sc.get("allowPrivilegeEscalation").and_then(Value::as_bool)
                == Some(false),
            capabilities,
            workdir: s(c, "/workingDir").to_string(),
            argv,
            env,
        };
        let launch_file = self.dir.join(format!("launch-{name}.json"));
        let text = serde_json::to_vec_pretty(&launch)
            .map_err(|e| ("RunContainerError".to_string(), e.to_string()))?;
        std::fs::write(&launch_file, text)
            .map_err(|e| ("RunContainerError".to_string(), e.to_string()))?;
        let ip = self
            .view
            .pod_ips
            .first()
            .copied()
            .unwrap_or(IpAddr::from([127, 0, 0, 1]));
        let grace = self
            .pod
            .pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(30);
        Ok(container::Spec {
            name: name.to_string(),
            init_program: self.ctx.init_program.clone(),
            launch_file,
            log: self.dir.join(format!("{name}.log")),
            restart: RestartPolicy::parse(s(&self.pod, "/spec/restartPolicy")),
            startup: super::probe::parse(c, "startupProbe", ip),
            readiness: super::probe::parse(c, "readinessProbe", ip),
            liveness: super::probe::parse(c, "livenessProbe", ip),
            grace: Duration::from_secs(grace),
            id_prefix: format!("{}-{name}", s(&self.pod, "/metadata/uid")),
            down: self.ctx.down.node(&self.node.name),
        })
    }

    /// Stops everything the pod has on the node and, when it was deleted gracefully, removes it
    /// from the API (the kubelet's final delete with grace 0).
    async fn finish(mut self) {
        // A pod deleted gracefully gets its grace period; one that vanished (forced, or this
        // kubelet stopping) the kubelet's minimum of 2 s.
        let grace = if self.deleting() {
            self.pod
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_u64)
                .unwrap_or(30)
                .max(2)
        } else {
            2
        };
        for (_, _, c) in std::mem::take(&mut self.containers) {
            c.stop(Duration::from_secs(grace)).await;
        }
        if let Some(sb) = self.sandbox.take() {
            sb.destroy(&self.ctx.cni).await;
        }
        let host_network = self
            .pod
            .pointer("/spec/hostNetwork")
            .and_then(Value::as_bool)
            == Some(true);
        if !self.node.processes && !host_network {
            self.ctx.local_addresses(&self.view.pod_ips, false).await;
            self.ctx.release(&self.node.name, &self.view.pod_ips);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if self.deleting() {
            let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ns());
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(s(&self.pod, "/metadata/uid").to_string()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&self.name(), &dp).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => {
                    tracing::warn!(pod = %self.name(), error = %e, "removing the terminated pod")
                }
            }
        }
    }
}

fn failed_container(reason: &str, message: &str) -> Container {
    Container::failed(container::Status::failed(reason, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_changed_by_someone_else_is_told_from_a_new_probe_time() {
        let written = json!({"conditions": [
            {"type": "Ready", "status": "True", "lastProbeTime": null},
            {"type": "PodScheduled", "status": "True"}]});
        let same = json!({"conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-27T10:00:00Z"}]});
        let marked = json!({"conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "NodeNotReady"}]});
        assert_eq!(condition_states(&written), condition_states(&same));
        assert_ne!(condition_states(&written), condition_states(&marked));
    }

    #[test]
    fn images_match_by_repository_whatever_the_tag() {
        let image =
            Image::parse("ghcr.io/kdoctor-io/kdoctor=/work/target/debug/kdoctor").expect("image");
        assert_eq!(image.entrypoint(), "/usr/bin/kdoctor");
        assert!(image.matches("ghcr.io/kdoctor-io/kdoctor:0.1.0"));
        assert!(image.matches("ghcr.io/kdoctor-io/kdoctor@sha256:abc"));
        assert!(image.matches("ghcr.io/kdoctor-io/kdoctor"));
        assert!(!image.matches("ghcr.io/kdoctor-io/kdoctor-agent:0.1.0"));
        let with_port = Image::parse("registry:5000/kdoctor=/bin/kdoctor").expect("image");
        assert!(with_port.matches("registry:5000/kdoctor:v1"));
        assert!(!with_port.matches("registry:5001/kdoctor:v1"));
        assert!(Image::parse("no-program").is_none());
    }
}
