//! Services: type defaults, IP families (dual stack when the cluster has IPv6), ClusterIP and
//! NodePort allocation (loopback addresses and the 30000-32767 range), immutability of the
//! allocated fields, release on removal.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};

use serde_json::{Value, json};

use crate::cluster::Cluster;
use crate::error::{ApiError, ApiResult};
use crate::net::ipv6;
use crate::resources::ResourceInfo;

fn svc_type(obj: &Value) -> String {
    obj.pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string()
}

fn name_of(obj: &Value) -> String {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn needs_node_ports(t: &str) -> bool {
    t == "NodePort" || t == "LoadBalancer"
}

fn default_ports(obj: &mut Value) {
    if let Some(ports) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
        for p in ports {
            let port = p.get("port").cloned().unwrap_or(Value::Null);
            if let Some(m) = p.as_object_mut() {
                m.entry("protocol").or_insert(json!("TCP"));
                m.entry("targetPort").or_insert(port);
            }
        }
    }
}

/// The IP families of a Service, primary first (`spec.ipFamilies`; IPv4 when unset).
pub fn families(svc: &Value) -> Vec<&'static str> {
    let listed: Vec<&'static str> = svc
        .pointer("/spec/ipFamilies")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| match f.as_str()? {
            "IPv4" => Some("IPv4"),
            "IPv6" => Some("IPv6"),
            _ => None,
        })
        .collect();
    if listed.is_empty() {
        vec!["IPv4"]
    } else {
        listed
    }
}

fn family_of(ip: &str) -> Option<&'static str> {
    ip.parse().ok().map(ipv6::family)
}

/// Fills `ipFamilies` as kube-apiserver does: as listed, else from the requested ClusterIPs,
/// else IPv4; plus the other family when the policy asks for dual stack and the cluster has it
/// (also on update: a dual-stack policy upgrades a single-stack Service).
fn default_families(spec: &mut serde_json::Map<String, Value>, dual: bool) {
    let policy = spec
        .get("ipFamilyPolicy")
        .and_then(Value::as_str)
        .unwrap_or("SingleStack")
        .to_string();
    spec.entry("ipFamilyPolicy").or_insert(json!(policy));
    let listed: Vec<Value> = spec
        .get("ipFamilies")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut fams = if listed.is_empty() {
        let from_ips: Vec<Value> = spec
            .get("clusterIPs")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_else(|| spec.get("clusterIP").cloned().into_iter().collect())
            .iter()
            .filter_map(|ip| family_of(ip.as_str()?))
            .map(|f| json!(f))
            .collect();
        if from_ips.is_empty() {
            vec![json!("IPv4")]
        } else {
            from_ips
        }
    } else {
        listed
    };
    if policy != "SingleStack" && dual && fams.len() == 1 {
        // An unknown family is check_families' to report.
        if let Some(f @ ("IPv4" | "IPv6")) = fams[0].as_str() {
            let other = other_family(f);
            fams.push(json!(other));
        }
    }
    spec.insert("ipFamilies".into(), json!(fams));
}

fn other_family(family: &str) -> &'static str {
    if family == "IPv4" { "IPv6" } else { "IPv4" }
}

/// On update, as kube-apiserver does: SingleStack on a dual-stack Service whose families were
/// left as they were keeps the primary family, and `clusterIPs` follow the families (the
/// second ClusterIP is the twin of the first, as at creation).
fn restack(old: &Value, new: &mut Value) {
    let mut fams = families(new);
    let single = new.pointer("/spec/ipFamilyPolicy").and_then(Value::as_str) == Some("SingleStack");
    if single && fams.len() == 2 && fams == families(old) {
        fams.truncate(1);
        new["spec"]["ipFamilies"] = json!(fams);
    }
    let slot = new
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .and_then(|ip| ip.parse().ok())
        .and_then(ipv6::slot);
    if let Some(slot) = slot {
        new["spec"]["clusterIPs"] = json!(cluster_ips(slot, &fams));
    }
}

