//! The harvest loop: harvesting on its own, beside the task reconciles. A reconcile only says
//! what it wants harvested (a task incarnation and the agents whose reports it waits for,
//! [`Harvests::want`]); the loop harvests every wanted task on its own schedule, each task's
//! pass in its own future (a slow or hanging agent holds up no other task, and no reconcile),
//! each agent's pass bounded by the harvester's deadline. When a pass stored reports, or could
//! not reach an agent, the task's reconcile is triggered at once to advance the round from what
//! the store now holds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kdoctor_api::task::TaskKind;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::harvest::{AwaitedRound, HarvestOutcome, Harvestee, Harvester};
use crate::readiness::AgentPod;

/// What a reconcile wants harvested.
#[derive(Clone, Debug)]
pub struct WantedHarvest {
    /// The task incarnation.
    pub harvestee: Harvestee,
    /// The agents to ask.
    pub agents: Vec<AgentPod>,
    /// Not before this instant: until then no agent can have finished the round's probing, and
    /// a pass over thousands of agents would find nothing while taking the machine's CPU from
    /// the probes themselves.
    pub not_before: Timestamp,
    /// The round agents may still be finishing: each holds its answer until its report is
    /// written (`None`: nothing to wait for, as for a last harvest).
    pub awaited: Option<AwaitedRound>,
}

/// The last finished pass for a task incarnation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pass {
    /// When it started (only agents asked after this instant count for a decision taken later).
    pub started: Timestamp,
    /// Agents it could not harvest, with the reason.
    pub failures: Vec<(String, String)>,
    /// Reports it stored.
    pub stored: usize,
}

#[derive(Debug)]
struct Entry {
    wanted: WantedHarvest,
    /// When a reconcile last asked: an entry no reconcile renews is dropped.
    renewed: Instant,
}

