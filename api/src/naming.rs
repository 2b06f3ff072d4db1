//! Names derived from a task: its carrier workload and Services, and the limits they put on the
//! task name.

use crate::task::TaskKind;

/// Prefix of every per-task carrier name.
pub const CARRIER_PREFIX: &str = "kdoctor";
/// Longest Kubernetes Service name (a DNS-1035 label).
pub const MAX_SERVICE_NAME_LEN: usize = 63;
/// Suffix of a carrier's IPv4 Service.
pub const IPV4_SERVICE_SUFFIX: &str = "-ipv4";
/// Suffix of a carrier's IPv6 Service.
pub const IPV6_SERVICE_SUFFIX: &str = "-ipv6";

/// Name of a task's own carrier workload: `kdoctor-<lowercase kind>-<task>`.
pub fn carrier_name(kind: TaskKind, task: &str) -> String {
    format!("{CARRIER_PREFIX}-{}-{task}", kind.lowercase())
}

/// Longest task name whose carrier Services still have valid names.
pub fn max_task_name_len_with_agent(kind: TaskKind) -> usize {
    MAX_SERVICE_NAME_LEN - carrier_name(kind, "").len() - IPV4_SERVICE_SUFFIX.len()
}

/// Whether `name` can be used for a task with agentSpec (its Service names are DNS-1035 labels).
pub fn is_valid_carrier_task_name(kind: TaskKind, name: &str) -> bool {
    let bytes = name.as_bytes();
    !name.is_empty()
        && name.len() <= max_task_name_len_with_agent(kind)
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// What [`is_valid_carrier_task_name`] requires, in words.
pub fn carrier_name_message(kind: TaskKind) -> String {
    format!(
        "with agentSpec the name must be at most {} lowercase letters, digits and '-', \
         starting and ending with a letter or digit (it names the carrier's Services)",
        max_task_name_len_with_agent(kind)
    )
}

/// The CEL form of [`is_valid_carrier_task_name`], evaluated at the root of the object.
pub fn carrier_name_rule(kind: TaskKind) -> String {
    format!(
        "!has(self.spec.agentSpec) || (size(self.metadata.name) <= {} && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",
        max_task_name_len_with_agent(kind)
    )
}

/// Whether `name` is a valid object name (a DNS-1123 subdomain), as the API server requires.
pub fn is_dns1123_subdomain(name: &str) -> bool {
    name.len() <= 253
        && !name.is_empty()
        && name.split('.').all(|label| is_dns1123_label(label, 253))
}

/// An RFC 1123 label of at most `max` characters: lowercase alphanumerics and '-', starting
/// and ending with an alphanumeric (namespaces, Service names).
pub fn is_dns1123_label(label: &str, max: usize) -> bool {
    let b = label.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}
