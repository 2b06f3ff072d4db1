//! What every reconcile shares: the client, the store, the configuration, caches of agent
//! workloads and pods, the harvester, the event recorder and the metrics.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Pod;
use kdoctor_api::config::Config;
use kdoctor_api::task::RuntimeStatus;
use kdoctor_store::Store;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store as Cache};
use kube::{Client, Resource, ResourceExt};

use crate::harvest::Harvester;
use crate::metrics::ControllerMetrics;
use crate::options::ControllerOptions;
use crate::readiness::{AgentPod, agent_pod};

/// In-memory views of the agent objects in the controller's namespace (label
/// `app.kubernetes.io/component=agent`), kept by watches: reading them costs no API request.
#[derive(Clone)]
pub struct Caches {
    /// Agent pods.
    pub pods: Cache<Pod>,
    /// Agent DaemonSets (the default agent and per-task carriers).
    pub daemonsets: Cache<DaemonSet>,
    /// Per-task Deployment carriers.
    pub deployments: Cache<Deployment>,
}

impl Caches {
    /// The DaemonSet `name` in `namespace`.
    pub fn daemonset(&self, namespace: &str, name: &str) -> Option<Arc<DaemonSet>> {
        self.daemonsets.get(&ObjectRef::new(name).within(namespace))
    }

    /// The Deployment `name` in `namespace`.
    pub fn deployment(&self, namespace: &str, name: &str) -> Option<Arc<Deployment>> {
        self.deployments
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// Agents whose pod labels include every pair of `selector`, in `namespace`.
    pub fn agents(&self, namespace: &str, selector: &BTreeMap<String, String>) -> Vec<AgentPod> {
        let mut agents: Vec<AgentPod> = self
            .pods
            .state()
            .iter()
            .filter(|pod| pod.namespace().as_deref() == Some(namespace))
            .filter(|pod| {
                let labels = pod.labels();
                selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
            .filter_map(|pod| agent_pod(pod))
            .collect();
        agents.sort();
        agents
    }
}

/// The state shared by all reconciles.
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// The report store.
    pub store: Arc<Store>,
    /// `conf.yml`.
    pub config: Arc<Config>,
    /// Controller settings.
    pub options: ControllerOptions,
    /// Caches of agent workloads and pods.
    pub caches: Caches,
    /// Report harvesting.
    pub harvester: Harvester,
    /// Kubernetes Events.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: ControllerMetrics,
    /// State of every per-task carrier, by task UID (for the carriers gauge).
    pub carriers: Mutex<BTreeMap<String, RuntimeStatus>>,
}

impl Context {
    /// Records the state of a task's own carrier (`None`: the task is gone or has none) and
    /// updates the carriers gauge.
    pub fn track_carrier(&self, uid: &str, state: Option<RuntimeStatus>) {
        let mut carriers = self.carriers.lock().unwrap_or_else(|p| p.into_inner());
        match state {
            Some(state) => carriers.insert(uid.to_string(), state),
            None => carriers.remove(uid),
        };
        for state in [
            RuntimeStatus::Creating,
            RuntimeStatus::Created,
            RuntimeStatus::Deleted,
        ] {
            let count = carriers.values().filter(|s| **s == state).count();
            self.metrics
                .carriers
                .with_label_values(&[state.as_str()])
                .set(count as i64);
        }
    }

    /// Publishes an Event on `object`; a failure is logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            // The Events API caps notes at 1 kB.
            note: Some(note.chars().take(1000).collect()),
            action: reason.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &object.object_ref(&())).await {
            tracing::warn!(reason, error = %e, "could not publish an Event");
        }
    }
}
