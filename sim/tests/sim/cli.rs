//! The `kube-sim` binary: serves until SIGTERM, writes a kubeconfig kubectl uses.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::kubectl_binary;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn kubectl(
    kubeconfig: &std::path::Path,
    cache: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    Command::new(kubectl_binary())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("kubectl")
}

#[test]
fn kube_sim_binary_serves_kubectl_until_sigterm() {
    let dir = tempfile::tempdir().expect("dir");
    let kubeconfig = dir.path().join("kubeconfig");
    let cache = dir.path().join("cache");
    let listen = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .args(["--nodes", "4", "--listen", &listen, "--kubeconfig-out"])
        .arg(&kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kube-sim");
    let start = Instant::now();
    while !kubeconfig.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no kubeconfig written"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&kubeconfig).expect("kubeconfig");
    assert!(
        text.contains(&format!("server: https://{listen}")),
        "{text}"
    );
    let out = loop {
        let out = kubectl(&kubeconfig, &cache, &["get", "nodes", "--no-headers"]);
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.success() && stdout.lines().filter(|l| l.contains(" Ready ")).count() == 4 {
            break stdout;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "nodes not Ready: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(out.contains("node-4"), "{out}");
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "kube-sim did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
}
