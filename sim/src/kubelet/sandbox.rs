//! A pod's network: its own network namespace, given addresses from the node's pod CIDRs by the
//! standard CNI plugins (Debian's containernetworking-plugins: `ptp` with `host-local` IPAM,
//! and `loopback`), as a container runtime does. `ptp` routes every packet of the pod through
//! the node's namespace, where kube-proxy's rules see it (a bridge would hand same-node replies
//! past them).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use ipnet::IpNet;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// Where the CNI plugins are and where their state goes.
#[derive(Debug, Clone)]
pub struct CniConfig {
    /// The plugins' directory (Debian: /usr/lib/cni).
    pub bin_dir: PathBuf,
    /// host-local's allocations, per node.
    pub data_dir: PathBuf,
    /// Prefix of the pods' namespace names (their files are /var/run/netns/<prefix><uid>).
    pub netns_prefix: String,
}

/// A pod's network namespace and addresses.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The namespace's file.
    pub netns: PathBuf,
    name: String,
    container_id: String,
    conf: Value,
    /// The pod's addresses, IPv4 first.
    pub ips: Vec<IpAddr>,
}

/// The CNI network configuration of a node: ptp, addresses from its pod CIDRs.
pub fn network_config(cfg: &CniConfig, node: &str, cidrs: &[IpNet]) -> Value {
    let ranges: Vec<Value> = cidrs
        .iter()
        .map(|c| json!([{"subnet": c.trunc().to_string()}]))
        .collect();
    let routes: Vec<Value> = cidrs
        .iter()
        .map(|c| json!({"dst": if matches!(c, IpNet::V4(_)) { "0.0.0.0/0" } else { "::/0" }}))
        .collect();
    json!({
        "cniVersion": "1.0.0",
        "name": format!("kube-sim-{node}"),
        "type": "ptp",
        "mtu": 1500,
        "ipMasq": false,
        "ipam": {
            "type": "host-local",
            "ranges": ranges,
            "routes": routes,
            "dataDir": cfg.data_dir.join(node).display().to_string(),
        },
    })
}

/// The addresses of a CNI ADD result (`ips[].address`, without the prefix length).
pub fn result_ips(result: &Value) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = result
        .get("ips")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| i.get("address")?.as_str()?.split('/').next()?.parse().ok())
        .collect();
    ips.sort_by_key(|ip| ip.is_ipv6());
    ips
}

async fn cni(
    cfg: &CniConfig,
    command: &str,
    container_id: &str,
    netns: &Path,
    ifname: &str,
    conf: &Value,
) -> Result<Value, String> {
    let plugin = conf.get("type").and_then(Value::as_str).unwrap_or("");
    let mut child = tokio::process::Command::new(cfg.bin_dir.join(plugin))
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", container_id)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", ifname)
        .env("CNI_PATH", &cfg.bin_dir)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running the CNI plugin {plugin}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let bytes = serde_json::to_vec(conf).map_err(|e| e.to_string())?;
        stdin.write_all(&bytes).await.map_err(|e| e.to_string())?;
    }
    let out = child.wait_with_output().await.map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "CNI {command} ({plugin}) failed: {}{}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    if out.stdout.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("CNI {command} ({plugin}) answered: {e}"))
}

async fn ip(args: &[&str]) -> Result<(), String> {
    let out = tokio::process::Command::new("ip")
        .args(args)
        .output()
        .await
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Sandbox {
    /// Creates the namespace of pod `uid` on `node` and gives it addresses from `cidrs`.
    pub async fn create(
        cfg: &CniConfig,
        uid: &str,
        node: &str,
        cidrs: &[IpNet],
    ) -> Result<Self, String> {
        if cidrs.is_empty() {
            return Err(format!("node {node} has no pod CIDR yet"));
        }
        let short: String = uid.chars().filter(|c| *c != '-').take(16).collect();
        let name = format!("{}{short}", cfg.netns_prefix);
        let netns = PathBuf::from("/var/run/netns").join(&name);
        if !netns.exists() {
            ip(&["netns", "add", &name]).await?;
        }
        let conf = network_config(cfg, node, cidrs);
        let sandbox = Sandbox {
            netns,
            name,
            container_id: uid.to_string(),
            conf,
            ips: Vec::new(),
        };
        let lo = json!({"cniVersion": "1.0.0", "name": "lo", "type": "loopback"});
        let added = async {
            cni(cfg, "ADD", uid, &sandbox.netns, "lo", &lo).await?;
            cni(cfg, "ADD", uid, &sandbox.netns, "eth0", &sandbox.conf).await
        }
        .await;
        match added {
            Ok(result) => {
                let ips = result_ips(&result);
                if ips.is_empty() {
                    sandbox.destroy(cfg).await;
                    return Err(format!("CNI gave pod {uid} no address: {result}"));
                }
                Ok(Sandbox { ips, ..sandbox })
            }
            Err(e) => {
                sandbox.destroy(cfg).await;
                Err(e)
            }
        }
    }

    /// Releases the addresses and removes the namespace (errors are logged: there is nothing
    /// more to do about them).
    pub async fn destroy(&self, cfg: &CniConfig) {
        if let Err(e) = cni(
            cfg,
            "DEL",
            &self.container_id,
            &self.netns,
            "eth0",
            &self.conf,
        )
        .await
        {
            tracing::warn!(netns = %self.name, error = %e, "releasing a pod's network");
        }
        if let Err(e) = ip(&["netns", "del", &self.name]).await {
            tracing::warn!(netns = %self.name, error = %e, "removing a pod's network namespace");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_networks_are_ptp_with_every_family() {
        let cfg = CniConfig {
            bin_dir: "/usr/lib/cni".into(),
            data_dir: "/tmp/cni".into(),
            netns_prefix: "kdc-".into(),
        };
        let c = network_config(
            &cfg,
            "node-1",
            &[
                "198.19.0.0/26".parse().expect("net"),
                "fd6b:6474:0:1000::/64".parse().expect("net"),
            ],
        );
        assert_eq!(c["type"], "ptp");
        assert_eq!(c["ipam"]["ranges"][1][0]["subnet"], "fd6b:6474:0:1000::/64");
        assert_eq!(c["ipam"]["routes"][0]["dst"], "0.0.0.0/0");
        assert_eq!(c["ipam"]["dataDir"], "/tmp/cni/node-1");
    }

    #[test]
    fn results_give_addresses_ipv4_first() {
        let r = json!({"ips": [{"address": "fd6b:6474:0:1000::5/64"}, {"address": "198.19.0.5/26", "gateway": "198.19.0.1"}]});
        assert_eq!(
            result_ips(&r),
            vec![
                "198.19.0.5".parse::<IpAddr>().expect("ip"),
                "fd6b:6474:0:1000::5".parse().expect("ip")
            ]
        );
    }
}
