//! Server-side printing (meta.k8s.io/v1 Table) so `kubectl get` shows the columns it shows
//! against a real cluster: CRD printer columns, and the usual columns of the built-in kinds.

use serde_json::{Value, json};

use crate::clock;
use crate::resources::ResourceInfo;

/// kubectl's short human duration (`5s`, `3m20s`, `2d4h`, `3y12d`).
pub fn human_age(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    let m = s / 60;
    let h = s / 3600;
    let d = h / 24;
    let y = d / 365;
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else if d < 365 * 8 {
        if d % 365 == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{}d", d % 365)
        }
    } else {
        format!("{y}y")
    }
}

fn age_of(obj: &Value, path: &str) -> String {
    obj.pointer(path)
        .and_then(Value::as_str)
        .and_then(clock::age_secs)
        .map(human_age)
        .unwrap_or_else(|| "<unknown>".into())
}

fn col(name: &str, ty: &str, priority: i64, description: &str) -> Value {
    let mut c = json!({"name": name, "type": ty, "format": "", "description": description, "priority": priority});
    if name == "Name" {
        c["format"] = json!("name");
    }
    c
}

fn s<'a>(obj: &'a Value, p: &str) -> &'a str {
    obj.pointer(p).and_then(Value::as_str).unwrap_or("")
}

fn i(obj: &Value, p: &str) -> i64 {
    obj.pointer(p).and_then(Value::as_i64).unwrap_or(0)
}

/// Evaluates a simple CRD printer-column JSONPath (`.status.x`, `.spec.list[0].y`).
fn json_path(obj: &Value, path: &str) -> Value {
    let mut cur = obj;
    let p = path.trim().trim_start_matches('{').trim_end_matches('}');
    for seg in p.trim_start_matches('.').split('.') {
        if seg.is_empty() {
            continue;
        }
        let (field, index) = match seg.split_once('[') {
            Some((f, rest)) => (f, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (seg, None),
        };
        cur = match cur.get(field) {
            Some(v) => v,
            None => return Value::Null,
        };
        if let Some(idx) = index {
            cur = match cur.get(idx) {
                Some(v) => v,
                None => return Value::Null,
            };
        }
    }
    cur.clone()
}

type Columns = (Vec<Value>, fn(&ResourceInfo, &Value) -> Vec<Value>);

fn custom_columns(info: &ResourceInfo) -> Vec<Value> {
    let mut cols = vec![col(
        "Name",
        "string",
        0,
        "Name must be unique within a namespace.",
    )];
    for c in &info.printer_columns {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        let ty = c.get("type").and_then(Value::as_str).unwrap_or("string");
        let pr = c.get("priority").and_then(Value::as_i64).unwrap_or(0);
        let desc = c.get("description").and_then(Value::as_str).unwrap_or("");
        cols.push(col(name, ty, pr, desc));
    }
    // As the real server: declared columns replace the default Age column entirely.
    if info.printer_columns.is_empty() {
        cols.push(col("Age", "date", 0, "CreationTimestamp is a timestamp representing the server time when this object was created."));
    }
    cols
}

fn custom_cells(info: &ResourceInfo, obj: &Value) -> Vec<Value> {
    let mut cells = vec![json!(s(obj, "/metadata/name"))];
    for c in &info.printer_columns {
        let v = json_path(obj, c.get("jsonPath").and_then(Value::as_str).unwrap_or(""));
        let ty = c.get("type").and_then(Value::as_str).unwrap_or("string");
        cells.push(match (ty, &v) {
            ("date", Value::String(t)) => {
                json!(clock::age_secs(t).map(human_age).unwrap_or_default())
            }
            (_, Value::Null) => json!("<none>"),
            (_, Value::String(_) | Value::Number(_) | Value::Bool(_)) => v,
            _ => json!(v.to_string()),
        });
    }
    // As the real server: declared columns replace the default Age column entirely.
    if info.printer_columns.is_empty() {
        cells.push(json!(age_of(obj, "/metadata/creationTimestamp")));
    }
    cells
}

fn pod_cells(_: &ResourceInfo, o: &Value) -> Vec<Value> {
    let statuses = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let total = o
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = statuses
        .iter()
        .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    let restarts: i64 = statuses
        .iter()
        .map(|c| c.get("restartCount").and_then(Value::as_i64).unwrap_or(0))
        .sum();
    let mut status = s(o, "/status/reason").to_string();
    if status.is_empty() {
        status = s(o, "/status/phase").to_string();
    }
    for c in &statuses {
        if let Some(r) = c.pointer("/state/waiting/reason").and_then(Value::as_str) {
            status = r.to_string();
        }
    }
    if o.pointer("/metadata/deletionTimestamp").is_some() {
        status = "Terminating".into();
    }
    let none = |x: &str| {
        if x.is_empty() {
            "<none>".to_string()
        } else {
            x.to_string()
        }
    };
    vec![
        json!(s(o, "/metadata/name")),
        json!(format!("{ready}/{total}")),
        json!(status),
        json!(restarts),
        json!(age_of(o, "/metadata/creationTimestamp")),
        json!(none(s(o, "/status/podIP"))),
        json!(none(s(o, "/spec/nodeName"))),
    ]
}

fn node_cells(_: &ResourceInfo, o: &Value) -> Vec<Value> {
    let ready = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| c["status"] == "True");
    let mut status = match ready {
        Some(true) => "Ready".to_string(),
        Some(false) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    let roles: Vec<String> = o
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.keys()
                .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/").map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let version = match s(o, "/status/nodeInfo/kubeletVersion") {
        "" => "<none>",
        v => v,
    };
    vec![
        json!(s(o, "/metadata/name")),
        json!(status),
        json!(if roles.is_empty() {
            "<none>".to_string()
        } else {
            roles.join(",")
        }),
        json!(age_of(o, "/metadata/creationTimestamp")),
        json!(version),
        json!(crate::stages::funcs::internal_ip(o).unwrap_or_else(|| "<none>".into())),
    ]
}

