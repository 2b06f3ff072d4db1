//! Server-side apply and managedFields: field sets in the `FieldsV1` encoding, ownership per
//! field manager, conflicts, and removal of fields a manager stops applying.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::listtype::{ListType, element_key, find_element, list_type};

/// One step of a field path in FieldsV1 spelling: `f:name`, `k:{"name":"x"}`, `v:"x"`.
pub type Path = Vec<String>;
/// A set of owned fields.
pub type FieldSet = BTreeSet<Path>;

/// Which part of an object an operation writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The main resource: everything but status when the kind has a status subresource.
    Main {
        /// Whether status belongs to a subresource (and so is not owned here).
        status_separate: bool,
    },
    /// The status subresource.
    Status,
}

/// One entry of metadata.managedFields.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedEntry {
    /// Field manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// apiVersion the fields were written through.
    pub api_version: String,
    /// When the entry last changed.
    pub time: String,
    /// `status` or empty.
    pub subresource: String,
    /// The owned fields.
    pub fields: FieldSet,
}

/// A server-side apply conflict: the message and Status causes, as the real server words them.
#[derive(Debug, Clone)]
pub struct Conflicts {
    /// `Apply failed with 1 conflict: conflict with "m": .spec.x`.
    pub message: String,
    /// One cause per conflicting field.
    pub causes: Vec<Value>,
}

const META_TRACKED: &[&str] = &["labels", "annotations", "finalizers", "ownerReferences"];

/// The part of an object whose fields are tracked for this scope.
fn tracked(obj: &Value, scope: Scope) -> Value {
    let mut out = Map::new();
    let Some(m) = obj.as_object() else {
        return Value::Object(out);
    };
    for (k, v) in m {
        match (k.as_str(), scope) {
            ("apiVersion" | "kind", _) => {}
            ("metadata", Scope::Main { .. }) => {
                let mut meta = Map::new();
                if let Some(mm) = v.as_object() {
                    for t in META_TRACKED {
                        if let Some(x) = mm.get(*t) {
                            meta.insert((*t).to_string(), x.clone());
                        }
                    }
                }
                if !meta.is_empty() {
                    out.insert(k.clone(), Value::Object(meta));
                }
            }
            (
                "status",
                Scope::Main {
                    status_separate: true,
                },
            ) => {}
            (_, Scope::Main { .. }) => {
                out.insert(k.clone(), v.clone());
            }
            ("status", Scope::Status) => {
                out.insert(k.clone(), v.clone());
            }
            (_, Scope::Status) => {}
        }
    }
    Value::Object(out)
}

fn key_step(keys: &[&str], item: &Value) -> String {
    // FieldsV1 keys are JSON objects with sorted keys; serde_json's Map keeps them sorted.
    format!("k:{}", Value::Object(element_key(keys, item)))
}

fn collect(v: &Value, path: &mut Path, out: &mut FieldSet) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                path.push(format!("f:{k}"));
                match child {
                    Value::Object(cm) if !cm.is_empty() => collect(child, path, out),
                    Value::Array(items) => collect_list(k, items, path, out),
                    _ => {
                        out.insert(path.clone());
                    }
                }
                path.pop();
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

fn collect_list(name: &str, items: &[Value], path: &mut Path, out: &mut FieldSet) {
    match list_type(name, items) {
        ListType::Atomic => {
            out.insert(path.clone());
        }
        ListType::Set => {
            if items.is_empty() {
                out.insert(path.clone());
            }
            for i in items {
                path.push(format!("v:{i}"));
                out.insert(path.clone());
                path.pop();
            }
        }
        ListType::Map(keys) => {
            if items.is_empty() {
                out.insert(path.clone());
            }
            for i in items {
                path.push(key_step(&keys, i));
                out.insert(path.clone());
                if i.as_object().is_some_and(|m| !m.is_empty()) {
                    collect(i, path, out);
                }
                path.pop();
            }
        }
    }
}

/// The fields set in an object, for one scope.
pub fn fields_of(obj: &Value, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    let t = tracked(obj, scope);
    if t.as_object().is_some_and(|m| !m.is_empty()) {
        collect(&t, &mut Vec::new(), &mut out);
    }
    out
}

/// The FieldsV1 JSON of a field set.
pub fn encode(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut cur = &mut root;
        for (i, step) in path.iter().enumerate() {
            let entry = cur
                .entry(step.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(next) = entry else {
                break;
            };
            cur = next;
            // Keyed list elements carry "." when the element itself is owned.
            if i + 1 == path.len() && step.starts_with("k:") {
                cur.insert(".".into(), json!({}));
            }
        }
    }
    Value::Object(root)
}

