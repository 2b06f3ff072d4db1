//! The stages the simulator plays unless told otherwise: nodes become Ready, bound pods become
//! Running and Ready, terminating pods are removed; plus fault stages that act only on objects
//! annotated `kube-sim.kdoctor.io/fault` (`not-ready` for nodes, `stuck-pending` and
//! `crash-loop` for pods), so a test picks a fault per object.

use crate::stages::model::{CompiledStage, StageError, parse_stages};

/// Annotation that selects a fault stage for one object.
pub const FAULT_ANNOTATION: &str = "kube-sim.kdoctor.io/fault";

/// The default stages' YAML, in the order they are listed.
pub const DEFAULT_STAGES: &[(&str, &str)] = &[
    (
        "node-initialize",
        include_str!("../../stages/node-initialize.yaml"),
    ),
    (
        "node-not-ready",
        include_str!("../../stages/node-not-ready.yaml"),
    ),
    ("pod-ready", include_str!("../../stages/pod-ready.yaml")),
    (
        "pod-stuck-pending",
        include_str!("../../stages/pod-stuck-pending.yaml"),
    ),
    (
        "pod-crash-loop",
        include_str!("../../stages/pod-crash-loop.yaml"),
    ),
    ("pod-delete", include_str!("../../stages/pod-delete.yaml")),
];

/// The default stages, parsed.
pub fn default_stages() -> Result<Vec<CompiledStage>, StageError> {
    let mut out = Vec::new();
    for (_, yaml) in DEFAULT_STAGES {
        out.extend(parse_stages(yaml)?);
    }
    Ok(out)
}
