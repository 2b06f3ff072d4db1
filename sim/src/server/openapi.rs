//! OpenAPI v3: the index and one document per group-version. kubectl needs them to decide that
//! the server validates fields itself (`fieldValidation` on the PATCH operation) and for
//! `explain`; custom resources carry their CRD schema, built-ins a permissive one.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

use crate::resources::{Catalogue, ResourceInfo};

/// Uppercase hex SHA-512, as the Go server hashes documents.
pub fn hash(bytes: &[u8]) -> String {
    Sha512::digest(bytes)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

fn schema_name(r: &ResourceInfo) -> String {
    let group = if r.group.is_empty() {
        "io.k8s.api.core".to_string()
    } else {
        let mut parts: Vec<&str> = r.group.split('.').collect();
        parts.reverse();
        parts.join(".")
    };
    format!("{group}.{}.{}", r.version, r.kind)
}

fn gvk(r: &ResourceInfo) -> Value {
    json!({"group": r.group, "version": r.version, "kind": r.kind})
}

fn operation(r: &ResourceInfo, action: &str, body: bool, name: &str) -> Value {
    let mut params = vec![
        json!({"name": "dryRun", "in": "query", "schema": {"type": "string"}}),
        json!({"name": "fieldManager", "in": "query", "schema": {"type": "string"}}),
    ];
    if body {
        params
            .push(json!({"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}));
    }
    if action == "patch" {
        params.push(json!({"name": "force", "in": "query", "schema": {"type": "boolean"}}));
    }
    let reference = json!({"$ref": format!("#/components/schemas/{name}")});
    let mut op = json!({
        "operationId": format!("{action}{}", r.kind),
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(r),
    });
    if body {
        op["requestBody"] = json!({"content": {"*/*": {"schema": reference}}, "required": true});
    }
    op
}

fn paths_for(r: &ResourceInfo, name: &str, prefix: &str) -> Vec<(String, Value)> {
    let base = if r.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("{prefix}/{}", r.plural)
    };
    let mut out = vec![
        (
            base.clone(),
            json!({
                "get": operation(r, "list", false, name),
                "post": operation(r, "post", true, name),
                "delete": operation(r, "deletecollection", false, name),
            }),
        ),
        (
            format!("{base}/{{name}}"),
            json!({
                "get": operation(r, "get", false, name),
                "put": operation(r, "put", true, name),
                "patch": operation(r, "patch", true, name),
                "delete": operation(r, "delete", false, name),
            }),
        ),
    ];
    if r.has_subresource("status") {
        out.push((
            format!("{base}/{{name}}/status"),
            json!({
                "get": operation(r, "get", false, name),
                "put": operation(r, "put", true, name),
                "patch": operation(r, "patch", true, name),
            }),
        ));
    }
    out
}

fn schema_for(r: &ResourceInfo) -> Value {
    let mut s = match &r.schema {
        Some(s) => s.clone(),
        None => json!({
            "type": "object",
            "description": format!("{} (kube-sim serves built-in kinds without a field schema)", r.kind),
            "x-kubernetes-preserve-unknown-fields": true,
        }),
    };
    if let Some(m) = s.as_object_mut() {
        m.insert("x-kubernetes-group-version-kind".into(), json!([gvk(r)]));
        let props = m
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(p) = props.as_object_mut() {
            p.entry("apiVersion").or_insert(json!({"type": "string"}));
            p.entry("kind").or_insert(json!({"type": "string"}));
            p.entry("metadata").or_insert(json!({"type": "object"}));
        }
    }
    s
}

/// The document for one group-version (None when not served).
pub fn document(cat: &Catalogue, group: &str, version: &str) -> Option<Value> {
    let rs: Vec<_> = cat
        .all()
        .into_iter()
        .filter(|r| r.group == group && r.version == version && !r.virtual_kind)
        .collect();
    if rs.is_empty() {
        return None;
    }
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for r in &rs {
        let name = schema_name(r);
        for (p, v) in paths_for(r, &name, &prefix) {
            paths.insert(p, v);
        }
        schemas.insert(name, schema_for(r));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// The key of a group-version in the index: `api/v1` or `apis/<g>/<v>`.
pub fn index_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The v3 index: every served group-version with its hashed URL.
pub fn index(cat: &Catalogue) -> Value {
    let mut paths = Map::new();
    for (g, versions) in cat.groups() {
        for v in versions {
            if let Some(doc) = document(cat, &g, &v) {
                let bytes = serde_json::to_vec(&doc).unwrap_or_default();
                let key = index_key(&g, &v);
                paths.insert(
                    key.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", hash(&bytes))}),
                );
            }
        }
    }
    json!({"paths": paths})
}
