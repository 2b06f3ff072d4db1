//! A real control plane for one test: `hack/cluster.sh up --no-build` with a directory and a
//! network namespace of its own (so tests run side by side), stopped when dropped. Its API
//! server is reached from the host through the forwarded port ([`TestCluster::client`]), or
//! from inside the cluster's namespace ([`TestCluster::enter`], then
//! [`TestCluster::inner_client`]), where pods' addresses are reachable too.
//!
//! What it runs must be built first — the control plane (`hack/kube/build.sh`) and the
//! `kube-sim` and `kdoctor` binaries — since `cargo test` holds the build directory while tests
//! run; `hack/test.sh` does it. Needs root (network namespaces).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use kube::Client;

/// Records that `what` could not run here and why: printed, and appended to the file named by
/// `KDOCTOR_MISSING_FILE` with the name of the test calling it (libtest names each test's thread
/// after the test; call this from the test's own thread), so that hack/test.sh counts that test
/// as skipped, not passed, and lists it with the reason.
pub fn missing(what: &str, why: &str) {
    let line = format!("{what}: {why}");
    eprintln!("MISSING: {line}");
    let test = std::thread::current()
        .name()
        .unwrap_or("(unnamed thread)")
        .to_string();
    if let Some(file) = std::env::var_os("KDOCTOR_MISSING_FILE") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(file)
        {
            let _ = writeln!(f, "{test}\t{line}");
        }
    }
}

/// How a test cluster is shaped.
#[derive(Debug, Clone)]
pub struct TestClusterOptions {
    /// Nodes node-1..N.
    pub nodes: usize,
    /// node-1..M run pods as processes; the others simulate them.
    pub process_nodes: usize,
    /// Dual stack (when the machine allows; else the cluster says it is IPv4 only).
    pub ipv6: bool,
    /// kube-sim (and the kdoctor it starts) from target/release rather than target/debug:
    /// benchmarks, where a debug kube-sim takes CPU from what is measured.
    pub release: bool,
}

impl Default for TestClusterOptions {
    fn default() -> Self {
        TestClusterOptions {
            nodes: 3,
            process_nodes: 0,
            ipv6: false,
            release: false,
        }
    }
}

/// Why a test cluster is not there.
#[derive(Debug, thiserror::Error)]
pub enum TestClusterError {
    /// hack/cluster.sh failed: its output says why.
    #[error("hack/cluster.sh up failed (exit {code:?}): {output}")]
    Up {
        /// Exit code.
        code: Option<i32>,
        /// Its last lines.
        output: String,
    },
    /// Running the script.
    #[error("running hack/cluster.sh: {0}")]
    Io(#[from] std::io::Error),
    /// The kubeconfig it wrote.
    #[error("the test cluster's kubeconfig: {0}")]
    Kubeconfig(String),
    /// A ServiceAccount's token from TokenRequest.
    #[error("a ServiceAccount token for {0}")]
    Token(String),
}

/// A running test cluster.
pub struct TestCluster {
    /// Its directory (logs, kubeconfigs, the audit log).
    pub dir: PathBuf,
    /// Its network namespace's name.
    pub netns: String,
    /// Whether it came up dual stack.
    pub ipv6: bool,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("hack")
        .join("cluster.sh")
}

/// The kubectl tests pin: `KDOCTOR_KUBECTL` when set, else the kubectl of the control plane's
/// release that `hack/kube/build.sh` built (hack/test.sh builds it first). Never whatever
/// `kubectl` is on PATH: Debian's is a dispatcher that picks a version by the server's.
pub fn pinned_kubectl() -> PathBuf {
    static KUBECTL: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    KUBECTL
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("KDOCTOR_KUBECTL") {
                return PathBuf::from(path);
            }
            let build = script().with_file_name("kube").join("build.sh");
            let out = Command::new(&build)
                .arg("--print")
                .output()
                .unwrap_or_else(|e| panic!("{} cannot run: {e}", build.display()));
            let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let kubectl = PathBuf::from(dir).join("kubectl");
            assert!(
                out.status.success() && kubectl.exists(),
                "no pinned kubectl: run hack/kube/build.sh (or hack/test.sh), or set KDOCTOR_KUBECTL"
            );
            kubectl
        })
        .clone()
}

