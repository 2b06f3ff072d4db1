//! The API group, version and resource this server serves.

/// API group served.
pub const GROUP: &str = kdoctor_api::report::GROUP;
/// API version served.
pub const VERSION: &str = kdoctor_api::report::VERSION;
/// Resource plural.
pub const PLURAL: &str = kdoctor_api::report::PLURAL;
/// Resource singular.
pub const SINGULAR: &str = kdoctor_api::report::SINGULAR;
/// Short name.
pub const SHORT_NAME: &str = "kdr";
/// `<plural>.<group>`, as Kubernetes names a resource in messages.
pub const GROUP_RESOURCE: &str = "kdoctorreports.system.kdoctor.io";
