//! One container of a pod as a supervised process: started by `kube-sim pod-init` (see
//! [`super::launch`]), probed (startup, then readiness and liveness), restarted by the pod's
//! restartPolicy with a doubling back-off, and stopped with SIGTERM, then SIGKILL when its
//! grace period is over. Its state is published for the pod's status.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::probe::{self, Probe, Tally, Verdict};

/// restartPolicy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Always restart.
    Always,
    /// Restart after a non-zero exit.
    OnFailure,
    /// Never restart.
    Never,
}

impl RestartPolicy {
    /// From the pod spec's field (Always when absent).
    pub fn parse(s: &str) -> Self {
        match s {
            "OnFailure" => RestartPolicy::OnFailure,
            "Never" => RestartPolicy::Never,
            _ => RestartPolicy::Always,
        }
    }

    fn restarts_after(self, exit_code: i32) -> bool {
        match self {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => exit_code != 0,
            RestartPolicy::Never => false,
        }
    }
}

/// A container's state, as `containerStatuses[].state` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Not running: why.
    Waiting {
        /// ContainerCreating, CrashLoopBackOff, RunContainerError, ...
        reason: String,
        /// Details.
        message: String,
    },
    /// Running since.
    Running {
        /// RFC 3339.
        started_at: String,
    },
    /// Exited.
    Terminated {
        /// Exit code (128 + signal when killed).
        exit_code: i32,
        /// Completed or Error.
        reason: String,
        /// RFC 3339.
        started_at: String,
        /// RFC 3339.
        finished_at: String,
    },
}

/// What the pod's status shows of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// Current state.
    pub state: State,
    /// The previous run's end, once it restarted.
    pub last: Option<State>,
    /// Passed its readiness probe (or has none and runs).
    pub ready: bool,
    /// Passed its startup probe (or has none and runs).
    pub started: bool,
    /// Restarts so far.
    pub restarts: u32,
    /// The current run's id.
    pub container_id: String,
}

impl Status {
    /// A container that is being created.
    pub fn creating() -> Self {
        Status {
            state: State::Waiting {
                reason: "ContainerCreating".into(),
                message: String::new(),
            },
            last: None,
            ready: false,
            started: false,
            restarts: 0,
            container_id: String::new(),
        }
    }

    /// A container that cannot be created (CreateContainerConfigError, ErrImagePull, ...).
    pub fn failed(reason: &str, message: &str) -> Self {
        Status {
            state: State::Waiting {
                reason: reason.into(),
                message: message.into(),
            },
            ..Status::creating()
        }
    }
}

/// An Event the container's life gives the pod: (reason, message, warning).
pub type PodEvent = (String, String, bool);

/// How to start and watch one container.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Container name.
    pub name: String,
    /// pod-init's program (this kube-sim binary).
    pub init_program: PathBuf,
    /// The launch file (JSON [`super::launch::Launch`]).
    pub launch_file: PathBuf,
    /// The container's log.
    pub log: PathBuf,
    /// restartPolicy.
    pub restart: RestartPolicy,
    /// Probes.
    pub startup: Option<Probe>,
    /// readinessProbe.
    pub readiness: Option<Probe>,
    /// livenessProbe.
    pub liveness: Option<Probe>,
    /// terminationGracePeriodSeconds (a liveness kill gives this much time too).
    pub grace: Duration,
    /// Prefix of container ids.
    pub id_prefix: String,
    /// Whether its node is down (then nothing probes it).
    pub down: super::down::NodeDown,
}

/// A running container's handle.
pub struct Container {
    /// Its current status.
    pub status: watch::Receiver<Status>,
    stop: watch::Sender<Option<Duration>>,
    task: tokio::task::JoinHandle<()>,
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// First restart after 2 s, doubling to 60 s (the kubelet's 10 s to 5 min, shortened so that
/// tests see a crash-looping pod recover in seconds).
const BACKOFF_START: Duration = Duration::from_secs(2);
const BACKOFF_MAX: Duration = Duration::from_secs(60);

fn signal(pid: Option<u32>, sig: libc::c_int) {
    if let Some(pid) = pid.and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: kill(2) on a child we started.
        unsafe { libc::kill(pid, sig) };
    }
}

