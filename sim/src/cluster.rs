//! The cluster's API semantics over the store: create, get, list, update, patch, apply and
//! delete with resourceVersion preconditions, status subresource, generation, managedFields,
//! finalizers and deletionTimestamp. The HTTP server and the in-process controllers both go
//! through here.

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};

use crate::alloc::Allocator;
use crate::apply::{self, ApplyRequest, Scope};
use crate::clock;
use crate::convert::{to_external, to_internal};
use crate::error::{ApiError, ApiResult};
use crate::kinds;
use crate::patch::{PatchType, apply_patch};
use crate::resources::{Catalogue, ResourceInfo};
use crate::reviews::Reviews;
use crate::rng::Rng;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Store, Write};

/// Options of a write.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// fieldManager (managedFields are recorded only when set).
    pub field_manager: Option<String>,
    /// dryRun=All: validate and answer without storing.
    pub dry_run: bool,
    /// force=true for server-side apply.
    pub force: bool,
    /// `status` (or `scale`) when writing a subresource.
    pub subresource: Option<String>,
}

impl WriteOptions {
    /// Options naming a field manager.
    pub fn manager(name: &str) -> Self {
        WriteOptions {
            field_manager: Some(name.into()),
            ..Default::default()
        }
    }

    /// The same options, for the status subresource.
    pub fn status(mut self) -> Self {
        self.subresource = Some("status".into());
        self
    }
}

/// Deletion propagation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Delete the owner now; the garbage collector deletes dependents afterwards.
    #[default]
    Background,
    /// Delete dependents first; the owner stays (with a finalizer) until they are gone.
    Foreground,
    /// Leave dependents, removing their ownerReferences.
    Orphan,
}

/// Options of a delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// propagationPolicy (None: the kind's default, Background).
    pub propagation: Option<Propagation>,
    /// gracePeriodSeconds.
    pub grace_period: Option<i64>,
    /// preconditions.uid.
    pub uid: Option<String>,
    /// preconditions.resourceVersion.
    pub resource_version: Option<String>,
    /// dryRun=All.
    pub dry_run: bool,
}

impl DeleteOptions {
    /// Reads a DeleteOptions body (JSON) and the query parameters.
    pub fn from_body(body: &Value) -> ApiResult<Self> {
        let mut o = DeleteOptions::default();
        if let Some(p) = body.get("propagationPolicy").and_then(Value::as_str) {
            o.propagation = Some(parse_propagation(p)?);
        }
        if body.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
            o.propagation = Some(Propagation::Orphan);
        }
        o.grace_period = body.get("gracePeriodSeconds").and_then(Value::as_i64);
        o.uid = body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(String::from);
        o.resource_version = body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(String::from);
        o.dry_run = body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        Ok(o)
    }
}

/// Parses a propagationPolicy value.
pub fn parse_propagation(p: &str) -> ApiResult<Propagation> {
    match p {
        "Background" => Ok(Propagation::Background),
        "Foreground" => Ok(Propagation::Foreground),
        "Orphan" => Ok(Propagation::Orphan),
        other => Err(ApiError::bad_request(format!(
            "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
        ))),
    }
}

/// Finalizer the API server adds for foreground deletion.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
/// Finalizer the API server adds for orphaning deletion.
pub const ORPHAN_FINALIZER: &str = "orphan";

/// The simulated cluster's state and API semantics.
pub struct Cluster {
    /// The object store.
    pub store: Store,
    /// The served resources.
    pub catalogue: Catalogue,
    /// TokenReview and SubjectAccessReview tables.
    pub reviews: Reviews,
    /// API requests served, by user, verb and resource.
    pub requests: crate::requests::RequestLog,
    alloc: Mutex<Allocator>,
    rng: Mutex<Rng>,
}

fn meta_str<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
}

/// The finalizers of an object.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn set_finalizers(obj: &mut Value, f: &[String]) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if f.is_empty() {
            meta.remove("finalizers");
        } else {
            meta.insert("finalizers".into(), json!(f));
        }
    }
}

fn without_volatile(v: &Value) -> Value {
    let mut c = v.clone();
    if let Some(meta) = c.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    c
}

fn spec_part(v: &Value) -> Value {
    let mut c = v.clone();
    if let Some(m) = c.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    c
}

/// Whether `name` is valid for objects of `info`: RBAC objects only need to be a path
/// segment (`system:auth-delegator` bindings are common), everything else a DNS subdomain.
fn is_valid_name(info: &ResourceInfo, name: &str) -> bool {
    if info.group == "rbac.authorization.k8s.io" {
        return !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains('/')
            && !name.contains('%');
    }
    is_dns_label_like(name)
}

