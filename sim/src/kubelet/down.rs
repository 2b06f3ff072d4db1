//! Nodes made to look dead, for the chaos suite's "node unreachable" case: the node names
//! listed, one per line, in `<work dir>/down-nodes` (read twice a second). A down node's
//! kubelet falls silent, as when the machine dies: its Lease and status are no longer renewed
//! (the node controller marks it NotReady, then unreachable), its pods' statuses are no longer
//! written, their probes do not run and nothing on it restarts, and a pod deleted meanwhile
//! stays Terminating. The test itself freezes and cuts off the node's processes. Taken off the
//! list, the node comes back and its kubelet catches up with what happened meanwhile.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;

/// How often the list is read.
const POLL: Duration = Duration::from_millis(500);

/// The node names in the list's `text` (blank lines and `#` comments ignored).
pub fn parse(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// The nodes that are down, as last read.
#[derive(Clone)]
pub struct Down {
    rx: watch::Receiver<BTreeSet<String>>,
}

impl Down {
    /// Follows the list at `path` (no file: no node is down).
    pub fn follow(path: PathBuf) -> Down {
        let (tx, rx) = watch::channel(BTreeSet::new());
        tokio::spawn(async move {
            loop {
                let down = std::fs::read_to_string(&path)
                    .map(|t| parse(&t))
                    .unwrap_or_default();
                let changed = tx.send_if_modified(|old| {
                    if *old == down {
                        return false;
                    }
                    *old = down.clone();
                    true
                });
                if changed {
                    tracing::warn!(down = ?down, "nodes whose kubelet is silent");
                }
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(POLL).await;
            }
        });
        Down { rx }
    }

    /// Whether `node` is down now.
    pub fn is_down(&self, node: &str) -> bool {
        self.rx.borrow().contains(node)
    }

    /// The handle of one node.
    pub fn node(&self, node: &str) -> NodeDown {
        NodeDown {
            down: self.clone(),
            node: node.to_string(),
        }
    }
}

/// Whether one node is down.
#[derive(Clone)]
pub struct NodeDown {
    down: Down,
    node: String,
}

impl std::fmt::Debug for NodeDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeDown({}: {})", self.node, self.is_down())
    }
}

impl NodeDown {
    /// Whether the node is down now.
    pub fn is_down(&self) -> bool {
        self.down.is_down(&self.node)
    }

    /// Returns once the node is up (at once when it is). A list that can no longer change
    /// (kube-sim stopping) counts as up.
    pub async fn wait_up(&self) {
        let mut rx = self.down.rx.clone();
        let _ = rx.wait_for(|d| !d.contains(&self.node)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_names_one_node_a_line() {
        let down = parse("node-2\n\n  node-3  \n# node-4\n");
        assert_eq!(
            down.into_iter().collect::<Vec<_>>(),
            vec!["node-2".to_string(), "node-3".to_string()]
        );
    }

    #[tokio::test]
    async fn a_node_listed_is_down_until_taken_off() {
        let dir = std::env::temp_dir().join(format!("kube-sim-down-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("down-nodes");
        let _ = std::fs::remove_file(&path);
        let down = Down::follow(path.clone());
        let node = down.node("node-2");
        assert!(!node.is_down());
        std::fs::write(&path, "node-2\n").expect("write");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !node.is_down() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "node-2 down in time"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!down.is_down("node-1"));
        std::fs::write(&path, "").expect("write");
        tokio::time::timeout(Duration::from_secs(5), node.wait_up())
            .await
            .expect("node-2 up again in time");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
