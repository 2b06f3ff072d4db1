//! The task objects of a server with no cluster behind it (`kdoctor local`): stored as written,
//! with the metadata the Kubernetes API gives them (uid, creationTimestamp, generation,
//! resourceVersion), admitted by the embedding program's rules, the spec immutable as the CRDs'
//! rule makes it in a cluster, and a change feed for watches and for the program that runs them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, RwLock};

use axum::http::StatusCode;
use kdoctor_api::task::{GROUP, TaskKind};
use kdoctor_api::validation::{ErrorKind, ErrorList};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::kube::status::{ApiError, Cause, Details};

/// Decides whether a task object may be stored: `Ok`, or every problem with its field path.
pub type Admit = Arc<dyn Fn(&Value) -> Result<(), ErrorList> + Send + Sync>;

/// The most task objects kept (each kind together): a bound on what clients can make the
/// server hold.
pub const MAX_OBJECTS: usize = 1000;
/// Changes kept for watches that resume from a resourceVersion.
const WINDOW: usize = 1024;

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    /// Created.
    Added,
    /// Changed (metadata or status).
    Modified,
    /// Deleted.
    Deleted,
}

impl ChangeType {
    /// The watch event's `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One change of one object.
#[derive(Clone, Debug)]
pub struct Change {
    /// The resourceVersion it made.
    pub version: u64,
    /// Kind of the object.
    pub kind: TaskKind,
    /// What happened.
    pub change: ChangeType,
    /// The object after the change (for Deleted: as it was).
    pub object: Arc<Value>,
}

/// The task objects a server shows (cheap to clone).
#[derive(Clone)]
pub struct TaskObjects {
    inner: Arc<RwLock<Inner>>,
    admit: Admit,
    feed: broadcast::Sender<Change>,
}

impl std::fmt::Debug for TaskObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskObjects").finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Inner {
    objects: BTreeMap<(TaskKind, String), Arc<Value>>,
    version: u64,
    window: VecDeque<Change>,
}

/// Where a watch starts.
#[derive(Debug)]
pub struct WatchStart {
    /// Changes to send first: every object as Added for a watch from now, else the kept
    /// changes after the version asked for.
    pub backlog: Vec<Change>,
    /// Later changes.
    pub live: broadcast::Receiver<Change>,
}

/// The string at a JSON pointer.
fn text_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

/// `netreaches.kdoctor.io "x"`, as messages name a task.
pub fn resource_name(kind: TaskKind, name: &str) -> String {
    format!("{}.{GROUP} {name:?}", kind.plural())
}

fn details(kind: TaskKind, causes: Vec<Cause>) -> Option<Box<Details>> {
    Some(Box::new(Details {
        group: GROUP.to_string(),
        kind: kind.plural().to_string(),
        causes,
    }))
}

/// An error about one task object.
pub fn task_error(
    kind: TaskKind,
    name: &str,
    code: StatusCode,
    reason: &'static str,
    message: String,
) -> ApiError {
    ApiError {
        name: Some(name.to_string()),
        details: details(kind, vec![]),
        ..ApiError::new(code, reason, message)
    }
}

/// Not found, in the words kubectl prints for a custom resource.
pub fn not_found(kind: TaskKind, name: &str) -> ApiError {
    task_error(
        kind,
        name,
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("{} not found", resource_name(kind, name)),
    )
}

fn conflict(kind: TaskKind, name: &str, why: &str) -> ApiError {
    task_error(
        kind,
        name,
        StatusCode::CONFLICT,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {}: {why}",
            resource_name(kind, name)
        ),
    )
}

