//! What every reconcile shares: the client, the store, the configuration, caches of agent
//! workloads and pods, the harvester, the event recorder and the metrics.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kdoctor_api::config::Config;
use kdoctor_api::task::RuntimeStatus;
use kdoctor_store::{Store, Writes};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store as Cache};
use kube::{Client, Resource, ResourceExt};

use crate::harvest::Harvester;
use crate::metrics::ControllerMetrics;
use crate::options::ControllerOptions;
use crate::readiness::{AgentPod, agent_pod};

/// How long a carrier's Services must list every agent before a round may start (kube-proxy's
/// default minimum sync period is 1 s).
pub const ROUTE_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

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
    /// EndpointSlices of the agents' Services (they carry the Services' labels).
    pub slices: Cache<EndpointSlice>,
    /// The agents' Services (the default agent's and per-task carriers').
    pub services: Cache<Service>,
    /// Per-task carriers' Ingresses.
    pub ingresses: Cache<Ingress>,
    /// When each carrier's Services first listed every ready agent, by workload name.
    pub routed_since: Arc<Mutex<BTreeMap<String, std::time::Instant>>>,
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

    /// The Service `name` in `namespace`.
    pub fn service(&self, namespace: &str, name: &str) -> Option<Arc<Service>> {
        self.services.get(&ObjectRef::new(name).within(namespace))
    }

    /// The Ingress `name` in `namespace`.
    pub fn ingress(&self, namespace: &str, name: &str) -> Option<Arc<Ingress>> {
        self.ingresses.get(&ObjectRef::new(name).within(namespace))
    }

    /// Whether Service traffic reaches every ready agent of the carrier `workload`: each of its
    /// `services` lists at least `agents` ready endpoints, and has for [`ROUTE_SETTLE`] — the
    /// time kube-proxy takes to program what the EndpointSlices say. Without it a round that
    /// starts as soon as the pods are ready sees its first Service requests refused.
    pub fn routed(
        &self,
        namespace: &str,
        workload: &str,
        services: &[String],
        agents: usize,
    ) -> bool {
        let slices: Vec<Arc<EndpointSlice>> = self
            .slices
            .state()
            .into_iter()
            .filter(|s| s.namespace().as_deref() == Some(namespace))
            .collect();
        let complete = agents > 0
            && services.iter().all(|svc| {
                crate::readiness::ready_endpoints(slices.iter().map(|s| s.as_ref()), svc) >= agents
            });
        let mut since = self.routed_since.lock().unwrap_or_else(|p| p.into_inner());
        if !complete {
            since.remove(workload);
            return false;
        }
        since
            .entry(workload.to_string())
            .or_insert_with(std::time::Instant::now)
            .elapsed()
            >= ROUTE_SETTLE
    }

    /// Whether Service `service` has an EndpointSlice (the endpoint controller makes one for
    /// every Service with a selector, even before it has endpoints).
    pub fn has_slices(&self, namespace: &str, service: &str) -> bool {
        self.slices.state().iter().any(|s| {
            s.namespace().as_deref() == Some(namespace)
                && s.labels()
                    .get("kubernetes.io/service-name")
                    .map(String::as_str)
                    == Some(service)
        })
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
    /// The report store, and where its writes go.
    pub writes: Writes,
    /// `conf.yml`.
    pub config: Arc<Config>,
    /// Controller settings.
    pub options: ControllerOptions,
    /// Caches of agent workloads and pods.
    pub caches: Caches,
    /// Report harvesting.
    pub harvester: Harvester,
    /// What the reconciles want harvested (the harvest loop does it).
    pub harvests: Arc<crate::harvest_loop::Harvests>,
    /// Kubernetes Events.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: ControllerMetrics,
    /// State of every per-task carrier, by task UID (for the carriers gauge).
    pub carriers: Mutex<BTreeMap<String, RuntimeStatus>>,
    /// What agents may read of the tasks' Secrets and ConfigMaps.
    pub grants: Arc<crate::grants::Grants>,
}

impl Context {
    /// The report store (read it; write through [`Context::writes`]).
    pub fn store(&self) -> &Arc<Store> {
        self.writes.store()
    }

    /// Where tasks may read their Secrets and ConfigMaps from (see [`kdoctor_api::inputs`]).
    pub fn input_policy(&self) -> kdoctor_api::inputs::InputPolicy {
        self.grants.policy().clone()
    }

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
