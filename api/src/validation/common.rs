//! Rules on the blocks every kind has: schedule, request load, expect and agentSpec.

use super::field::{BadValue, ErrorList, FieldError, FieldPath};
use crate::schedule::Schedule;
use crate::task::{AgentKind, AgentSpec, NetSuccessCondition, SchedulePlan};

/// The round window in milliseconds, if the schedule is usable enough to know it.
pub(super) fn round_window_ms(plan: Option<&SchedulePlan>) -> Option<i64> {
    plan.filter(|p| p.round_timeout_minute >= 1)
        .and_then(|p| p.round_timeout_minute.checked_mul(60_000))
}

/// `spec.schedule`.
pub(super) fn schedule(plan: Option<&SchedulePlan>, path: &FieldPath, errors: &mut ErrorList) {
    let Some(plan) = plan else {
        errors.push(FieldError::required(path.clone(), "schedule is required"));
        return;
    };
    if plan.round_timeout_minute < 1 {
        errors.push(FieldError::invalid(
            path.child("roundTimeoutMinute"),
            plan.round_timeout_minute,
            "must be at least 1",
        ));
    }
    if plan.round_number == 0 || plan.round_number < -1 {
        errors.push(FieldError::invalid(
            path.child("roundNumber"),
            plan.round_number,
            "must be -1 (run forever) or at least 1",
        ));
    }
    let Some(text) = plan.schedule.as_deref() else {
        errors.push(FieldError::required(
            path.child("schedule"),
            "\"<start minutes> <interval minutes>\" or a 5-field cron expression is required",
        ));
        return;
    };
    let parsed = match text.parse::<Schedule>() {
        Ok(parsed) => parsed,
        Err(e) => {
            errors.push(FieldError::invalid(
                path.child("schedule"),
                text,
                e.to_string(),
            ));
            return;
        }
    };
    let gap = parsed.shortest_gap_minutes();
    if plan.round_timeout_minute > gap {
        let what = match parsed {
            Schedule::Interval { .. } => "the interval of the schedule",
            Schedule::Cron(_) => "the shortest interval between two ticks of the cron schedule",
        };
        errors.push(FieldError::invalid(
            path.child("roundTimeoutMinute"),
            plan.round_timeout_minute,
            format!("must not be greater than {what} ({})", minutes(gap)),
        ));
    }
}

/// The load fields shared by the HTTP and DNS request blocks.
pub(super) struct Load {
    pub duration_in_second: i64,
    pub qps: i64,
    pub per_request_timeout_in_ms: Option<i64>,
}

/// The load of `spec.request`: positive, below the kind's maximum qps, inside the round window.
pub(super) fn load(
    load: &Load,
    max_qps: i64,
    window_ms: Option<i64>,
    path: &FieldPath,
    errors: &mut ErrorList,
) {
    if load.duration_in_second < 1 {
        errors.push(FieldError::invalid(
            path.child("durationInSecond"),
            load.duration_in_second,
            "must be at least 1",
        ));
    }
    if load.qps < 1 {
        errors.push(FieldError::invalid(
            path.child("qps"),
            load.qps,
            "must be at least 1",
        ));
    } else if load.qps >= max_qps {
        errors.push(FieldError::invalid(
            path.child("qps"),
            load.qps,
            format!("must be less than {max_qps}"),
        ));
    }
    let timeout_path = path.child("perRequestTimeoutInMS");
    let Some(timeout) = load.per_request_timeout_in_ms else {
        errors.push(FieldError::required(
            timeout_path,
            "perRequestTimeoutInMS is required",
        ));
        return;
    };
    if timeout < 1 {
        errors.push(FieldError::invalid(
            timeout_path,
            timeout,
            "must be at least 1",
        ));
        return;
    }
    let Some(window) = window_ms else { return };
    if timeout > window {
        errors.push(FieldError::invalid(
            timeout_path,
            timeout,
            format!("must not be greater than schedule.roundTimeoutMinute ({window} ms)"),
        ));
        return;
    }
    let busy = load
        .duration_in_second
        .saturating_mul(1000)
        .saturating_add(timeout);
    if load.duration_in_second >= 1 && busy > window {
        errors.push(FieldError::invalid(
            path.child("durationInSecond"),
            load.duration_in_second,
            format!(
                "durationInSecond plus perRequestTimeoutInMS ({busy} ms) must fit in \
                 schedule.roundTimeoutMinute ({window} ms)"
            ),
        ));
    }
}