/// The wanted harvests, shared by the reconciles and the loop.
#[derive(Debug, Default)]
pub struct Harvests {
    wanted: Mutex<BTreeMap<String, Entry>>,
    passes: Mutex<BTreeMap<String, Pass>>,
    wake: Notify,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Harvests {
    /// Asks for `wanted` to be harvested (replacing what was asked for that incarnation); the
    /// loop is woken when the agents to ask changed.
    pub fn want(&self, wanted: WantedHarvest) {
        let uid = wanted.harvestee.uid.clone();
        let names = |w: &WantedHarvest| -> BTreeSet<String> {
            w.agents.iter().map(|a| a.name.clone()).collect()
        };
        let changed = {
            let mut all = lock(&self.wanted);
            let changed = all.get(&uid).is_none_or(|e| {
                names(&e.wanted) != names(&wanted)
                    || e.wanted.not_before != wanted.not_before
                    || e.wanted.awaited != wanted.awaited
            });
            all.insert(
                uid,
                Entry {
                    wanted,
                    renewed: Instant::now(),
                },
            );
            changed
        };
        if changed {
            self.wake.notify_one();
        }
    }

    /// Nothing more to harvest for the incarnation `uid`.
    pub fn forget(&self, uid: &str) {
        lock(&self.wanted).remove(uid);
    }

    /// Nothing more at all for the incarnation `uid` (its task is gone).
    pub fn drop_task(&self, uid: &str) {
        self.forget(uid);
        lock(&self.passes).remove(uid);
    }

    /// The last finished pass for `uid`.
    pub fn last(&self, uid: &str) -> Option<Pass> {
        lock(&self.passes).get(uid).cloned()
    }

    /// The wanted harvests not in flight and due at `now`, dropping those no reconcile renewed
    /// within `stale`; and when the first of those not due yet becomes due.
    fn due(
        &self,
        in_flight: &BTreeSet<String>,
        stale: Duration,
        now: Timestamp,
    ) -> (Vec<WantedHarvest>, Option<Timestamp>) {
        let mut all = lock(&self.wanted);
        all.retain(|_, e| e.renewed.elapsed() < stale);
        let idle = all
            .iter()
            .filter(|(uid, _)| !in_flight.contains(*uid))
            .map(|(_, e)| &e.wanted);
        let (due, later): (Vec<_>, Vec<_>) = idle.partition(|w| w.not_before <= now);
        let next = later.iter().map(|w| w.not_before).min();
        (due.into_iter().cloned().collect(), next)
    }

    fn record(&self, uid: &str, pass: Pass) {
        lock(&self.passes).insert(uid.to_string(), pass);
    }
}

/// Wakes the reconcile of a task (kind and name): the loop's when a task's store holds
/// something new, the carrier caches' when one of its objects changed.
pub type Trigger = Arc<dyn Fn(TaskKind, &str) + Send + Sync>;

/// Harvests what is wanted every `every` (and at once when something new is wanted), each task
/// in its own future, until dropped. `gone` says whether an incarnation is deleted (its harvest
/// is dropped).
pub async fn run(
    harvests: Arc<Harvests>,
    harvester: Harvester,
    every: Duration,
    trigger: Trigger,
    gone: impl Fn(&str) -> bool + Send + Sync + 'static,
) {
    // A reconcile renews what it wants at every poll of an ongoing round; one that stopped
    // (its task gone, a replica that lost the Lease) is not harvested for long.
    let stale = (every * 20).max(Duration::from_secs(60));
    let mut in_flight: JoinSet<(WantedHarvest, Pass)> = JoinSet::new();
    let mut busy: BTreeSet<String> = BTreeSet::new();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // When the first wanted harvest that is not due yet becomes due.
    let mut next_due: Option<Timestamp> = None;
    loop {
        let until_due = async {
            match next_due {
                Some(at) => {
                    let wait = Duration::try_from(at.duration_since(Timestamp::now()));
                    tokio::time::sleep(wait.unwrap_or(Duration::ZERO)).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tick.tick() => {}
            _ = harvests.wake.notified() => {}
            _ = until_due => {}
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                if let Ok((wanted, pass)) = done {
                    let uid = &wanted.harvestee.uid;
                    busy.remove(uid);
                    let news = pass.stored > 0 || !pass.failures.is_empty();
                    harvests.record(uid, pass);
                    if news {
                        trigger(wanted.harvestee.kind, &wanted.harvestee.name);
                    }
                }
                continue;
            }
        }
        let (due, later) = harvests.due(&busy, stale, Timestamp::now());
        next_due = later;
        for wanted in due {
            let uid = wanted.harvestee.uid.clone();
            if gone(&uid) {
                harvests.drop_task(&uid);
                continue;
            }
            busy.insert(uid);
            let harvester = harvester.clone();
            in_flight.spawn(async move {
                let started = Timestamp::now();
                let clock = Instant::now();
                let HarvestOutcome {
                    stored, failures, ..
                } = harvester
                    .harvest(&wanted.harvestee, &wanted.agents, wanted.awaited)
                    .await;
                // Where a round's time goes: each pass, its agents and what it stored.
                tracing::debug!(
                    kind = %wanted.harvestee.kind,
                    task = %wanted.harvestee.name,
                    agents = wanted.agents.len(),
                    stored,
                    failed = failures.len(),
                    seconds = clock.elapsed().as_secs_f64(),
                    "harvest pass"
                );
                if !failures.is_empty() {
                    tracing::debug!(kind = %wanted.harvestee.kind, task = %wanted.harvestee.name, ?failures, "harvest incomplete");
                }
                let pass = Pass {
                    started,
                    failures,
                    stored,
                };
                (wanted, pass)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(uid: &str, agents: &[&str]) -> WantedHarvest {
        WantedHarvest {
            harvestee: Harvestee {
                kind: TaskKind::NetReach,
                name: format!("task-{uid}"),
                uid: uid.to_string(),
                id: kdoctor_store::IncarnationId(1),
            },
            agents: agents
                .iter()
                .map(|name| AgentPod {
                    name: name.to_string(),
                    uid: format!("uid-{name}"),
                    node: format!("node-{name}"),
                    ip: "10.0.0.1".parse().unwrap(),
                    ready: true,
                })
                .collect(),
            not_before: Timestamp::UNIX_EPOCH,
            awaited: None,
        }
    }

    #[test]
    fn wanted_harvests_are_renewed_replaced_skipped_in_flight_and_dropped_when_stale() {
        let h = Harvests::default();
        h.want(wanted("a", &["p1", "p2"]));
        h.want(wanted("b", &["p3"]));
        let due = |busy: &[&str], stale| {
            let busy: BTreeSet<String> = busy.iter().map(|s| s.to_string()).collect();
            h.due(&busy, stale, Timestamp::now())
                .0
                .into_iter()
                .map(|w| (w.harvestee.uid, w.agents.len()))
                .collect::<Vec<_>>()
        };
        let long = Duration::from_secs(60);
        assert_eq!(due(&[], long), [("a".into(), 2), ("b".into(), 1)]);
        // In flight: not started twice.
        assert_eq!(due(&["a"], long), [("b".to_string(), 1)]);
        // A reconcile that now waits for one agent only.
        h.want(wanted("a", &["p2"]));
        assert_eq!(due(&["b"], long), [("a".to_string(), 1)]);
        h.forget("b");
        assert_eq!(due(&[], long), [("a".to_string(), 1)]);
        // Nobody renewed it: dropped.
        assert_eq!(due(&[], Duration::ZERO), Vec::<(String, usize)>::new());
        assert_eq!(due(&[], long), Vec::<(String, usize)>::new());
        h.record(
            "a",
            Pass {
                started: Timestamp::UNIX_EPOCH,
                failures: vec![],
                stored: 1,
            },
        );
        assert_eq!(h.last("a").map(|p| p.stored), Some(1));
        h.drop_task("a");
        assert_eq!(h.last("a"), None);
    }

    #[test]
    fn a_harvest_is_not_due_before_its_round_s_probing_can_have_ended() {
        let h = Harvests::default();
        let now = Timestamp::from_second(1_000).unwrap();
        let later = |s| now + jiff::SignedDuration::from_secs(s);
        let mut probing = wanted("a", &["p1"]);
        probing.not_before = later(10);
        h.want(probing);
        let mut other = wanted("b", &["p2"]);
        other.not_before = later(3);
        h.want(other);
        let due = |at| {
            let (due, next) = h.due(&BTreeSet::new(), Duration::from_secs(60), at);
            let uids: Vec<String> = due.into_iter().map(|w| w.harvestee.uid).collect();
            (uids, next)
        };
        // Nothing yet; the loop wakes when the first one is due.
        assert_eq!(due(now), (vec![], Some(later(3))));
        assert_eq!(due(later(3)), (vec!["b".to_string()], Some(later(10))));
        assert_eq!(
            due(later(10)),
            (vec!["a".to_string(), "b".to_string()], None)
        );
    }
}
