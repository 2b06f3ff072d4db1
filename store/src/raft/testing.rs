//! For tests (feature `testing`): replicas of the store in one process, on a network of
//! channels that a test can cut. Each replica has its own directory and sled database, as in a
//! cluster; only the wire is in memory, so partitions and crashes are exact. Never shipped: the
//! controller's replicas talk over mutual-TLS HTTPS (kdoctor-reconciler's replica module).

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{BoxFuture, Member, NodeId, Options, Replica, Rpc, Timing, Transport, TransportError};
use crate::{Store, StoreConfig};

/// Who can reach whom.
#[derive(Default)]
pub struct Net {
    replicas: Mutex<BTreeMap<String, Replica>>,
    /// Directed pairs (from, to) whose messages are lost.
    cut: Mutex<HashSet<(String, String)>>,
}

impl Net {
    fn replica(&self, pod: &str) -> Option<Replica> {
        self.replicas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(pod)
            .cloned()
    }

    fn is_cut(&self, from: &str, to: &str) -> bool {
        self.cut
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(from.to_string(), to.to_string()))
    }
}

/// One replica's end of the network.
struct Link {
    from: String,
    net: Arc<Net>,
}

impl Transport for Link {
    fn call(
        &self,
        to: &Member,
        rpc: Rpc,
        body: Vec<u8>,
        timeout: Duration,
    ) -> BoxFuture<Result<Vec<u8>, TransportError>> {
        let net = self.net.clone();
        let from = self.from.clone();
        let to = to.pod.clone();
        Box::pin(async move {
            let unreachable = |reason: &str| TransportError::Unreachable {
                member: to.clone(),
                reason: reason.to_string(),
            };
            if net.is_cut(&from, &to) {
                // A cut link loses the message: the caller hears nothing until its timeout.
                tokio::time::sleep(timeout).await;
                return Err(TransportError::Timeout {
                    member: to.clone(),
                    timeout,
                });
            }
            let target = net.replica(&to).ok_or_else(|| unreachable("not running"))?;
            let served =
                tokio::spawn(
                    async move { target.handle(rpc, &body).await.map_err(|e| e.to_string()) },
                );
            let answer = match tokio::time::timeout(timeout, served).await {
                Ok(Ok(Ok(answer))) => answer,
                Ok(Ok(Err(e))) => return Err(unreachable(&e)),
                Ok(Err(e)) => return Err(unreachable(&e.to_string())),
                Err(_) => {
                    return Err(TransportError::Timeout {
                        member: to.clone(),
                        timeout,
                    });
                }
            };
            // The answer is lost too on a link cut meanwhile, or cut the other way.
            if net.is_cut(&to, &from) || net.is_cut(&from, &to) {
                return Err(unreachable("the answer was lost"));
            }
            Ok(answer)
        })
    }
}

/// Fast clocks: elections in well under a second.
pub fn timing() -> Timing {
    Timing {
        heartbeat: Duration::from_millis(50),
        election_min: Duration::from_millis(400),
        election_max: Duration::from_millis(800),
    }
}

/// A cluster of replicas `c-0` … `c-{n-1}`.
pub struct Cluster {
    pub net: Arc<Net>,
    dirs: Vec<PathBuf>,
    names: Vec<String>,
    /// Node ids minted so far, per replica (a lost volume mints a new one).
    minted: Vec<NodeId>,
    /// Options every replica starts with.
    pub options: Box<dyn Fn(Member) -> Options + Send + Sync>,
}

/// `f` on the store at `dir`, again while another holds it: a store just dropped may still be
/// held by sled's flusher thread for a moment (a new process, as a restarted controller is,
/// never sees that).
fn when_let_go<T>(dir: &std::path::Path, what: &str, f: impl Fn() -> crate::Result<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match f() {
            Ok(done) => return done,
            Err(e) if std::time::Instant::now() < deadline && e.to_string().contains("in use") => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("store {} {what}: {e}", dir.display()),
        }
    }
}

fn open_store(dir: &std::path::Path) -> Arc<Store> {
    Arc::new(when_let_go(dir, "opens", || {
        Store::open(StoreConfig::new(dir))
    }))
}

impl Cluster {
    /// Fresh directories `<base>-<i>` for `n` replicas (nothing started).
    pub fn new(base: &std::path::Path, n: usize) -> Cluster {
        let cluster = Cluster::new_keeping(base, n);
        for dir in &cluster.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
        cluster
    }

