//! Version conversion between the stored form and the version a client asked for: apiVersion
//! for custom resources, and the field renames between core/v1 and events.k8s.io/v1 Events.

use serde_json::{Map, Value};

use crate::resources::ResourceInfo;

// (core/v1 field, events.k8s.io/v1 field)
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(obj: &mut Value, from_is_core: bool) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    let mut moved = Map::new();
    for (core, new) in EVENT_FIELDS {
        let (from, to) = if from_is_core {
            (core, new)
        } else {
            (new, core)
        };
        if let Some(v) = m.remove(*from) {
            moved.insert((*to).to_string(), v);
        }
    }
    m.extend(moved);
}

/// The stored object as the client's version shows it.
pub fn to_external(info: &ResourceInfo, stored: &Value) -> Value {
    let mut v = stored.clone();
    if info.plural == "events" && info.group == "events.k8s.io" {
        rename(&mut v, true);
    }
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), Value::String(info.api_version()));
        m.insert("kind".into(), Value::String(info.kind.clone()));
    }
    v
}

/// A client's object in the stored form.
pub fn to_internal(info: &ResourceInfo, external: Value) -> Value {
    let mut v = external;
    if info.plural == "events" && info.group == "events.k8s.io" {
        rename(&mut v, false);
        if let Some(m) = v.as_object_mut() {
            m.insert("apiVersion".into(), Value::String("v1".into()));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;
    use serde_json::json;

    #[test]
    fn events_convert_both_ways() {
        let all = builtins();
        let new = all
            .iter()
            .find(|r| r.group == "events.k8s.io")
            .expect("events.k8s.io");
        let stored = to_internal(
            new,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "note": "hi", "regarding": {"name": "p"}}),
        );
        assert_eq!(stored["message"], json!("hi"));
        assert_eq!(stored["involvedObject"]["name"], json!("p"));
        let back = to_external(new, &stored);
        assert_eq!(back["note"], json!("hi"));
        assert_eq!(back["apiVersion"], json!("events.k8s.io/v1"));
    }
}