/// 422 with every field at fault, as the Go server words it
/// (`NetReach.kdoctor.io "x" is invalid: [spec.a: …, spec.b: …]`).
pub fn invalid(kind: TaskKind, name: &str, errors: &ErrorList) -> ApiError {
    let causes = errors
        .iter()
        .map(|e| Cause {
            reason: match e.kind {
                ErrorKind::Required => "FieldValueRequired",
                ErrorKind::Invalid => "FieldValueInvalid",
                ErrorKind::NotSupported => "FieldValueNotSupported",
                ErrorKind::Forbidden => "FieldValueForbidden",
                ErrorKind::Unknown => "FieldValueUnknown",
                ErrorKind::NotFound => "FieldValueNotFound",
            }
            .to_string(),
            field: e.field.as_str().to_string(),
            // kubectl prints `<field>: <message>`: the field is not repeated.
            message: e
                .to_string()
                .strip_prefix(&format!("{}: ", e.field.as_str()))
                .map(str::to_string)
                .unwrap_or_else(|| e.to_string()),
        })
        .collect();
    ApiError {
        name: Some(name.to_string()),
        // As the Go server's NewInvalid: the kind, not the resource, in `details.kind`.
        details: Some(Box::new(Details {
            group: GROUP.to_string(),
            kind: kind.as_str().to_string(),
            causes,
        })),
        ..ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!("{}.{GROUP} {name:?} is invalid: {errors}", kind.as_str()),
        )
    }
}

