//! The three task CRDs behind one trait, so one reconciler serves them all.

use std::fmt::Debug;

use kdoctor_api::task::{AppHttpHealthy, NetReach, Netdns, Task, TaskKind, TaskStatus};
use kube::Resource;
use kube::core::ClusterResourceScope;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A task CRD type.
pub trait TaskObject:
    Resource<DynamicType = (), Scope = ClusterResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The kind.
    const KIND: TaskKind;

    /// The task as the kind-independent enum.
    fn to_task(&self) -> Task;

    /// `status`.
    fn task_status(&self) -> Option<&TaskStatus>;
}

macro_rules! task_object {
    ($type:ident) => {
        impl TaskObject for $type {
            const KIND: TaskKind = TaskKind::$type;

            fn to_task(&self) -> Task {
                Task::$type(self.clone())
            }

            fn task_status(&self) -> Option<&TaskStatus> {
                self.status.as_ref()
            }
        }
    };
}

task_object!(NetReach);
task_object!(AppHttpHealthy);
task_object!(Netdns);
