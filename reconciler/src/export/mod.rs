//! Report export: every stored agent round report pushed to an HTTPS receiver as a signed
//! CloudEvent, so other systems get results without polling (docs/controller.md, "Exporting
//! reports"). The harvester offers each stored report to a bounded in-memory queue without
//! waiting; workers deliver it with retries. Nothing here can slow harvesting down.

pub mod event;
pub mod sender;
pub mod sign;

pub use event::Exported;
pub use sender::{ExportConfig, ExportError, ExportHook, ExportMetrics, Offered, start};
