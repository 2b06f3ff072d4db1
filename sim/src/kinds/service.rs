//! Services: type defaults, ClusterIP and NodePort allocation (loopback addresses and the
//! 30000-32767 range), immutability of the allocated fields, release on removal.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use serde_json::{Value, json};

use crate::cluster::Cluster;
use crate::error::{ApiError, ApiResult};
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

fn default_spec(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    let t = svc_type(obj);
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("type").or_insert(json!(t));
        spec.entry("sessionAffinity").or_insert(json!("None"));
        if t != "ExternalName" {
            spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
            spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
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

/// Allocates a new Service's ClusterIP and NodePorts.
pub fn prepare_create(c: &Cluster, info: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
    default_spec(obj);
    let t = svc_type(obj);
    let name = name_of(obj);
    let mut allocated_ip = None;
    if t != "ExternalName" {
        match obj.pointer("/spec/clusterIP").and_then(Value::as_str) {
            Some("None") => {
                obj["spec"]["clusterIPs"] = json!(["None"]);
            }
            Some(ip) if !ip.is_empty() => {
                let parsed: Option<Ipv4Addr> = ip.parse().ok();
                let ok = parsed.is_some_and(|a| c.alloc().cluster_ips.claim(a));
                if !ok {
                    return Err(ApiError::invalid(
                        info,
                        &name,
                        "spec.clusterIPs",
                        &format!(
                            "Invalid value: []string{{\"{ip}\"}}: failed to allocate IP {ip}: provided IP is already allocated"
                        ),
                    ));
                }
                allocated_ip = parsed;
                obj["spec"]["clusterIPs"] = json!([ip]);
            }
            _ => {
                let ip = c
                    .alloc()
                    .cluster_ips
                    .allocate()
                    .ok_or_else(|| ApiError::internal("no ClusterIPs left"))?;
                allocated_ip = Some(ip);
                obj["spec"]["clusterIP"] = json!(ip.to_string());
                obj["spec"]["clusterIPs"] = json!([ip.to_string()]);
            }
        }
    }
    if needs_node_ports(&t)
        && let Err(e) = allocate_node_ports(c, info, obj, &[])
    {
        if let Some(ip) = allocated_ip {
            c.alloc().cluster_ips.release(ip);
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
    default_spec(new);
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
    if let Some(ip) = obj
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<Ipv4Addr>().ok())
    {
        alloc.cluster_ips.release(ip);
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
    if let Some(ing) = obj
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
    {
        for i in ing {
            if let Some(ip) = i
                .get("ip")
                .and_then(Value::as_str)
                .and_then(|s| s.parse::<Ipv4Addr>().ok())
            {
                alloc.load_balancers.release(ip);
            }
        }
    }
}
