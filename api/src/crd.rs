//! The three task CRDs, as `kdoctor crd` prints them and `manifests/crds/` holds them.
//!
//! The kube derive gives each kind its schema, field rules and names; what all three share is
//! added here once: printer columns, the spec-level CEL rules and the carrier-name rule.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, JSONSchemaProps,
    JSONSchemaPropsOrArray, JSONSchemaPropsOrBool, ValidationRule,
};
use kube::CustomResourceExt;

use crate::defaults::OMITTED_SCHEDULE_ROUND_TIMEOUT_MINUTE;
use crate::naming::{carrier_name_message, carrier_name_rule};
use crate::task::{AppHttpHealthy, NetReach, Netdns, TaskKind};

/// The CRD of one task kind.
pub fn crd(kind: TaskKind) -> CustomResourceDefinition {
    let mut crd = match kind {
        TaskKind::NetReach => NetReach::crd(),
        TaskKind::AppHttpHealthy => AppHttpHealthy::crd(),
        TaskKind::Netdns => Netdns::crd(),
    };
    for version in &mut crd.spec.versions {
        version.additional_printer_columns = Some(printer_columns());
        if let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            kubernetes_formats(root);
            add_rules(root, [carrier_name(kind)]);
            if let Some(spec) = root.properties.as_mut().and_then(|p| p.get_mut("spec")) {
                add_rules(spec, spec_rules());
                add_rules(spec, [jitter_bound(kind), path_mtu_bound(kind)]);
            }
        }
    }
    crd
}

/// The CRDs of every task kind, in upstream's order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    TaskKind::ALL.into_iter().map(crd).collect()
}

/// Upstream's columns (kubectl prints them upper-cased), plus AGE, which kubectl only adds by
/// itself when a CRD declares no columns.
fn printer_columns() -> Vec<CustomResourceColumnDefinition> {
    let column = |name: &str, type_: &str, json_path: &str, description: &str| {
        CustomResourceColumnDefinition {
            name: name.to_string(),
            type_: type_.to_string(),
            json_path: json_path.to_string(),
            description: Some(description.to_string()),
            ..CustomResourceColumnDefinition::default()
        }
    };
    vec![
        column("finish", "boolean", ".status.finish", "finish"),
        column(
            "expectedRound",
            "integer",
            ".status.expectedRound",
            "expectedRound",
        ),
        column("doneRound", "integer", ".status.doneRound", "doneRound"),
        column(
            "lastRoundStatus",
            "string",
            ".status.lastRoundStatus",
            "lastRoundStatus",
        ),
        column("schedule", "string", ".spec.schedule.schedule", "schedule"),
        column(
            "age",
            "date",
            ".metadata.creationTimestamp",
            "time since creation",
        ),
    ]
}

fn rule(rule: String, message: &str, field_path: Option<&str>) -> ValidationRule {
    ValidationRule {
        rule,
        message: Some(message.to_string()),
        field_path: field_path.map(str::to_string),
        ..ValidationRule::default()
    }
}

/// Rules on `spec` that relate its blocks: immutability and the round window.
fn spec_rules() -> [ValidationRule; 3] {
    let window = format!(
        "(has(self.schedule) ? self.schedule.roundTimeoutMinute : {OMITTED_SCHEDULE_ROUND_TIMEOUT_MINUTE}) * 60000"
    );
    [
        rule(
            "self == oldSelf".to_string(),
            "spec is immutable: delete and re-create the task to change it",
            None,
        ),
        rule(
            format!(
                "!has(self.request) || !has(self.request.perRequestTimeoutInMS) \
                 || self.request.perRequestTimeoutInMS <= {window}"
            ),
            "must not be greater than schedule.roundTimeoutMinute in milliseconds",
            Some(".request.perRequestTimeoutInMS"),
        ),
        rule(
            format!(
                "!has(self.request) || self.request.durationInSecond * 1000 \
                 + (has(self.request.perRequestTimeoutInMS) ? self.request.perRequestTimeoutInMS : 0) \
                 <= {window}"
            ),
            "durationInSecond plus perRequestTimeoutInMS must fit in schedule.roundTimeoutMinute",
            Some(".request.durationInSecond"),
        ),
    ]
}