/// SIGTERM, then SIGKILL after `grace`; waits for the exit. Returns the exit code.
async fn terminate(child: &mut tokio::process::Child, grace: Duration) -> i32 {
    signal(child.id(), libc::SIGTERM);
    let status = match tokio::time::timeout(grace, child.wait()).await {
        Ok(s) => s.ok(),
        Err(_) => {
            let _ = child.kill().await;
            child.wait().await.ok()
        }
    };
    status.map(exit_code).unwrap_or(137)
}

fn exit_code(s: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9))
}

/// What the probes report to the supervisor.
enum ProbeNews {
    Started,
    Ready(bool),
    /// The startup or liveness probe failed: restart.
    Kill(String),
}

async fn probe_loop(
    spec: Spec,
    news: mpsc::UnboundedSender<ProbeNews>,
    events: mpsc::UnboundedSender<PodEvent>,
) {
    let fail = |kind: &str, e: &str| {
        let _ = events.send((
            "Unhealthy".into(),
            format!("{kind} probe failed: {e}"),
            true,
        ));
    };
    if let Some(p) = &spec.startup {
        tokio::time::sleep(p.initial_delay).await;
        let mut tally = Tally::default();
        loop {
            spec.down.wait_up().await;
            let r = probe::run(p).await;
            if let Err(e) = &r {
                fail("Startup", e);
            }
            match tally.record(p, r.is_ok()) {
                Verdict::Passing => break,
                Verdict::Failing => {
                    let _ = news.send(ProbeNews::Kill(
                        "failed startup probe, will be restarted".into(),
                    ));
                    return;
                }
                Verdict::Undecided => {}
            }
            tokio::time::sleep(p.period).await;
        }
    }
    let _ = news.send(ProbeNews::Started);
    let readiness = {
        let news = news.clone();
        let events = events.clone();
        let p = spec.readiness.clone();
        let down = spec.down.clone();
        async move {
            let Some(p) = p else {
                let _ = news.send(ProbeNews::Ready(true));
                return std::future::pending::<()>().await;
            };
            tokio::time::sleep(p.initial_delay).await;
            let mut tally = Tally::default();
            loop {
                down.wait_up().await;
                let r = probe::run(&p).await;
                if let Err(e) = &r {
                    let _ = events.send((
                        "Unhealthy".into(),
                        format!("Readiness probe failed: {e}"),
                        true,
                    ));
                }
                match tally.record(&p, r.is_ok()) {
                    Verdict::Passing => {
                        let _ = news.send(ProbeNews::Ready(true));
                    }
                    Verdict::Failing => {
                        let _ = news.send(ProbeNews::Ready(false));
                    }
                    Verdict::Undecided => {}
                }
                tokio::time::sleep(p.period).await;
            }
        }
    };
    let liveness = async {
        let Some(p) = &spec.liveness else {
            return std::future::pending::<()>().await;
        };
        tokio::time::sleep(p.initial_delay).await;
        let mut tally = Tally::default();
        loop {
            spec.down.wait_up().await;
            let r = probe::run(p).await;
            if let Err(e) = &r {
                fail("Liveness", e);
            }
            if tally.record(p, r.is_ok()) == Verdict::Failing {
                let _ = news.send(ProbeNews::Kill(
                    "failed liveness probe, will be restarted".into(),
                ));
                return;
            }
            tokio::time::sleep(p.period).await;
        }
    };
    tokio::join!(readiness, liveness);
}

