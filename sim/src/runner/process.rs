//! One pod's process: started with the pod's environment, restarted with back-off when it
//! exits (the pod's container status shows the crash and the restart count), stopped with
//! SIGTERM (then SIGKILL after 5 s) when the pod goes.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Command;

use crate::cluster::{Cluster, WriteOptions};
use crate::patch::PatchType;
use crate::runner::RunnerConfig;
use crate::runner::env::{expand, pod_env};

const MANAGER: &str = "kubelet";

/// The current process id of each pod's process, by (namespace, name).
pub type Pids = Arc<std::sync::Mutex<std::collections::HashMap<(String, String), u32>>>;

/// A running pod process and its supervisor task.
pub struct Supervisor {
    stop: tokio::sync::watch::Sender<bool>,
}

/// The log file of a pod's process.
pub fn log_path(work_dir: &std::path::Path, ns: &str, name: &str) -> PathBuf {
    work_dir.join(format!("{ns}_{name}.log"))
}

fn container_status(
    c: &Cluster,
    ns: &str,
    name: &str,
    ready: bool,
    restarts: u32,
    exit: Option<i32>,
) {
    let Some(pod) = c.store.get("core/pods", ns, name) else {
        return;
    };
    let Ok(info) = c.builtin("", "Pod") else {
        return;
    };
    let now = crate::clock::now();
    let mut statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(first) = statuses.first_mut() {
        first["ready"] = json!(ready);
        first["started"] = json!(ready);
        first["restartCount"] = json!(restarts);
        first["state"] = if ready {
            json!({"running": {"startedAt": now}})
        } else {
            json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting failed container"}})
        };
        if let Some(code) = exit {
            first["lastState"] = json!({"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }, "finishedAt": now}});
        }
    }
    let mut conditions = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for cond in &mut conditions {
        if cond["type"] == "Ready" || cond["type"] == "ContainersReady" {
            cond["status"] = json!(if ready { "True" } else { "False" });
            cond["lastTransitionTime"] = json!(now);
        }
    }
    let patch = json!({"status": {"containerStatuses": statuses, "conditions": conditions}});
    let _ = c.patch(
        &info,
        ns,
        name,
        PatchType::Merge,
        &serde_json::to_vec(&patch).unwrap_or_default(),
        &WriteOptions::manager(MANAGER).status(),
    );
}

fn pod_now(c: &Cluster, ns: &str, name: &str) -> Value {
    c.store
        .get("core/pods", ns, name)
        .map(|p| (*p).clone())
        .unwrap_or(Value::Null)
}

fn terminate(pid: Option<u32>) {
    if let Some(pid) = pid {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Supervisor {
    /// Starts the process of `pod` and supervises it.
    pub fn start(
        c: Arc<Cluster>,
        cfg: &RunnerConfig,
        pod: &Value,
        kubeconfig: &str,
        pids: Pids,
    ) -> std::io::Result<Self> {
        let ns = pod
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let name = pod
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        std::fs::create_dir_all(&cfg.work_dir)?;
        let kc_path = cfg.work_dir.join(format!("{ns}_{name}.kubeconfig"));
        std::fs::write(&kc_path, kubeconfig)?;
        let mut env = pod_env(&c, pod);
        env.push(("KUBECONFIG".into(), kc_path.display().to_string()));
        let raw_args: Vec<String> = if cfg.args.is_empty() {
            pod.pointer("/spec/containers/0/args")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        } else {
            cfg.args.clone()
        };
        let mounts = super::volumes::materialize(
            &c,
            pod,
            &cfg.work_dir.join(format!("{ns}_{name}")).join("volumes"),
        )?;
        for (_, value) in env.iter_mut() {
            *value = super::volumes::rewrite(value, &mounts);
        }
        let args: Vec<String> = raw_args
            .iter()
            .map(|a| super::volumes::rewrite(&expand(a, &env), &mounts))
            .collect();
        let log = log_path(&cfg.work_dir, &ns, &name);
        let program = cfg.program.clone();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let mut restarts = 0u32;
            let mut backoff = Duration::from_secs(1);
            loop {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log);
                let (out, err) = match file.and_then(|f| Ok((f.try_clone()?, f))) {
                    Ok((a, b)) => (Stdio::from(a), Stdio::from(b)),
                    Err(_) => (Stdio::null(), Stdio::null()),
                };
                let child = Command::new(&program)
                    .args(&args)
                    .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                    .stdin(Stdio::null())
                    .stdout(out)
                    .stderr(err)
                    .kill_on_drop(true)
                    .spawn();
                let mut child = match child {
                    Ok(ch) => ch,
                    Err(e) => {
                        tracing::warn!(error = %e, program = %program.display(), pod = %name, "cannot start pod process");
                        container_status(&c, &ns, &name, false, restarts, Some(127));
                        return;
                    }
                };
                if let Some(pid) = child.id() {
                    pids.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert((ns.clone(), name.clone()), pid);
                }
                let ready_probe = super::probe::readiness(&pod_now(&c, &ns, &name));
                if let Some(probe) = &ready_probe {
                    // Not Ready until the process answers its readiness probe.
                    container_status(&c, &ns, &name, false, restarts, None);
                    let mut answered = false;
                    loop {
                        if super::probe::check(probe).await {
                            answered = true;
                            break;
                        }
                        if child.try_wait().ok().flatten().is_some() || *stopped.borrow() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    if answered {
                        container_status(&c, &ns, &name, true, restarts, None);
                    }
                } else if restarts > 0 {
                    container_status(&c, &ns, &name, true, restarts, None);
                }
                tokio::select! {
                    status = child.wait() => {
                        let code = status.ok().and_then(|s| s.code()).unwrap_or(-1);
                        restarts += 1;
                        container_status(&c, &ns, &name, false, restarts, Some(code));
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = async { let _ = stopped.wait_for(|s| *s).await; } => return,
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(10));
                    }
                    _ = async { let _ = stopped.wait_for(|s| *s).await; } => {
                        pids.lock().unwrap_or_else(|e| e.into_inner()).remove(&(ns.clone(), name.clone()));
                        terminate(child.id());
                        if tokio::time::timeout(Duration::from_secs(5), child.wait()).await.is_err() {
                            let _ = child.kill().await;
                        }
                        return;
                    }
                }
            }
        });
        Ok(Supervisor { stop })
    }

    /// Stops the process (SIGTERM, SIGKILL after 5 s).
    pub fn stop(self) {
        let _ = self.stop.send(true);
    }
}
