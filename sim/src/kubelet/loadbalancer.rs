//! Load-balancer addresses, as a cloud's controller (or MetalLB) gives them: every Service of
//! type LoadBalancer gets one address per IP family from kube-sim's pools, written to
//! `status.loadBalancer.ingress`; kube-proxy then routes them like its ClusterIPs.

use std::collections::BTreeSet;
use std::net::IpAddr;

use futures::StreamExt;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

/// The addresses a Service asks for, given what is taken: one per family of `spec.ipFamilies`
/// (IPv4 when unset), from the pool of that family.
pub fn pick(svc: &Service, pools: &[IpNet], taken: &BTreeSet<IpAddr>) -> Vec<IpAddr> {
    let families = svc
        .spec
        .as_ref()
        .and_then(|s| s.ip_families.clone())
        .unwrap_or_else(|| vec!["IPv4".into()]);
    families
        .iter()
        .filter_map(|f| {
            let pool = pools
                .iter()
                .find(|p| super::address::family(&p.network()) == f)?;
            (1u128..1 << 16)
                .map_while(|n| super::address::nth(pool, n))
                .find(|ip| !taken.contains(ip))
        })
        .collect()
}

fn assigned(svc: &Service) -> Vec<IpAddr> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.clone())
        .unwrap_or_default()
        .iter()
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect()
}

fn is_load_balancer(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
}

/// Assigns addresses until shutdown.
pub async fn run(
    client: Client,
    pools: Vec<IpNet>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let api: Api<Service> = Api::all(client.clone());
    let stream = watcher::watcher(api, watcher::Config::default());
    futures::pin_mut!(stream);
    let mut taken: BTreeSet<IpAddr> = BTreeSet::new();
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = super::stopped(&mut shutdown) => return,
        };
        let svc = match event {
            Some(Ok(Event::Apply(s) | Event::InitApply(s))) => s,
            Some(Ok(Event::Delete(s))) => {
                for ip in assigned(&s) {
                    taken.remove(&ip);
                }
                continue;
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "watching Services (retrying)");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
            None => return,
        };
        let have = assigned(&svc);
        taken.extend(have.iter().copied());
        if !is_load_balancer(&svc) || !have.is_empty() {
            continue;
        }
        let ips = pick(&svc, &pools, &taken);
        if ips.is_empty() {
            continue;
        }
        taken.extend(ips.iter().copied());
        let ns = svc.metadata.namespace.clone().unwrap_or_default();
        let name = svc.metadata.name.clone().unwrap_or_default();
        let status = json!({"status": {"loadBalancer": {"ingress":
            ips.iter().map(|ip| json!({"ip": ip.to_string(), "ipMode": "VIP"})).collect::<Vec<_>>()}}});
        if let Err(e) = Api::<Service>::namespaced(client.clone(), &ns)
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            tracing::warn!(service = %format!("{ns}/{name}"), error = %e, "writing the load-balancer address");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_free_address_per_family() {
        let pools: Vec<IpNet> = vec![
            "198.18.16.0/20".parse().expect("net"),
            "fd6b:6474:0:10::/112".parse().expect("net"),
        ];
        let svc: Service = serde_json::from_value(
            json!({"spec": {"type": "LoadBalancer", "ipFamilies": ["IPv4", "IPv6"]}}),
        )
        .expect("svc");
        let taken = BTreeSet::from(["198.18.16.1".parse().expect("ip")]);
        assert_eq!(
            pick(&svc, &pools, &taken),
            vec![
                "198.18.16.2".parse::<IpAddr>().expect("ip"),
                "fd6b:6474:0:10::1".parse().expect("ip")
            ]
        );
        let v4: Service =
            serde_json::from_value(json!({"spec": {"type": "LoadBalancer"}})).expect("svc");
        assert_eq!(
            pick(&v4, &pools, &BTreeSet::new()),
            vec!["198.18.16.1".parse::<IpAddr>().expect("ip")]
        );
    }
}
