//! kwok-style Stages: lifecycle rules for nodes, pods and any other kind, played by an engine
//! over the store.

pub mod defaults;
pub mod engine;
pub mod funcs;
pub mod jq;
pub mod model;
pub mod template;

pub use defaults::{FAULT_ANNOTATION, default_stages};
pub use engine::StageSet;
pub use model::{CompiledStage, Stage, StageError, parse_stages};