    /// The directories `<base>-<i>` of `n` replicas as they are (replicas that ran before).
    pub fn new_keeping(base: &std::path::Path, n: usize) -> Cluster {
        let dirs: Vec<PathBuf> = (0..n)
            .map(|i| {
                let mut dir = base.as_os_str().to_owned();
                dir.push(format!("-{i}"));
                PathBuf::from(dir)
            })
            .collect();
        Cluster {
            net: Arc::new(Net::default()),
            dirs,
            names: (0..n).map(|i| format!("c-{i}")).collect(),
            minted: (0..n).map(|i| i as NodeId + 1).collect(),
            options: Box::new(|me| {
                let mut options = Options::new(me);
                options.timing = timing();
                options.write_timeout = Duration::from_secs(3);
                options
            }),
        }
    }

    /// The members the replica formations expect.
    pub fn members(&self) -> Vec<Member> {
        self.names.iter().map(Member::new).collect()
    }

    /// Starts replica `i` (its store as it is on disk).
    pub async fn start(&self, i: usize) -> Replica {
        let name = self.names[i].clone();
        let store = open_store(&self.dirs[i]);
        let link = Arc::new(Link {
            from: name.clone(),
            net: self.net.clone(),
        });
        let id = self.minted[i];
        let replica = Replica::start(store, (self.options)(Member::new(&name)), link, || id)
            .await
            .expect("replica starts");
        self.net
            .replicas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name, replica.clone());
        replica
    }

    /// Starts replica `i` and has it join the cluster of every replica (within 60 s).
    pub async fn start_joined(&self, i: usize) -> Replica {
        let replica = self.start(i).await;
        let expected = self.members();
        tokio::time::timeout(Duration::from_secs(60), replica.form(|| expected.clone()))
            .await
            .expect("joined in time")
            .expect("joins");
        replica
    }

    /// Starts replicas `0..n` and has each form (or join) the cluster of all of them.
    pub async fn start_all(&self, n: usize) -> Vec<Replica> {
        let mut replicas = Vec::new();
        for i in 0..n {
            replicas.push(self.start(i).await);
        }
        let expected: Vec<Member> = self.members()[..n].to_vec();
        let forming: Vec<_> = replicas
            .iter()
            .map(|r| {
                let r = r.clone();
                let expected = expected.clone();
                tokio::spawn(async move { r.form(|| expected.clone()).await })
            })
            .collect();
        for f in forming {
            tokio::time::timeout(Duration::from_secs(60), f)
                .await
                .expect("formed in time")
                .expect("joins")
                .expect("formed");
        }
        replicas
    }

    /// The directory of replica `i`.
    pub fn dir(&self, i: usize) -> &PathBuf {
        &self.dirs[i]
    }

    /// Stops a replica as a crash would (nothing handed over) and closes its store.
    pub async fn stop(&self, replica: Replica) {
        let name = replica.member().pod.clone();
        self.net
            .replicas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&name);
        replica.shutdown().await;
        drop(replica);
    }

    /// Loses replica `i`'s volume: the next start is a new node with an empty store.
    pub fn lose_volume(&mut self, i: usize) {
        let _ = std::fs::remove_dir_all(&self.dirs[i]);
        self.mint_anew(i);
    }

    /// Replica `i`'s next empty store mints another node id.
    fn mint_anew(&mut self, i: usize) {
        self.minted[i] += 100;
    }

    /// Replica `i` (stopped) at its next start, as the controller's: its store discarded if it
    /// was marked (`super::removal`), then a new node. Returns why it was marked.
    pub fn discard_if_marked(&mut self, i: usize) -> Option<String> {
        let dir = self.dirs[i].clone();
        let why = when_let_go(&dir, "is discarded", || {
            super::removal::discard_if_marked(&dir)
        });
        if why.is_some() {
            self.mint_anew(i);
        }
        why
    }

    /// Cuts both directions between `a` and `b`.
    pub fn cut(&self, a: &str, b: &str) {
        let mut cut = self.net.cut.lock().unwrap_or_else(|p| p.into_inner());
        cut.insert((a.to_string(), b.to_string()));
        cut.insert((b.to_string(), a.to_string()));
    }

    /// Cuts `a` from every other replica.
    pub fn isolate(&self, a: &str) {
        for other in &self.names {
            if other != a {
                self.cut(a, other);
            }
        }
    }

    /// Heals every cut.
    pub fn heal(&self) {
        self.net
            .cut
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// Waits until one of `replicas` leads (proved its lease) and returns it.
pub async fn leader_of(replicas: &[Replica]) -> Replica {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(r) = replicas.iter().find(|r| *r.leading().borrow()) {
            return r.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no replica leads within 30s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until every replica applied at least `index`.
pub async fn applied_everywhere(replicas: &[Replica], index: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while replicas.iter().any(|r| r.applied_index() < index) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not applied everywhere within 30s: {:?}",
            replicas
                .iter()
                .map(Replica::applied_index)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
