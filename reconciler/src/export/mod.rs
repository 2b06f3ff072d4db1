//! Report export: every stored agent round report pushed to an HTTPS receiver as a signed
//! CloudEvent, so other systems get results without polling (docs/controller.md, "Exporting
//! reports"). Each stored report waits in the store's export outbox (written with it, kept
//! across restarts) until the receiver acknowledges it; workers deliver with retries. Nothing
//! here can slow harvesting down.

pub mod event;
pub mod sender;
pub mod sign;

pub use event::Exported;
pub use sender::{ExportConfig, ExportError, ExportHook, ExportMetrics, Offered, start};
