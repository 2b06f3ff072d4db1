//! Rules on NetReach's `spec.isolation`: the same words as the CRD's schema and CEL rules, so
//! that the controller and the API server say the same thing.

use kube::core::Selector;

use super::common::{object, within};
use super::field::{ErrorList, FieldError, FieldPath};
use crate::naming::is_dns1123_label;
use crate::task::isolation::{MAX_ISOLATION_NAME, MAX_ISOLATIONS};
use crate::task::{Isolation, IsolationProtocol};

const PORT_RULE: &str = "port is required for TCP and UDP, and ICMP has none";
const LABEL_RULE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
                          characters or '-', and must start and end with an alphanumeric character";

pub(super) fn check(isolations: &[Isolation], path: &FieldPath, errors: &mut ErrorList) {
    if isolations.len() > MAX_ISOLATIONS {
        errors.push(FieldError::invalid(
            path.clone(),
            isolations.len() as i64,
            format!("must have at most {MAX_ISOLATIONS} items"),
        ));
    }
    for (i, isolation) in isolations.iter().enumerate() {
        if isolations[..i].iter().any(|o| o.name == isolation.name) {
            errors.push(FieldError::invalid(
                path.clone(),
                isolation.name.as_str(),
                "each isolation entry needs a name of its own",
            ));
        }
        entry(isolation, &path.index(i), errors);
    }
}

fn entry(isolation: &Isolation, path: &FieldPath, errors: &mut ErrorList) {
    for (field, value, max) in [
        ("name", Some(&isolation.name), MAX_ISOLATION_NAME),
        ("namespace", Some(&isolation.namespace), 63),
        ("service", isolation.service.as_ref(), 63),
    ] {
        let Some(value) = value else { continue };
        if value.is_empty() {
            errors.push(FieldError::required(path.child(field), "must not be empty"));
        } else if !is_dns1123_label(value, max) {
            errors.push(FieldError::invalid(
                path.child(field),
                value.as_str(),
                format!("{LABEL_RULE}, of at most {max} characters"),
            ));
        }
    }
    if isolation.pod_selector.is_some() == isolation.service.is_some() {
        errors.push(FieldError::invalid(
            path.clone(),
            object(),
            "exactly one of podSelector and service names the peers",
        ));
    }
    if let Some(selector) = &isolation.pod_selector
        && let Err(e) = Selector::try_from(selector.clone())
    {
        errors.push(FieldError::invalid(
            path.child("podSelector"),
            object(),
            e.to_string(),
        ));
    }
    let icmp = isolation.protocol == IsolationProtocol::Icmp;
    if icmp == isolation.port.is_some() {
        errors.push(match isolation.port {
            Some(port) => FieldError::invalid(path.child("port"), port, PORT_RULE),
            None => FieldError::required(path.child("port"), PORT_RULE),
        });
    }
    if let Some(port) = isolation.port {
        within(port, 1, 65_535, path.child("port"), errors);
    }
    if icmp && let Some(service) = &isolation.service {
        errors.push(FieldError::invalid(
            path.child("service"),
            service.as_str(),
            "a Service's ClusterIP answers no ICMP echo: ICMP isolation needs podSelector",
        ));
    }
}
