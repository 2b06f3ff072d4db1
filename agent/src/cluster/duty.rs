//! Which rounds this agent owes: pure decisions over a task and its status, so that the watch
//! loop only has to feed tasks in and start what comes out.

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};
use kdoctor_api::task::{RoundStatus, Task, TaskKind};

use crate::config::TaskArgs;

/// The tasks an agent runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The default agent: every task without `agentSpec`.
    Default,
    /// A task's own carrier: that task only.
    Task {
        /// Its kind.
        kind: TaskKind,
        /// Its name.
        name: String,
    },
}

impl Scope {
    /// The scope the flags ask for; `None` when the agent runs no rounds.
    pub fn from_args(args: &TaskArgs) -> Option<Scope> {
        match (&args.task_kind, &args.task_name) {
            (Some(kind), Some(name)) => Some(Scope::Task {
                kind: *kind,
                name: name.clone(),
            }),
            _ => args.default_agent.then_some(Scope::Default),
        }
    }

    /// Whether `task` is this agent's to run (upstream: the default agent ignores tasks with
    /// `agentSpec`, a carrier every task but its own).
    pub fn covers(&self, task: &Task) -> bool {
        match self {
            Scope::Default => task.agent_spec().is_none(),
            Scope::Task { kind, name } => task.kind() == *kind && task.name() == name,
        }
    }

    /// The task kinds to watch.
    pub fn kinds(&self) -> Vec<TaskKind> {
        match self {
            Scope::Default => TaskKind::ALL.to_vec(),
            Scope::Task { kind, .. } => vec![*kind],
        }
    }
}

/// A round this agent should run now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duty {
    /// Task kind.
    pub kind: TaskKind,
    /// Task name.
    pub name: String,
    /// UID of the task incarnation.
    pub uid: String,
    /// Round number.
    pub round: i64,
    /// When the controller stops waiting for reports.
    pub deadline: Timestamp,
}

/// The round `task` wants from the agent on `node` at `now`, if any: the latest history record
/// is ongoing, the deadline has not passed, this node has not reported yet and — once the
/// controller has listed the nodes it expects — this node is one of them (a node that joined
/// mid-round is not waited for, so it does not probe either).
pub fn due(scope: &Scope, task: &Task, node: &str, now: Timestamp) -> Option<Duty> {
    if !scope.covers(task) || task.metadata().deletion_timestamp.is_some() {
        return None;
    }
    let uid = task.metadata().uid.clone()?;
    let status = task.status()?;
    if status.finish {
        return None;
    }
    let top = status.history.as_ref()?.first()?;
    let reported = top.succeed_agent_node_list.iter().any(|n| n == node)
        || top.failed_agent_node_list.iter().any(|n| n == node);
    let expected = top.not_report_agent_node_list.is_empty()
        || top.not_report_agent_node_list.iter().any(|n| n == node);
    if top.status != RoundStatus::Ongoing
        || reported
        || !expected
        || now >= top.dead_line_time_stamp.0
    {
        return None;
    }
    Some(Duty {
        kind: task.kind(),
        name: task.name().to_string(),
        uid,
        round: top.round_number,
        deadline: top.dead_line_time_stamp.0,
    })
}

/// How long a round may probe: until shortly before the deadline, so that the report is
/// spooled and can be harvested in time; at least one second.
pub fn time_box(deadline: Timestamp, now: Timestamp) -> std::time::Duration {
    let left = deadline.duration_since(now);
    // A tenth of what is left, at least 2 s and at most 30 s, for spooling and harvesting.
    let margin = (left / 10).clamp(SignedDuration::from_secs(2), SignedDuration::from_secs(30));
    let usable = (left - margin).max(SignedDuration::from_secs(1));
    std::time::Duration::try_from(usable).unwrap_or(std::time::Duration::from_secs(1))
}

/// The rounds this agent has started, so that each runs once per task incarnation however
/// often the task's status changes meanwhile.
#[derive(Debug, Default)]
pub struct Ledger {
    started: HashMap<(String, i64), Timestamp>,
}

impl Ledger {
    /// Records `duty` as started; false when it already was.
    pub fn start(&mut self, duty: &Duty) -> bool {
        self.started
            .insert((duty.uid.clone(), duty.round), duty.deadline)
            .is_none()
    }

    /// Forgets a duty that could not start, so that a later status change retries it.
    pub fn forget(&mut self, duty: &Duty) {
        self.started.remove(&(duty.uid.clone(), duty.round));
    }

    /// Drops rounds whose deadline passed an hour ago: they can never be due again.
    pub fn prune(&mut self, now: Timestamp) {
        self.started
            .retain(|_, deadline| now.duration_since(*deadline) < SignedDuration::from_hours(1));
    }

    /// How many rounds are remembered.
    pub fn len(&self) -> usize {
        self.started.len()
    }

