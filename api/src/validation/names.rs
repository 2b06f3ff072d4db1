//! Rules on `metadata.name`.

use super::field::{ErrorList, FieldError, FieldPath};
use crate::naming::{carrier_name_message, is_dns1123_subdomain, is_valid_carrier_task_name};
use crate::task::Task;

pub(super) fn check(task: &Task, errors: &mut ErrorList) {
    let path = FieldPath::new("metadata").child("name");
    let name = task.name();
    if name.is_empty() {
        errors.push(FieldError::required(path, "name is required"));
        return;
    }
    if !is_dns1123_subdomain(name) {
        errors.push(FieldError::invalid(
            path,
            name,
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
             '-' or '.', and must start and end with an alphanumeric character",
        ));
        return;
    }
    if task.agent_spec().is_some() && !is_valid_carrier_task_name(task.kind(), name) {
        errors.push(FieldError::invalid(
            path,
            name,
            carrier_name_message(task.kind()),
        ));
    }
}
