//! The task kinds of `kdoctor.io/v1beta1` and what they share.

pub mod apphttphealthy;
pub mod common;
pub mod isolation;
pub mod kind;
pub mod marker;
pub mod netdns;
pub mod netreach;
pub mod status;

pub use apphttphealthy::{AppHttpHealthy, AppHttpHealthySpec, AppHttpHealthyTarget, HttpMethod};
pub use common::{AgentKind, AgentSpec, NetHttpRequest, NetSuccessCondition, SchedulePlan};
pub use isolation::{Isolation, IsolationProtocol};
pub use kind::{API_VERSION, GROUP, Task, TaskKind, UnknownKind, VERSION};
pub use marker::{Marked, MarkerPolicy, MarkerSet, MarkerTaint, TaintEffect};
pub use netdns::{
    DnsProtocol, NetDnsTarget, NetDnsTargetDns, NetDnsTargetUser, Netdns, NetdnsRequest, NetdnsSpec,
};
pub use netreach::{NetReach, NetReachSpec, NetReachTarget};
pub use status::{
    LastRoundStatus, RoundStatus, RuntimeStatus, StatusHistoryRecord, TaskResource, TaskStatus,
};