/// The field set of a FieldsV1 JSON value.
pub fn decode(v: &Value) -> FieldSet {
    fn walk(v: &Value, path: &mut Path, out: &mut FieldSet) {
        let Some(m) = v.as_object() else {
            return;
        };
        if m.is_empty() && !path.is_empty() {
            out.insert(path.clone());
            return;
        }
        for (k, child) in m {
            if k == "." {
                out.insert(path.clone());
                continue;
            }
            path.push(k.clone());
            walk(child, path, out);
            path.pop();
        }
    }
    let mut out = FieldSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// Reads metadata.managedFields.
pub fn managed_entries(obj: &Value) -> Vec<ManagedEntry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| {
                    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    ManagedEntry {
                        manager: s("manager"),
                        operation: s("operation"),
                        api_version: s("apiVersion"),
                        time: s("time"),
                        subresource: s("subresource"),
                        fields: e.get("fieldsV1").map(decode).unwrap_or_default(),
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Writes metadata.managedFields (dropping entries that own nothing).
pub fn set_managed_entries(obj: &mut Value, entries: &[ManagedEntry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": encode(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

fn parse_step(step: &str) -> (&str, &str) {
    step.split_at(2)
}

/// The value at a field path, if present.
pub fn value_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = obj;
    for step in path {
        let (kind, rest) = parse_step(step);
        cur = match kind {
            "f:" => cur.get(rest)?,
            "k:" => {
                let want: Map<String, Value> = serde_json::from_str(rest).ok()?;
                let keys: Vec<&str> = want.keys().map(String::as_str).collect();
                cur.as_array()?
                    .iter()
                    .find(|e| element_key(&keys, e) == want)?
            }
            "v:" => {
                let want: Value = serde_json::from_str(rest).ok()?;
                cur.as_array()?.iter().find(|e| **e == want)?
            }
            _ => return None,
        };
    }
    Some(cur)
}

fn remove_at(obj: &mut Value, path: &[String]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for step in parent_path {
        let (kind, rest) = parse_step(step);
        let next = match kind {
            "f:" => cur.get_mut(rest),
            "k:" => {
                let Ok(want) = serde_json::from_str::<Map<String, Value>>(rest) else {
                    return;
                };
                let keys: Vec<&str> = want.keys().map(String::as_str).collect();
                cur.as_array_mut()
                    .and_then(|a| a.iter_mut().find(|e| element_key(&keys, e) == want))
            }
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    let (kind, rest) = parse_step(last);
    match kind {
        "f:" => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(rest);
            }
        }
        "k:" => {
            if let (Ok(want), Some(a)) = (
                serde_json::from_str::<Map<String, Value>>(rest),
                cur.as_array_mut(),
            ) {
                let keys: Vec<&str> = want.keys().map(String::as_str).collect();
                a.retain(|e| element_key(&keys, e) != want);
            }
        }
        "v:" => {
            if let (Ok(want), Some(a)) = (serde_json::from_str::<Value>(rest), cur.as_array_mut()) {
                a.retain(|e| *e != want);
            }
        }
        _ => {}
    }
}

/// Merges an applied configuration into an object: maps recursively, keyed lists by key,
/// sets by union, atomic lists replaced.
pub fn merge_applied(target: &mut Value, applied: &Value) {
    let (Some(tm), Some(am)) = (target.as_object_mut(), applied.as_object()) else {
        *target = applied.clone();
        return;
    };
    for (k, v) in am {
        match v {
            Value::Object(_) => {
                let entry = tm.entry(k.clone()).or_insert(Value::Null);
                if entry.is_object() {
                    merge_applied(entry, v);
                } else {
                    *entry = v.clone();
                }
            }
            Value::Array(items) => {
                let current = tm
                    .get(k)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let merged = match list_type(k, items) {
                    ListType::Atomic => items.clone(),
                    ListType::Set => {
                        let mut c = current;
                        for i in items {
                            if !c.contains(i) {
                                c.push(i.clone());
                            }
                        }
                        c
                    }
                    ListType::Map(keys) => {
                        let mut c = current;
                        for i in items {
                            match find_element(&keys, &c, i) {
                                Some(idx) => merge_applied(&mut c[idx], i),
                                None => c.push(i.clone()),
                            }
                        }
                        c
                    }
                };
                tm.insert(k.clone(), Value::Array(merged));
            }
            _ => {
                tm.insert(k.clone(), v.clone());
            }
        }
    }
}

/// `.spec.containers[name="a"].image`, as structured-merge-diff prints paths.
pub fn path_string(path: &[String]) -> String {
    let mut s = String::new();
    for step in path {
        let (kind, rest) = parse_step(step);
        match kind {
            "f:" => {
                s.push('.');
                s.push_str(rest);
            }
            "k:" => {
                let m: Map<String, Value> = serde_json::from_str(rest).unwrap_or_default();
                let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
                s.push_str(&format!("[{}]", parts.join(",")));
            }
            "v:" => s.push_str(&format!("[={rest}]")),
            _ => s.push_str(step),
        }
    }
    s
}

fn print_manager(e: &ManagedEntry) -> String {
    let mut s = format!("{:?}", e.manager);
    if !e.subresource.is_empty() {
        s.push_str(&format!(" with subresource {:?}", e.subresource));
    }
    if e.operation == "Update" {
        s.push_str(&format!(" using {}", e.api_version));
        if !e.time.is_empty() {
            s.push_str(&format!(" at {}", e.time));
        }
    }
    s
}

fn subresource_of(scope: Scope) -> &'static str {
    match scope {
        Scope::Status => "status",
        Scope::Main { .. } => "",
    }
}

/// Inputs of one server-side apply.
pub struct ApplyRequest<'a> {
    /// The applied configuration.
    pub applied: &'a Value,
    /// Field manager (required by the real server for apply).
    pub manager: &'a str,
    /// `force=true`: take conflicting fields instead of failing.
    pub force: bool,
    /// Main resource or status.
    pub scope: Scope,
    /// apiVersion of the request.
    pub api_version: &'a str,
    /// RFC 3339 time for the entry.
    pub now: &'a str,
}

/// Applies `req.applied` to `current` (which is `{}`-like for a new object) and returns the new
/// object with updated managedFields.
pub fn server_side_apply(current: &Value, req: &ApplyRequest<'_>) -> Result<Value, Conflicts> {
    let applied_set = fields_of(req.applied, req.scope);
    let subresource = subresource_of(req.scope);
    let mut entries = managed_entries(current);
    let mut conflicts: Vec<(usize, Path)> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if e.manager == req.manager && e.operation == "Apply" && e.subresource == subresource {
            continue;
        }
        for p in e.fields.intersection(&applied_set) {
            if value_at(current, p) != value_at(req.applied, p) && value_at(current, p).is_some() {
                conflicts.push((i, p.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !req.force {
        let causes = conflicts
            .iter()
            .map(|(i, p)| {
                json!({
                    "reason": "FieldManagerConflict",
                    "message": format!("conflict with {}", print_manager(&entries[*i])),
                    "field": path_string(p),
                })
            })
            .collect();
        let message = if conflicts.len() == 1 {
            let (i, p) = &conflicts[0];
            format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                print_manager(&entries[*i]),
                path_string(p)
            )
        } else {
            let mut by_manager: Vec<(String, Vec<String>)> = Vec::new();
            for (i, p) in &conflicts {
                let m = print_manager(&entries[*i]);
                match by_manager.iter_mut().find(|(x, _)| *x == m) {
                    Some((_, ps)) => ps.push(path_string(p)),
                    None => by_manager.push((m, vec![path_string(p)])),
                }
            }
            by_manager.sort();
            let mut lines = Vec::new();
            for (m, ps) in by_manager {
                lines.push(format!("conflicts with {m}:"));
                lines.extend(ps.into_iter().map(|p| format!("- {p}")));
            }
            format!(
                "Apply failed with {} conflicts: {}",
                conflicts.len(),
                lines.join("\n")
            )
        };
        return Err(Conflicts { message, causes });
    }
    for (i, p) in &conflicts {
        entries[*i].fields.remove(p);
    }
    let own_idx = entries.iter().position(|e| {
        e.manager == req.manager && e.operation == "Apply" && e.subresource == subresource
    });
    let previous = own_idx
        .map(|i| entries[i].fields.clone())
        .unwrap_or_default();
    let mut out = current.clone();
    // Fields this manager applied before and no longer applies go away unless someone else owns them.
    for p in previous.difference(&applied_set) {
        let shared = entries.iter().enumerate().any(|(i, e)| {
            Some(i) != own_idx
                && (e.fields.contains(p) || e.fields.iter().any(|q| q.starts_with(p)))
        });
        if !shared && !applied_set.iter().any(|q| q.starts_with(p)) {
            remove_at(&mut out, p);
        }
    }
    let applied_part = tracked(req.applied, req.scope);
    merge_applied(&mut out, &applied_part);
    let entry = ManagedEntry {
        manager: req.manager.to_string(),
        operation: "Apply".into(),
        api_version: req.api_version.to_string(),
        time: req.now.to_string(),
        subresource: subresource.to_string(),
        fields: applied_set,
    };
    match own_idx {
        Some(i) => entries[i] = entry,
        None => entries.push(entry),
    }
    set_managed_entries(&mut out, &entries);
    Ok(out)
}

/// Records an update (create, PUT or non-apply PATCH) by `manager`: the fields it changed become
/// its own and are taken from every other manager.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    scope: Scope,
    api_version: &str,
    now: &str,
) {
    let new_set = fields_of(new, scope);
    let old_set = old.map(|o| fields_of(o, scope)).unwrap_or_default();
    let mut entries = old.map(managed_entries).unwrap_or_default();
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| !old_set.contains(*p) || old.and_then(|o| value_at(o, p)) != value_at(new, p))
        .cloned()
        .collect();
    let removed: FieldSet = old_set.difference(&new_set).cloned().collect();
    let subresource = subresource_of(scope);
    for e in &mut entries {
        e.fields.retain(|p| !removed.contains(p));
        if !(e.manager == manager && e.operation == "Update" && e.subresource == subresource) {
            e.fields.retain(|p| !changed.contains(p));
        }
    }
    if !changed.is_empty() {
        match entries.iter_mut().find(|e| {
            e.manager == manager && e.operation == "Update" && e.subresource == subresource
        }) {
            Some(e) => {
                e.fields.extend(changed);
                e.time = now.to_string();
                e.api_version = api_version.to_string();
            }
            None => entries.push(ManagedEntry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version: api_version.to_string(),
                time: now.to_string(),
                subresource: subresource.to_string(),
                fields: changed,
            }),
        }
    }
    set_managed_entries(new, &entries);
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAIN: Scope = Scope::Main {
        status_separate: true,
    };

    fn apply(
        current: &Value,
        applied: Value,
        manager: &str,
        force: bool,
    ) -> Result<Value, Conflicts> {
        server_side_apply(
            current,
            &ApplyRequest {
                applied: &applied,
                manager,
                force,
                scope: MAIN,
                api_version: "apps/v1",
                now: "2026-01-01T00:00:00Z",
            },
        )
    }

    #[test]
    fn fields_round_trip_through_fieldsv1() {
        let obj = json!({"metadata": {"labels": {"a": "b"}, "finalizers": ["x"]},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let set = fields_of(&obj, MAIN);
        let enc = encode(&set);
        assert_eq!(
            enc["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"],
            json!({".": {}, "f:image": {}, "f:name": {}})
        );
        assert_eq!(enc["f:metadata"]["f:finalizers"]["v:\"x\""], json!({}));
        assert_eq!(decode(&enc), set);
    }

    #[test]
    fn apply_conflicts_force_and_removal() {
        let a = apply(
            &json!({"metadata": {}}),
            json!({"spec": {"replicas": 2, "paused": false}}),
            "a",
            false,
        )
        .expect("first apply");
        let err = apply(&a, json!({"spec": {"replicas": 3}}), "b", false).expect_err("conflict");
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"a\": .spec.replicas"
        );
        // Same value: shared ownership, no conflict.
        let shared = apply(&a, json!({"spec": {"replicas": 2}}), "b", false).expect("shared");
        let forced = apply(&shared, json!({"spec": {"replicas": 5}}), "b", true).expect("force");
        assert_eq!(forced["spec"]["replicas"], json!(5));
        // a stops applying paused: it is removed; replicas is now b's alone, so it stays.
        let dropped = apply(&forced, json!({"spec": {}}), "a", false).expect("drop");
        assert_eq!(dropped["spec"], json!({"replicas": 5}));
    }

    #[test]
    fn update_takes_ownership_without_conflict() {
        let a = apply(
            &json!({"metadata": {}}),
            json!({"spec": {"replicas": 2}}),
            "ssa",
            false,
        )
        .expect("apply");
        let mut edited = a.clone();
        edited["spec"]["replicas"] = json!(4);
        record_update(Some(&a), &mut edited, "kubectl-edit", MAIN, "apps/v1", "t");
        let err =
            apply(&edited, json!({"spec": {"replicas": 2}}), "ssa", false).expect_err("conflict");
        assert!(
            err.message
                .contains("conflict with \"kubectl-edit\" using apps/v1 at t: .spec.replicas"),
            "{}",
            err.message
        );
    }
}
