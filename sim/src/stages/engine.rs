//! The stage engine: watches the store, picks the stage an object matches (by weight when
//! several do), waits its delay, re-checks the selector, and plays `next` (event, finalizers,
//! delete or statusTemplate). `immediateNextStage` re-evaluates at once instead of waiting for
//! the write's own watch event.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::cluster::{Cluster, DeleteOptions, WriteOptions, finalizers};
use crate::controllers::{events, info_for};
use crate::error::{ApiError, ApiResult};
use crate::patch::PatchType;
use crate::resources::ResourceInfo;
use crate::stages::funcs::ClusterFuncs;
use crate::stages::model::CompiledStage;
use crate::store::{EventType, ObjectRef};

const MANAGER: &str = "kube-sim-stages";

/// The stages in force; tests may replace them while the cluster runs.
#[derive(Default)]
pub struct StageSet(RwLock<Arc<Vec<CompiledStage>>>);

impl StageSet {
    /// A set holding these stages.
    pub fn new(stages: Vec<CompiledStage>) -> Self {
        StageSet(RwLock::new(Arc::new(stages)))
    }

    /// The current stages.
    pub fn get(&self) -> Arc<Vec<CompiledStage>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the stages (objects already waiting keep their schedule if still matched).
    pub fn set(&self, stages: Vec<CompiledStage>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(stages);
    }
}

/// The stages that match `obj`, and one picked by weight with the cluster's seeded generator.
pub fn choose<'a>(
    c: &Cluster,
    stages: &'a [CompiledStage],
    info: &ResourceInfo,
    obj: &Value,
) -> Option<&'a CompiledStage> {
    let matching: Vec<&CompiledStage> = stages
        .iter()
        .filter(|s| s.applies_to(&info.group, &info.kind) && s.matches(obj))
        .collect();
    if matching.len() <= 1 {
        return matching.into_iter().next();
    }
    let total: u64 = matching.iter().map(|s| u64::from(s.weight())).sum();
    if total == 0 {
        return matching.into_iter().next();
    }
    let mut pick = c.rng().below(total);
    for s in &matching {
        let w = u64::from(s.weight());
        if pick < w {
            return Some(s);
        }
        pick -= w;
    }
    matching.into_iter().next()
}

fn merge_patch(
    c: &Cluster,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    patch: &Value,
    status: bool,
) -> ApiResult<Value> {
    let opts = if status && info.has_subresource("status") {
        WriteOptions::manager(MANAGER).status()
    } else {
        WriteOptions::manager(MANAGER)
    };
    c.patch(
        info,
        ns,
        name,
        PatchType::Merge,
        &serde_json::to_vec(patch).unwrap_or_default(),
        &opts,
    )
}

/// Plays a stage's `next` on an object; returns the object afterwards (None once deleted).
pub fn play(
    c: &Cluster,
    stage: &CompiledStage,
    info: &ResourceInfo,
    obj: &Value,
) -> ApiResult<Option<Value>> {
    let ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let next = &stage.stage.spec.next;
    let mut current = obj.clone();
    if let Some(ev) = &next.event {
        let kind = if ev.type_.is_empty() {
            "Normal"
        } else {
            ev.type_.as_str()
        };
        let component = if info.kind == "Pod" || info.kind == "Node" {
            "kubelet"
        } else {
            MANAGER
        };
        events::record(c, &current, kind, &ev.reason, &ev.message, component);
    }
    if let Some(f) = &next.finalizers {
        let mut list = if f.empty {
            Vec::new()
        } else {
            finalizers(&current)
        };
        list.retain(|x| !f.remove.iter().any(|r| &r.value == x));
        for a in &f.add {
            if !list.contains(&a.value) {
                list.push(a.value.clone());
            }
        }
        if list != finalizers(&current) {
            current = merge_patch(
                c,
                info,
                &ns,
                &name,
                &json!({"metadata": {"finalizers": list}}),
                false,
            )?;
        }
    }
    if next.delete {
        let opts = DeleteOptions {
            grace_period: Some(0),
            ..Default::default()
        };
        return match c.delete(info, &ns, &name, &opts) {
            Ok(_) => Ok(c.store.get(&info.storage, &ns, &name).map(|v| (*v).clone())),
            Err(e) if e.code == 404 => Ok(None),
            Err(e) => Err(e),
        };
    }
    if let Some(t) = &stage.template {
        let rendered = t
            .render(&current, &ClusterFuncs { cluster: c })
            .map_err(|e| ApiError::internal(format!("stage {}: {e}", stage.name())))?;
        let status: Value = serde_yaml::from_str(&rendered).map_err(|e| {
            ApiError::internal(format!(
                "stage {}: rendered status is not YAML: {e}\n{rendered}",
                stage.name()
            ))
        })?;
        current = merge_patch(c, info, &ns, &name, &json!({"status": status}), true)?;
    }
    Ok(Some(current))
}