fn service_cells(_: &ResourceInfo, o: &Value) -> Vec<Value> {
    let ty = s(o, "/spec/type");
    let external: Vec<String> = o
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|i| {
                    i.get("ip")
                        .or_else(|| i.get("hostname"))
                        .and_then(Value::as_str)
                })
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let external = if !external.is_empty() {
        external.join(",")
    } else if ty == "LoadBalancer" {
        "<pending>".into()
    } else if ty == "ExternalName" {
        s(o, "/spec/externalName").to_string()
    } else {
        "<none>".into()
    };
    let ports: Vec<String> = o
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                    match p.get("nodePort").and_then(Value::as_i64) {
                        Some(np) => format!("{}:{np}/{proto}", i(p, "/port")),
                        None => format!("{}/{proto}", i(p, "/port")),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    vec![
        json!(s(o, "/metadata/name")),
        json!(ty),
        json!(match s(o, "/spec/clusterIP") {
            "" => "<none>",
            ip => ip,
        }),
        json!(external),
        json!(if ports.is_empty() {
            "<none>".to_string()
        } else {
            ports.join(",")
        }),
        json!(age_of(o, "/metadata/creationTimestamp")),
    ]
}

fn daemonset_cells(_: &ResourceInfo, o: &Value) -> Vec<Value> {
    let sel = o
        .pointer("/spec/template/spec/nodeSelector")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .filter(|x| !x.is_empty())
        .unwrap_or_else(|| "<none>".into());
    vec![
        json!(s(o, "/metadata/name")),
        json!(i(o, "/status/desiredNumberScheduled")),
        json!(i(o, "/status/currentNumberScheduled")),
        json!(i(o, "/status/numberReady")),
        json!(i(o, "/status/updatedNumberScheduled")),
        json!(i(o, "/status/numberAvailable")),
        json!(sel),
        json!(age_of(o, "/metadata/creationTimestamp")),
    ]
}

