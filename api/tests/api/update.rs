//! The spec of a task cannot change after creation, in the controller and in the CRD.

use kdoctor_api::document::decode_task;
use kdoctor_api::validation::validate_update;

use crate::support::{crd_rejections, json, task};

const SPEC: &str = "schedule: {schedule: '0 1', roundTimeoutMinute: 1}\nrequest: {qps: 5}";
const CHANGED: &str = "schedule: {schedule: '0 1', roundTimeoutMinute: 1}\nrequest: {qps: 6}";

#[test]
fn changing_the_spec_is_rejected() {
    let old = decode_task(&mut json(&task("NetReach", "t", SPEC))).expect("decodes");
    let new = decode_task(&mut json(&task("NetReach", "t", CHANGED))).expect("decodes");
    let errors = validate_update(&old, &new).expect_err("spec changed");
    assert_eq!(
        errors.to_string(),
        "spec: Forbidden: spec is immutable: delete and re-create the task to change it"
    );
    assert!(validate_update(&old, &old.clone()).is_ok());
}

#[test]
fn the_crd_rejects_a_spec_change_but_not_a_label_change() {
    let old = task("NetReach", "t", SPEC);
    let changed = crd_rejections(&task("NetReach", "t", CHANGED), Some(&old));
    assert!(
        changed.iter().any(|e| e.contains("spec is immutable")),
        "a spec change must be rejected: {changed:?}"
    );
    let relabelled = old.replace("  name: t\n", "  name: t\n  labels: {team: net}\n");
    assert!(crd_rejections(&relabelled, Some(&old)).is_empty());
}
