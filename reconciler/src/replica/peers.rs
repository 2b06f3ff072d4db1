//! Where the replicas are and which ones the StatefulSet wants: a watch of the controller's
//! pods (a replica's address is its pod's IP, which changes when the pod restarts; its name
//! does not) and one of the StatefulSet, for its replica count.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kdoctor_store::raft::Member;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use tokio::task::JoinSet;

/// Label of the controller's pods.
pub const SELECTOR: &str = "app.kubernetes.io/name=kdoctor-controller";

/// The StatefulSet a pod belongs to and its ordinal, from the pod's name
/// (`kdoctor-controller-2` is replica 2 of `kdoctor-controller`).
pub fn ordinal_of(pod: &str) -> Option<(&str, usize)> {
    let (set, ordinal) = pod.rsplit_once('-')?;
    if set.is_empty() || ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((set, ordinal.parse().ok()?))
}

/// The other replicas, as the cluster's API shows them.
#[derive(Clone)]
pub struct Peers {
    pods: reflector::Store<Pod>,
    me: String,
    /// The StatefulSet's replica count; 0 until read.
    replicas: Arc<AtomicUsize>,
}

impl Peers {
    /// Watches the controller's pods in `namespace` and, when `me` is a StatefulSet's pod, that
    /// StatefulSet's replica count, in tasks of `tasks`.
    pub fn start(client: &Client, namespace: &str, me: &str, tasks: &mut JoinSet<()>) -> Peers {
        let (reader, writer) = reflector::store();
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let stream = reflector::reflector(
            writer,
            watcher(pods, watcher::Config::default().labels(SELECTOR)),
        )
        .default_backoff()
        .touched_objects();
        tasks.spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                if let Err(e) = item {
                    tracing::debug!(error = %e, "watch of the controller's pods (retrying)");
                }
            }
        });
        let replicas = Arc::new(AtomicUsize::new(0));
        if let Some((set, _)) = ordinal_of(me) {
            // A watch of the one StatefulSet: a scale is seen at once, and costs the API
            // nothing while nothing changes (it was a read every 10 s by every replica).
            let sets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
            let config = watcher::Config::default().fields(&format!("metadata.name={set}"));
            let set = set.to_string();
            let count = replicas.clone();
            tasks.spawn(async move {
                let changes = watcher(sets, config).default_backoff().applied_objects();
                let mut changes = std::pin::pin!(changes);
                while let Some(change) = changes.next().await {
                    match change {
                        Ok(s) => {
                            let n = s.spec.and_then(|s| s.replicas).unwrap_or(1).max(0) as usize;
                            if count.swap(n, Ordering::SeqCst) != n {
                                tracing::info!(statefulset = %set, replicas = n, "the controller's replicas");
                            }
                        }
                        Err(e) => {
                            tracing::warn!(statefulset = %set, error = %e, "cannot watch the controller's StatefulSet (retrying)");
                        }
                    }
                }
            });
        }
        Peers {
            pods: reader,
            me: me.to_string(),
            replicas,
        }
    }

    /// The pod IP of replica `pod`, while its pod has one.
    pub fn address(&self, pod: &str) -> Option<IpAddr> {
        self.pods
            .state()
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(pod))
            .and_then(|p| p.status.as_ref()?.pod_ip.as_deref()?.parse().ok())
    }

    /// The controller's pods, as last seen.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.pods.state()
    }

    /// How many replicas the StatefulSet wants, once read.
    pub fn replicas(&self) -> Option<usize> {
        Some(self.replicas.load(Ordering::SeqCst)).filter(|n| *n > 0)
    }

    /// Every replica the StatefulSet wants (this one among them); only this one when it is not
    /// a StatefulSet's pod.
    pub fn expected(&self) -> Vec<Member> {
        match (ordinal_of(&self.me), self.replicas()) {
            (Some((set, _)), Some(n)) => {
                (0..n).map(|i| Member::new(format!("{set}-{i}"))).collect()
            }
            _ => vec![Member::new(&self.me)],
        }
    }

    /// Waits until the StatefulSet's replica count is known (a replica of a StatefulSet does
    /// not form a cluster without it).
    pub async fn ready(&self) {
        if ordinal_of(&self.me).is_none() {
            return;
        }
        while self.replicas().is_none() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let _ = self.pods.wait_until_ready().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_s_statefulset_and_ordinal_come_from_its_name() {
        assert_eq!(
            ordinal_of("kdoctor-controller-2"),
            Some(("kdoctor-controller", 2))
        );
        assert_eq!(
            ordinal_of("kdoctor-controller-10"),
            Some(("kdoctor-controller", 10))
        );
        assert_eq!(ordinal_of("kdoctor-controller"), None);
        assert_eq!(ordinal_of("laptop"), None);
        assert_eq!(ordinal_of("-3"), None);
        assert_eq!(ordinal_of("a-"), None);
    }
}