impl TestCluster {
    /// Starts a cluster (about 15 s).
    pub fn start(opts: &TestClusterOptions) -> Result<TestCluster, TestClusterError> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let netns = format!("kdt-{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("kdoctor-{netns}"));
        let mut cmd = Command::new(script());
        cmd.arg("up")
            .arg("--no-build")
            .args(["--nodes", &opts.nodes.to_string()])
            .args(["--process-nodes", &opts.process_nodes.to_string()])
            .env("CLUSTER_DIR", &dir)
            .env("CLUSTER_NETNS", &netns);
        if !opts.ipv6 {
            cmd.arg("--ipv4-only");
        }
        if opts.release {
            cmd.arg("--release");
        }
        let out = cmd.output()?;
        // From here on, Drop takes down whatever was started.
        let mut cluster = TestCluster {
            dir,
            netns,
            ipv6: false,
        };
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            return Err(TestClusterError::Up {
                code: out.status.code(),
                output: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            });
        }
        cluster.ipv6 =
            std::fs::read_to_string(cluster.dir.join("ipv6")).is_ok_and(|s| s.trim() == "1");
        Ok(cluster)
    }

    /// The admin kubeconfig whose server is the forwarded port on the host's loopback.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// The admin kubeconfig for use inside the cluster's namespace (the API server's own address).
    pub fn inner_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.inner.kubeconfig")
    }

    /// kube-apiserver's audit log (one JSON line per request).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("logs").join("audit.log")
    }

    /// The kubectl of the control plane's release.
    pub fn kubectl(&self) -> PathBuf {
        let bin = std::fs::read_to_string(self.dir.join("kube-bin")).unwrap_or_default();
        PathBuf::from(bin.trim()).join("kubectl")
    }

    /// Moves the calling thread into the cluster's network namespace; threads it starts
    /// afterwards (a tokio runtime's) live there too.
    pub fn enter(&self) -> std::io::Result<()> {
        crate::netns::enter(&Path::new("/var/run/netns").join(&self.netns))
    }

    /// A tokio runtime whose threads live in the cluster's namespace: what runs there (a
    /// controller, stand-in agents) reaches pods' addresses and serves on them. Build clients
    /// for it inside it (`runtime.spawn(cluster.inner_client())`): a kube client spawns its
    /// connection worker on the runtime it is made on.
    pub fn runtime(&self, workers: usize) -> std::io::Result<tokio::runtime::Runtime> {
        let path = Path::new("/var/run/netns").join(&self.netns);
        // Fail here, with the reason, rather than in a runtime thread.
        let probe = path.clone();
        std::thread::spawn(move || crate::netns::enter(&probe))
            .join()
            .map_err(|_| std::io::Error::other("the namespace probe thread panicked"))??;
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers.max(1))
            .enable_all()
            .on_thread_start(move || {
                if let Err(e) = crate::netns::enter(&path) {
                    eprintln!("entering {}: {e}", path.display());
                }
            })
            .build()
    }

    /// The requests of `user` so far, by "verb resource[/subresource]", from the audit log.
    pub fn requests(&self, user: &str) -> std::collections::BTreeMap<String, u64> {
        let mut out = std::collections::BTreeMap::new();
        let Ok(text) = std::fs::read_to_string(self.audit_log()) else {
            return out;
        };
        // A request has an event per stage (a watch: started, then complete): one each.
        let mut seen = std::collections::HashSet::new();
        for line in text.lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if event.pointer("/user/username").and_then(|u| u.as_str()) != Some(user) {
                continue;
            }
            let id = event
                .get("auditID")
                .and_then(|i| i.as_str())
                .unwrap_or("")
                .to_string();
            if !seen.insert(id) {
                continue;
            }
            let verb = event.get("verb").and_then(|v| v.as_str()).unwrap_or("");
            let resource = event
                .pointer("/objectRef/resource")
                .and_then(|r| r.as_str())
                .unwrap_or("");
            let what = match event
                .pointer("/objectRef/subresource")
                .and_then(|r| r.as_str())
            {
                Some(sub) => format!("{verb} {resource}/{sub}"),
                None => format!("{verb} {resource}"),
            };
            *out.entry(what).or_default() += 1;
        }
        out
    }

    /// An admin client through the forwarded port (from the host's namespace).
    pub async fn client(&self) -> Result<Client, TestClusterError> {
        client_from(&self.kubeconfig()).await
    }

    /// An admin client for a thread inside the cluster's namespace.
    pub async fn inner_client(&self) -> Result<Client, TestClusterError> {
        client_from(&self.inner_kubeconfig()).await
    }
}

/// A client of the cluster as a kubeconfig says (from a thread in the cluster's namespace, the
/// inner one).
pub async fn client_from(path: &Path) -> Result<Client, TestClusterError> {
    client_of(path, None).await
}

/// A client of the cluster a kubeconfig names (its server and CA) that authenticates with
/// `token` instead of the kubeconfig's user: a ServiceAccount's, say.
pub async fn client_with_token(path: &Path, token: String) -> Result<Client, TestClusterError> {
    client_of(path, Some(token)).await
}

async fn client_of(path: &Path, token: Option<String>) -> Result<Client, TestClusterError> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| TestClusterError::Kubeconfig(e.to_string()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| TestClusterError::Kubeconfig(e.to_string()))?;
    if let Some(token) = token {
        config.auth_info = kube::config::AuthInfo {
            token: Some(token.into()),
            ..Default::default()
        };
    }
    Client::try_from(config).map_err(|e| TestClusterError::Kubeconfig(e.to_string()))
}

/// A token of the ServiceAccount `namespace/name`, valid for `seconds`, from TokenRequest (not
/// bound to a pod: what a test or a benchmark acts as).
pub async fn service_account_token(
    client: &Client,
    namespace: &str,
    name: &str,
    seconds: i64,
) -> Result<String, TestClusterError> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(seconds),
            ..Default::default()
        },
        ..Default::default()
    };
    let issued = kube::Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(name, &kube::api::PostParams::default(), &request)
        .await
        .map_err(|e| TestClusterError::Token(format!("{namespace}/{name}: {e}")))?;
    issued
        .status
        .map(|s| s.token)
        .ok_or_else(|| TestClusterError::Token(format!("{namespace}/{name}: no token issued")))
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        // From the host's namespace: dropped on a thread inside the cluster's, the script
        // would be one of the processes it ends there.
        let (dir, netns) = (self.dir.clone(), self.netns.clone());
        let out = std::thread::spawn(move || {
            let _ = crate::netns::enter(Path::new("/proc/1/ns/net"));
            Command::new(script())
                .arg("down")
                .env("CLUSTER_DIR", &dir)
                .env("CLUSTER_NETNS", &netns)
                .output()
        })
        .join()
        .unwrap_or_else(|_| {
            Err(std::io::Error::other(
                "the thread taking the cluster down panicked",
            ))
        });
        if let Ok(out) = out
            && !out.status.success()
        {
            eprintln!(
                "hack/cluster.sh down for {}: {}",
                self.netns,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
