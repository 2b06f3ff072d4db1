//! Views of reports for people (pure): the connectivity matrix of a NetReach round and its
//! terminal rendering. `cmd/kubectl.rs` fetches the reports and prints these.

pub mod matrix;
pub mod terminal;
