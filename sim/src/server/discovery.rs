//! Discovery documents: legacy (/api, /api/v1, /apis, /apis/<g>, /apis/<g>/<v>) and aggregated
//! (apidiscovery.k8s.io v2 and v2beta1, chosen by Accept), built from the catalogue.

use serde_json::{Value, json};

use crate::resources::{Catalogue, ResourceInfo};

/// Which aggregated discovery version the client asked for, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregated {
    /// apidiscovery.k8s.io/v2.
    V2,
    /// apidiscovery.k8s.io/v2beta1.
    V2Beta1,
}

impl Aggregated {
    /// The version string.
    pub fn version(self) -> &'static str {
        match self {
            Aggregated::V2 => "v2",
            Aggregated::V2Beta1 => "v2beta1",
        }
    }

    /// The response Content-Type clients recognise the document by.
    pub fn content_type(self) -> String {
        format!(
            "application/json;g=apidiscovery.k8s.io;v={};as=APIGroupDiscoveryList",
            self.version()
        )
    }
}

/// The first aggregated format in the Accept header (in the client's order), if any.
pub fn negotiate(accept: &str) -> Option<Aggregated> {
    for range in accept.split(',') {
        let mut g = None;
        let mut v = None;
        let mut as_ = None;
        for param in range.split(';').skip(1) {
            match param.trim().split_once('=') {
                Some(("g", x)) => g = Some(x.trim()),
                Some(("v", x)) => v = Some(x.trim()),
                Some(("as", x)) => as_ = Some(x.trim()),
                _ => {}
            }
        }
        if g == Some("apidiscovery.k8s.io") && as_ == Some("APIGroupDiscoveryList") {
            match v {
                Some("v2") => return Some(Aggregated::V2),
                Some("v2beta1") => return Some(Aggregated::V2Beta1),
                _ => {}
            }
        }
    }
    None
}

fn subresource_verbs(sub: &str) -> Vec<&'static str> {
    match sub {
        "finalize" => vec!["update"],
        "log" => vec!["get"],
        _ => vec!["get", "patch", "update"],
    }
}

fn sorted_resources(
    cat: &Catalogue,
    group: &str,
    version: &str,
) -> Vec<std::sync::Arc<ResourceInfo>> {
    let mut rs: Vec<_> = cat
        .all()
        .into_iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    rs.sort_by(|a, b| a.plural.cmp(&b.plural));
    rs
}

/// `APIResourceList` for /api/v1 or /apis/<g>/<v>; None when the group-version is not served.
pub fn resource_list(cat: &Catalogue, group: &str, version: &str) -> Option<Value> {
    let rs = sorted_resources(cat, group, version);
    if rs.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for r in &rs {
        let mut e = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
        });
        if !r.short_names.is_empty() {
            e["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            e["categories"] = json!(r.categories);
        }
        resources.push(e);
        for sub in &r.subresources {
            let kind = if sub == "scale" {
                "Scale"
            } else {
                r.kind.as_str()
            };
            let mut s = json!({
                "name": format!("{}/{sub}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": kind,
                "verbs": subresource_verbs(sub),
            });
            if sub == "scale" {
                s["group"] = json!("autoscaling");
                s["version"] = json!("v1");
            }
            resources.push(s);
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }))
}

/// `APIVersions` for /api.
pub fn api_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    })
}

fn group_entry(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

/// `APIGroupList` for /apis.
pub fn group_list(cat: &Catalogue) -> Value {
    let groups: Vec<Value> = cat
        .groups()
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_entry(&g, &vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `APIGroup` for /apis/<g>.
pub fn group(cat: &Catalogue, name: &str) -> Option<Value> {
    cat.groups()
        .into_iter()
        .find(|(g, _)| g == name && !g.is_empty())
        .map(|(g, vs)| {
            let mut e = group_entry(&g, &vs);
            e["kind"] = json!("APIGroup");
            e["apiVersion"] = json!("v1");
            e
        })
}

fn aggregated_resource(r: &ResourceInfo) -> Value {
    let scope = if r.namespaced {
        "Namespaced"
    } else {
        "Cluster"
    };
    let mut e = json!({
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": scope,
        "singularResource": r.singular,
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        e["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        e["categories"] = json!(r.categories);
    }
    if !r.subresources.is_empty() {
        let subs: Vec<Value> = r
            .subresources
            .iter()
            .map(|s| {
                let kind = if s == "scale" {
                    json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
                } else {
                    json!({"group": r.group, "version": r.version, "kind": r.kind})
                };
                json!({
                    "subresource": s,
                    "responseKind": kind,
                    "acceptedTypes": [kind],
                    "verbs": subresource_verbs(s),
                })
            })
            .collect();
        e["subresources"] = json!(subs);
    }
    e
}

/// `APIGroupDiscoveryList` for /api (core only) or /apis (every named group).
pub fn aggregated(cat: &Catalogue, core: bool, format: Aggregated) -> Value {
    let items: Vec<Value> = cat
        .groups()
        .into_iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, versions)| {
            let vs: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = sorted_resources(cat, &g, v)
                        .iter()
                        .map(|r| aggregated_resource(r))
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": g, "creationTimestamp": null}, "versions": vs})
        })
        .collect();
    json!({
        "apiVersion": format!("apidiscovery.k8s.io/{}", format.version()),
        "kind": "APIGroupDiscoveryList",
        "metadata": {},
        "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation_follows_client_order() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(negotiate(kubectl), Some(Aggregated::V2));
        assert_eq!(
            negotiate("application/json;as=APIGroupDiscoveryList;v=v2beta1;g=apidiscovery.k8s.io"),
            Some(Aggregated::V2Beta1)
        );
        assert_eq!(negotiate("application/json, */*"), None);
    }

    #[test]
    fn documents_list_builtins() {
        let cat = Catalogue::with_builtins();
        let core = resource_list(&cat, "", "v1").expect("core");
        assert!(
            core["resources"]
                .as_array()
                .expect("resources")
                .iter()
                .any(|r| r["name"] == "pods/status")
        );
        let agg = aggregated(&cat, false, Aggregated::V2);
        assert!(
            agg["items"]
                .as_array()
                .expect("items")
                .iter()
                .any(|g| g["metadata"]["name"] == "apps")
        );
        assert!(resource_list(&cat, "nope", "v1").is_none());
    }
}