/// The ClusterIPs of a pool slot, one per family in order: the slot itself for IPv4, its
/// twin for IPv6.
fn cluster_ips(slot: Ipv4Addr, families: &[&str]) -> Vec<String> {
    families
        .iter()
        .map(|f| ipv6::in_family(slot, f).to_string())
        .collect()
}

fn default_spec(obj: &mut Value, dual: bool) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    let t = svc_type(obj);
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("type").or_insert(json!(t));
        spec.entry("sessionAffinity").or_insert(json!("None"));
        if t != "ExternalName" {
            default_families(spec, dual);
            spec.entry("internalTrafficPolicy")
                .or_insert(json!("Cluster"));
        }
        if needs_node_ports(&t) {
            spec.entry("externalTrafficPolicy")
                .or_insert(json!("Cluster"));
        }
        if t == "LoadBalancer" {
            spec.entry("allocateLoadBalancerNodePorts")
                .or_insert(json!(true));
        }
    }
    default_ports(obj);
}

fn allocate_node_ports(
    c: &Cluster,
    info: &ResourceInfo,
    obj: &mut Value,
    keep: &[(i64, String, i64)],
) -> ApiResult<Vec<u16>> {
    let name = name_of(obj);
    let mut taken = Vec::new();
    let Some(ports) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) else {
        return Ok(taken);
    };
    let mut alloc = c.alloc();
    for (i, p) in ports.iter_mut().enumerate() {
        let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
        let proto = p
            .get("protocol")
            .and_then(Value::as_str)
            .unwrap_or("TCP")
            .to_string();
        match p.get("nodePort").and_then(Value::as_i64) {
            Some(np) if keep.iter().any(|(_, _, k)| *k == np) => {}
            Some(np) => {
                let ok = u16::try_from(np).is_ok_and(|np| alloc.claim_node_port(np));
                if !ok {
                    for t in &taken {
                        alloc.release_node_port(*t);
                    }
                    return Err(ApiError::invalid(
                        info,
                        &name,
                        &format!("spec.ports[{i}].nodePort"),
                        &format!("Invalid value: {np}: provided port is already allocated"),
                    ));
                }
                taken.push(np as u16);
            }
            None => {
                let reuse = keep
                    .iter()
                    .find(|(kp, kproto, _)| *kp == port && *kproto == proto)
                    .map(|(_, _, np)| *np);
                let np = match reuse {
                    Some(np) => np,
                    None => {
                        let np = alloc.allocate_node_port().ok_or_else(|| {
                            ApiError::internal("no NodePorts left in 30000-32767")
                        })?;
                        taken.push(np);
                        i64::from(np)
                    }
                };
                p["nodePort"] = json!(np);
            }
        }
    }
    Ok(taken)
}

/// Rejects families the cluster does not have, as kube-apiserver does.
fn check_families(info: &ResourceInfo, obj: &Value, dual: bool) -> ApiResult<()> {
    let name = name_of(obj);
    let policy = obj
        .pointer("/spec/ipFamilyPolicy")
        .and_then(Value::as_str)
        .unwrap_or("SingleStack");
    let invalid = |field: &str, msg: String| Err(ApiError::invalid(info, &name, field, &msg));
    if !matches!(
        policy,
        "SingleStack" | "PreferDualStack" | "RequireDualStack"
    ) {
        return invalid(
            "spec.ipFamilyPolicy",
            format!(
                "Unsupported value: \"{policy}\": supported values: \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\""
            ),
        );
    }
    if policy == "RequireDualStack" && !dual {
        return invalid(
            "spec.ipFamilyPolicy",
            format!(
                "Invalid value: \"{policy}\": this cluster is not configured for dual-stack services"
            ),
        );
    }
    let listed: Vec<String> = obj
        .pointer("/spec/ipFamilies")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|f| f.as_str().unwrap_or("").to_string())
        .collect();
    for (i, f) in listed.iter().enumerate() {
        match f.as_str() {
            "IPv4" => {}
            "IPv6" if dual => {}
            "IPv6" => {
                return invalid(
                    &format!("spec.ipFamilies[{i}]"),
                    format!("Invalid value: \"{f}\": not configured on this cluster"),
                );
            }
            _ => {
                return invalid(
                    &format!("spec.ipFamilies[{i}]"),
                    format!("Unsupported value: \"{f}\": supported values: \"IPv4\", \"IPv6\""),
                );
            }
        }
    }
    if listed.len() == 2 && listed[0] == listed[1] {
        return invalid(
            "spec.ipFamilies[1]",
            format!("Duplicate value: \"{}\"", listed[1]),
        );
    }
    if listed.len() > 1 && policy == "SingleStack" {
        return invalid(
            "spec.ipFamilyPolicy",
            "Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' when multiple 'ipFamilies' are specified".to_string(),
        );
    }
    Ok(())
}