fn deployment_cells(_: &ResourceInfo, o: &Value) -> Vec<Value> {
    vec![
        json!(s(o, "/metadata/name")),
        json!(format!(
            "{}/{}",
            i(o, "/status/readyReplicas"),
            i(o, "/spec/replicas")
        )),
        json!(i(o, "/status/updatedReplicas")),
        json!(i(o, "/status/availableReplicas")),
        json!(age_of(o, "/metadata/creationTimestamp")),
    ]
}

fn namespace_cells(_: &ResourceInfo, o: &Value) -> Vec<Value> {
    vec![
        json!(s(o, "/metadata/name")),
        json!(s(o, "/status/phase")),
        json!(age_of(o, "/metadata/creationTimestamp")),
    ]
}

fn endpoints_cells(_: &ResourceInfo, o: &Value) -> Vec<Value> {
    let mut eps = Vec::new();
    for subset in o
        .get("subsets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let ports: Vec<i64> = subset
            .get("ports")
            .and_then(Value::as_array)
            .map(|ps| ps.iter().map(|p| i(p, "/port")).collect())
            .unwrap_or_default();
        for a in subset
            .get("addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let ip = a.get("ip").and_then(Value::as_str).unwrap_or("");
            if ports.is_empty() {
                eps.push(ip.to_string());
            }
            for p in &ports {
                eps.push(format!("{ip}:{p}"));
            }
        }
    }
    let shown = if eps.is_empty() {
        "<none>".to_string()
    } else if eps.len() > 3 {
        format!("{} + {} more...", eps[..3].join(","), eps.len() - 3)
    } else {
        eps.join(",")
    };
    vec![
        json!(s(o, "/metadata/name")),
        json!(shown),
        json!(age_of(o, "/metadata/creationTimestamp")),
    ]
}

fn data_count(o: &Value) -> usize {
    ["data", "binaryData", "stringData"]
        .iter()
        .filter_map(|k| o.get(*k).and_then(Value::as_object))
        .map(|m| m.len())
        .sum()
}

fn configmap_cells(_: &ResourceInfo, o: &Value) -> Vec<Value> {
    vec![
        json!(s(o, "/metadata/name")),
        json!(data_count(o)),
        json!(age_of(o, "/metadata/creationTimestamp")),
    ]
}

fn secret_cells(_: &ResourceInfo, o: &Value) -> Vec<Value> {
    vec![
        json!(s(o, "/metadata/name")),
        json!(match s(o, "/type") {
            "" => "Opaque",
            t => t,
        }),
        json!(data_count(o)),
        json!(age_of(o, "/metadata/creationTimestamp")),
    ]
}

fn replicaset_cells(_: &ResourceInfo, o: &Value) -> Vec<Value> {
    vec![
        json!(s(o, "/metadata/name")),
        json!(i(o, "/spec/replicas")),
        json!(i(o, "/status/replicas")),
        json!(i(o, "/status/readyReplicas")),
        json!(age_of(o, "/metadata/creationTimestamp")),
    ]
}

fn ingress_cells(_: &ResourceInfo, o: &Value) -> Vec<Value> {
    let hosts: Vec<&str> = o
        .pointer("/spec/rules")
        .and_then(Value::as_array)
        .map(|rs| {
            rs.iter()
                .map(|r| r.get("host").and_then(Value::as_str).unwrap_or("*"))
                .collect()
        })
        .unwrap_or_default();
    let addrs: Vec<&str> = o
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.get("ip").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let tls = o
        .pointer("/spec/tls")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    vec![
        json!(s(o, "/metadata/name")),
        json!(match s(o, "/spec/ingressClassName") {
            "" => "<none>",
            c => c,
        }),
        json!(if hosts.is_empty() {
            "*".to_string()
        } else {
            hosts.join(",")
        }),
        json!(addrs.join(",")),
        json!(if tls { "80, 443" } else { "80" }),
        json!(age_of(o, "/metadata/creationTimestamp")),
    ]
}

