//! A pod's status as the kubelet writes it: phase, conditions (their transition times kept
//! while they hold), addresses, and one entry per container.

use std::net::IpAddr;

use serde_json::{Value, json};

use super::container::{State, Status};

/// What the kubelet knows of a pod at one moment.
#[derive(Debug, Clone, Default)]
pub struct PodView {
    /// The node's addresses.
    pub host_ips: Vec<IpAddr>,
    /// The pod's addresses (empty until its network exists).
    pub pod_ips: Vec<IpAddr>,
    /// When the kubelet took the pod (RFC 3339).
    pub start_time: String,
    /// (name, image, status) of each app container, in spec order.
    pub containers: Vec<(String, String, Status)>,
    /// The pod was rejected before any container ran: (reason, message). Phase Failed.
    pub rejected: Option<(String, String)>,
}

fn state_json(s: &State) -> Value {
    match s {
        State::Waiting { reason, message } => {
            let mut w = json!({"reason": reason});
            if !message.is_empty() {
                w["message"] = json!(message);
            }
            json!({"waiting": w})
        }
        State::Running { started_at } => json!({"running": {"startedAt": started_at}}),
        State::Terminated {
            exit_code,
            reason,
            started_at,
            finished_at,
        } => json!({"terminated": {"exitCode": exit_code, "reason": reason,
                    "startedAt": started_at, "finishedAt": finished_at}}),
    }
}

/// The phase: Failed when rejected, Succeeded/Failed when every container ended for good,
/// Running once one runs (or restarts), else Pending.
pub fn phase(v: &PodView) -> &'static str {
    if v.rejected.is_some() {
        return "Failed";
    }
    let states: Vec<&Status> = v.containers.iter().map(|(_, _, s)| s).collect();
    if states.is_empty() {
        return "Pending";
    }
    let ended: Vec<i32> = states
        .iter()
        .filter_map(|s| match s.state {
            State::Terminated { exit_code, .. } => Some(exit_code),
            _ => None,
        })
        .collect();
    if ended.len() == states.len() {
        return if ended.iter().all(|c| *c == 0) {
            "Succeeded"
        } else {
            "Failed"
        };
    }
    let running = states
        .iter()
        .any(|s| matches!(s.state, State::Running { .. }) || s.restarts > 0);
    if running { "Running" } else { "Pending" }
}

fn condition(current: &Value, kind: &str, status: bool, now: &str) -> Value {
    let status = if status { "True" } else { "False" };
    let previous = current
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind);
    // A condition that holds keeps its transition time.
    let since = match previous {
        Some(p) if p["status"] == status => p["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    let mut c =
        json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": since});
    if (kind == "ContainersReady" || kind == "Ready") && status == "False" {
        c["reason"] = json!("ContainersNotReady");
    }
    c
}

/// The status to write for `pod` (the object as last seen) from `v`.
pub fn status_json(pod: &Value, v: &PodView, now: &str) -> Value {
    let ready = !v.containers.is_empty() && v.containers.iter().all(|(_, _, s)| s.ready);
    let networked = !v.pod_ips.is_empty();
    let phase = phase(v);
    let mut status = json!({
        "phase": phase,
        "hostIP": v.host_ips.first().map(|i| i.to_string()),
        "hostIPs": v.host_ips.iter().map(|i| json!({"ip": i.to_string()})).collect::<Vec<_>>(),
        "startTime": v.start_time,
        "conditions": [
            condition(pod, "PodReadyToStartContainers", networked, now),
            condition(pod, "Initialized", true, now),
            condition(pod, "ContainersReady", ready, now),
            condition(pod, "Ready", ready, now),
        ],
        "containerStatuses": v.containers.iter().map(|(name, image, s)| {
            let mut c = json!({
                "name": name,
                "image": image,
                "imageID": image,
                "ready": s.ready,
                "started": s.started,
                "restartCount": s.restarts,
                "state": state_json(&s.state),
                "lastState": s.last.as_ref().map(state_json).unwrap_or(json!({})),
            });
            if !s.container_id.is_empty() {
                c["containerID"] = json!(s.container_id);
            }
            c
        }).collect::<Vec<_>>(),
    });
    if networked {
        status["podIP"] = json!(v.pod_ips[0].to_string());
        status["podIPs"] = json!(
            v.pod_ips
                .iter()
                .map(|i| json!({"ip": i.to_string()}))
                .collect::<Vec<_>>()
        );
    }
    if let Some((reason, message)) = &v.rejected {
        status["reason"] = json!(reason);
        status["message"] = json!(message);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(ready: bool) -> Status {
        Status {
            state: State::Running {
                started_at: "t0".into(),
            },
            last: None,
            ready,
            started: true,
            restarts: 0,
            container_id: "kube-sim://x-0".into(),
        }
    }

    fn view(statuses: Vec<Status>) -> PodView {
        PodView {
            host_ips: vec!["198.18.0.11".parse().expect("ip")],
            pod_ips: vec![
                "198.19.0.2".parse().expect("ip"),
                "fd6b:6474:0:1000::2".parse().expect("ip"),
            ],
            start_time: "t0".into(),
            containers: statuses
                .into_iter()
                .map(|s| ("c".to_string(), "img".to_string(), s))
                .collect(),
            rejected: None,
        }
    }

    #[test]
    fn phases() {
        assert_eq!(phase(&view(vec![Status::creating()])), "Pending");
        assert_eq!(phase(&view(vec![running(false)])), "Running");
        let done = |code| Status {
            state: State::Terminated {
                exit_code: code,
                reason: "x".into(),
                started_at: "a".into(),
                finished_at: "b".into(),
            },
            ..running(false)
        };
        assert_eq!(phase(&view(vec![done(0)])), "Succeeded");
        assert_eq!(phase(&view(vec![done(0), done(2)])), "Failed");
        let mut rejected = view(vec![]);
        rejected.rejected = Some(("SysctlForbidden".into(), "x".into()));
        assert_eq!(phase(&rejected), "Failed");
    }

    #[test]
    fn ready_pods_have_addresses_and_conditions_keep_their_times() {
        let pod = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "earlier"}]}});
        let s = status_json(&pod, &view(vec![running(true)]), "now");
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["podIP"], "198.19.0.2");
        assert_eq!(s["podIPs"][1]["ip"], "fd6b:6474:0:1000::2");
        assert_eq!(s["hostIP"], "198.18.0.11");
        let cond = |t: &str| {
            s["conditions"]
                .as_array()
                .expect("conditions")
                .iter()
                .find(|c| c["type"] == t)
                .cloned()
                .expect("condition")
        };
        assert_eq!(cond("Ready")["status"], "True");
        assert_eq!(cond("Ready")["lastTransitionTime"], "earlier");
        assert_eq!(cond("ContainersReady")["lastTransitionTime"], "now");
        assert_eq!(
            s["containerStatuses"][0]["state"]["running"]["startedAt"],
            "t0"
        );
        let s = status_json(&pod, &view(vec![running(false)]), "later");
        assert_eq!(s["conditions"][3]["status"], "False");
        assert_eq!(s["conditions"][3]["lastTransitionTime"], "later");
    }
}