impl Container {
    /// Starts the container and supervises it until stopped.
    pub fn start(spec: Spec, events: mpsc::UnboundedSender<PodEvent>) -> Self {
        let (status_tx, status) = watch::channel(Status::creating());
        let (stop, mut stopped) = watch::channel::<Option<Duration>>(None);
        let task = tokio::spawn(async move {
            let mut restarts = 0u32;
            let mut backoff = BACKOFF_START;
            let mut last: Option<State> = None;
            loop {
                let log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&spec.log);
                let (out, err) = match log.and_then(|f| Ok((f.try_clone()?, f))) {
                    Ok((a, b)) => (Stdio::from(a), Stdio::from(b)),
                    Err(_) => (Stdio::null(), Stdio::null()),
                };
                let started_at = now();
                let container_id = format!("kube-sim://{}-{restarts}", spec.id_prefix);
                let spawned = tokio::process::Command::new(&spec.init_program)
                    .arg("pod-init")
                    .arg(&spec.launch_file)
                    .env_clear()
                    .stdin(Stdio::null())
                    .stdout(out)
                    .stderr(err)
                    .kill_on_drop(true)
                    .spawn();
                let mut child = match spawned {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = status_tx.send(Status {
                            last: last.clone(),
                            restarts,
                            ..Status::failed("RunContainerError", &e.to_string())
                        });
                        if stopped.wait_for(Option::is_some).await.is_ok() {
                            return;
                        }
                        return;
                    }
                };
                let _ = events.send((
                    "Started".into(),
                    format!("Started container {}", spec.name),
                    false,
                ));
                let mut current = Status {
                    state: State::Running {
                        started_at: started_at.clone(),
                    },
                    last: last.clone(),
                    ready: false,
                    started: false,
                    restarts,
                    container_id: container_id.clone(),
                };
                let _ = status_tx.send(current.clone());
                let (news_tx, mut news) = mpsc::unbounded_channel();
                let probes = tokio::spawn(probe_loop(spec.clone(), news_tx, events.clone()));
                let exit = loop {
                    tokio::select! {
                        status = child.wait() => break status.map(exit_code).unwrap_or(-1),
                        r = stopped.changed() => {
                            probes.abort();
                            let grace = if r.is_ok() { (*stopped.borrow()).unwrap_or(spec.grace) } else { Duration::ZERO };
                            let _ = events.send(("Killing".into(), format!("Stopping container {}", spec.name), false));
                            let code = terminate(&mut child, grace).await;
                            let _ = status_tx.send(Status {
                                state: State::Terminated {
                                    exit_code: code,
                                    reason: if code == 0 { "Completed".into() } else { "Error".into() },
                                    started_at,
                                    finished_at: now(),
                                },
                                ready: false,
                                ..current
                            });
                            return;
                        }
                        Some(n) = news.recv() => {
                            match n {
                                ProbeNews::Started => current.started = true,
                                ProbeNews::Ready(r) => current.ready = r && current.started,
                                ProbeNews::Kill(why) => {
                                    let _ = events.send(("Killing".into(), format!("Container {} {why}", spec.name), false));
                                    probes.abort();
                                    break terminate(&mut child, spec.grace).await;
                                }
                            }
                            let _ = status_tx.send(current.clone());
                        }
                    }
                };
                probes.abort();
                let ended = State::Terminated {
                    exit_code: exit,
                    reason: if exit == 0 {
                        "Completed".into()
                    } else {
                        "Error".into()
                    },
                    started_at,
                    finished_at: now(),
                };
                if !spec.restart.restarts_after(exit) {
                    let _ = status_tx.send(Status {
                        state: ended,
                        ready: false,
                        ..current
                    });
                    let _ = stopped.wait_for(Option::is_some).await;
                    return;
                }
                restarts += 1;
                last = Some(ended);
                let _ = events.send((
                    "BackOff".into(),
                    format!("Back-off restarting failed container {}", spec.name),
                    true,
                ));
                let _ = status_tx.send(Status {
                    state: State::Waiting {
                        reason: "CrashLoopBackOff".into(),
                        message: format!(
                            "back-off {}s restarting failed container={}",
                            backoff.as_secs(),
                            spec.name
                        ),
                    },
                    last: last.clone(),
                    ready: false,
                    started: false,
                    restarts,
                    container_id,
                });
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stopped.wait_for(Option::is_some) => return,
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        });
        Container { status, stop, task }
    }

    /// A container that could not be created: its status says why; stopping it does nothing.
    pub fn failed(status: Status) -> Self {
        let (_, status) = watch::channel(status);
        let (stop, _) = watch::channel(None);
        Container {
            status,
            stop,
            task: tokio::spawn(async {}),
        }
    }

    /// Stops the container (SIGTERM, SIGKILL after `grace`) and waits until it is gone.
    pub async fn stop(self, grace: Duration) {
        let _ = self.stop.send(Some(grace));
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_policies() {
        assert!(RestartPolicy::parse("").restarts_after(0));
        assert!(!RestartPolicy::parse("OnFailure").restarts_after(0));
        assert!(RestartPolicy::parse("OnFailure").restarts_after(1));
        assert!(!RestartPolicy::parse("Never").restarts_after(1));
    }
}
