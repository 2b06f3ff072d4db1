//! How lists merge: the strategic-merge-patch keys and server-side-apply list types of the
//! fields kdoctor and the built-in kinds use. The real server reads them from the OpenAPI
//! schema; the simulator knows them by field name.

use serde_json::Value;

/// How a list field merges.
#[derive(Debug, Clone, PartialEq)]
pub enum ListType {
    /// Elements identified by these keys (`x-kubernetes-list-type: map`).
    Map(Vec<&'static str>),
    /// Scalar elements treated as a set.
    Set,
    /// Replaced as a whole.
    Atomic,
}

/// The list type of the field `name` holding `items`.
pub fn list_type(name: &str, items: &[Value]) -> ListType {
    let has = |k: &str| items.iter().all(|i| i.get(k).is_some()) && !items.is_empty();
    match name {
        "finalizers" => ListType::Set,
        "ownerReferences" => ListType::Map(vec!["uid"]),
        "conditions" => ListType::Map(vec!["type"]),
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "containerStatuses"
        | "initContainerStatuses" => ListType::Map(vec!["name"]),
        "volumeMounts" => ListType::Map(vec!["mountPath"]),
        "ports" if has("containerPort") => ListType::Map(vec!["containerPort", "protocol"]),
        "ports" if has("port") => ListType::Map(vec!["port", "protocol"]),
        "hostAliases" => ListType::Map(vec!["ip"]),
        _ => ListType::Atomic,
    }
}

/// The key values of a map-list element; a missing `protocol` counts as TCP, as defaulting would.
pub fn element_key(keys: &[&str], item: &Value) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    for k in keys {
        match item.get(*k) {
            Some(v) => {
                m.insert((*k).to_string(), v.clone());
            }
            None if *k == "protocol" => {
                m.insert("protocol".into(), Value::String("TCP".into()));
            }
            None => {}
        }
    }
    m
}

/// Index of the element of `list` with the same key as `item`.
pub fn find_element(keys: &[&str], list: &[Value], item: &Value) -> Option<usize> {
    let want = element_key(keys, item);
    list.iter().position(|e| element_key(keys, e) == want)
}
