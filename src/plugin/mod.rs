//! Views of reports for people (pure): the connectivity matrix of a NetReach round and its
//! terminal rendering, the summary of every report and the history of a task's rounds, and
//! what a mistyped report name meant. `cmd/kubectl.rs` fetches the reports and prints these.

pub mod heatmap;
pub mod junit;
pub mod matrix;
pub mod names;
pub mod rounds;
pub mod terminal;
