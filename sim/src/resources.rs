//! The catalogue of served resources: the built-in kinds plus those registered by CRDs.

use std::cmp::Ordering;
use std::sync::{Arc, RwLock};

use serde_json::Value;

/// Verbs of an ordinary stored resource.
const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// What the server knows about one resource at one group-version.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceInfo {
    /// API group, empty for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Plural resource name, e.g. `pods`.
    pub plural: String,
    /// Singular resource name, e.g. `pod`.
    pub singular: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Categories for kubectl (`all`, `kdoctor`).
    pub categories: Vec<String>,
    /// Verbs advertised in discovery.
    pub verbs: Vec<String>,
    /// Subresources served: `status`, `scale`.
    pub subresources: Vec<String>,
    /// Field selector keys accepted beyond metadata.name and metadata.namespace.
    pub field_selectors: Vec<String>,
    /// Storage key shared by every version of the same resource.
    pub storage: String,
    /// The OpenAPI schema of a custom resource version (None for built-ins).
    pub schema: Option<Value>,
    /// additionalPrinterColumns of a custom resource version.
    pub printer_columns: Vec<Value>,
    /// True for kinds served from a CRD.
    pub custom: bool,
    /// True for create-only review kinds (TokenReview, SubjectAccessReview).
    pub virtual_kind: bool,
}

impl ResourceInfo {
    /// `apiVersion` of the objects: `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods` or `deployments.apps`, as in the Go server's messages.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The list kind, e.g. `PodList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Whether the resource serves the given subresource.
    pub fn has_subresource(&self, sub: &str) -> bool {
        self.subresources.iter().any(|s| s == sub)
    }

    /// Whether the verb is served.
    pub fn allows(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// Whether a field selector key is served.
    pub fn allows_field(&self, key: &str) -> bool {
        key == "metadata.name"
            || (key == "metadata.namespace" && self.namespaced)
            || self.field_selectors.iter().any(|f| f == key)
    }
}

struct Builtin<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
    plural: &'a str,
    namespaced: bool,
    short: &'a [&'a str],
    subresources: &'a [&'a str],
    fields: &'a [&'a str],
}

fn builtin(b: Builtin<'_>) -> ResourceInfo {
    let group_key = if b.group.is_empty() { "core" } else { b.group };
    // Events are stored once and served in both core/v1 and events.k8s.io/v1.
    let storage = if b.plural == "events" {
        "core/events".to_string()
    } else {
        format!("{group_key}/{}", b.plural)
    };
    ResourceInfo {
        group: b.group.into(),
        version: b.version.into(),
        kind: b.kind.into(),
        plural: b.plural.into(),
        singular: b.kind.to_lowercase(),
        namespaced: b.namespaced,
        short_names: b.short.iter().map(|s| s.to_string()).collect(),
        categories: Vec::new(),
        verbs: ALL_VERBS.iter().map(|s| s.to_string()).collect(),
        subresources: b.subresources.iter().map(|s| s.to_string()).collect(),
        field_selectors: b.fields.iter().map(|s| s.to_string()).collect(),
        storage,
        schema: None,
        printer_columns: Vec::new(),
        custom: false,
        virtual_kind: false,
    }
}