/// Allocates a new Service's ClusterIPs (one per family) and NodePorts.
pub fn prepare_create(c: &Cluster, info: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
    let dual = c.alloc().ipv6;
    default_spec(obj, dual);
    let t = svc_type(obj);
    let name = name_of(obj);
    let mut allocated: Option<Ipv4Addr> = None;
    if t != "ExternalName" {
        check_families(info, obj, dual)?;
        let requested: Vec<String> = match obj.pointer("/spec/clusterIPs").and_then(Value::as_array)
        {
            Some(ips) if !ips.is_empty() => ips
                .iter()
                .filter_map(|i| i.as_str().map(String::from))
                .collect(),
            _ => obj
                .pointer("/spec/clusterIP")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .into_iter()
                .collect(),
        };
        if requested.first().map(String::as_str) == Some("None") {
            obj["spec"]["clusterIP"] = json!("None");
            obj["spec"]["clusterIPs"] = json!(["None"]);
        } else {
            let families = families(obj);
            // One pool slot per Service: its IPv6 ClusterIP is the IPv4 one's twin.
            let slot = if requested.is_empty() {
                c.alloc()
                    .cluster_ips
                    .allocate()
                    .ok_or_else(|| ApiError::internal("no ClusterIPs left"))?
            } else {
                let slots: Vec<Option<Ipv4Addr>> = requested
                    .iter()
                    .zip(&families)
                    .map(|(ip, family)| {
                        ip.parse::<IpAddr>()
                            .ok()
                            .filter(|a| ipv6::family(*a) == *family)
                            .and_then(ipv6::slot)
                    })
                    .collect();
                let first = slots.first().copied().flatten();
                let same = slots.iter().all(|s| *s == first);
                match first.filter(|s| same && c.alloc().cluster_ips.claim(*s)) {
                    Some(s) => s,
                    None => {
                        let list = requested
                            .iter()
                            .map(|ip| format!("\"{ip}\""))
                            .collect::<Vec<_>>()
                            .join(", ");
                        return Err(ApiError::invalid(
                            info,
                            &name,
                            "spec.clusterIPs",
                            &format!(
                                "Invalid value: []string{{{list}}}: failed to allocate IP {}: provided IP is already allocated",
                                requested[0]
                            ),
                        ));
                    }
                }
            };
            allocated = Some(slot);
            let ips = cluster_ips(slot, &families);
            obj["spec"]["clusterIP"] = json!(ips.first());
            obj["spec"]["clusterIPs"] = json!(ips);
        }
    }
    if needs_node_ports(&t)
        && let Err(e) = allocate_node_ports(c, info, obj, &[])
    {
        if let Some(slot) = allocated {
            c.alloc().cluster_ips.release(slot);
        }
        return Err(e);
    }
    obj["status"] = json!({"loadBalancer": {}});
    Ok(())
}

