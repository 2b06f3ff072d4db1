//! The three task CRDs, as `kdoctor crd` prints them and `manifests/crds/` holds them.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, ValidationRule,
};
use kube::CustomResourceExt;

use crate::naming::{carrier_name_message, carrier_name_rule};
use crate::task::{AppHttpHealthy, NetReach, Netdns, TaskKind};

/// The CRD of one task kind.
pub fn crd(kind: TaskKind) -> CustomResourceDefinition {
    let mut crd = match kind {
        TaskKind::NetReach => NetReach::crd(),
        TaskKind::AppHttpHealthy => AppHttpHealthy::crd(),
        TaskKind::Netdns => Netdns::crd(),
    };
    add_carrier_name_rule(&mut crd, kind);
    crd
}

/// The CRDs of every task kind, in upstream's order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    TaskKind::ALL.into_iter().map(crd).collect()
}

/// With agentSpec the task name becomes part of Service names (DNS-1035 labels, at most 63
/// characters): reject names that cannot be used at apply time instead of failing later.
fn add_carrier_name_rule(crd: &mut CustomResourceDefinition, kind: TaskKind) {
    let rule = ValidationRule {
        rule: carrier_name_rule(kind),
        message: Some(carrier_name_message(kind)),
        field_path: Some(".metadata.name".to_string()),
        ..ValidationRule::default()
    };
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            schema
                .x_kubernetes_validations
                .get_or_insert_with(Vec::new)
                .push(rule.clone());
        }
    }
}
