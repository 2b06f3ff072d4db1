//! Shared helpers: start a sim, run the installed kubectl 1.32 against it.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use kube_sim::{Sim, SimConfig};

/// A started sim with its admin client.
pub async fn start() -> (Sim, kube::Client) {
    let sim = Sim::start(SimConfig::default()).await.expect("start sim");
    let client = sim.client().await.expect("client");
    (sim, client)
}

/// The pinned kubectl (the dispatcher would pick it from /version anyway; pinning keeps the
/// test independent of the dispatcher).
pub fn kubectl_binary() -> PathBuf {
    let pinned = PathBuf::from("/usr/lib/google-cloud-sdk/bin/kubectl.1.32");
    if pinned.exists() {
        pinned
    } else {
        PathBuf::from("kubectl")
    }
}

/// kubectl with a kubeconfig for the sim and a fresh cache dir.
pub struct Kubectl {
    dir: tempfile::TempDir,
}

impl Kubectl {
    /// Writes the sim's admin kubeconfig into a temporary directory.
    pub fn new(sim: &Sim) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        sim.write_kubeconfig(&dir.path().join("kubeconfig"))
            .expect("kubeconfig");
        Kubectl { dir }
    }

    /// A command with --kubeconfig and --cache-dir set, stdin closed.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(kubectl_binary());
        cmd.arg("--kubeconfig")
            .arg(self.dir.path().join("kubeconfig"))
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs kubectl and returns its output (asynchronously, so the sim keeps serving).
    pub async fn run(&self, args: &[&str]) -> Output {
        let mut cmd = self.command(args);
        tokio::task::spawn_blocking(move || cmd.output().expect("run kubectl"))
            .await
            .expect("join kubectl")
    }

    /// Runs kubectl, asserts success, returns stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs kubectl, asserts failure, returns stderr.
    pub async fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(!out.status.success(), "kubectl {args:?} should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

/// The repository root (for manifests/ and examples/).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

/// Polls `f` every 20 ms until it returns Some, for at most `secs` seconds.
pub async fn eventually<T, F, Fut>(secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within {secs} s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The Status of an API error; panics on any other error.
pub fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other}"),
    }
}

/// Asserts a 422 Invalid whose message holds `message`.
pub fn assert_invalid(e: kube::Error, message: &str) {
    let status = api_error(e);
    assert_eq!(status.code, 422, "{}", status.message);
    assert!(status.message.contains(message), "{}", status.message);
}
