//! RBAC as kube-apiserver evaluates it (opt-in, `SimConfig::rbac`): ClusterRoleBindings and
//! RoleBindings to Users, Groups and ServiceAccounts; Role and ClusterRole rules over verbs,
//! API groups, resources, subresources, resource names and non-resource URLs; aggregated
//! ClusterRoles; `system:masters` allowed everything; discovery and health paths and
//! self-reviews open to every authenticated user (the default system:discovery,
//! system:public-info-viewer and system:basic-user bindings).

use serde_json::Value;

use crate::cluster::Cluster;
use crate::reviews::UserInfo;
use crate::selector::LabelSelector;

/// What a request asks to do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Attributes {
    /// get, list, watch, create, update, patch, delete, deletecollection (or the HTTP verb in
    /// lower case for non-resource paths).
    pub verb: String,
    /// API group ("" for core).
    pub api_group: String,
    /// Resource plural.
    pub resource: String,
    /// Subresource, if any.
    pub subresource: String,
    /// Namespace ("" for cluster scope).
    pub namespace: String,
    /// Object name, if the request names one.
    pub name: String,
    /// The path, for non-resource requests.
    pub path: Option<String>,
}

const OPEN_PATHS: &[&str] = &[
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/version",
    "/openapi",
    "/openapi/*",
    "/healthz",
    "/livez",
    "/readyz",
];

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn path_allowed(patterns: &[String], path: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => p == path,
    })
}

fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    let verbs = strings(rule, "verbs");
    if !verbs.iter().any(|v| v == "*" || *v == a.verb) {
        return false;
    }
    if let Some(path) = &a.path {
        return path_allowed(&strings(rule, "nonResourceURLs"), path);
    }
    let groups = strings(rule, "apiGroups");
    if !groups.iter().any(|g| g == "*" || *g == a.api_group) {
        return false;
    }
    let resources = strings(rule, "resources");
    let wanted = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let resource_ok = resources.iter().any(|r| {
        r == "*"
            || *r == wanted
            || (!a.subresource.is_empty() && *r == format!("*/{}", a.subresource))
    });
    if !resource_ok {
        return false;
    }
    let names = strings(rule, "resourceNames");
    names.is_empty() || (!a.name.is_empty() && names.contains(&a.name))
}