/// Plays stages on one object, ignoring delays, until none matches or `max_steps` ran; returns
/// the names of the stages played (for golden tests and synchronous setups).
pub fn settle(
    c: &Cluster,
    stages: &[CompiledStage],
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    max_steps: usize,
) -> ApiResult<Vec<String>> {
    let mut played = Vec::new();
    for _ in 0..max_steps {
        let Some(obj) = c.store.get(&info.storage, ns, name) else {
            break;
        };
        let Some(stage) = choose(c, stages, info, &obj) else {
            break;
        };
        played.push(stage.name().to_string());
        if play(c, stage, info, &obj)?.is_none() {
            break;
        }
    }
    Ok(played)
}

struct Pending {
    stage: String,
    seq: u64,
}

/// The running engine's state.
struct Engine {
    cluster: Arc<Cluster>,
    stages: Arc<StageSet>,
    pending: HashMap<ObjectRef, Pending>,
    heap: BinaryHeap<Reverse<(Instant, u64, ObjectRef)>>,
    seq: u64,
}

impl Engine {
    fn consider(&mut self, oref: &ObjectRef, obj: &Value) {
        let Some(info) = info_for(&self.cluster, &oref.storage) else {
            return;
        };
        let stages = self.stages.get();
        if let Some(p) = self.pending.get(oref)
            && stages.iter().any(|s| {
                s.name() == p.stage && s.applies_to(&info.group, &info.kind) && s.matches(obj)
            })
        {
            return;
        }
        let Some(stage) = choose(&self.cluster, &stages, &info, obj) else {
            self.pending.remove(oref);
            return;
        };
        let delay = {
            let c = &self.cluster;
            stage.delay_ms(obj, &mut |n| c.rng().below(n))
        };
        self.seq += 1;
        self.pending.insert(
            oref.clone(),
            Pending {
                stage: stage.name().to_string(),
                seq: self.seq,
            },
        );
        self.heap.push(Reverse((
            Instant::now() + Duration::from_millis(delay),
            self.seq,
            oref.clone(),
        )));
    }

    fn fire_due(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((due, seq, oref))) = self.heap.peek().cloned() {
            if due > now {
                break;
            }
            self.heap.pop();
            let Some(p) = self.pending.get(&oref) else {
                continue;
            };
            if p.seq != seq {
                continue;
            }
            let stage_name = p.stage.clone();
            self.pending.remove(&oref);
            let Some(obj) = self
                .cluster
                .store
                .get(&oref.storage, &oref.namespace, &oref.name)
            else {
                continue;
            };
            let Some(info) = info_for(&self.cluster, &oref.storage) else {
                continue;
            };
            let stages = self.stages.get();
            let Some(stage) = stages.iter().find(|s| s.name() == stage_name) else {
                continue;
            };
            if !stage.matches(&obj) {
                self.consider(&oref, &obj);
                continue;
            }
            match play(&self.cluster, stage, &info, &obj) {
                Ok(Some(after)) if stage.stage.spec.immediate_next_stage => {
                    self.consider(&oref, &after)
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, stage = stage.name(), object = ?oref, "stage failed")
                }
            }
        }
    }

    fn covered(&self, storage: &str) -> bool {
        info_for(&self.cluster, storage).is_some_and(|info| {
            self.stages
                .get()
                .iter()
                .any(|s| s.applies_to(&info.group, &info.kind))
        })
    }

    fn resync(&mut self) {
        for info in self.cluster.catalogue.all() {
            if info.virtual_kind || !self.covered(&info.storage) {
                continue;
            }
            let (items, _) = self.cluster.store.list(&info.storage, None);
            for item in items {
                let oref = crate::controllers::oref(&info.storage, &item);
                self.consider(&oref, &item);
            }
        }
    }
}

/// Runs the stage engine until `shutdown` turns true.
pub fn spawn(
    cluster: Arc<Cluster>,
    stages: Arc<StageSet>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut notify = cluster.store.subscribe();
        let mut cursor = cluster.store.rv();
        let mut engine = Engine {
            cluster: cluster.clone(),
            stages,
            pending: HashMap::new(),
            heap: BinaryHeap::new(),
            seq: 0,
        };
        engine.resync();
        loop {
            match cluster.store.events_since(cursor) {
                Ok(events) => {
                    for e in events {
                        cursor = e.rv;
                        if !engine.covered(&e.storage) {
                            continue;
                        }
                        let oref = ObjectRef {
                            storage: e.storage.to_string(),
                            namespace: e.namespace.clone(),
                            name: e.name.clone(),
                        };
                        if e.kind == EventType::Deleted {
                            engine.pending.remove(&oref);
                        } else {
                            engine.consider(&oref, &e.object);
                        }
                    }
                }
                Err(_) => {
                    cursor = cluster.store.rv();
                    engine.resync();
                }
            }
            engine.fire_due();
            let next_due = engine.heap.peek().map(|Reverse((d, _, _))| *d);
            tokio::select! {
                changed = notify.changed() => if changed.is_err() { return },
                _ = async {
                    match next_due {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending::<()>().await,
                    }
                } => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    })
}
