//! Real agents among the stand-ins: the agent as its DaemonSet runs it (its report API and echo
//! targets on the pod's address, its task loop with the agent ServiceAccount's token,
//! in-process), on the first `--agent-nodes` agent pods of the cluster. They see the task's
//! rounds through their own watch, probe the peers the round samples for them (the stand-ins
//! answer on their echo target) and spool their own reports, which the controller harvests with
//! the stand-ins'.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kdoctor_agent::agent::{RunningAgent, start};
use kdoctor_agent::cluster::runner::Runner;
use kdoctor_agent::config::{AgentArgs, TaskArgs};
use kdoctor_api::task::TaskKind;

use crate::{Cluster, NAMESPACE, REPORT_PORT, Spooled, client_from};

/// The agent's HTTP echo target port (the DaemonSet's `--app-http-port`).
pub const ECHO_PORT: u16 = 80;

pub struct RealAgents {
    /// Their spools, which their report APIs serve.
    pub spools: Vec<Spooled>,
    _running: Vec<RunningAgent>,
    loops: Vec<tokio::task::JoinHandle<()>>,
}

impl RealAgents {
    /// Real agents on the first `count` agent pods.
    pub async fn start(cluster: &Cluster, count: usize) -> RealAgents {
        let mut agents = RealAgents {
            spools: Vec::new(),
            _running: Vec::new(),
            loops: Vec::new(),
        };
        if count == 0 {
            return agents;
        }
        let token = cluster.token("kdoctor-agent").await;
        let client = client_from(&cluster.kube.inner_kubeconfig(), Some(token)).await;
        let ca = cluster.dir.join("agent-ca.crt");
        std::fs::write(&ca, &cluster.ca.pem.cert).expect("the CA for the agents");
        let tokens = cluster.identity_tokens().await;
        let tasks = TaskArgs {
            default_agent: true,
            namespace: NAMESPACE.to_string(),
            dns_service_label_key: "kubernetes.io/name".into(),
            dns_service_label_value: "CoreDNS".into(),
            report_expiry_hours: 1,
            ..TaskArgs::default()
        };
        for (index, (pod, node, ip)) in cluster.agents.iter().take(count).enumerate() {
            let mut args = AgentArgs::ephemeral(vec![*ip]);
            args.report_token = tokens[pod].clone();
            args.report_dir = Some(cluster.dir.join("agents").join(pod));
            args.report_port = REPORT_PORT;
            args.tls_ca_cert = ca.clone();
            args.node_name = Some(node.clone());
            args.pod_name = Some(pod.clone());
            args.app_http_port = ECHO_PORT;
            let running = start(&args).await.expect("a real agent");
            let spool = running.spool.clone().expect("the agent's spool");
            let runner = Runner::new(
                client.clone(),
                &args,
                &tasks,
                running.spool.clone(),
                running.registry.clone(),
            )
            .expect("the agent's task loop")
            .expect("a default agent");
            agents
                .loops
                .push(tokio::spawn(Arc::new(runner).run(client.clone())));
            agents.spools.push(Spooled {
                index,
                pod: pod.clone(),
                node: node.clone(),
                spool,
            });
            agents._running.push(running);
        }
        agents
    }

    pub fn len(&self) -> usize {
        self.spools.len()
    }

    /// When every real agent had spooled its report of round `round` of `task` (seen by
    /// polling their spools every 20 ms), or None after `within`.
    pub async fn reported(&self, task: &str, round: i64, within: Duration) -> Option<Instant> {
        let deadline = Instant::now() + within;
        let kind = TaskKind::NetReach.to_string();
        loop {
            let all = self.spools.iter().all(|s| {
                s.spool.list().is_ok_and(|entries| {
                    entries
                        .iter()
                        .any(|e| e.kind == kind && e.task == task && e.round == round as u64)
                })
            });
            if all {
                return Some(Instant::now());
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl RealAgents {
    /// The probes that failed in the real agents' reports of round `round` of `task`: node,
    /// target and reason, at most `at_most`.
    /// Times are seconds after `started`, the round's start as the controller wrote it.
    pub fn failed_probes(
        &self,
        task: &str,
        round: i64,
        started: jiff::Timestamp,
        at_most: usize,
    ) -> Vec<String> {
        let after = |t: jiff::Timestamp| t.duration_since(started).as_secs_f64();
        let mut failed = Vec::new();
        for s in &self.spools {
            let entries = s.spool.list().unwrap_or_default();
            let Some(entry) = entries
                .iter()
                .find(|e| e.task == task && e.round == round as u64)
            else {
                continue;
            };
            let Ok(report) = s
                .spool
                .read(&entry.name)
                .map_err(|e| e.to_string())
                .and_then(|b| {
                    serde_json::from_slice::<kdoctor_api::report::Report>(&b)
                        .map_err(|e| e.to_string())
                })
            else {
                continue;
            };
            let round_start = report.round_start_time_stamp.0;
            let report_failure = report.failed_reason.clone();
            let details = report
                .task_net_reach
                .map(|r| r.round_task_detail)
                .unwrap_or_default();
            let failed_details: Vec<_> =
                details.into_iter().filter(|d| !d.request_succeed).collect();
            // A report can fail with no failed probe (its agent could not probe at all).
            if failed_details.is_empty()
                && let Some(why) = report_failure
            {
                failed.push(format!(
                    "{}: the report failed with no failed probe: {why} (the agent's round from {:.3} s after the controller's start)",
                    s.node,
                    after(round_start)
                ));
            }
            for d in failed_details {
                let m = &d.request_target_metrics;
                failed.push(format!(
                    "{}: {} ({}): {}; the agent's round from {:.3} s, its requests from {:.3} to {:.3} s after the controller's start; {}",
                    s.node,
                    d.name,
                    d.url,
                    d.failure_reason.as_deref().unwrap_or_default(),
                    after(round_start),
                    after(m.requests.request_start_time.0),
                    after(m.requests.request_end_time.0),
                    m.met()
                ));
            }
        }
        failed.truncate(at_most);
        failed
    }
}

impl Drop for RealAgents {
    fn drop(&mut self) {
        for task_loop in &self.loops {
            task_loop.abort();
        }
    }
}