fn subject_matches(s: &Value, user: &UserInfo) -> bool {
    let name = s.get("name").and_then(Value::as_str).unwrap_or("");
    match s.get("kind").and_then(Value::as_str).unwrap_or("") {
        "User" => name == user.username,
        "Group" => user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let ns = s.get("namespace").and_then(Value::as_str).unwrap_or("");
            user.username == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

fn cluster_role_rules(c: &Cluster, name: &str) -> Vec<Value> {
    let Some(role) = c
        .store
        .get("rbac.authorization.k8s.io/clusterroles", "", name)
    else {
        return Vec::new();
    };
    let mut rules: Vec<Value> = role
        .get("rules")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(selectors) = role
        .pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
    {
        let (all, _) = c.store.list("rbac.authorization.k8s.io/clusterroles", None);
        for sel in selectors {
            let Ok(sel) = LabelSelector::from_object(sel) else {
                continue;
            };
            for other in &all {
                if other.pointer("/metadata/name").and_then(Value::as_str) != Some(name)
                    && sel.matches(other)
                {
                    rules.extend(
                        other
                            .get("rules")
                            .and_then(Value::as_array)
                            .cloned()
                            .unwrap_or_default(),
                    );
                }
            }
        }
    }
    rules
}

fn role_rules(c: &Cluster, binding: &Value, ns: &str) -> Vec<Value> {
    let kind = binding
        .pointer("/roleRef/kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = binding
        .pointer("/roleRef/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    match kind {
        "ClusterRole" => cluster_role_rules(c, name),
        "Role" => c
            .store
            .get("rbac.authorization.k8s.io/roles", ns, name)
            .and_then(|r| r.get("rules").and_then(Value::as_array).cloned())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Whether `user` may do `a`.
pub fn allowed(c: &Cluster, user: &UserInfo, a: &Attributes) -> bool {
    if user.groups.iter().any(|g| g == "system:masters") {
        return true;
    }
    if let Some(path) = &a.path
        && a.verb == "get"
        && path_allowed(
            &OPEN_PATHS.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            path,
        )
    {
        return true;
    }
    // system:basic-user, bound to every authenticated user: asking about oneself.
    if a.verb == "create"
        && matches!(
            a.resource.as_str(),
            "selfsubjectaccessreviews" | "selfsubjectrulesreviews" | "selfsubjectreviews"
        )
    {
        return true;
    }
    let bound = |b: &Value| {
        b.get("subjects")
            .and_then(Value::as_array)
            .is_some_and(|ss| ss.iter().any(|s| subject_matches(s, user)))
    };
    let (crbs, _) = c
        .store
        .list("rbac.authorization.k8s.io/clusterrolebindings", None);
    for b in crbs.iter().filter(|b| bound(b)) {
        if role_rules(c, b, "").iter().any(|r| rule_allows(r, a)) {
            return true;
        }
    }
    if !a.namespace.is_empty() && a.path.is_none() {
        let (rbs, _) = c
            .store
            .list("rbac.authorization.k8s.io/rolebindings", Some(&a.namespace));
        for b in rbs.iter().filter(|b| bound(b)) {
            if role_rules(c, b, &a.namespace)
                .iter()
                .any(|r| rule_allows(r, a))
            {
                return true;
            }
        }
    }
    false
}

/// The real server's 403 message for a denied request.
pub fn forbidden_message(user: &UserInfo, a: &Attributes) -> String {
    if let Some(path) = &a.path {
        return format!(
            "forbidden: User \"{}\" cannot {} path \"{path}\"",
            user.username, a.verb
        );
    }
    let gr = if a.api_group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.api_group)
    };
    let what = if a.name.is_empty() {
        format!("{gr} is forbidden")
    } else {
        format!("{gr} \"{}\" is forbidden", a.name)
    };
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", a.namespace)
    };
    format!(
        "{what}: User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
        user.username, a.verb, a.api_group
    )
}

/// Attributes of a SubjectAccessReview spec.
pub fn attributes_of_review(spec: &Value) -> Attributes {
    let s = |p: &str| {
        spec.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    if spec.get("nonResourceAttributes").is_some() {
        return Attributes {
            verb: s("/nonResourceAttributes/verb"),
            path: Some(s("/nonResourceAttributes/path")),
            ..Default::default()
        };
    }
    Attributes {
        verb: s("/resourceAttributes/verb"),
        api_group: s("/resourceAttributes/group"),
        resource: s("/resourceAttributes/resource"),
        subresource: s("/resourceAttributes/subresource"),
        namespace: s("/resourceAttributes/namespace"),
        name: s("/resourceAttributes/name"),
        path: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::WriteOptions;
    use serde_json::json;

    fn put(c: &Cluster, kind: &str, ns: &str, obj: Value) {
        let info = c
            .resource("rbac.authorization.k8s.io", kind)
            .expect("rbac kind");
        c.create(&info, ns, obj, &WriteOptions::default())
            .expect("create");
    }

    #[test]
    fn bindings_roles_and_aggregation() {
        let c = Cluster::new(100, 1);
        let nsinfo = c.builtin("", "Namespace").expect("ns");
        c.create(
            &nsinfo,
            "",
            json!({"metadata": {"name": "kdoctor"}}),
            &WriteOptions::default(),
        )
        .expect("ns");
        put(
            &c,
            "ClusterRole",
            "",
            json!({"metadata": {"name": "reader", "labels": {"agg": "yes"}},
            "rules": [{"apiGroups": ["kdoctor.io"], "resources": ["netreaches", "netreaches/status"], "verbs": ["get", "list", "watch"]}]}),
        );
        put(
            &c,
            "ClusterRole",
            "",
            json!({"metadata": {"name": "aggregate"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "yes"}}]}}),
        );
        put(
            &c,
            "ClusterRoleBinding",
            "",
            json!({"metadata": {"name": "b"},
            "roleRef": {"kind": "ClusterRole", "name": "aggregate"},
            "subjects": [{"kind": "Group", "name": "dev"}]}),
        );
        put(
            &c,
            "Role",
            "kdoctor",
            json!({"metadata": {"name": "lease"},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kdoctor"], "verbs": ["get", "update"]}]}),
        );
        put(
            &c,
            "RoleBinding",
            "kdoctor",
            json!({"metadata": {"name": "lease"},
            "roleRef": {"kind": "Role", "name": "lease"},
            "subjects": [{"kind": "ServiceAccount", "name": "controller", "namespace": "kdoctor"}]}),
        );
        let dev = UserInfo::new("alice", &["dev"]);
        let sa = UserInfo::new("system:serviceaccount:kdoctor:controller", &[]);
        let get =
            |group: &str, resource: &str, sub: &str, ns: &str, name: &str, verb: &str| Attributes {
                verb: verb.into(),
                api_group: group.into(),
                resource: resource.into(),
                subresource: sub.into(),
                namespace: ns.into(),
                name: name.into(),
                path: None,
            };
        assert!(allowed(
            &c,
            &dev,
            &get("kdoctor.io", "netreaches", "", "", "t", "get")
        ));
        assert!(allowed(
            &c,
            &dev,
            &get("kdoctor.io", "netreaches", "status", "", "t", "get")
        ));
        assert!(!allowed(
            &c,
            &dev,
            &get("kdoctor.io", "netreaches", "", "", "t", "delete")
        ));
        assert!(allowed(
            &c,
            &sa,
            &get(
                "coordination.k8s.io",
                "leases",
                "",
                "kdoctor",
                "kdoctor",
                "update"
            )
        ));
        assert!(!allowed(
            &c,
            &sa,
            &get(
                "coordination.k8s.io",
                "leases",
                "",
                "kdoctor",
                "other",
                "update"
            )
        ));
        assert!(!allowed(
            &c,
            &sa,
            &get(
                "coordination.k8s.io",
                "leases",
                "",
                "default",
                "kdoctor",
                "update"
            )
        ));
        let discovery = Attributes {
            verb: "get".into(),
            path: Some("/apis/kdoctor.io/v1beta1".into()),
            ..Default::default()
        };
        assert!(allowed(&c, &sa, &discovery));
        assert_eq!(
            forbidden_message(&dev, &get("kdoctor.io", "netreaches", "", "", "", "delete")),
            "netreaches.kdoctor.io is forbidden: User \"alice\" cannot delete resource \"netreaches\" in API group \"kdoctor.io\" at the cluster scope"
        );
    }
}
