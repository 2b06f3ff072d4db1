//! The names upstream kdoctor gives a report's values and targets, and the names of the
//! serialized histograms: a leaf, so that metrics can name series as reports do.

/// `roundResult` of a round whose targets all met `expect`.
pub const ROUND_SUCCEED: &str = "succeed";
/// `roundResult` of a failed round.
pub const ROUND_FAIL: &str = "fail";
/// `targetType` of an AppHttpHealthy result (upstream's value).
pub const TARGET_TYPE_APP_HTTP_HEALTHY: &str = "HttpAppHealthy";
/// `targetType` of a NetReach result (upstream's value).
pub const TARGET_TYPE_NETREACH: &str = "NetReach";
/// `targetType` of a Netdns result (upstream's value).
pub const TARGET_TYPE_NETDNS: &str = "kdoctor agent";
/// Name of the AppHttpHealthy target (upstream's value).
pub const APP_HTTP_HEALTHY_TARGET_NAME: &str = "HttpAppHealthy target";

/// Names of the serialized histograms in `histograms`.
pub mod histogram_names {
    /// Every request, from the pacer's wake time to the end (coordinated omission shown).
    pub const RESPONSE_TIME: &str = "responseTime";
    /// Successful requests only; the report's `latencies` come from it.
    pub const SUCCEEDED_RESPONSE_TIME: &str = "succeededResponseTime";
    /// Every request, from the actual send to the end.
    pub const SERVICE_TIME: &str = "serviceTime";
    /// How late the pacer woke for each request.
    pub const PACER_LATENESS: &str = "pacerLateness";
    /// Connection set-up (TCP and TLS), for requests that opened a connection.
    pub const CONNECT_TIME: &str = "connectTime";
}