fn review(group: &str, kind: &str, plural: &str, namespaced: bool) -> ResourceInfo {
    let mut r = builtin(Builtin {
        group,
        version: "v1",
        kind,
        plural,
        namespaced,
        short: &[],
        subresources: &[],
        fields: &[],
    });
    r.verbs = vec!["create".into()];
    r.virtual_kind = true;
    r
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// The built-in kinds the simulator serves.
pub fn builtins() -> Vec<ResourceInfo> {
    let mut v = vec![
        builtin(Builtin {
            group: "",
            version: "v1",
            kind: "Namespace",
            plural: "namespaces",
            namespaced: false,
            short: &["ns"],
            subresources: &["status", "finalize"],
            fields: &["status.phase"],
        }),
        builtin(Builtin {
            group: "",
            version: "v1",
            kind: "Node",
            plural: "nodes",
            namespaced: false,
            short: &["no"],
            subresources: &["status"],
            fields: &["spec.unschedulable"],
        }),
        builtin(Builtin {
            group: "",
            version: "v1",
            kind: "Pod",
            plural: "pods",
            namespaced: true,
            short: &["po"],
            subresources: &["status", "log"],
            fields: POD_FIELDS,
        }),
        builtin(Builtin {
            group: "",
            version: "v1",
            kind: "Service",
            plural: "services",
            namespaced: true,
            short: &["svc"],
            subresources: &["status"],
            fields: &[],
        }),
        builtin(Builtin {
            group: "",
            version: "v1",
            kind: "Endpoints",
            plural: "endpoints",
            namespaced: true,
            short: &["ep"],
            subresources: &[],
            fields: &[],
        }),
        builtin(Builtin {
            group: "",
            version: "v1",
            kind: "ConfigMap",
            plural: "configmaps",
            namespaced: true,
            short: &["cm"],
            subresources: &[],
            fields: &[],
        }),
        builtin(Builtin {
            group: "",
            version: "v1",
            kind: "Secret",
            plural: "secrets",
            namespaced: true,
            short: &[],
            subresources: &[],
            fields: &["type"],
        }),
        // Stored only: no volumes are provisioned; the runner gives a claim's mount a
        // directory of the pod's own.
        builtin(Builtin {
            group: "",
            version: "v1",
            kind: "PersistentVolumeClaim",
            plural: "persistentvolumeclaims",
            namespaced: true,
            short: &["pvc"],
            subresources: &["status"],
            fields: &[],
        }),
        builtin(Builtin {
            group: "",
            version: "v1",
            kind: "ServiceAccount",
            plural: "serviceaccounts",
            namespaced: true,
            short: &["sa"],
            subresources: &[],
            fields: &[],
        }),
        builtin(Builtin {
            group: "",
            version: "v1",
            kind: "Event",
            plural: "events",
            namespaced: true,
            short: &["ev"],
            subresources: &[],
            fields: EVENT_FIELDS,
        }),
        builtin(Builtin {
            group: "events.k8s.io",
            version: "v1",
            kind: "Event",
            plural: "events",
            namespaced: true,
            // Without a short name: `kubectl get ev` means core/v1 Events, without a warning.
            short: &[],
            subresources: &[],
            fields: EVENT_FIELDS,
        }),
        builtin(Builtin {
            group: "apps",
            version: "v1",
            kind: "DaemonSet",
            plural: "daemonsets",
            namespaced: true,
            short: &["ds"],
            subresources: &["status"],
            fields: &[],
        }),
        builtin(Builtin {
            group: "apps",
            version: "v1",
            kind: "Deployment",
            plural: "deployments",
            namespaced: true,
            short: &["deploy"],
            subresources: &["status", "scale"],
            fields: &[],
        }),
        builtin(Builtin {
            group: "apps",
            version: "v1",
            kind: "ReplicaSet",
            plural: "replicasets",
            namespaced: true,
            short: &["rs"],
            subresources: &["status", "scale"],
            fields: &[],
        }),
        builtin(Builtin {
            group: "discovery.k8s.io",
            version: "v1",
            kind: "EndpointSlice",
            plural: "endpointslices",
            namespaced: true,
            short: &[],
            subresources: &[],
            fields: &[],
        }),
        builtin(Builtin {
            group: "networking.k8s.io",
            version: "v1",
            kind: "Ingress",
            plural: "ingresses",
            namespaced: true,
            short: &["ing"],
            subresources: &["status"],
            fields: &[],
        }),
        builtin(Builtin {
            group: "networking.k8s.io",
            version: "v1",
            kind: "IngressClass",
            plural: "ingressclasses",
            namespaced: false,
            short: &[],
            subresources: &[],
            fields: &[],
        }),
        builtin(Builtin {
            group: "coordination.k8s.io",
            version: "v1",
            kind: "Lease",
            plural: "leases",
            namespaced: true,
            short: &[],
            subresources: &[],
            fields: &[],
        }),
        builtin(Builtin {
            group: "apiextensions.k8s.io",
            version: "v1",
            kind: "CustomResourceDefinition",
            plural: "customresourcedefinitions",
            namespaced: false,
            short: &["crd", "crds"],
            subresources: &["status"],
            fields: &[],
        }),
        builtin(Builtin {
            group: "apiregistration.k8s.io",
            version: "v1",
            kind: "APIService",
            plural: "apiservices",
            namespaced: false,
            short: &[],
            subresources: &["status"],
            fields: &[],
        }),
    ];
    for (kind, plural, namespaced) in [
        ("Role", "roles", true),
        ("RoleBinding", "rolebindings", true),
        ("ClusterRole", "clusterroles", false),
        ("ClusterRoleBinding", "clusterrolebindings", false),
    ] {
        v.push(builtin(Builtin {
            group: "rbac.authorization.k8s.io",
            version: "v1",
            kind,
            plural,
            namespaced,
            short: &[],
            subresources: &[],
            fields: &[],
        }));
    }
    v.push(review(
        "authentication.k8s.io",
        "TokenReview",
        "tokenreviews",
        false,
    ));
    v.push(review(
        "authorization.k8s.io",
        "SubjectAccessReview",
        "subjectaccessreviews",
        false,
    ));
    v.push(review(
        "authorization.k8s.io",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        false,
    ));
    for r in &mut v {
        if matches!(
            r.plural.as_str(),
            "pods" | "services" | "daemonsets" | "deployments" | "replicasets"
        ) {
            r.categories = vec!["all".into()];
        }
    }
    v
}

/// Orders versions as Kubernetes does: GA before beta before alpha, higher numbers first,
/// then non-Kubernetes-style versions alphabetically.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u32, u8, u32)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let major: u32 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((major, 2, 0));
        }
        let (stage, num) = if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (0, n)
        } else {
            return None;
        };
        Some((major, stage, num.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        (Some((ma, sa, na)), Some((mb, sb, nb))) => sb.cmp(&sa).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// The served resources; CRDs add and remove entries while the server runs.
#[derive(Default)]
pub struct Catalogue {
    inner: RwLock<Vec<Arc<ResourceInfo>>>,
}

impl Catalogue {
    /// A catalogue holding the built-in kinds.
    pub fn with_builtins() -> Self {
        Catalogue {
            inner: RwLock::new(builtins().into_iter().map(Arc::new).collect()),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<ResourceInfo>>> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Every served resource, in registration order.
    pub fn all(&self) -> Vec<Arc<ResourceInfo>> {
        self.read().clone()
    }

    /// The resource served at group/version/plural.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.read()
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .cloned()
    }

    /// The resource of an apiVersion and kind.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        let (group, version) = split_api_version(api_version);
        self.read()
            .iter()
            .find(|r| r.group == group && r.version == version && r.kind == kind)
            .cloned()
    }

    /// The preferred version of a group's resource with this kind (for ownerReferences and stages).
    pub fn by_group_kind(&self, group: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        let all = self.read();
        let mut found: Vec<&Arc<ResourceInfo>> = all
            .iter()
            .filter(|r| r.group == group && r.kind == kind)
            .collect();
        found.sort_by(|a, b| compare_versions(&a.version, &b.version));
        found.first().map(|r| (*r).clone())
    }

    /// Every version of the resource stored under `storage`.
    pub fn by_storage(&self, storage: &str) -> Vec<Arc<ResourceInfo>> {
        self.read()
            .iter()
            .filter(|r| r.storage == storage)
            .cloned()
            .collect()
    }

    /// Replaces the versions served for one CRD (group + plural).
    pub fn set_custom(&self, group: &str, plural: &str, versions: Vec<ResourceInfo>) {
        let mut all = self.inner.write().unwrap_or_else(|e| e.into_inner());
        all.retain(|r| !(r.custom && r.group == group && r.plural == plural));
        all.extend(versions.into_iter().map(Arc::new));
    }

    /// Group names with their versions in preference order, built-ins first.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for r in self.read().iter() {
            match out.iter_mut().find(|(g, _)| *g == r.group) {
                Some((_, versions)) => {
                    if !versions.contains(&r.version) {
                        versions.push(r.version.clone());
                    }
                }
                None => out.push((r.group.clone(), vec![r.version.clone()])),
            }
        }
        for (_, versions) in &mut out {
            versions.sort_by(|a, b| compare_versions(a, b));
        }
        out
    }
}

/// Splits `apps/v1` into (`apps`, `v1`) and `v1` into (``, `v1`).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_like_kubernetes() {
        let mut v = vec!["v1alpha1", "v1beta1", "v2", "v1", "foo", "v1beta2", "v10"];
        v.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(
            v,
            ["v10", "v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }
}
