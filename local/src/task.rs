//! A task as local mode runs it: the effective task from its file, given what the Kubernetes API
//! would give it (a UID, a creation time, a generation) and a status only local mode writes.
//! Each run of `kdoctor local` is a new incarnation of its tasks (as a task deleted and
//! re-created in a cluster), so earlier runs' reports stay apart in the store.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kdoctor_api::defaults::omitted_schedule;
use kdoctor_api::schedule::Schedule;
use kdoctor_api::task::{SchedulePlan, Task, TaskKind, TaskStatus};
use kdoctor_store::TaskRecord;

use crate::LocalError;

/// One task of this run.
#[derive(Clone, Debug)]
pub struct LocalTask {
    /// The effective task with its metadata filled in.
    pub task: Task,
    /// Its kind.
    pub kind: TaskKind,
    /// Its name.
    pub name: String,
    /// Its UID (new for every run).
    pub uid: String,
    /// When this run created it.
    pub created: Timestamp,
    /// The schedule block (the defaults' when omitted).
    pub plan: SchedulePlan,
    /// The parsed schedule.
    pub schedule: Schedule,
}

fn metadata_mut(task: &mut Task) -> &mut kube::core::ObjectMeta {
    match task {
        Task::NetReach(t) => &mut t.metadata,
        Task::AppHttpHealthy(t) => &mut t.metadata,
        Task::Netdns(t) => &mut t.metadata,
    }
}

fn set_status(task: &mut Task, status: TaskStatus) {
    match task {
        Task::NetReach(t) => t.status = Some(status),
        Task::AppHttpHealthy(t) => t.status = Some(status),
        Task::Netdns(t) => t.status = Some(status),
    }
}

impl LocalTask {
    /// The incarnation `uid` of an effective (validated) task created at `now`.
    pub fn new(mut task: Task, uid: String, now: Timestamp) -> Result<LocalTask, LocalError> {
        let meta = metadata_mut(&mut task);
        meta.uid = Some(uid.clone());
        meta.creation_timestamp = Some(Time(now));
        meta.generation = Some(1);
        let plan = task.schedule().cloned().unwrap_or_else(omitted_schedule);
        let text = plan.schedule.clone().unwrap_or_else(|| "0 1".to_string());
        // Validation accepted it; an error here would be a bug, reported rather than hidden.
        let schedule: Schedule = text.parse().map_err(|e| LocalError::Schedule {
            kind: task.kind(),
            name: task.name().to_string(),
            text: text.clone(),
            problem: format!("{e}"),
        })?;
        Ok(LocalTask {
            kind: task.kind(),
            name: task.name().to_string(),
            uid,
            created: now,
            plan,
            schedule,
            task,
        })
    }

    /// The task object with `status`, as the API shows it.
    pub fn object(&self, status: &TaskStatus) -> serde_json::Value {
        let mut task = self.task.clone();
        set_status(&mut task, status.clone());
        serde_json::to_value(&task).unwrap_or_default()
    }

    /// The store's record of this incarnation with `status`.
    pub fn record(&self, status: &TaskStatus) -> TaskRecord {
        let object = self.object(status);
        TaskRecord {
            kind: self.kind,
            name: self.name.clone(),
            uid: self.uid.clone(),
            created: self.created,
            spec: object.get("spec").cloned().unwrap_or_default(),
            status: object.get("status").cloned(),
            deleted: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use kdoctor_api::config::Config;
    use kdoctor_api::defaults::ClusterFacts;
    use kdoctor_api::document::parse_tasks;

    use super::*;

    #[test]
    fn incarnation_has_metadata_schedule_and_record() {
        let document = parse_tasks(
            "apiVersion: kdoctor.io/v1beta1\nkind: NetReach\nmetadata: {name: nr}\nspec: {}\n",
        )
        .into_iter()
        .next()
        .unwrap();
        let task = kdoctor_api::validation::check(
            document.task.unwrap(),
            &Config::default(),
            ClusterFacts::default(),
        )
        .unwrap();
        let now: Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
        let local = LocalTask::new(task, kdoctor_apiserver::tasks::uid::new_uid(), now).unwrap();
        assert_eq!(local.name, "nr");
        assert_eq!(local.plan.round_number, 1);
        assert_eq!(local.schedule.first_start(now), Some(now));
        let status = TaskStatus {
            expected_round: Some(1),
            done_round: Some(0),
            ..Default::default()
        };
        let object = local.object(&status);
        assert_eq!(object["apiVersion"], "kdoctor.io/v1beta1");
        assert_eq!(object["kind"], "NetReach");
        assert_eq!(object["metadata"]["uid"], local.uid.as_str());
        assert_eq!(
            object["metadata"]["creationTimestamp"],
            "2025-01-01T00:00:00Z"
        );
        assert_eq!(object["status"]["expectedRound"], 1);
        let record = local.record(&status);
        assert_eq!(record.uid, local.uid);
        assert_eq!(record.status.unwrap()["doneRound"], 0);
        assert!(record.spec.get("target").is_some());
    }
}