/// `expect.maxJitterInMs` only where echoes measure jitter: a NetReach task with `target.udp`
/// or `target.icmp` (the controller's message, word for word).
fn jitter_bound(kind: TaskKind) -> ValidationRule {
    let unbounded = "!has(self.expect) || !has(self.expect.maxJitterInMs)";
    let (rule_text, why) = match kind {
        TaskKind::NetReach => (
            format!(
                "{unbounded} || (has(self.target) && ((has(self.target.udp) && self.target.udp) \
                 || (has(self.target.icmp) && self.target.icmp)))"
            ),
            "without target.udp or target.icmp",
        ),
        TaskKind::AppHttpHealthy => (unbounded.to_string(), "in an AppHttpHealthy task"),
        TaskKind::Netdns => (unbounded.to_string(), "in a Netdns task"),
    };
    rule(
        rule_text,
        &format!("jitter is measured by UDP and ICMP echoes only: nothing measures it {why}"),
        Some(".expect.maxJitterInMs"),
    )
}

/// `expect.minPathMTU` only where a path MTU is searched for: a NetReach task with
/// `target.pathMTU` (the controller's message, word for word).
fn path_mtu_bound(kind: TaskKind) -> ValidationRule {
    let unbounded = "!has(self.expect) || !has(self.expect.minPathMTU)";
    let rule_text = match kind {
        TaskKind::NetReach => format!(
            "{unbounded} || (has(self.target) && has(self.target.pathMTU) && self.target.pathMTU)"
        ),
        TaskKind::AppHttpHealthy | TaskKind::Netdns => unbounded.to_string(),
    };
    rule(
        rule_text,
        crate::validation::PATH_MTU_BOUND_ALONE,
        Some(".expect.minPathMTU"),
    )
}

/// With agentSpec the task name becomes part of Service names (DNS-1035 labels, at most 63
/// characters): reject names that cannot be used at apply time instead of failing later.
/// The API server resolves a fieldPath against the schema, which leaves `metadata` to the
/// server and so has no `metadata.name` property: the error names `spec.agentSpec`, the field
/// that makes the name matter (without a fieldPath kube-apiserver prints `<nil>`).
fn carrier_name(kind: TaskKind) -> ValidationRule {
    rule(
        carrier_name_rule(kind),
        &carrier_name_message(kind),
        Some(".spec.agentSpec"),
    )
}

/// Integer formats as Kubernetes knows them: schemars names Rust's unsigned types (`uint32`),
/// which kube-apiserver v1.37 warns about on every apply ("unrecognized format"). An unsigned
/// field becomes the signed format that holds it, never below 0.
fn kubernetes_formats(schema: &mut JSONSchemaProps) {
    let wider = match schema.format.as_deref() {
        Some("uint8" | "uint16") => Some("int32"),
        Some("uint32" | "uint64" | "uint") => Some("int64"),
        _ => None,
    };
    if let Some(format) = wider {
        schema.format = Some(format.to_string());
        if schema.minimum.is_none_or(|m| m < 0.0) {
            schema.minimum = Some(0.0);
        }
    }
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        kubernetes_formats(child);
    }
    for list in [&mut schema.all_of, &mut schema.any_of, &mut schema.one_of] {
        for child in list.iter_mut().flatten() {
            kubernetes_formats(child);
        }
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(child)) => kubernetes_formats(child),
        Some(JSONSchemaPropsOrArray::Schemas(children)) => {
            children.iter_mut().for_each(kubernetes_formats)
        }
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(child)) = schema.additional_properties.as_mut() {
        kubernetes_formats(child);
    }
    if let Some(child) = schema.not.as_mut() {
        kubernetes_formats(child);
    }
}

fn add_rules(schema: &mut JSONSchemaProps, rules: impl IntoIterator<Item = ValidationRule>) {
    schema
        .x_kubernetes_validations
        .get_or_insert_with(Vec::new)
        .extend(rules);
}
