//! The objects a fresh cluster has: the system namespaces, the `kubernetes` Service, and the
//! `kube-system/extension-apiserver-authentication` ConfigMap built from the sim's CAs.

use serde_json::{Value, json};

use crate::certs::Pki;
use crate::cluster::{Cluster, WriteOptions};
use crate::error::ApiResult;

/// Name of the authentication ConfigMap (in kube-system).
pub const AUTH_CONFIGMAP: &str = "extension-apiserver-authentication";

/// The authentication ConfigMap as kube-apiserver writes it (header lists are JSON arrays).
pub fn auth_configmap(pki: &Pki) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": AUTH_CONFIGMAP, "namespace": "kube-system"},
        "data": {
            "client-ca-file": pki.client_ca.cert_pem,
            "requestheader-client-ca-file": pki.front_proxy_ca.cert_pem,
            "requestheader-allowed-names": "[\"front-proxy-client\"]",
            "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]",
            "requestheader-group-headers": "[\"X-Remote-Group\"]",
            "requestheader-username-headers": "[\"X-Remote-User\"]",
        }
    })
}

/// Creates the system namespaces, the `kubernetes` Service (its Endpoints point at the API
/// server), the kube-dns Service and the authentication ConfigMap.
pub fn run(c: &Cluster, pki: &Pki, api: std::net::SocketAddr) -> ApiResult<()> {
    let opts = WriteOptions::manager("kube-apiserver");
    let ns = c.builtin("", "Namespace")?;
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        c.create(&ns, "", json!({"metadata": {"name": name}}), &opts)?;
    }
    let svc = c.builtin("", "Service")?;
    c.create(
        &svc,
        "default",
        json!({
            "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}
        }),
        &opts,
    )?;
    let ep = c.builtin("", "Endpoints")?;
    c.create(
        &ep,
        "default",
        json!({
            "metadata": {"name": "kubernetes", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": api.ip().to_string()}], "ports": [{"name": "https", "port": api.port(), "protocol": "TCP"}]}]
        }),
        &opts,
    )?;
    let (dns_ip, dual) = {
        let alloc = c.alloc();
        (alloc.dns_ip(), alloc.ipv6)
    };
    let mut dns_ips = vec![dns_ip.to_string()];
    if dual {
        dns_ips.push(crate::net::ipv6::twin(dns_ip).to_string());
    }
    c.create(
        &svc,
        "kube-system",
        json!({
            "metadata": {"name": "kube-dns", "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS", "kubernetes.io/cluster-service": "true"}},
            "spec": {"clusterIP": dns_ip.to_string(), "clusterIPs": dns_ips,
                "ipFamilyPolicy": if dual { "PreferDualStack" } else { "SingleStack" }, "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}
            ]}
        }),
        &opts,
    )?;
    let cm = c.builtin("", "ConfigMap")?;
    c.create(&cm, "kube-system", auth_configmap(pki), &opts)?;
    // The bootstrap roles an aggregated API server is bound to (kube-apiserver's own).
    let cluster_role = c.builtin("rbac.authorization.k8s.io", "ClusterRole")?;
    c.create(
        &cluster_role,
        "",
        json!({
            "metadata": {"name": "system:auth-delegator", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
            "rules": [
                {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}
            ]
        }),
        &opts,
    )?;
    let role = c.builtin("rbac.authorization.k8s.io", "Role")?;
    c.create(
        &role,
        "kube-system",
        json!({
            "metadata": {"name": "extension-apiserver-authentication-reader", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [AUTH_CONFIGMAP], "verbs": ["get", "list", "watch"]}]
        }),
        &opts,
    )?;
    Ok(())
}

/// Creates nodes `node-<i>` for each i (labels like a kubelet registers, kwok's annotation);
/// the first `process_nodes` are marked for the process runner. The node-initialize stage
/// makes them Ready.
pub fn nodes(
    c: &Cluster,
    range: std::ops::RangeInclusive<usize>,
    process_nodes: usize,
) -> ApiResult<()> {
    let info = c.builtin("", "Node")?;
    let opts = WriteOptions::manager("kubelet");
    for i in range {
        let name = format!("node-{i}");
        let processes = if i <= process_nodes { "true" } else { "false" };
        c.create(
            &info,
            "",
            json!({
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "type": "kube-sim",
                        "kube-sim.kdoctor.io/processes": processes
                    },
                    "annotations": {"kwok.x-k8s.io/node": "fake"}
                },
                "spec": {}
            }),
            &opts,
        )?;
    }
    Ok(())
}