    /// Whether no round is remembered.
    pub fn is_empty(&self) -> bool {
        self.started.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kdoctor_api::task::{AgentSpec, NetReach, NetReachSpec, StatusHistoryRecord, TaskStatus};

    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn task(name: &str, status: RoundStatus, nodes: (&[&str], &[&str], &[&str])) -> NetReach {
        let mut t = NetReach::new(name, NetReachSpec::default());
        t.metadata.uid = Some(format!("uid-{name}"));
        let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        t.status = Some(TaskStatus {
            expected_round: Some(2),
            done_round: Some(1),
            history: Some(vec![StatusHistoryRecord {
                status,
                failure_reason: None,
                round_number: 2,
                start_time_stamp: Time(at(0)),
                end_time_stamp: None,
                duration: None,
                dead_line_time_stamp: Time(at(60)),
                expected_actor_number: None,
                succeed_agent_node_list: list(nodes.0),
                failed_agent_node_list: list(nodes.1),
                not_report_agent_node_list: list(nodes.2),
            }]),
            ..TaskStatus::default()
        });
        t
    }

    #[test]
    fn an_ongoing_round_is_due_once_per_node_until_it_reports() {
        let scope = Scope::Default;
        let t = Task::NetReach(task("a", RoundStatus::Ongoing, (&[], &[], &["n1", "n2"])));
        let duty = due(&scope, &t, "n1", at(5)).expect("due");
        assert_eq!(
            duty,
            Duty {
                kind: TaskKind::NetReach,
                name: "a".into(),
                uid: "uid-a".into(),
                round: 2,
                deadline: at(60),
            }
        );
        assert_eq!(due(&scope, &t, "n3", at(5)), None, "not an expected node");
        assert_eq!(due(&scope, &t, "n1", at(60)), None, "deadline passed");
        let reported = Task::NetReach(task("a", RoundStatus::Ongoing, (&["n1"], &["n2"], &[])));
        assert_eq!(due(&scope, &reported, "n1", at(5)), None);
        assert_eq!(due(&scope, &reported, "n2", at(5)), None);
        assert!(
            due(&scope, &reported, "n3", at(5)).is_some(),
            "no expected list yet"
        );
        for other in [
            RoundStatus::Notstarted,
            RoundStatus::Succeed,
            RoundStatus::Fail,
        ] {
            let t = Task::NetReach(task("a", other, (&[], &[], &[])));
            assert_eq!(due(&scope, &t, "n1", at(5)), None, "{other:?}");
        }
    }

    #[test]
    fn scopes_split_tasks_between_the_default_agent_and_carriers() {
        let plain = Task::NetReach(task("a", RoundStatus::Ongoing, (&[], &[], &[])));
        let mut own = task("b", RoundStatus::Ongoing, (&[], &[], &[]));
        own.spec.agent_spec = Some(AgentSpec::default());
        let own = Task::NetReach(own);
        let carrier = Scope::Task {
            kind: TaskKind::NetReach,
            name: "b".into(),
        };
        assert!(Scope::Default.covers(&plain));
        assert!(!Scope::Default.covers(&own));
        assert!(carrier.covers(&own));
        assert!(!carrier.covers(&plain));
        let other_kind = Scope::Task {
            kind: TaskKind::Netdns,
            name: "b".into(),
        };
        assert!(!other_kind.covers(&own));
        assert_eq!(carrier.kinds(), vec![TaskKind::NetReach]);
        assert_eq!(Scope::Default.kinds().len(), 3);
        let args = TaskArgs {
            task_kind: Some(TaskKind::NetReach),
            task_name: Some("b".into()),
            ..TaskArgs::default()
        };
        assert_eq!(Scope::from_args(&args), Some(carrier));
        assert_eq!(Scope::from_args(&TaskArgs::default()), None);
    }

    #[test]
    fn finished_or_deleted_tasks_owe_nothing() {
        let mut t = task("a", RoundStatus::Ongoing, (&[], &[], &[]));
        t.status.as_mut().unwrap().finish = true;
        assert_eq!(due(&Scope::Default, &Task::NetReach(t), "n1", at(5)), None);
        let mut t = task("a", RoundStatus::Ongoing, (&[], &[], &[]));
        t.metadata.deletion_timestamp = Some(Time(at(1)));
        assert_eq!(due(&Scope::Default, &Task::NetReach(t), "n1", at(5)), None);
        let mut t = task("a", RoundStatus::Ongoing, (&[], &[], &[]));
        t.metadata.uid = None;
        assert_eq!(due(&Scope::Default, &Task::NetReach(t), "n1", at(5)), None);
    }

    #[test]
    fn the_ledger_runs_each_incarnation_round_once() {
        let mut ledger = Ledger::default();
        let duty = Duty {
            kind: TaskKind::NetReach,
            name: "a".into(),
            uid: "u1".into(),
            round: 1,
            deadline: at(60),
        };
        assert!(ledger.start(&duty));
        assert!(!ledger.start(&duty));
        let recreated = Duty {
            uid: "u2".into(),
            ..duty.clone()
        };
        assert!(
            ledger.start(&recreated),
            "a new incarnation runs its round 1"
        );
        ledger.forget(&recreated);
        assert!(ledger.start(&recreated));
        ledger.prune(at(60 + 3599));
        assert_eq!(ledger.len(), 2);
        ledger.prune(at(60 + 3600));
        assert!(ledger.is_empty());
    }

    #[test]
    fn rounds_stop_before_the_deadline() {
        assert_eq!(time_box(at(60), at(0)), std::time::Duration::from_secs(54));
        assert_eq!(
            time_box(at(600), at(0)),
            std::time::Duration::from_secs(570)
        );
        assert_eq!(
            time_box(at(3600), at(0)),
            std::time::Duration::from_secs(3570)
        );
        assert_eq!(time_box(at(2), at(0)), std::time::Duration::from_secs(1));
        assert_eq!(time_box(at(0), at(10)), std::time::Duration::from_secs(1));
    }
}
