//! CustomResourceDefinitions: validation of names and versions, the Established status, and
//! registration of the served versions in the catalogue (synchronously, so a CR can be applied
//! right after its CRD).

use serde_json::{Value, json};

use crate::cluster::Cluster;
use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceInfo;
use crate::store::Write;

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

fn strings(v: &Value, p: &str) -> Vec<String> {
    v.pointer(p)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn validate(info: &ResourceInfo, obj: &Value) -> ApiResult<()> {
    let name = s(obj, "/metadata/name");
    let group = s(obj, "/spec/group");
    let plural = s(obj, "/spec/names/plural");
    let invalid = |field: &str, detail: String| {
        let mut e = ApiError::invalid(info, name, field, &detail);
        e.message = format!(
            "CustomResourceDefinition.apiextensions.k8s.io \"{name}\" is invalid: {field}: {detail}"
        );
        e
    };
    if group.is_empty() || plural.is_empty() || s(obj, "/spec/names/kind").is_empty() {
        return Err(invalid("spec.names", "Required value".into()));
    }
    if name != format!("{plural}.{group}") {
        return Err(invalid(
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let versions = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        return Err(invalid("spec.versions", "Required value".into()));
    }
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if storage != 1 {
        return Err(invalid(
            "spec.versions",
            "Invalid value: must have exactly one version marked as storage version".into(),
        ));
    }
    match s(obj, "/spec/scope") {
        "Namespaced" | "Cluster" => Ok(()),
        other => Err(invalid(
            "spec.scope",
            format!(
                "Unsupported value: \"{other}\": supported values: \"Cluster\", \"Namespaced\""
            ),
        )),
    }
}

fn set_status(obj: &mut Value) {
    let now = crate::clock::now();
    let storage: Vec<String> = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let mut stored = strings(obj, "/status/storedVersions");
    for v in storage {
        if !stored.contains(&v) {
            stored.push(v);
        }
    }
    let mut names = obj.pointer("/spec/names").cloned().unwrap_or(json!({}));
    if names.get("singular").is_none() {
        names["singular"] = json!(s(obj, "/spec/names/kind").to_lowercase());
    }
    if names.get("listKind").is_none() {
        names["listKind"] = json!(format!("{}List", s(obj, "/spec/names/kind")));
    }
    obj["status"] = json!({
        "acceptedNames": names,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": now, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
        ],
        "storedVersions": stored,
    });
}

/// Validates a new CRD and marks it Established.
pub fn prepare_create(info: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
    validate(info, obj)?;
    if let Some(vs) = obj
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    {
        for v in vs {
            if let Some(m) = v.as_object_mut() {
                m.entry("served").or_insert(json!(true));
            }
        }
    }
    set_status(obj);
    Ok(())
}

/// Validates a changed CRD; group and names.plural are immutable.
pub fn prepare_update(info: &ResourceInfo, old: &Value, new: &mut Value) -> ApiResult<()> {
    validate(info, new)?;
    if s(old, "/spec/group") != s(new, "/spec/group") {
        return Err(ApiError::invalid(
            info,
            s(new, "/metadata/name"),
            "spec.group",
            "Invalid value: field is immutable",
        ));
    }
    new["status"] = old.get("status").cloned().unwrap_or(json!({}));
    set_status(new);
    Ok(())
}

/// The catalogue entries of a CRD's served versions.
pub fn versions_of(crd: &Value) -> Vec<ResourceInfo> {
    let group = s(crd, "/spec/group").to_string();
    let plural = s(crd, "/spec/names/plural").to_string();
    let kind = s(crd, "/spec/names/kind").to_string();
    let singular = match s(crd, "/spec/names/singular") {
        "" => kind.to_lowercase(),
        x => x.to_string(),
    };
    let namespaced = s(crd, "/spec/scope") == "Namespaced";
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
        .map(|v| {
            let mut subresources = Vec::new();
            if v.pointer("/subresources/status").is_some() {
                subresources.push("status".to_string());
            }
            if v.pointer("/subresources/scale").is_some() {
                subresources.push("scale".to_string());
            }
            ResourceInfo {
                group: group.clone(),
                version: s(v, "/name").to_string(),
                kind: kind.clone(),
                plural: plural.clone(),
                singular: singular.clone(),
                namespaced,
                short_names: strings(crd, "/spec/names/shortNames"),
                categories: strings(crd, "/spec/names/categories"),
                verbs: [
                    "delete",
                    "deletecollection",
                    "get",
                    "list",
                    "patch",
                    "create",
                    "update",
                    "watch",
                ]
                .iter()
                .map(|x| x.to_string())
                .collect(),
                subresources,
                field_selectors: v
                    .get("selectableFields")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                            .map(|p| p.trim_start_matches('.').to_string())
                            .collect()
                    })
                    .unwrap_or_default(),
                storage: format!("{group}/{plural}"),
                schema: v.pointer("/schema/openAPIV3Schema").cloned(),
                printer_columns: v
                    .get("additionalPrinterColumns")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
                custom: true,
                virtual_kind: false,
            }
        })
        .collect()
}

/// Serves the CRD's versions.
pub fn register(c: &Cluster, crd: &Value) -> ApiResult<()> {
    let group = s(crd, "/spec/group");
    let plural = s(crd, "/spec/names/plural");
    c.catalogue.set_custom(group, plural, versions_of(crd));
    Ok(())
}

/// Stops serving the CRD's kinds and removes their objects.
pub fn unregister(c: &Cluster, crd: &Value) {
    let group = s(crd, "/spec/group");
    let plural = s(crd, "/spec/names/plural");
    c.catalogue.set_custom(group, plural, Vec::new());
    let storage = format!("{group}/{plural}");
    let (items, _) = c.store.list(&storage, None);
    for item in items {
        let ns = s(&item, "/metadata/namespace").to_string();
        let name = s(&item, "/metadata/name").to_string();
        let _ = c.store.mutate(&storage, &ns, &name, |cur, _| {
            Ok((
                cur.map_or(Write::Keep, |v| Write::Delete((**v).clone())),
                (),
            ))
        });
    }
}
