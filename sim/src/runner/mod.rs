//! The process runner: pods on nodes labelled `kube-sim.kdoctor.io/processes=true` that match
//! the runner's selector are started as real processes with the pod's environment (downward
//! API fields, literal env, ConfigMap and Secret keys), their own kubeconfig and address, and
//! are stopped when the pod goes; a crashed process is restarted with back-off and shown in the
//! pod's container status; a readiness probe decides when the pod is Ready; output goes to one
//! log file per pod.

pub mod env;
pub mod probe;
pub mod process;
pub mod volumes;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use crate::cluster::Cluster;
use crate::controllers::Controller;
use crate::selector::LabelSelector;
use crate::store::StoreEvent;

/// Label that marks a node whose pods run as processes.
pub const PROCESS_NODE_LABEL: &str = "kube-sim.kdoctor.io/processes";

/// What the runner starts.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// The program (e.g. the `kdoctor` binary).
    pub program: PathBuf,
    /// Arguments; when empty, the pod's first container `args` are used. `$(VAR)` is expanded
    /// from the pod's environment as Kubernetes does (`$(POD_IP)`, `$(NODE_NAME)`, ...).
    pub args: Vec<String>,
    /// Pods to run, as a label selector (empty: every pod on a marked node).
    pub selector: String,
    /// Directory for per-pod logs and kubeconfigs.
    pub work_dir: PathBuf,
}

/// Gives the kubeconfig YAML of a pod's process from (namespace, serviceAccount).
pub type KubeconfigFn = Arc<dyn Fn(&str, &str) -> String + Send + Sync>;

/// The runner controller.
pub struct Runner {
    cluster: Arc<Cluster>,
    cfg: RunnerConfig,
    selector: LabelSelector,
    running: HashMap<String, process::Supervisor>,
    dirty: bool,
    kubeconfig: KubeconfigFn,
    pids: process::Pids,
}

impl Runner {
    /// A runner; `kubeconfig(namespace, serviceAccount)` gives the YAML a pod's process uses.
    pub fn new(
        cluster: Arc<Cluster>,
        cfg: RunnerConfig,
        kubeconfig: KubeconfigFn,
        pids: process::Pids,
    ) -> Result<Self, crate::error::ApiError> {
        let selector = LabelSelector::parse(&cfg.selector)?;
        Ok(Runner {
            cluster,
            cfg,
            selector,
            running: HashMap::new(),
            dirty: true,
            kubeconfig,
            pids,
        })
    }

    fn wanted(&self, c: &Cluster) -> HashMap<String, Value> {
        let (nodes, _) = c.store.list("core/nodes", None);
        let marked: std::collections::HashSet<String> = nodes
            .iter()
            .filter(|n| {
                n.pointer(&format!(
                    "/metadata/labels/{}",
                    PROCESS_NODE_LABEL.replace('/', "~1")
                ))
                .and_then(Value::as_str)
                    == Some("true")
            })
            .filter_map(|n| {
                n.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(String::from)
            })
            .collect();
        let mut out = HashMap::new();
        if marked.is_empty() {
            return out;
        }
        let (pods, _) = c.store.list("core/pods", None);
        for p in pods {
            let node = p
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .unwrap_or("");
            let has_ip = p
                .pointer("/status/podIP")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty());
            if marked.contains(node)
                && has_ip
                && p.pointer("/metadata/deletionTimestamp").is_none()
                && self.selector.matches(&p)
            {
                let uid = p
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                out.insert(uid, (*p).clone());
            }
        }
        out
    }
}

impl Controller for Runner {
    fn handle(&mut self, _c: &Cluster, e: &StoreEvent) {
        // Secrets and ConfigMaps: a pod waiting for one it mounts may start now.
        if matches!(
            &*e.storage,
            "core/pods" | "core/nodes" | "core/secrets" | "core/configmaps"
        ) {
            self.dirty = true;
        }
    }

    fn resync(&mut self, _c: &Cluster) {
        self.dirty = true;
    }

    fn flush(&mut self, c: &Cluster) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        let want = self.wanted(c);
        let gone: Vec<String> = self
            .running
            .keys()
            .filter(|k| !want.contains_key(*k))
            .cloned()
            .collect();
        for uid in gone {
            if let Some(s) = self.running.remove(&uid) {
                s.stop();
            }
        }
        for (uid, pod) in want {
            if self.running.contains_key(&uid) {
                continue;
            }
            let missing = volumes::missing_sources(&self.cluster, &pod);
            if !missing.is_empty() {
                tracing::debug!(?missing, "pod process waits for the objects it mounts");
                continue;
            }
            let ns = pod
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("default");
            let sa = pod
                .pointer("/spec/serviceAccountName")
                .and_then(Value::as_str)
                .unwrap_or("default");
            let kubeconfig = (self.kubeconfig)(ns, sa);
            match process::Supervisor::start(
                self.cluster.clone(),
                &self.cfg,
                &pod,
                &kubeconfig,
                self.pids.clone(),
            ) {
                Ok(s) => {
                    self.running.insert(uid, s);
                }
                Err(e) => tracing::warn!(error = %e, "starting a pod process failed"),
            }
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        for (_, s) in self.running.drain() {
            s.stop();
        }
    }
}
