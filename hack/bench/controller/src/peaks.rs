//! Peak RSS of kube-apiserver and of the replicas while a part of the bench runs, sampled
//! every 100 ms.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::{Cluster, Controllers, usage};

/// A running sampler.
pub struct Peaks {
    stop: Arc<AtomicBool>,
    apiserver: Arc<AtomicU64>,
    replicas: Arc<AtomicU64>,
    sampler: tokio::task::JoinHandle<()>,
}

impl Peaks {
    pub fn start(cluster: &Cluster, controllers: &Controllers) -> Peaks {
        let pids: Vec<u32> = controllers.0.iter().map(|c| c.child.id()).collect();
        let apiserver_pid = cluster.apiserver_pid();
        let (stop, apiserver, replicas) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        );
        let sampler = {
            let (stop, apiserver, replicas) = (stop.clone(), apiserver.clone(), replicas.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    apiserver.fetch_max(usage(apiserver_pid).1, Ordering::SeqCst);
                    for pid in &pids {
                        replicas.fetch_max(usage(*pid).1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        Peaks {
            stop,
            apiserver,
            replicas,
            sampler,
        }
    }

    /// (kube-apiserver's peak RSS, the largest replica's), MiB.
    pub async fn stop(self) -> (f64, f64) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.sampler.await;
        let mib = |kib: &AtomicU64| kib.load(Ordering::SeqCst) as f64 / 1024.0;
        (mib(&self.apiserver), mib(&self.replicas))
    }
}