fn node_ports(obj: &Value) -> Vec<(i64, String, i64)> {
    obj.pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .filter_map(|p| {
                    Some((
                        p.get("port").and_then(Value::as_i64).unwrap_or(0),
                        p.get("protocol")
                            .and_then(Value::as_str)
                            .unwrap_or("TCP")
                            .to_string(),
                        p.get("nodePort").and_then(Value::as_i64)?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Keeps the allocated ClusterIP, re-uses NodePorts of unchanged ports, frees dropped ones.
pub fn prepare_update(
    c: &Cluster,
    info: &ResourceInfo,
    old: &Value,
    new: &mut Value,
) -> ApiResult<()> {
    // A replacement that leaves the families out keeps the allocated ones.
    for field in ["ipFamilies", "ipFamilyPolicy"] {
        if new.pointer(&format!("/spec/{field}")).is_none()
            && let (Some(v), Some(spec)) = (
                old.pointer(&format!("/spec/{field}")),
                new.get_mut("spec").and_then(Value::as_object_mut),
            )
        {
            spec.insert(field.into(), v.clone());
        }
    }
    let dual = c.alloc().ipv6;
    default_spec(new, dual);
    let name = name_of(new);
    let old_ip = old.pointer("/spec/clusterIP").cloned();
    match (
        new.pointer("/spec/clusterIP").and_then(Value::as_str),
        &old_ip,
    ) {
        (None | Some(""), Some(ip)) => {
            new["spec"]["clusterIP"] = ip.clone();
            if let Some(ips) = old.pointer("/spec/clusterIPs") {
                new["spec"]["clusterIPs"] = ips.clone();
            }
        }
        (Some(n), Some(o)) if Some(n) != o.as_str() => {
            return Err(ApiError::invalid(
                info,
                &name,
                "spec.clusterIPs[0]",
                &format!("Invalid value: []string{{\"{n}\"}}: may not change once set"),
            ));
        }
        _ => {}
    }
    if svc_type(new) != "ExternalName" {
        restack(old, new);
        check_families(info, new, dual)?;
    }
    let old_ports = node_ports(old);
    let mut taken = Vec::new();
    if needs_node_ports(&svc_type(new)) {
        taken = allocate_node_ports(c, info, new, &old_ports)?;
    } else if let Some(ps) = new.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
        for p in ps {
            if let Some(m) = p.as_object_mut() {
                m.remove("nodePort");
            }
        }
    }
    let kept: HashSet<i64> = node_ports(new).iter().map(|(_, _, np)| *np).collect();
    let mut alloc = c.alloc();
    for (_, _, np) in old_ports {
        if !kept.contains(&np) && !taken.iter().any(|t| i64::from(*t) == np) {
            alloc.release_node_port(np as u16);
        }
    }
    Ok(())
}

/// Returns the ClusterIP, NodePorts and LoadBalancer addresses of a removed Service.
pub fn release(c: &Cluster, obj: &Value) {
    let mut alloc = c.alloc();
    for slot in addresses(obj, "/spec/clusterIPs") {
        alloc.cluster_ips.release(slot);
    }
    for (_, _, np) in node_ports(obj) {
        if let Ok(np) = u16::try_from(np) {
            alloc.release_node_port(np);
        }
    }
    drop(alloc);
    release_load_balancer(c, obj);
}

/// Returns the LoadBalancer addresses in an object's status.
pub fn release_load_balancer(c: &Cluster, obj: &Value) {
    let mut alloc = c.alloc();
    for slot in addresses(obj, "/status/loadBalancer/ingress") {
        alloc.load_balancers.release(slot);
    }
}

/// The pool slots of the addresses listed at `pointer` (strings, or objects with `ip`).
pub fn addresses(obj: &Value, pointer: &str) -> Vec<Ipv4Addr> {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().or_else(|| v.get("ip")?.as_str()))
        .filter_map(|s| ipv6::slot(s.parse().ok()?))
        .collect()
}