fn event_cells(_: &ResourceInfo, o: &Value) -> Vec<Value> {
    let last = [
        "/lastTimestamp",
        "/eventTime",
        "/metadata/creationTimestamp",
    ]
    .iter()
    .find_map(|p| o.pointer(p).and_then(Value::as_str))
    .and_then(clock::age_secs)
    .map(human_age)
    .unwrap_or_else(|| "<unknown>".into());
    // core/v1 and events.k8s.io/v1 name the same fields differently.
    let either = |a: &str, b: &str| {
        let x = s(o, a);
        if x.is_empty() { s(o, b) } else { x }
    };
    vec![
        json!(last),
        json!(s(o, "/type")),
        json!(s(o, "/reason")),
        json!(format!(
            "{}/{}",
            either("/involvedObject/kind", "/regarding/kind").to_lowercase(),
            either("/involvedObject/name", "/regarding/name")
        )),
        json!(either("/message", "/note")),
    ]
}

fn default_cells(_: &ResourceInfo, o: &Value) -> Vec<Value> {
    vec![
        json!(s(o, "/metadata/name")),
        json!(age_of(o, "/metadata/creationTimestamp")),
    ]
}

fn columns(info: &ResourceInfo) -> Columns {
    let name = || {
        col(
            "Name",
            "string",
            0,
            "Name must be unique within a namespace.",
        )
    };
    let age = || col("Age", "string", 0, "Time since creation.");
    if info.custom {
        return (custom_columns(info), custom_cells);
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => (
            vec![
                name(),
                col(
                    "Ready",
                    "string",
                    0,
                    "The aggregate readiness state of this pod for accepting traffic.",
                ),
                col(
                    "Status",
                    "string",
                    0,
                    "The aggregate status of the containers in this pod.",
                ),
                col(
                    "Restarts",
                    "string",
                    0,
                    "The number of times the containers in this pod have been restarted.",
                ),
                age(),
                col("IP", "string", 1, "IP address allocated to the pod."),
                col(
                    "Node",
                    "string",
                    1,
                    "Name of the node where the pod is scheduled.",
                ),
            ],
            pod_cells,
        ),
        ("", "nodes") => (
            vec![
                name(),
                col("Status", "string", 0, "The status of the node"),
                col("Roles", "string", 0, "The roles of the node"),
                age(),
                col(
                    "Version",
                    "string",
                    0,
                    "Kubelet Version reported by the node.",
                ),
                col(
                    "Internal-IP",
                    "string",
                    1,
                    "List of internal IPs in the node.",
                ),
            ],
            node_cells,
        ),
        ("", "services") => (
            vec![
                name(),
                col("Type", "string", 0, "The type of the service."),
                col("Cluster-IP", "string", 0, "The cluster IP of the service."),
                col(
                    "External-IP",
                    "string",
                    0,
                    "The external IPs of the service.",
                ),
                col("Port(s)", "string", 0, "The ports of the service."),
                age(),
            ],
            service_cells,
        ),
        ("apps", "daemonsets") => (
            vec![
                name(),
                col("Desired", "integer", 0, "The desired number of pods."),
                col("Current", "integer", 0, "The current number of pods."),
                col("Ready", "integer", 0, "The number of pods ready."),
                col("Up-to-date", "integer", 0, "The number of pods updated."),
                col("Available", "integer", 0, "The number of pods available."),
                col(
                    "Node Selector",
                    "string",
                    0,
                    "Which nodes should be scheduled.",
                ),
                age(),
            ],
            daemonset_cells,
        ),
        ("apps", "deployments") => (
            vec![
                name(),
                col("Ready", "string", 0, "Number of the pod with ready state"),
                col(
                    "Up-to-date",
                    "string",
                    0,
                    "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                ),
                col(
                    "Available",
                    "string",
                    0,
                    "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                ),
                age(),
            ],
            deployment_cells,
        ),
        ("", "namespaces") => (
            vec![
                name(),
                col("Status", "string", 0, "The status of the namespace"),
                age(),
            ],
            namespace_cells,
        ),
        ("", "endpoints") => (
            vec![
                name(),
                col("Endpoints", "string", 0, "Endpoints of the service."),
                age(),
            ],
            endpoints_cells,
        ),
        ("", "configmaps") => (
            vec![name(), col("Data", "integer", 0, "Number of keys."), age()],
            configmap_cells,
        ),
        ("", "secrets") => (
            vec![
                name(),
                col("Type", "string", 0, "The type of the secret."),
                col("Data", "integer", 0, "Number of keys."),
                age(),
            ],
            secret_cells,
        ),
        ("apps", "replicasets") => (
            vec![
                name(),
                col("Desired", "integer", 0, "Number of desired pods."),
                col("Current", "integer", 0, "Number of actual replicas."),
                col("Ready", "integer", 0, "Number of ready replicas."),
                age(),
            ],
            replicaset_cells,
        ),
        ("networking.k8s.io", "ingresses") => (
            vec![
                name(),
                col(
                    "Class",
                    "string",
                    0,
                    "The name of the IngressClass resource.",
                ),
                col(
                    "Hosts",
                    "string",
                    0,
                    "Hosts that incoming requests are matched against.",
                ),
                col(
                    "Address",
                    "string",
                    0,
                    "Address is a list containing ingress points for the load-balancer.",
                ),
                col(
                    "Ports",
                    "string",
                    0,
                    "Ports of TLS configurations that open.",
                ),
                age(),
            ],
            ingress_cells,
        ),
        ("", "events") | ("events.k8s.io", "events") => (
            vec![
                col(
                    "Last Seen",
                    "string",
                    0,
                    "Time since the event was last seen.",
                ),
                col("Type", "string", 0, "Type of this event."),
                col("Reason", "string", 0, "Why the action was taken."),
                col("Object", "string", 0, "The object this event is about."),
                col(
                    "Message",
                    "string",
                    0,
                    "A human-readable description of the status.",
                ),
            ],
            event_cells,
        ),
        _ => (vec![name(), age()], default_cells),
    }
}

/// Whether the Accept header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .any(|r| r.contains("as=Table") && r.contains("g=meta.k8s.io"))
}

fn partial(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// A Table of these objects; `headers` false for watch events after the first.
pub fn table(
    info: &ResourceInfo,
    objs: &[Value],
    rv: Option<String>,
    headers: bool,
    include: &str,
) -> Value {
    let (cols, cells) = columns(info);
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let mut row = json!({"cells": cells(info, o)});
            match include {
                "None" => {}
                "Object" => row["object"] = o.clone(),
                _ => row["object"] = partial(o),
            }
            row
        })
        .collect();
    let mut t = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "rows": rows,
    });
    if headers {
        t["columnDefinitions"] = json!(cols);
    }
    if let Some(rv) = rv {
        t["metadata"]["resourceVersion"] = json!(rv);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_as_many_cells_as_columns() {
        let objects = [
            serde_json::json!({"metadata": {"name": "x", "creationTimestamp": "2026-01-01T00:00:00Z"}}),
            serde_json::json!({"metadata": {"name": "x"}, "spec": {"ports": [{"port": 1}], "rules": [{}]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
                "subsets": [{"addresses": [{"ip": "1.2.3.4"}], "ports": [{"port": 80}]}]}),
        ];
        let mut infos = crate::resources::builtins();
        let mut custom = infos[0].clone();
        custom.custom = true;
        custom.printer_columns =
            vec![serde_json::json!({"name": "A", "type": "string", "jsonPath": ".spec.a"})];
        infos.push(custom);
        for info in &infos {
            let (cols, cells) = columns(info);
            for o in &objects {
                assert_eq!(cells(info, o).len(), cols.len(), "{}", info.plural);
            }
        }
    }

    #[test]
    fn ages_print_like_kubectl() {
        assert_eq!(human_age(5), "5s");
        assert_eq!(human_age(200), "3m20s");
        assert_eq!(human_age(3600 * 5 + 60), "5h1m");
        assert_eq!(human_age(86400 * 3 + 3600), "3d1h");
        assert_eq!(human_age(86400 * 800), "2y70d");
    }
}
