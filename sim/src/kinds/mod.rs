//! Kind-specific behaviour of the API server (the Go server's "strategies"): defaults,
//! validation, address allocation, CRD registration, graceful deletion.

pub mod crd;
pub mod custom;
pub mod namespace;
pub mod pod;
pub mod service;
pub mod workload;

use serde_json::Value;

use crate::cluster::Cluster;
use crate::error::ApiResult;
use crate::resources::ResourceInfo;

fn is(info: &ResourceInfo, group: &str, plural: &str) -> bool {
    info.group == group && info.plural == plural && !info.custom
}

/// Whether metadata.generation counts spec changes for this kind.
pub fn tracks_generation(info: &ResourceInfo) -> bool {
    info.custom
        || matches!(
            info.group.as_str(),
            "apps" | "apiextensions.k8s.io" | "networking.k8s.io"
        )
}

/// Whether a create drops the client's status (kinds with a status subresource, except the
/// ones whose creators legitimately set it).
pub fn status_reset_on_create(info: &ResourceInfo) -> bool {
    info.has_subresource("status") && !matches!(info.plural.as_str(), "nodes" | "namespaces")
}

/// Defaults and validation on create.
pub fn prepare_create(c: &Cluster, info: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
    if info.custom {
        return custom::prepare(info, obj);
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => pod::prepare_create(info, obj),
        ("", "services") => service::prepare_create(c, info, obj),
        ("", "namespaces") => {
            namespace::prepare_create(obj);
            Ok(())
        }
        ("apps", _) => workload::prepare(info, obj),
        ("apiextensions.k8s.io", "customresourcedefinitions") => crd::prepare_create(info, obj),
        _ => Ok(()),
    }
}

/// Defaults, validation and immutable fields on update.
pub fn prepare_update(
    c: &Cluster,
    info: &ResourceInfo,
    old: &Value,
    new: &mut Value,
) -> ApiResult<()> {
    if info.custom {
        return custom::prepare(info, new);
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "services") => service::prepare_update(c, info, old, new),
        ("apps", _) => workload::prepare(info, new),
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            crd::prepare_update(info, old, new)
        }
        _ => Ok(()),
    }
}

/// After a successful create or update (outside the store lock).
pub fn after_write(c: &Cluster, info: &ResourceInfo, stored: &Value) -> ApiResult<()> {
    if is(info, "apiextensions.k8s.io", "customresourcedefinitions") {
        crd::register(c, stored)?;
    }
    Ok(())
}

/// Returns what a removed object held (addresses, ports).
pub fn released(c: &Cluster, info: &ResourceInfo, obj: &Value) {
    if is(info, "", "services") {
        service::release(c, obj);
    } else if is(info, "", "pods") {
        pod::release(c, obj);
    } else if is(info, "networking.k8s.io", "ingresses") {
        service::release_load_balancer(c, obj);
    } else if is(info, "", "nodes") {
        pod::release_node(c, obj);
    }
}

/// After an object left the store.
pub fn after_delete(c: &Cluster, info: &ResourceInfo, obj: &Value) {
    if is(info, "apiextensions.k8s.io", "customresourcedefinitions") {
        crd::unregister(c, obj);
    }
}

/// Refuses deletes the real server refuses.
pub fn check_delete(info: &ResourceInfo, name: &str) -> ApiResult<()> {
    if is(info, "", "namespaces") {
        namespace::check_delete(name)?;
    }
    Ok(())
}

/// The grace period a delete gets: pods bound to a node wait for the kubelet; the rest go at once.
pub fn grace_period(info: &ResourceInfo, obj: &Value, requested: Option<i64>) -> i64 {
    if is(info, "", "pods") {
        pod::grace_period(obj, requested)
    } else {
        0
    }
}

/// Whether something other than metadata.finalizers holds the object (a namespace's spec.finalizers).
pub fn blocks_deletion(info: &ResourceInfo, obj: &Value) -> bool {
    is(info, "", "namespaces") && namespace::has_spec_finalizers(obj)
}

/// Marks an object as terminating (a namespace's phase).
pub fn terminating(info: &ResourceInfo, obj: &mut Value) {
    if is(info, "", "namespaces") {
        obj["status"]["phase"] = Value::String("Terminating".into());
    }
}