/// `spec.expect`.
pub(super) fn expect(
    expect: Option<&NetSuccessCondition>,
    status_code_allowed: bool,
    path: &FieldPath,
    errors: &mut ErrorList,
) {
    let Some(expect) = expect else {
        errors.push(FieldError::required(path.clone(), "expect is required"));
        return;
    };
    if expect.success_rate.is_none() && expect.mean_access_delay_in_ms.is_none() {
        errors.push(FieldError::required(
            path.clone(),
            "at least one of successRate and meanAccessDelayInMs must be set",
        ));
    }
    if let Some(rate) = expect.success_rate {
        within(rate, 0.0, 1.0, path.child("successRate"), errors);
    }
    if let Some(delay) = expect.mean_access_delay_in_ms
        && delay < 1
    {
        errors.push(FieldError::invalid(
            path.child("meanAccessDelayInMs"),
            delay,
            "must be at least 1",
        ));
    }
    if let Some(jitter) = expect.max_jitter_in_ms
        && !(jitter > 0.0 && jitter <= 60_000.0)
    {
        errors.push(FieldError::invalid(
            path.child("maxJitterInMs"),
            jitter,
            "must be more than 0 and at most 60000",
        ));
    }
    if let Some(mtu) = expect.min_path_mtu {
        within(mtu, 576, 65_535, path.child("minPathMTU"), errors);
    }
    if let Some(code) = expect.status_code {
        if !status_code_allowed {
            errors.push(FieldError::forbidden(
                path.child("statusCode"),
                "statusCode applies to HTTP tasks only",
            ));
        } else {
            within(code, 100, 599, path.child("statusCode"), errors);
        }
    }
}

/// `spec.agentSpec`.
pub(super) fn agent_spec(agent: Option<&AgentSpec>, path: &FieldPath, errors: &mut ErrorList) {
    let Some(agent) = agent else { return };
    match (agent.kind, agent.deployment_replicas) {
        (AgentKind::Deployment, None) => errors.push(FieldError::required(
            path.child("deploymentReplicas"),
            "a Deployment carrier needs deploymentReplicas",
        )),
        (_, Some(replicas)) if replicas < 1 => errors.push(FieldError::invalid(
            path.child("deploymentReplicas"),
            replicas,
            "must be at least 1",
        )),
        _ => {}
    }
    if let Some(minutes) = agent.termination_grace_period_minutes
        && minutes < 0
    {
        errors.push(FieldError::invalid(
            path.child("terminationGracePeriodMinutes"),
            minutes,
            "must not be negative",
        ));
    }
}

/// `value` at `path` must lie in `low..=high`: "must be between LOW and HIGH" otherwise.
pub(super) fn within<T>(value: T, low: T, high: T, path: FieldPath, errors: &mut ErrorList)
where
    T: PartialOrd + std::fmt::Display + Into<BadValue>,
{
    if value < low || value > high {
        let rule = format!("must be between {low} and {high}");
        errors.push(FieldError::invalid(path, value, rule));
    }
}

/// The value Kubernetes prints for a rule on a whole object.
pub(super) fn object() -> BadValue {
    BadValue::Str("object".to_string())
}

/// "1 minute", "5 minutes".
fn minutes(n: i64) -> String {
    if n == 1 {
        "1 minute".to_string()
    } else {
        format!("{n} minutes")
    }
}
