//! One invalid task per rule, each with its exact message, and whether the CRD alone (so the
//! API server on `kubectl apply`) rejects it too. Rules that need the kdoctor configuration
//! (maximum qps, enabled IP families) or a full parser (cron, URLs, DNS names) are enforced by
//! the controller only; every other rule is in the CRD as well.

use kdoctor_api::config::Config;

use crate::support::{controller_errors, crd_rejections, task};

struct Case {
    /// What the case breaks.
    rule: &'static str,
    kind: &'static str,
    name: &'static str,
    spec: &'static str,
    /// Every message the controller gives, exactly.
    errors: &'static [&'static str],
    /// Whether the CRD (schema and CEL rules) rejects it too.
    crd_rejects: bool,
}

const NR: &str = "NetReach";
const AHH: &str = "AppHttpHealthy";
const DNS: &str = "Netdns";

/// A valid schedule/request/expect, spliced into most cases.
const OK_SCHEDULE: &str = "schedule: {schedule: '0 1', roundTimeoutMinute: 1, roundNumber: 1}";

fn cases() -> Vec<Case> {
    vec![
        Case {
            rule: "schedule has neither 2 nor 5 fields",
            kind: NR,
            name: "t",
            spec: "schedule: {schedule: '1 2 3', roundTimeoutMinute: 1}",
            errors: &[
                r#"spec.schedule.schedule: Invalid value: "1 2 3": must be "<start minutes> <interval minutes>" or a 5-field cron expression, found 3 field(s)"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "a descriptor such as @hourly is one field",
            kind: NR,
            name: "t",
            spec: "schedule: {schedule: '@hourly', roundTimeoutMinute: 1}",
            errors: &[
                r#"spec.schedule.schedule: Invalid value: "@hourly": must be "<start minutes> <interval minutes>" or a 5-field cron expression, found 1 field(s)"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "interval form: start delay is not a number",
            kind: NR,
            name: "t",
            spec: "schedule: {schedule: 'soon 1', roundTimeoutMinute: 1}",
            errors: &[
                r#"spec.schedule.schedule: Invalid value: "soon 1": the start delay of the interval form must be a whole number of minutes, found "soon""#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "interval form: interval below 1",
            kind: NR,
            name: "t",
            spec: "schedule: {schedule: '0 0', roundTimeoutMinute: 1}",
            errors: &[
                r#"spec.schedule.schedule: Invalid value: "0 0": the interval of the interval form must be between 1 and 527040 minutes, found 0"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "cron form: a field out of range",
            kind: NR,
            name: "t",
            spec: "schedule: {schedule: '61 * * * *', roundTimeoutMinute: 1}",
            errors: &[
                r#"spec.schedule.schedule: Invalid value: "61 * * * *": not a valid cron expression: the minute field "61" is invalid (Component error: Number out of bounds.)"#,
            ],
            crd_rejects: false,
        },
        Case {
            rule: "cron form: never fires",
            kind: NR,
            name: "t",
            spec: "schedule: {schedule: '0 0 30 2 *', roundTimeoutMinute: 1}",
            errors: &[
                r#"spec.schedule.schedule: Invalid value: "0 0 30 2 *": the cron expression never fires"#,
            ],
            crd_rejects: false,
        },
        Case {
            rule: "schedule string missing",
            kind: NR,
            name: "t",
            spec: "schedule: {roundTimeoutMinute: 1}",
            errors: &[
                r#"spec.schedule.schedule: Required value: "<start minutes> <interval minutes>" or a 5-field cron expression is required"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "roundTimeoutMinute greater than the interval",
            kind: NR,
            name: "t",
            spec: "schedule: {schedule: '0 5', roundTimeoutMinute: 10}",
            errors: &[
                "spec.schedule.roundTimeoutMinute: Invalid value: 10: must not be greater than the interval of the schedule (5 minutes)",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "roundTimeoutMinute defaults to 60, more than a 1-minute interval (as upstream)",
            kind: NR,
            name: "t",
            spec: "schedule: {schedule: '0 1'}",
            errors: &[
                "spec.schedule.roundTimeoutMinute: Invalid value: 60: must not be greater than the interval of the schedule (1 minute)",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "roundTimeoutMinute greater than the shortest gap of a cron schedule",
            kind: NR,
            name: "t",
            spec: "schedule: {schedule: '*/5 * * * *', roundTimeoutMinute: 10}",
            errors: &[
                "spec.schedule.roundTimeoutMinute: Invalid value: 10: must not be greater than the shortest interval between two ticks of the cron schedule (5 minutes)",
            ],
            crd_rejects: false,
        },
        Case {
            rule: "roundTimeoutMinute below 1",
            kind: NR,
            name: "t",
            spec: "schedule: {schedule: '0 1', roundTimeoutMinute: 0}",
            errors: &["spec.schedule.roundTimeoutMinute: Invalid value: 0: must be at least 1"],
            crd_rejects: true,
        },
        Case {
            rule: "roundNumber 0 (upstream accepted it and never ran the task)",
            kind: NR,
            name: "t",
            spec: "schedule: {schedule: '0 1', roundTimeoutMinute: 1, roundNumber: 0}",
            errors: &[
                "spec.schedule.roundNumber: Invalid value: 0: must be -1 (run forever) or at least 1",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "roundNumber below -1",
            kind: NR,
            name: "t",
            spec: "schedule: {schedule: '0 1', roundTimeoutMinute: 1, roundNumber: -2}",
            errors: &[
                "spec.schedule.roundNumber: Invalid value: -2: must be -1 (run forever) or at least 1",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "qps not below the NetReach maximum (netReachRequestMaxQPS 20)",
            kind: NR,
            name: "t",
            spec: "request: {qps: 25}",
            errors: &["spec.request.qps: Invalid value: 25: must be less than 20"],
            crd_rejects: false,
        },
        Case {
            rule: "qps not below the AppHttpHealthy maximum (appHttpHealthyRequestMaxQPS 100)",
            kind: AHH,
            name: "t",
            spec: "target: {host: 'http://a.example.com', method: GET}\nrequest: {qps: 100}",
            errors: &["spec.request.qps: Invalid value: 100: must be less than 100"],
            crd_rejects: false,
        },
        Case {
            rule: "qps not below the Netdns maximum (netDnsRequestMaxQPS 100)",
            kind: DNS,
            name: "t",
            spec: "request: {qps: 150}",
            errors: &["spec.request.qps: Invalid value: 150: must be less than 100"],
            crd_rejects: false,
        },
        Case {
            rule: "qps below 1",
            kind: NR,
            name: "t",
            spec: "request: {qps: 0}",
            errors: &["spec.request.qps: Invalid value: 0: must be at least 1"],
            crd_rejects: true,
        },
        Case {
            rule: "durationInSecond below 1",
            kind: NR,
            name: "t",
            spec: "request: {durationInSecond: 0}",
            errors: &["spec.request.durationInSecond: Invalid value: 0: must be at least 1"],
            crd_rejects: true,
        },
        Case {
            rule: "perRequestTimeoutInMS below 1",
            kind: NR,
            name: "t",
            spec: "request: {perRequestTimeoutInMS: 0}",
            errors: &["spec.request.perRequestTimeoutInMS: Invalid value: 0: must be at least 1"],
            crd_rejects: true,
        },
        Case {
            rule: "perRequestTimeoutInMS longer than the round",
            kind: NR,
            name: "t",
            spec: "schedule: {schedule: '0 1', roundTimeoutMinute: 1}\nrequest: {perRequestTimeoutInMS: 60001}",
            errors: &[
                "spec.request.perRequestTimeoutInMS: Invalid value: 60001: must not be greater than schedule.roundTimeoutMinute (60000 ms)",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "durationInSecond plus one request timeout does not fit in the round",
            kind: NR,
            name: "t",
            spec: "schedule: {schedule: '0 1', roundTimeoutMinute: 1}\nrequest: {durationInSecond: 60, perRequestTimeoutInMS: 1000}",
            errors: &[
                "spec.request.durationInSecond: Invalid value: 60: durationInSecond plus perRequestTimeoutInMS (61000 ms) must fit in schedule.roundTimeoutMinute (60000 ms)",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "successRate above 1",
            kind: NR,
            name: "t",
            spec: "expect: {successRate: 1.5}",
            errors: &["spec.expect.successRate: Invalid value: 1.5: must be between 0 and 1"],
            crd_rejects: true,
        },
        Case {
            rule: "successRate below 0",
            kind: NR,
            name: "t",
            spec: "expect: {successRate: -0.1}",
            errors: &["spec.expect.successRate: Invalid value: -0.1: must be between 0 and 1"],
            crd_rejects: true,
        },
        Case {
            rule: "meanAccessDelayInMs below 1",
            kind: NR,
            name: "t",
            spec: "expect: {meanAccessDelayInMs: 0}",
            errors: &["spec.expect.meanAccessDelayInMs: Invalid value: 0: must be at least 1"],
            crd_rejects: true,
        },
        Case {
            rule: "statusCode outside 100-599",
            kind: AHH,
            name: "t",
            spec: "target: {host: 'http://a.example.com', method: GET}\nexpect: {statusCode: 99}",
            errors: &["spec.expect.statusCode: Invalid value: 99: must be between 100 and 599"],
            crd_rejects: true,
        },
        Case {
            rule: "statusCode on a DNS task",
            kind: DNS,
            name: "t",
            spec: "expect: {statusCode: 200}",
            errors: &["spec.expect.statusCode: Forbidden: statusCode applies to HTTP tasks only"],
            crd_rejects: false,
        },
        Case {
            rule: "agentSpec.kind not DaemonSet or Deployment",
            kind: NR,
            name: "t",
            spec: "agentSpec: {kind: Pod}",
            errors: &[
                r#"spec.agentSpec.kind: Unsupported value: "Pod": supported values: "DaemonSet", "Deployment""#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "a Deployment carrier without replicas (upstream created no pods)",
            kind: NR,
            name: "t",
            spec: "agentSpec: {kind: Deployment}",
            errors: &[
                "spec.agentSpec.deploymentReplicas: Required value: a Deployment carrier needs deploymentReplicas",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "deploymentReplicas below 1",
            kind: NR,
            name: "t",
            spec: "agentSpec: {kind: Deployment, deploymentReplicas: 0}",
            errors: &["spec.agentSpec.deploymentReplicas: Invalid value: 0: must be at least 1"],
            crd_rejects: true,
        },
        Case {
            rule: "terminationGracePeriodMinutes negative",
            kind: NR,
            name: "t",
            spec: "agentSpec: {terminationGracePeriodMinutes: -1}",
            errors: &[
                "spec.agentSpec.terminationGracePeriodMinutes: Invalid value: -1: must not be negative",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "with agentSpec, a name that cannot name the carrier's Services",
            kind: NR,
            name: "my.task",
            spec: "agentSpec: {kind: DaemonSet}",
            errors: &[
                r#"metadata.name: Invalid value: "my.task": with agentSpec the name must be at most 41 lowercase letters, digits and '-', starting and ending with a letter or digit (it names the carrier's Services)"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "with agentSpec, a name too long for the carrier's Services",
            kind: AHH,
            name: "a-name-that-is-far-too-long-for-a-service",
            spec: "agentSpec: {kind: DaemonSet}\ntarget: {host: 'http://a.example.com', method: GET}",
            errors: &[
                r#"metadata.name: Invalid value: "a-name-that-is-far-too-long-for-a-service": with agentSpec the name must be at most 35 lowercase letters, digits and '-', starting and ending with a letter or digit (it names the carrier's Services)"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "NetReach: neither IPv4 nor IPv6",
            kind: NR,
            name: "t",
            spec: "target: {ipv4: false, ipv6: false}",
            errors: &[
                r#"spec.target: Invalid value: "object": at least one of ipv4 and ipv6 must be true"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "NetReach: no target type",
            kind: NR,
            name: "t",
            spec: "target: {endpoint: false, clusterIP: false, nodePort: false}",
            errors: &[
                r#"spec.target: Invalid value: "object": at least one of endpoint, clusterIP, nodePort, loadBalancer and ingress must be true"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "NetReach: ingress without IPv4",
            kind: NR,
            name: "t",
            spec: "target: {ipv4: false, ipv6: true, ingress: true}",
            errors: &[
                "spec.target.ingress: Invalid value: true: ingress targets are IPv4 only: ingress requires ipv4",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "NetReach: multusInterface without endpoint",
            kind: NR,
            name: "t",
            spec: "target: {endpoint: false, multusInterface: true}",
            errors: &[
                "spec.target.multusInterface: Invalid value: true: multusInterface adds secondary pod IPs: it requires endpoint",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "NetReach: udp without endpoint",
            kind: NR,
            name: "t",
            spec: "target: {endpoint: false, clusterIP: true, udp: true}",
            errors: &[
                "spec.target.udp: Invalid value: true: udp sends echoes to the agent pods' IPs: it requires endpoint",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "NetReach: icmp without endpoint",
            kind: NR,
            name: "t",
            spec: "target: {endpoint: false, clusterIP: true, icmp: true}",
            errors: &[
                "spec.target.icmp: Invalid value: true: icmp sends echoes to the agent pods' IPs: it requires endpoint",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "NetReach: pathMTU without udp",
            kind: NR,
            name: "t",
            spec: "target: {endpoint: true, pathMTU: true}",
            errors: &[
                "spec.target.pathMTU: Invalid value: true: pathMTU is searched with UDP echoes: it requires udp",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "NetReach: minPathMTU without pathMTU",
            kind: NR,
            name: "t",
            spec: "target: {endpoint: true, udp: true}\nexpect: {successRate: 1, minPathMTU: 1500}",
            errors: &[
                "spec.expect.minPathMTU: Forbidden: minPathMTU bounds the path MTU, which only a NetReach task's target.pathMTU searches for",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "NetReach: maxJitterInMs without udp",
            kind: NR,
            name: "t",
            spec: "target: {endpoint: true}\nexpect: {successRate: 1, maxJitterInMs: 2}",
            errors: &[
                "spec.expect.maxJitterInMs: Forbidden: jitter is measured by UDP and ICMP echoes only: nothing measures it without target.udp or target.icmp",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "NetReach: maxJitterInMs out of range",
            kind: NR,
            name: "t",
            spec: "target: {endpoint: true, udp: true}\nexpect: {successRate: 1, maxJitterInMs: 0}",
            errors: &[
                "spec.expect.maxJitterInMs: Invalid value: 0: must be more than 0 and at most 60000",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "isolation: neither podSelector nor service",
            kind: NR,
            name: "t",
            spec: "isolation: [{name: db, namespace: shop, port: 5432}]",
            errors: &[
                r#"spec.isolation[0]: Invalid value: "object": exactly one of podSelector and service names the peers"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "isolation: both podSelector and service",
            kind: NR,
            name: "t",
            spec: "isolation: [{name: db, namespace: shop, service: db, podSelector: {matchLabels: {app: db}}, port: 5432}]",
            errors: &[
                r#"spec.isolation[0]: Invalid value: "object": exactly one of podSelector and service names the peers"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "isolation: TCP without a port",
            kind: NR,
            name: "t",
            spec: "isolation: [{name: db, namespace: shop, service: db}]",
            errors: &[
                r#"spec.isolation[0].port: Required value: port is required for TCP and UDP, and ICMP has none"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "isolation: ICMP with a port",
            kind: NR,
            name: "t",
            spec: "isolation: [{name: db, namespace: shop, podSelector: {matchLabels: {app: db}}, protocol: ICMP, port: 1}]",
            errors: &[
                r#"spec.isolation[0].port: Invalid value: 1: port is required for TCP and UDP, and ICMP has none"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "isolation: ICMP to a Service",
            kind: NR,
            name: "t",
            spec: "isolation: [{name: db, namespace: shop, service: db, protocol: ICMP}]",
            errors: &[
                r#"spec.isolation[0].service: Invalid value: "db": a Service's ClusterIP answers no ICMP echo: ICMP isolation needs podSelector"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "isolation: two entries of one name",
            kind: NR,
            name: "t",
            spec: "isolation: [{name: db, namespace: shop, service: db, port: 1}, {name: db, namespace: web, service: db, port: 1}]",
            errors: &[
                r#"spec.isolation: Invalid value: "db": each isolation entry needs a name of its own"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "isolation: a name that is not a DNS label",
            kind: NR,
            name: "t",
            spec: "isolation: [{name: Db, namespace: shop, service: db, port: 1}]",
            errors: &[
                r#"spec.isolation[0].name: Invalid value: "Db": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character, of at most 32 characters"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "isolation: a port out of range",
            kind: NR,
            name: "t",
            spec: "isolation: [{name: db, namespace: shop, service: db, port: 70000}]",
            errors: &[
                r#"spec.isolation[0].port: Invalid value: 70000: must be between 1 and 65535"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "isolation: In without values",
            kind: NR,
            name: "t",
            spec: "isolation: [{name: db, namespace: shop, podSelector: {matchExpressions: [{key: app, operator: In}]}, port: 1}]",
            errors: &[
                r#"spec.isolation[0].podSelector: Invalid value: "object": failed to parse value as expression: Expected values for In operator, got none"#,
            ],
            crd_rejects: false,
        },
        Case {
            rule: "maxJitterInMs on a DNS task",
            kind: DNS,
            name: "t",
            spec: "expect: {successRate: 1, maxJitterInMs: 2}",
            errors: &[
                "spec.expect.maxJitterInMs: Forbidden: jitter is measured by UDP and ICMP echoes only: nothing measures it in a Netdns task",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "AppHttpHealthy: scheme other than http or https",
            kind: AHH,
            name: "t",
            spec: "target: {host: 'ftp://files.example.com', method: GET}",
            errors: &[
                r#"spec.target.host: Invalid value: "ftp://files.example.com": scheme must be http or https"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "AppHttpHealthy: dotted host that is neither a domain nor IPv4",
            kind: AHH,
            name: "t",
            spec: "target: {host: 'http://10.0.0', method: GET}",
            errors: &[
                r#"spec.target.host: Invalid value: "http://10.0.0": "10.0.0" is neither a domain name nor an IPv4 address"#,
            ],
            crd_rejects: false,
        },
        Case {
            rule: "AppHttpHealthy: IPv6 host not bracketed",
            kind: AHH,
            name: "t",
            spec: "target: {host: 'http://fd00::1/', method: GET}",
            errors: &[
                r#"spec.target.host: Invalid value: "http://fd00::1/": must be a URL such as http://example.com:8080/path (invalid authority)"#,
            ],
            crd_rejects: false,
        },
        Case {
            rule: "AppHttpHealthy: header without ':' (upstream panicked)",
            kind: AHH,
            name: "t",
            spec: "target: {host: 'http://a.example.com', method: GET, header: ['Content-Type application/json']}",
            errors: &[
                r#"spec.target.header[0]: Invalid value: "Content-Type application/json": must be "Name: value""#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "AppHttpHealthy: header name not a token",
            kind: AHH,
            name: "t",
            spec: "target: {host: 'http://a.example.com', method: GET, header: ['X-Ok: 1', 'Bad(Name): 2']}",
            errors: &[
                r#"spec.target.header[1]: Invalid value: "Bad(Name): 2": "Bad(Name)" is not a valid header name"#,
            ],
            crd_rejects: false,
        },
        Case {
            rule: "AppHttpHealthy: TLS Secret without namespace",
            kind: AHH,
            name: "t",
            spec: "target: {host: 'https://a.example.com', method: GET, tlsSecretName: client}",
            errors: &[
                "spec.target.tlsSecretNamespace: Required value: tlsSecretName needs tlsSecretNamespace",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "AppHttpHealthy: body ConfigMap without name",
            kind: AHH,
            name: "t",
            spec: "target: {host: 'http://a.example.com', method: POST, bodyConfigmapNamespace: default}",
            errors: &[
                "spec.target.bodyConfigmapName: Required value: bodyConfigmapNamespace needs bodyConfigmapName",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "AppHttpHealthy: unknown method",
            kind: AHH,
            name: "t",
            spec: "target: {host: 'http://a.example.com', method: FETCH}",
            errors: &[
                r#"spec.target.method: Unsupported value: "FETCH": supported values: "GET", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "PATCH", "HEAD""#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "AppHttpHealthy: no host",
            kind: AHH,
            name: "t",
            spec: "target: {method: GET}",
            errors: &["spec.target.host: Required value"],
            crd_rejects: true,
        },
        Case {
            rule: "Netdns: both targetUser and targetDns",
            kind: DNS,
            name: "t",
            spec: "target: {targetUser: {server: 10.96.0.10}, targetDns: {}}",
            errors: &[
                r#"spec.target: Invalid value: "object": exactly one of targetUser and targetDns must be set"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "Netdns: neither targetUser nor targetDns",
            kind: DNS,
            name: "t",
            spec: "target: {enableLatencyMetric: true}",
            errors: &[
                r#"spec.target: Invalid value: "object": exactly one of targetUser and targetDns must be set"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "Netdns: targetUser without server",
            kind: DNS,
            name: "t",
            spec: "target: {targetUser: {port: 53}}",
            errors: &[
                "spec.target.targetUser.server: Required value: the address of the DNS server is required",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "Netdns: server neither an IP nor a host name",
            kind: DNS,
            name: "t",
            spec: "target: {targetUser: {server: 'dns server'}}",
            errors: &[
                r#"spec.target.targetUser.server: Invalid value: "dns server": must be an IP address or a host name"#,
            ],
            crd_rejects: false,
        },
        Case {
            rule: "Netdns: port out of range",
            kind: DNS,
            name: "t",
            spec: "target: {targetUser: {server: 10.96.0.10, port: 0}}",
            errors: &["spec.target.targetUser.port: Invalid value: 0: must be between 1 and 65535"],
            crd_rejects: true,
        },
        Case {
            rule: "Netdns: serviceName without serviceNamespace",
            kind: DNS,
            name: "t",
            spec: "target: {targetDns: {serviceName: kube-dns}}",
            errors: &[
                "spec.target.targetDns.serviceNamespace: Required value: serviceName needs serviceNamespace",
            ],
            crd_rejects: true,
        },
        Case {
            rule: "Netdns: neither testIPv4 nor testIPv6",
            kind: DNS,
            name: "t",
            spec: "target: {targetDns: {testIPv4: false}}",
            errors: &[
                r#"spec.target.targetDns: Invalid value: "object": at least one of testIPv4 and testIPv6 must be true"#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "Netdns: domain that is not a DNS name (upstream failed silently at run time)",
            kind: DNS,
            name: "t",
            spec: "request: {domain: 'bad domain'}",
            errors: &[
                r#"spec.request.domain: Invalid value: "bad domain": must be a DNS name: dot-separated labels of at most 63 letters, digits, '-' or '_', at most 253 characters"#,
            ],
            crd_rejects: false,
        },
        Case {
            rule: "Netdns: unknown protocol",
            kind: DNS,
            name: "t",
            spec: "request: {protocol: quic}",
            errors: &[
                r#"spec.request.protocol: Unsupported value: "quic": supported values: "udp", "tcp", "tcp-tls""#,
            ],
            crd_rejects: true,
        },
        Case {
            rule: "an unknown field (kubectl's strict validation)",
            kind: NR,
            name: "t",
            spec: "request: {qsp: 5}",
            errors: &["spec.request.qsp: Unknown field: field not declared in schema"],
            crd_rejects: true,
        },
        Case {
            rule: "a field of the wrong type",
            kind: NR,
            name: "t",
            spec: "request: {qps: ten}",
            errors: &[r#"spec.request.qps: Invalid value: "ten": must be of type integer"#],
            crd_rejects: true,
        },
    ]
}

/// The full task of a case: its spec, plus a valid schedule when the case does not set one.
fn manifest(case: &Case) -> String {
    let mut spec = case.spec.to_string();
    if !spec.contains("schedule:") {
        spec.push('\n');
        spec.push_str(OK_SCHEDULE);
    }
    task(case.kind, case.name, &spec)
}

#[test]
fn every_rule_gives_its_exact_message() {
    let config = Config::default();
    let mut failures = Vec::new();
    for case in cases() {
        let got = controller_errors(&manifest(&case), &config);
        if got != case.errors {
            failures.push(format!(
                "{}:\n  want {:?}\n  got  {:?}",
                case.rule, case.errors, got
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_crd_rejects_what_needs_no_configuration() {
    let mut failures = Vec::new();
    for case in cases() {
        let got = crd_rejections(&manifest(&case), None);
        if got.is_empty() == case.crd_rejects {
            failures.push(format!(
                "{}: the CRD should {}, got {:?}",
                case.rule,
                if case.crd_rejects {
                    "reject it"
                } else {
                    "accept it"
                },
                got
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn disabled_ip_families_are_rejected_by_the_controller() {
    let config = Config {
        enable_ipv6: false,
        ..Config::default()
    };
    let yaml = task(NR, "t", &format!("target: {{ipv6: true}}\n{OK_SCHEDULE}"));
    assert_eq!(
        controller_errors(&yaml, &config),
        [
            "spec.target.ipv6: Invalid value: true: IPv6 is disabled in the kdoctor configuration (enableIPv6: false)"
        ]
    );
    let config = Config {
        enable_ipv4: false,
        ..Config::default()
    };
    let yaml = task(
        DNS,
        "t",
        &format!("target: {{targetDns: {{testIPv4: true}}}}\n{OK_SCHEDULE}"),
    );
    assert_eq!(
        controller_errors(&yaml, &config),
        [
            "spec.target.targetDns.testIPv4: Invalid value: true: IPv4 is disabled in the kdoctor configuration (enableIPv4: false)"
        ]
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let yaml = task(
        NR,
        "t",
        "schedule: {schedule: '0 5', roundTimeoutMinute: 10}\nrequest: {qps: 30}\nexpect: {successRate: 2}",
    );
    let got = controller_errors(&yaml, &Config::default());
    assert_eq!(got.len(), 3, "{got:?}");
}

#[test]
fn the_task_name_must_be_an_object_name() {
    let yaml = task(NR, "Bad_Name", OK_SCHEDULE);
    assert_eq!(
        controller_errors(&yaml, &Config::default()),
        [
            r#"metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"#
        ]
    );
}

#[test]
fn a_spec_with_every_block_missing_is_reported_not_dereferenced() {
    use kdoctor_api::task::{NetReach, Netdns, NetdnsSpec, Task};
    use kdoctor_api::validation::validate;
    let config = Config::default();
    let errors = validate(
        &Task::NetReach(NetReach::new("t", Default::default())),
        &config,
    )
    .expect_err("nothing is set");
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        [
            "spec.schedule: Required value: schedule is required",
            "spec.request: Required value: request is required",
            "spec.expect: Required value: expect is required",
            "spec.target: Required value: target is required",
        ]
    );
    let errors = validate(
        &Task::Netdns(Netdns::new("t", NetdnsSpec::default())),
        &config,
    )
    .expect_err("nothing is set");
    assert_eq!(errors.iter().count(), 4, "{errors}");
}

#[test]
fn a_tls_secret_holds_only_non_empty_tls_keys() {
    use kdoctor_api::validation::check_tls_secret;
    assert!(
        check_tls_secret(
            "ns",
            "client",
            [("ca.crt", 10), ("tls.crt", 10), ("tls.key", 10)]
        )
        .is_ok()
    );
    assert!(check_tls_secret("ns", "ca-only", [("ca.crt", 10)]).is_ok());
    let errors = check_tls_secret(
        "ns",
        "client",
        [("ca.crt", 0), ("token", 5), ("tls.crt", 3)],
    )
    .expect_err("bad secret");
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        [
            r#"spec.target.tlsSecretName: Invalid value: "client": Secret ns/client: key "ca.crt" is empty"#,
            r#"spec.target.tlsSecretName: Invalid value: "client": Secret ns/client holds key "token": only ca.crt, tls.crt and tls.key may be used"#,
            r#"spec.target.tlsSecretName: Invalid value: "client": Secret ns/client: a client certificate needs both tls.crt and tls.key"#,
        ]
    );
}

/// Where the cases are written for the real API server: hack/e2e/crd-judge.sh applies each with
/// a server-side dry run and checks that kube-apiserver (its OpenAPI validation and cel-go)
/// rejects exactly the cases marked so, naming the field.
const JUDGED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/invalid");

/// Cases where kube-apiserver names another field than the controller: a CEL rule can only
/// point into the schema (not at `metadata.name`) and a rule on a list names the list.
const CRD_FIELDS: &[(&str, &str)] = &[
    (
        "with agentSpec, a name that cannot name the carrier's Services",
        "spec.agentSpec",
    ),
    (
        "with agentSpec, a name too long for the carrier's Services",
        "spec.agentSpec",
    ),
    (
        "AppHttpHealthy: header without ':' (upstream panicked)",
        "spec.target.header",
    ),
];

/// The file of a case: what it breaks, what the API server and the controller say, the task.
fn judged_file(case: &Case) -> String {
    let field = CRD_FIELDS
        .iter()
        .find(|(rule, _)| *rule == case.rule)
        .map(|(_, field)| *field)
        .unwrap_or_else(|| case.errors[0].split(':').next().unwrap_or(""));
    let verdict = if case.crd_rejects {
        format!("rejects {field}")
    } else {
        "accepts (the controller rejects it)".to_string()
    };
    let mut text = format!(
        "# Generated by api/tests/api/invalid.rs (KDOCTOR_BLESS=1 cargo test -p kdoctor-api --test api judged); applied by hack/e2e/crd-judge.sh.\n# rule: {}\n# kube-apiserver: {verdict}\n",
        case.rule
    );
    for e in case.errors {
        text.push_str(&format!("# controller: {e}\n"));
    }
    text.push_str(&manifest(case));
    text
}

fn slug(rule: &str) -> String {
    let mut s: String = rule
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    s.trim_matches('-').chars().take(60).collect()
}

#[test]
fn judged_cases_are_written_for_the_real_api_server() {
    let dir = std::path::Path::new(JUDGED);
    let want: Vec<(String, String)> = cases()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            (
                format!("{:03}-{}.yaml", i + 1, slug(c.rule)),
                judged_file(c),
            )
        })
        .collect();
    if std::env::var_os("KDOCTOR_BLESS").is_some() {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).expect("creating tests/invalid");
        for (name, text) in &want {
            std::fs::write(dir.join(name), text).expect("writing a case");
        }
    }
    let mut have: Vec<String> = std::fs::read_dir(dir)
        .expect("tests/invalid (KDOCTOR_BLESS=1 writes it)")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    have.sort();
    let names: Vec<String> = want.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(
        have, names,
        "tests/invalid is stale: KDOCTOR_BLESS=1 cargo test -p kdoctor-api --test api judged"
    );
    for (name, text) in want {
        let on_disk = std::fs::read_to_string(dir.join(&name)).expect("reading a case");
        assert_eq!(
            on_disk, text,
            "{name} is stale: KDOCTOR_BLESS=1 cargo test -p kdoctor-api --test api judged"
        );
    }
}
