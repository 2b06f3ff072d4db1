//! Validation of tasks: every rule of upstream's admission webhook, plus the checks that keep a
//! task from running in a way that cannot work. Errors name the field, the value and the rule.
//!
//! Rules run on the *defaulted* task (see [`crate::defaults`]); a block that is still missing is
//! reported, never dereferenced. The CRD carries the same rules where they need no
//! configuration (bounds, enums, CEL), so the API server rejects most bad tasks itself.

mod address;
mod common;
pub(crate) mod field;
mod isolation;
mod kinds;
mod names;
pub mod structure;
mod tls_secret;

pub use field::{BadValue, ErrorKind, ErrorList, FieldError, FieldPath};
pub use kinds::PATH_MTU_BOUND_ALONE;
pub use tls_secret::{TLS_SECRET_KEYS, check_tls_secret};

use crate::config::Config;
use crate::defaults::{self, ClusterFacts};
use crate::task::Task;

/// Checks a task whose defaults have been applied.
pub fn validate(task: &Task, config: &Config) -> Result<(), ErrorList> {
    let mut errors = ErrorList::default();
    names::check(task, &mut errors);
    let spec = FieldPath::new("spec");
    match task {
        Task::NetReach(t) => kinds::net_reach(&t.spec, config, &spec, &mut errors),
        Task::AppHttpHealthy(t) => kinds::app_http_healthy(&t.spec, config, &spec, &mut errors),
        Task::Netdns(t) => kinds::netdns(&t.spec, config, &spec, &mut errors),
    }
    errors.into_result()
}

/// Applies the defaults, then validates: the effective task, or every problem with it.
pub fn check(mut task: Task, config: &Config, facts: ClusterFacts) -> Result<Task, ErrorList> {
    defaults::apply(&mut task, config, facts);
    validate(&task, config)?;
    Ok(task)
}

/// Checks an update of a task: the spec cannot change (rounds already run under it).
pub fn validate_update(old: &Task, new: &Task) -> Result<(), ErrorList> {
    let same = match (old, new) {
        (Task::NetReach(a), Task::NetReach(b)) => a.spec == b.spec,
        (Task::AppHttpHealthy(a), Task::AppHttpHealthy(b)) => a.spec == b.spec,
        (Task::Netdns(a), Task::Netdns(b)) => a.spec == b.spec,
        _ => false,
    };
    if same {
        Ok(())
    } else {
        Err(ErrorList(vec![FieldError::forbidden(
            FieldPath::new("spec"),
            "spec is immutable: delete and re-create the task to change it",
        )]))
    }
}