fn is_dns_label_like(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

impl Cluster {
    /// A cluster with the built-in kinds, a store keeping `history` events, and a seed for
    /// uids, generated names and stage randomness.
    pub fn new(history: usize, seed: u64) -> Self {
        Self::with_allocator(history, seed, Allocator::default())
    }

    /// A cluster allocating addresses from `alloc`.
    pub fn with_allocator(history: usize, seed: u64, alloc: Allocator) -> Self {
        Cluster {
            store: Store::new(history),
            catalogue: Catalogue::with_builtins(),
            reviews: Reviews::default(),
            requests: Default::default(),
            alloc: Mutex::new(alloc),
            rng: Mutex::new(Rng::new(seed)),
        }
    }

    /// The address allocator.
    pub fn alloc(&self) -> MutexGuard<'_, Allocator> {
        self.alloc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The seeded random generator.
    pub fn rng(&self) -> MutexGuard<'_, Rng> {
        self.rng.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The preferred served version of group + kind (panics never; None when unknown).
    pub fn resource(&self, group: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        self.catalogue.by_group_kind(group, kind)
    }

    /// The resource or a 404, for internal callers that name a built-in kind.
    pub fn builtin(&self, group: &str, kind: &str) -> ApiResult<Arc<ResourceInfo>> {
        self.resource(group, kind).ok_or_else(|| {
            ApiError::internal(format!("kind {kind} of group {group:?} is not served"))
        })
    }

    fn check_namespace(&self, info: &ResourceInfo, ns: &str, name: &str) -> ApiResult<()> {
        if !info.namespaced {
            return Ok(());
        }
        let Some(nsobj) = self.store.get("core/namespaces", "", ns) else {
            return Err(ApiError::not_found_gr("", "namespaces", ns));
        };
        if nsobj.pointer("/metadata/deletionTimestamp").is_some() {
            let mut e = ApiError::forbidden(format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                info.group_resource()
            ));
            e.details.causes = vec![
                json!({"reason": "NamespaceTerminating", "message": format!("namespace {ns} is being terminated"), "field": "metadata.namespace"}),
            ];
            return Err(e);
        }
        Ok(())
    }

    /// One object, as the version of `info` shows it.
    pub fn get(&self, info: &ResourceInfo, ns: &str, name: &str) -> ApiResult<Value> {
        self.store
            .get(&info.storage, ns, name)
            .map(|v| to_external(info, &v))
            .ok_or_else(|| ApiError::not_found(info, name))
    }

    /// Matching objects and the resourceVersion of the list.
    pub fn list(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> (Vec<Value>, u64) {
        let (items, rv) = self.store.list(&info.storage, ns);
        let out = items
            .iter()
            .filter(|o| labels.matches(o) && fields.matches(o))
            .map(|o| to_external(info, o))
            .collect();
        (out, rv)
    }

    fn check_type(&self, info: &ResourceInfo, obj: &Value) -> ApiResult<()> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request is not a JSON object",
            ));
        }
        if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
            && av != info.api_version()
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                info.api_version()
            )));
        }
        if let Some(k) = obj.get("kind").and_then(Value::as_str)
            && k != info.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                info.kind
            )));
        }
        Ok(())
    }

    /// Creates an object (POST).
    pub fn create(
        &self,
        info: &ResourceInfo,
        ns: &str,
        obj: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        self.check_type(info, &obj)?;
        let mut obj = obj;
        obj["apiVersion"] = json!(info.api_version());
        obj["kind"] = json!(info.kind);
        let mut obj = to_internal(info, obj);
        let ns = if info.namespaced { ns } else { "" };
        let body_ns = meta_str(&obj, "namespace").unwrap_or("").to_string();
        if info.namespaced && !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let generate = meta_str(&obj, "generateName").map(String::from);
        let given = meta_str(&obj, "name").unwrap_or("").to_string();
        if given.is_empty() && generate.is_none() {
            return Err(ApiError::invalid(
                info,
                "",
                "metadata.name",
                "Required value: name or generateName is required",
            ));
        }
        self.check_namespace(info, ns, &given)?;
        if !obj.get("metadata").is_some_and(Value::is_object) {
            obj["metadata"] = json!({});
        }
        let now = clock::now();
        {
            let mut rng = self.rng();
            let meta = obj["metadata"]
                .as_object_mut()
                .ok_or_else(|| ApiError::internal("metadata"))?;
            meta.insert("uid".into(), json!(rng.uuid()));
            meta.insert("creationTimestamp".into(), json!(now));
            meta.remove("deletionTimestamp");
            meta.remove("deletionGracePeriodSeconds");
            meta.remove("resourceVersion");
            // With a field manager the create's own entry replaces them; without one (an apply
            // that creates) the entries the caller computed stand.
            if opts.field_manager.is_some() {
                meta.remove("managedFields");
            }
            if info.namespaced {
                meta.insert("namespace".into(), json!(ns));
            } else {
                meta.remove("namespace");
            }
            if kinds::tracks_generation(info) {
                meta.insert("generation".into(), json!(1));
            }
        }
        if kinds::status_reset_on_create(info)
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        kinds::prepare_create(self, info, &mut obj)?;
        if let Some(manager) = &opts.field_manager {
            apply::record_update(
                None,
                &mut obj,
                manager,
                Scope::Main {
                    status_separate: info.has_subresource("status"),
                },
                &info.api_version(),
                &now,
            );
        }
        let mut attempts = 0;
        loop {
            let name = match &generate {
                Some(prefix) if given.is_empty() => {
                    format!("{prefix}{}", self.rng().name_suffix())
                }
                _ => given.clone(),
            };
            if !is_valid_name(info, &name) {
                return Err(ApiError::invalid(
                    info,
                    &name,
                    "metadata.name",
                    &format!(
                        "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                    ),
                ));
            }
            obj["metadata"]["name"] = json!(name);
            if opts.dry_run {
                if self.store.get(&info.storage, ns, &name).is_some() {
                    return Err(ApiError::already_exists(info, &name));
                }
                return Ok(to_external(info, &obj));
            }
            let candidate = obj.clone();
            let res = self.store.mutate(&info.storage, ns, &name, |cur, _| {
                if cur.is_some() {
                    return Err(ApiError::already_exists(info, &name));
                }
                Ok((Write::Put(candidate), ()))
            });
            match res {
                Ok(()) => break,
                Err(e)
                    if e.reason == "AlreadyExists"
                        && generate.is_some()
                        && given.is_empty()
                        && attempts < 8 =>
                {
                    attempts += 1;
                }
                Err(e) => {
                    kinds::released(self, info, &obj);
                    return Err(e);
                }
            }
        }
        let name = meta_str(&obj, "name").unwrap_or("").to_string();
        let stored = self
            .store
            .get(&info.storage, ns, &name)
            .ok_or_else(|| ApiError::internal("created object vanished"))?;
        kinds::after_write(self, info, &stored)?;
        Ok(to_external(info, &stored))
    }

    /// Replaces an object (PUT), on the main resource or the status subresource.
    pub fn update(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        obj: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        self.check_type(info, &obj)?;
        if let Some(n) = meta_str(&obj, "name")
            && n != name
        {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        // An empty resourceVersion means an unconditional update.
        let precondition = meta_str(&obj, "resourceVersion")
            .filter(|rv| !rv.is_empty())
            .map(String::from);
        self.write(info, ns, name, opts, precondition, move |_| Ok(obj))
    }

    /// Patches an object with a merge, JSON or strategic patch, or server-side apply.
    pub fn patch(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        kind: PatchType,
        body: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        if kind == PatchType::Apply {
            return self.apply(info, ns, name, body, opts);
        }
        self.write(info, ns, name, opts, None, |current| {
            let new = apply_patch(kind, current, body)?;
            if let Some(rv) = meta_str(&new, "resourceVersion")
                && Some(rv) != meta_str(current, "resourceVersion")
            {
                return Err(ApiError::modified(info, name));
            }
            Ok(new)
        })
    }

    fn apply(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        body: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        let applied: Value = serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        self.check_type(info, &applied)?;
        let manager = opts
            .field_manager
            .clone()
            .ok_or_else(|| ApiError::bad_request("PATCH, apply type requires fieldManager"))?;
        if meta_str(&applied, "name").is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        let scope = self.scope(info, opts);
        let now = clock::now();
        let api_version = info.api_version();
        let req = ApplyRequest {
            applied: &applied,
            manager: &manager,
            force: opts.force,
            scope,
            api_version: &api_version,
            now: &now,
        };
        if self.store.get(&info.storage, ns, name).is_none() {
            if opts.subresource.is_some() {
                return Err(ApiError::not_found(info, name));
            }
            let mut fresh = apply::server_side_apply(&json!({"metadata": {}}), &req)
                .map_err(|c| ApiError::apply_conflict(info, name, c.message, c.causes))?;
            fresh["apiVersion"] = json!(api_version);
            fresh["kind"] = json!(info.kind);
            fresh["metadata"]["name"] = json!(name);
            let created = self.create(
                info,
                ns,
                fresh,
                &WriteOptions {
                    field_manager: None,
                    ..opts.clone()
                },
            );
            match created {
                Ok(_) if opts.dry_run => return created,
                Ok(_) => return self.get(info, ns, name),
                Err(e) if e.reason == "AlreadyExists" => {}
                Err(e) => return Err(e),
            }
        }
        let precondition = meta_str(&applied, "resourceVersion")
            .filter(|rv| !rv.is_empty())
            .map(String::from);
        let mut no_manager = opts.clone();
        no_manager.field_manager = None;
        self.write(info, ns, name, &no_manager, precondition, |current| {
            apply::server_side_apply(current, &req)
                .map_err(|c| ApiError::apply_conflict(info, name, c.message, c.causes))
        })
    }

    fn scope(&self, info: &ResourceInfo, opts: &WriteOptions) -> Scope {
        match opts.subresource.as_deref() {
            Some("status") => Scope::Status,
            _ => Scope::Main {
                status_separate: info.has_subresource("status"),
            },
        }
    }

    /// The common read-modify-write: `produce` maps the current object (client's version) to the
    /// new one; the rest enforces the API's rules.
    fn write(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        opts: &WriteOptions,
        precondition: Option<String>,
        produce: impl FnOnce(&Value) -> ApiResult<Value>,
    ) -> ApiResult<Value> {
        if let Some(sub) = &opts.subresource
            && !info.has_subresource(sub)
        {
            return Err(ApiError::path_not_found());
        }
        let ns = if info.namespaced { ns } else { "" };
        let scope = self.scope(info, opts);
        let now = clock::now();
        let dry_run = opts.dry_run;
        let result = self.store.mutate(&info.storage, ns, name, |cur, _| {
            let cur = cur.ok_or_else(|| ApiError::not_found(info, name))?;
            let cur_ext = to_external(info, cur);
            let produced = produce(&cur_ext)?;
            self.check_type(info, &produced)?;
            if let Some(rv) = &precondition
                && Some(rv.as_str()) != meta_str(cur, "resourceVersion")
            {
                return Err(ApiError::modified(info, name));
            }
            let produced = to_internal(info, produced);
            let mut new = match scope {
                Scope::Status => {
                    let mut n = (**cur).clone();
                    match produced.get("status") {
                        Some(s) => n["status"] = s.clone(),
                        None => {
                            if let Some(m) = n.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                    if let Some(mf) = produced.pointer("/metadata/managedFields") {
                        n["metadata"]["managedFields"] = mf.clone();
                    }
                    n
                }
                Scope::Main { status_separate } => {
                    let mut n = produced;
                    if !n.get("metadata").is_some_and(Value::is_object) {
                        n["metadata"] = json!({});
                    }
                    if status_separate
                        && let Some(m) = n.as_object_mut()
                    {
                        match cur.get("status") {
                            Some(s) => {
                                m.insert("status".into(), s.clone());
                            }
                            None => {
                                m.remove("status");
                            }
                        }
                    }
                    n
                }
            };
            // Fields the client may not change.
            if let (Some(nm), Some(cm)) = (
                new.get_mut("metadata").and_then(Value::as_object_mut),
                cur.get("metadata").and_then(Value::as_object),
            ) {
                for k in [
                    "name",
                    "namespace",
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                    "generateName",
                ] {
                    match cm.get(k) {
                        Some(v) => {
                            nm.insert(k.into(), v.clone());
                        }
                        None => {
                            nm.remove(k);
                        }
                    }
                }
                if cm.contains_key("deletionTimestamp") {
                    // A terminating object may lose finalizers but not gain new ones.
                    let old: Vec<Value> = cm
                        .get("finalizers")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    if let Some(Value::Array(f)) = nm.get("finalizers")
                        && f.iter().any(|x| !old.contains(x))
                    {
                        return Err(ApiError::forbidden(format!(
                            "{} \"{name}\" is forbidden: no new finalizers can be added if the object is being deleted",
                            info.group_resource()
                        )));
                    }
                }
            }
            kinds::prepare_update(self, info, cur, &mut new)?;
            if matches!(scope, Scope::Main { .. })
                && kinds::tracks_generation(info)
                && spec_part(&new) != spec_part(cur)
            {
                let g = cur
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                new["metadata"]["generation"] = json!(g + 1);
            }
            if let Some(manager) = &opts.field_manager {
                apply::record_update(Some(cur), &mut new, manager, scope, &info.api_version(), &now);
            }
            if without_volatile(&new) == without_volatile(cur) {
                return Ok((Write::Keep, (**cur).clone()));
            }
            if dry_run {
                return Ok((Write::Keep, new));
            }
            if new.pointer("/metadata/deletionTimestamp").is_some()
                && finalizers(&new).is_empty()
                && !kinds::blocks_deletion(info, &new)
                && new
                    .pointer("/metadata/deletionGracePeriodSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
                    == 0
            {
                return Ok((Write::Delete(new.clone()), new));
            }
            Ok((Write::Put(new.clone()), new))
        })?;
        let stored = self
            .store
            .get(&info.storage, ns, name)
            .map(|v| (*v).clone());
        match stored {
            Some(s) => {
                kinds::after_write(self, info, &s)?;
                Ok(to_external(info, &s))
            }
            None => {
                kinds::released(self, info, &result);
                kinds::after_delete(self, info, &result);
                Ok(to_external(info, &result))
            }
        }
    }

    /// Deletes an object (DELETE), honouring finalizers, graceful pod deletion and propagation.
    pub fn delete(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Value> {
        let ns = if info.namespaced { ns } else { "" };
        kinds::check_delete(info, name)?;
        let propagation = opts.propagation.unwrap_or_default();
        let now = clock::now();
        let (obj, removed) = self.store.mutate(&info.storage, ns, name, |cur, _| {
            let cur = cur.ok_or_else(|| ApiError::not_found(info, name))?;
            if let Some(uid) = &opts.uid
                && Some(uid.as_str()) != meta_str(cur, "uid")
            {
                return Err(ApiError::conflict(
                    info,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta_str(cur, "uid").unwrap_or("")
                    ),
                ));
            }
            if let Some(rv) = &opts.resource_version
                && Some(rv.as_str()) != meta_str(cur, "resourceVersion")
            {
                return Err(ApiError::conflict(
                    info,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        meta_str(cur, "resourceVersion").unwrap_or("")
                    ),
                ));
            }
            let mut obj = (**cur).clone();
            let mut fins = finalizers(&obj);
            let terminating = obj.pointer("/metadata/deletionTimestamp").is_some();
            match propagation {
                Propagation::Foreground if !fins.iter().any(|f| f == FOREGROUND_FINALIZER) => {
                    fins.push(FOREGROUND_FINALIZER.into());
                }
                Propagation::Orphan if !fins.iter().any(|f| f == ORPHAN_FINALIZER) => {
                    fins.push(ORPHAN_FINALIZER.into());
                }
                _ => {}
            }
            let grace = kinds::grace_period(info, &obj, opts.grace_period);
            if grace > 0 {
                let shorter = !terminating
                    || obj
                        .pointer("/metadata/deletionGracePeriodSeconds")
                        .and_then(Value::as_i64)
                        .is_some_and(|g| grace < g);
                if shorter {
                    obj["metadata"]["deletionTimestamp"] = json!(clock::now_plus(grace));
                    obj["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
                }
                set_finalizers(&mut obj, &fins);
                if opts.dry_run || without_volatile(&obj) == without_volatile(cur) {
                    return Ok((Write::Keep, (obj, false)));
                }
                return Ok((Write::Put(obj.clone()), (obj, false)));
            }
            if !fins.is_empty() || kinds::blocks_deletion(info, &obj) {
                if !terminating {
                    obj["metadata"]["deletionTimestamp"] = json!(now);
                }
                obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                set_finalizers(&mut obj, &fins);
                kinds::terminating(info, &mut obj);
                if opts.dry_run || without_volatile(&obj) == without_volatile(cur) {
                    return Ok((Write::Keep, (obj, false)));
                }
                return Ok((Write::Put(obj.clone()), (obj, false)));
            }
            if opts.dry_run {
                return Ok((Write::Keep, (obj, false)));
            }
            if !terminating {
                obj["metadata"]["deletionTimestamp"] = json!(now);
            }
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            Ok((Write::Delete(obj.clone()), (obj, true)))
        })?;
        if removed {
            kinds::released(self, info, &obj);
            kinds::after_delete(self, info, &obj);
        }
        Ok(to_external(info, &obj))
    }
}