impl TaskObjects {
    /// No objects yet; `admit` decides what may be stored.
    pub fn new(admit: Admit) -> TaskObjects {
        TaskObjects {
            inner: Arc::default(),
            admit,
            feed: broadcast::channel(WINDOW).0,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Every change from now on (the program that runs the tasks follows this).
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.feed.subscribe()
    }

    /// Records a change under the write lock (so watchers see changes in version order).
    fn commit(
        &self,
        inner: &mut Inner,
        kind: TaskKind,
        change: ChangeType,
        mut object: Value,
    ) -> Arc<Value> {
        inner.version += 1;
        let version = inner.version;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(version.to_string()));
        }
        let name = text_at(&object, "/metadata/name")
            .unwrap_or_default()
            .to_string();
        let object = Arc::new(object);
        match change {
            ChangeType::Deleted => {
                inner.objects.remove(&(kind, name));
            }
            _ => {
                inner.objects.insert((kind, name), object.clone());
            }
        }
        let change = Change {
            version,
            kind,
            change,
            object: object.clone(),
        };
        if inner.window.len() == WINDOW {
            inner.window.pop_front();
        }
        inner.window.push_back(change.clone());
        let _ = self.feed.send(change);
        object
    }

    fn admitted(&self, kind: TaskKind, name: &str, object: &Value) -> Result<(), ApiError> {
        (self.admit)(object).map_err(|errors| invalid(kind, name, &errors))
    }

    /// Creates an object (POST); `dry_run` checks everything and stores nothing.
    pub fn create(
        &self,
        kind: TaskKind,
        mut object: Value,
        dry_run: bool,
    ) -> Result<Arc<Value>, ApiError> {
        let Some(name) = text_at(&object, "/metadata/name").map(str::to_string) else {
            return Err(invalid(
                kind,
                "",
                &ErrorList(vec![kdoctor_api::validation::FieldError::required(
                    kdoctor_api::validation::FieldPath::new("metadata.name"),
                    "name or generateName is required",
                )]),
            ));
        };
        self.admitted(kind, &name, &object)?;
        let mut inner = self.write();
        if inner.objects.contains_key(&(kind, name.clone())) {
            return Err(task_error(
                kind,
                &name,
                StatusCode::CONFLICT,
                "AlreadyExists",
                format!("{} already exists", resource_name(kind, &name)),
            ));
        }
        if inner.objects.len() >= MAX_OBJECTS {
            return Err(task_error(
                kind,
                &name,
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!("this server keeps at most {MAX_OBJECTS} tasks: delete one first"),
            ));
        }
        let meta = object
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
        meta.insert("uid".into(), json!(crate::tasks::uid::new_uid()));
        meta.insert(
            "creationTimestamp".into(),
            json!(
                jiff::Timestamp::now()
                    .round(jiff::Unit::Second)
                    .unwrap_or_else(|_| jiff::Timestamp::now())
                    .to_string()
            ),
        );
        meta.insert("generation".into(), json!(1));
        meta.remove("resourceVersion");
        meta.remove("deletionTimestamp");
        meta.remove("managedFields");
        if let Some(object) = object.as_object_mut() {
            object.remove("status");
        }
        if dry_run {
            return Ok(Arc::new(object));
        }
        Ok(self.commit(&mut inner, kind, ChangeType::Added, object))
    }

    /// Replaces an object's metadata (PUT, and the result of a patch): the spec is immutable,
    /// the status is the server's; a resourceVersion in the object must be the current one.
    pub fn update(
        &self,
        kind: TaskKind,
        name: &str,
        mut object: Value,
        dry_run: bool,
    ) -> Result<Arc<Value>, ApiError> {
        let current = self.get(kind, name).ok_or_else(|| not_found(kind, name))?;
        if text_at(&object, "/metadata/name").is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                text_at(&object, "/metadata/name").unwrap_or_default()
            )));
        }
        let wanted_version = text_at(&object, "/metadata/resourceVersion").map(str::to_string);
        if object.get("spec") != current.get("spec") {
            return Err(invalid(
                kind,
                name,
                &ErrorList(vec![kdoctor_api::validation::FieldError::forbidden(
                    kdoctor_api::validation::FieldPath::new("spec"),
                    "spec is immutable: delete and re-create the task to change it",
                )]),
            ));
        }
        self.admitted(kind, name, &object)?;
        // What only the server sets comes from the stored object.
        let meta = object
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
        meta.insert("name".into(), json!(name));
        for key in ["uid", "creationTimestamp", "generation"] {
            match current.pointer(&format!("/metadata/{key}")) {
                Some(v) => meta.insert(key.into(), v.clone()),
                None => meta.remove(key),
            };
        }
        meta.remove("managedFields");
        match current.get("status") {
            Some(status) => object["status"] = status.clone(),
            None => {
                if let Some(o) = object.as_object_mut() {
                    o.remove("status");
                }
            }
        }
        let mut inner = self.write();
        let stored = inner
            .objects
            .get(&(kind, name.to_string()))
            .cloned()
            .ok_or_else(|| not_found(kind, name))?;
        let stored_version = text_at(&stored, "/metadata/resourceVersion").unwrap_or_default();
        if wanted_version
            .as_deref()
            .is_some_and(|v| v != stored_version)
        {
            return Err(conflict(
                kind,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let mut unchanged = object.clone();
        unchanged["metadata"]["resourceVersion"] = json!(stored_version);
        if dry_run || unchanged == *stored {
            return Ok(if dry_run { Arc::new(object) } else { stored });
        }
        Ok(self.commit(&mut inner, kind, ChangeType::Modified, object))
    }

    /// Deletes an object; the object as it was.
    pub fn delete(
        &self,
        kind: TaskKind,
        name: &str,
        dry_run: bool,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.write();
        let object = inner
            .objects
            .get(&(kind, name.to_string()))
            .cloned()
            .ok_or_else(|| not_found(kind, name))?;
        if dry_run {
            return Ok(object);
        }
        Ok(self.commit(&mut inner, kind, ChangeType::Deleted, (*object).clone()))
    }

    /// Sets the status of the incarnation `uid` of `kind`/`name` (the program that runs the
    /// task is its only writer); nothing when that incarnation is gone.
    pub fn set_status(&self, kind: TaskKind, name: &str, uid: &str, status: Value) {
        let mut inner = self.write();
        let Some(current) = inner.objects.get(&(kind, name.to_string())).cloned() else {
            return;
        };
        if text_at(&current, "/metadata/uid") != Some(uid) || current.get("status") == Some(&status)
        {
            return;
        }
        let mut object = (*current).clone();
        object["status"] = status;
        self.commit(&mut inner, kind, ChangeType::Modified, object);
    }

    /// Every object of `kind`, by name, and the current version.
    pub fn list(&self, kind: TaskKind) -> (Vec<Arc<Value>>, u64) {
        let inner = self.read();
        let objects = inner
            .objects
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|(_, v)| v.clone())
            .collect();
        (objects, inner.version)
    }

    /// One object.
    pub fn get(&self, kind: TaskKind, name: &str) -> Option<Arc<Value>> {
        self.read().objects.get(&(kind, name.to_string())).cloned()
    }

    /// Where a watch of `kind` from `from` starts (`None` or 0: from now, every object first
    /// as Added); 410 when the changes after `from` are no longer kept.
    pub fn watch(&self, kind: TaskKind, from: Option<u64>) -> Result<WatchStart, ApiError> {
        // Under the write lock, so that no change falls between the backlog and the feed.
        let inner = self.write();
        let live = self.feed.subscribe();
        let backlog = match from.filter(|v| *v > 0) {
            None => inner
                .objects
                .iter()
                .filter(|((k, _), _)| *k == kind)
                .map(|(_, object)| Change {
                    version: inner.version,
                    kind,
                    change: ChangeType::Added,
                    object: object.clone(),
                })
                .collect(),
            Some(from) => {
                let oldest = inner
                    .window
                    .front()
                    .map_or(inner.version, |c| c.version - 1);
                if from < oldest || from > inner.version {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {from} ({oldest})"
                    )));
                }
                inner
                    .window
                    .iter()
                    .filter(|c| c.version > from && c.kind == kind)
                    .cloned()
                    .collect()
            }
        };
        Ok(WatchStart { backlog, live })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept_all() -> TaskObjects {
        TaskObjects::new(Arc::new(|_| Ok(())))
    }

    fn task(name: &str, qps: i64) -> Value {
        json!({
            "apiVersion": "kdoctor.io/v1beta1",
            "kind": "NetReach",
            "metadata": {"name": name, "labels": {"a": "1"}},
            "spec": {"request": {"qps": qps}},
        })
    }

    #[test]
    fn objects_get_server_metadata_and_versions_and_a_feed() {
        let objects = accept_all();
        let mut feed = objects.subscribe();
        let created = objects
            .create(TaskKind::NetReach, task("b", 1), false)
            .unwrap();
        assert_eq!(created["metadata"]["resourceVersion"], "1");
        assert_eq!(created["metadata"]["generation"], 1);
        assert!(
            created["metadata"]["uid"]
                .as_str()
                .is_some_and(|u| u.len() == 36)
        );
        objects
            .create(TaskKind::NetReach, task("a", 1), false)
            .unwrap();
        objects
            .create(TaskKind::Netdns, task("d", 1), false)
            .unwrap();
        let (items, version) = objects.list(TaskKind::NetReach);
        assert_eq!(version, 3);
        let names: Vec<&str> = items
            .iter()
            .filter_map(|i| text_at(i, "/metadata/name"))
            .collect();
        assert_eq!(names, ["a", "b"]);
        let first = feed.try_recv().unwrap();
        assert_eq!((first.version, first.change), (1, ChangeType::Added));
        // Dry run: checked, not stored.
        objects
            .create(TaskKind::NetReach, task("c", 1), true)
            .unwrap();
        assert!(objects.get(TaskKind::NetReach, "c").is_none());
        objects.delete(TaskKind::NetReach, "b", false).unwrap();
        assert!(objects.get(TaskKind::NetReach, "b").is_none());
        assert_eq!(
            objects
                .delete(TaskKind::NetReach, "b", false)
                .unwrap_err()
                .code,
            StatusCode::NOT_FOUND
        );
    }

    #[test]
    fn the_spec_is_immutable_metadata_is_not_and_versions_are_preconditions() {
        let objects = accept_all();
        let created = objects
            .create(TaskKind::NetReach, task("x", 1), false)
            .unwrap();
        let err = objects
            .create(TaskKind::NetReach, task("x", 1), false)
            .unwrap_err();
        assert_eq!(
            (err.code, err.reason),
            (StatusCode::CONFLICT, "AlreadyExists")
        );
        let err = objects
            .update(TaskKind::NetReach, "x", task("x", 2), false)
            .unwrap_err();
        assert_eq!(err.code, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            err.message.contains("spec: Forbidden: spec is immutable"),
            "{}",
            err.message
        );
        let status = err.to_status();
        assert_eq!(status["details"]["causes"][0]["field"], "spec");
        assert_eq!(status["details"]["kind"], "NetReach");
        assert_eq!(
            status["details"]["causes"][0]["message"],
            "Forbidden: spec is immutable: delete and re-create the task to change it"
        );
        let mut relabelled = (*created).clone();
        relabelled["metadata"]["labels"]["a"] = json!("2");
        let updated = objects
            .update(TaskKind::NetReach, "x", relabelled.clone(), false)
            .unwrap();
        assert_eq!(updated["metadata"]["labels"]["a"], "2");
        assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
        // The old version is stale now.
        let err = objects
            .update(TaskKind::NetReach, "x", relabelled, false)
            .unwrap_err();
        assert_eq!(err.reason, "Conflict");
        // The status is the runner's: set only for the incarnation it runs.
        let uid = text_at(&created, "/metadata/uid").unwrap().to_string();
        objects.set_status(TaskKind::NetReach, "x", "another", json!({"finish": true}));
        assert!(
            objects
                .get(TaskKind::NetReach, "x")
                .unwrap()
                .get("status")
                .is_none()
        );
        objects.set_status(TaskKind::NetReach, "x", &uid, json!({"finish": true}));
        assert_eq!(
            objects.get(TaskKind::NetReach, "x").unwrap()["status"]["finish"],
            true
        );
    }

    #[test]
    fn admission_errors_name_every_field() {
        let objects = TaskObjects::new(Arc::new(|_| {
            Err(ErrorList(vec![
                kdoctor_api::validation::FieldError::required(
                    kdoctor_api::validation::FieldPath::new("spec.a"),
                    "",
                ),
                kdoctor_api::validation::FieldError::forbidden(
                    kdoctor_api::validation::FieldPath::new("spec.b"),
                    "no",
                ),
            ]))
        }));
        let err = objects
            .create(TaskKind::NetReach, task("x", 1), false)
            .unwrap_err();
        assert_eq!(err.code, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            err.message,
            "NetReach.kdoctor.io \"x\" is invalid: [spec.a: Required value, spec.b: Forbidden: no]"
        );
        let causes = &err.to_status()["details"]["causes"];
        assert_eq!(causes[1]["reason"], "FieldValueForbidden");
    }

    #[test]
    fn a_watch_resumes_from_a_kept_version_or_is_told_it_is_too_old() {
        let objects = accept_all();
        for i in 0..3 {
            objects
                .create(TaskKind::NetReach, task(&format!("t{i}"), 1), false)
                .unwrap();
        }
        let now = objects.watch(TaskKind::NetReach, None).unwrap();
        assert_eq!(now.backlog.len(), 3);
        let resumed = objects.watch(TaskKind::NetReach, Some(2)).unwrap();
        assert_eq!(
            resumed
                .backlog
                .iter()
                .map(|c| c.version)
                .collect::<Vec<_>>(),
            [3]
        );
        let t0 = objects.get(TaskKind::NetReach, "t0").unwrap();
        let uid = text_at(&t0, "/metadata/uid").unwrap();
        for i in 0..WINDOW {
            objects.set_status(TaskKind::NetReach, "t0", uid, json!({"doneRound": i}));
        }
        assert_eq!(
            objects.watch(TaskKind::NetReach, Some(1)).unwrap_err().code,
            StatusCode::GONE
        );
    }
}
