//! The agent in a cluster: which tasks it runs (`duty`), what their rounds probe (`addresses`,
//! `discover`, `plan`) and the watch loop that runs each due round once and spools its report
//! (`runner`). Read-only towards the API: the controller is the only status writer.

pub mod addresses;
pub mod discover;
pub mod duty;
pub mod plan;
pub mod pods;
pub mod runner;
