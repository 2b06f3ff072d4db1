//! The exported event: one agent round report as a CloudEvent (specification 1.0, structured
//! mode: the whole event is the JSON body, `Content-Type: application/cloudevents+json`).
//!
//! Its `id` is `<task UID>/<round>/<node>`: the same for every attempt and every harvest of
//! that report, so a receiver can de-duplicate on it (with `source`, as CloudEvents asks).

use jiff::Timestamp;
use kdoctor_api::report::Report;
use kdoctor_api::task::TaskKind;
use serde::Serialize;

/// CloudEvents `specversion`.
pub const SPEC_VERSION: &str = "1.0";
/// CloudEvents `type` of an exported agent round report.
pub const EVENT_TYPE: &str = "io.kdoctor.report.v1";
/// `datacontenttype` of the event's `data`.
pub const DATA_CONTENT_TYPE: &str = "application/json";
/// `Content-Type` of the request (structured mode).
pub const CONTENT_TYPE: &str = "application/cloudevents+json; charset=utf-8";

/// One stored agent report, as the harvester hands it over.
#[derive(Clone, Debug)]
pub struct Exported {
    /// Task kind.
    pub kind: TaskKind,
    /// Task name.
    pub name: String,
    /// The task incarnation's UID.
    pub uid: String,
    /// The report as stored.
    pub report: Report,
    /// When it was stored (the event's `time`).
    pub stored_at: Timestamp,
}

/// The event id of `node`'s report of round `round` of the incarnation `uid`.
pub fn event_id(uid: &str, round: i64, node: &str) -> String {
    format!("{uid}/{round}/{node}")
}

/// The event `source`: the task's KdoctorReport (`<lowercase kind>-<name>`).
pub fn source(kind: TaskKind, name: &str) -> String {
    format!(
        "/apis/system.kdoctor.io/v1beta1/kdoctorreports/{}-{name}",
        kind.lowercase()
    )
}

/// The task an event is about.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskRef<'a> {
    /// Kind.
    pub kind: &'a str,
    /// Name.
    pub name: &'a str,
    /// UID of the incarnation.
    pub uid: &'a str,
}

/// The event's `data`.
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct EventData<'a> {
    /// The task.
    pub task: TaskRef<'a>,
    /// Round number.
    pub round: i64,
    /// Node of the agent.
    pub node: &'a str,
    /// The agent's report as stored (the `latestRoundReport[]` item shape).
    pub report: &'a Report,
}

/// A CloudEvent in structured mode.
#[derive(Serialize, Debug)]
pub struct CloudEvent<'a> {
    /// `1.0`.
    pub specversion: &'static str,
    /// [`EVENT_TYPE`].
    #[serde(rename = "type")]
    pub type_: &'static str,
    /// [`source`].
    pub source: String,
    /// [`event_id`].
    pub id: String,
    /// `round/<n>/node/<node>`.
    pub subject: String,
    /// When the report was stored (RFC 3339).
    pub time: String,
    /// `application/json`.
    pub datacontenttype: &'static str,
    /// The report and what it belongs to.
    pub data: EventData<'a>,
}

impl Exported {
    /// The event id (see [`event_id`]).
    pub fn id(&self) -> String {
        event_id(&self.uid, self.report.round_number, &self.report.node_name)
    }

    /// The CloudEvent.
    pub fn event(&self) -> CloudEvent<'_> {
        let node = self.report.node_name.as_str();
        let round = self.report.round_number;
        CloudEvent {
            specversion: SPEC_VERSION,
            type_: EVENT_TYPE,
            source: source(self.kind, &self.name),
            id: self.id(),
            subject: format!("round/{round}/node/{node}"),
            time: self.stored_at.to_string(),
            datacontenttype: DATA_CONTENT_TYPE,
            data: EventData {
                task: TaskRef {
                    kind: self.kind.as_str(),
                    name: &self.name,
                    uid: &self.uid,
                },
                round,
                node,
                report: &self.report,
            },
        }
    }

    /// The request body: the event's JSON, the same bytes for every attempt.
    pub fn body(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(&self.event())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exported(node: &str, round: i64) -> Exported {
        Exported {
            kind: TaskKind::NetReach,
            name: "reach".into(),
            uid: "0b5c7e9a-uid".into(),
            report: kdoctor_api::fixtures::net_reach_report(node, round, 2, 7),
            stored_at: Timestamp::from_second(1_767_225_600).unwrap(),
        }
    }

    #[test]
    fn the_event_is_a_structured_cloud_event_carrying_the_stored_report() {
        let item = exported("node-1", 3);
        let body: serde_json::Value = serde_json::from_slice(&item.body().unwrap()).unwrap();
        assert_eq!(body["specversion"], "1.0");
        assert_eq!(body["type"], "io.kdoctor.report.v1");
        assert_eq!(
            body["source"],
            "/apis/system.kdoctor.io/v1beta1/kdoctorreports/netreach-reach"
        );
        assert_eq!(body["id"], "0b5c7e9a-uid/3/node-1");
        assert_eq!(body["subject"], "round/3/node/node-1");
        assert_eq!(body["time"], "2026-01-01T00:00:00Z");
        assert_eq!(body["datacontenttype"], "application/json");
        assert_eq!(
            body["data"]["task"],
            serde_json::json!({"kind": "NetReach", "name": "reach", "uid": "0b5c7e9a-uid"})
        );
        assert_eq!(body["data"]["round"], 3);
        assert_eq!(body["data"]["node"], "node-1");
        // The report exactly as stored (its own JSON, lowerCamel keys).
        let stored: serde_json::Value =
            serde_json::from_slice(&serde_json::to_vec(&item.report).unwrap()).unwrap();
        assert_eq!(body["data"]["report"], stored);
        assert_eq!(body["data"]["report"]["nodeName"], "node-1");
        assert_eq!(body["data"]["report"]["roundNumber"], 3);
        let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 8, "{keys:?}");
    }

    #[test]
    fn the_id_is_stable_per_incarnation_round_and_node_and_unique_otherwise() {
        let a = exported("node-1", 1);
        // Harvested again later, with other content: the same id and the same source.
        let mut again = exported("node-1", 1);
        again.stored_at = Timestamp::from_second(1_767_300_000).unwrap();
        again.report.round_result = "fail".into();
        assert_eq!(a.id(), again.id());
        assert_eq!(a.event().source, again.event().source);
        // Same body bytes for the same stored report (every retry sends identical bytes).
        assert_eq!(a.body().unwrap(), exported("node-1", 1).body().unwrap());

        let mut other_uid = exported("node-1", 1);
        other_uid.uid = "another-uid".into();
        let ids = [
            a.id(),
            exported("node-2", 1).id(),
            exported("node-1", 2).id(),
            other_uid.id(),
        ];
        let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "{ids:?}");
    }
}
