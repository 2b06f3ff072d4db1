//! Status conditions of a task (beyond upstream, additive): `Valid` and `CarrierReady`, in the
//! Kubernetes convention — `lastTransitionTime` changes only when the status flips.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The task passed validation (False: it never runs; the message lists every problem).
pub const VALID: &str = "Valid";
/// The task's carrier runs a ready agent on every node it should.
pub const CARRIER_READY: &str = "CarrierReady";

/// One condition's wanted state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted<'a> {
    /// `type`.
    pub type_: &'a str,
    /// True or False.
    pub ok: bool,
    /// CamelCase reason.
    pub reason: &'a str,
    /// Human message.
    pub message: String,
}

/// Sets a condition in `conditions`; returns whether anything changed.
pub fn set(
    conditions: &mut Vec<Condition>,
    wanted: Wanted<'_>,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let status = if wanted.ok { "True" } else { "False" };
    let next = |last_transition_time: Time| Condition {
        type_: wanted.type_.to_string(),
        status: status.to_string(),
        reason: wanted.reason.to_string(),
        message: wanted.message.clone(),
        observed_generation: generation,
        last_transition_time,
    };
    match conditions.iter_mut().find(|c| c.type_ == wanted.type_) {
        Some(existing) => {
            let time = if existing.status == status {
                existing.last_transition_time.clone()
            } else {
                Time(now)
            };
            let updated = next(time);
            if *existing == updated {
                false
            } else {
                *existing = updated;
                true
            }
        }
        None => {
            conditions.push(next(Time(now)));
            true
        }
    }
}

/// The condition of `type_`, if set.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}
