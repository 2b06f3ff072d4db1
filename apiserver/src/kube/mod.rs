//! Kubernetes API plumbing beneath the handlers: the served group's names, Status errors,
//! content negotiation, PartialObjectMetadata, the query string, selectors, streamed bodies,
//! Table and watch framing, discovery documents. Nothing here knows the server's state or the report store.

pub mod discovery;
pub mod group;
pub mod negotiate;
pub mod partial;
pub mod query;
pub mod response;
pub mod selectors;
pub mod sink;
pub mod status;
pub mod table;
pub mod watch;
