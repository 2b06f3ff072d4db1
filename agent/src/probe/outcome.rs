//! What one probe request produced: success, or an error class with a short detail.

use std::fmt;
use std::time::Duration;

pub use super::datagram::tally::EchoReading;

/// Classes of failure a report counts separately (they point at different network faults).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorClass {
    /// The peer refused the connection (nothing listens, or a firewall rejects).
    Refused,
    /// No complete answer within the per-request timeout.
    Timeout,
    /// The connection was reset or closed before the answer was complete.
    Reset,
    /// The TLS handshake failed (certificate, protocol).
    Tls,
    /// The name of the target could not be resolved.
    Dns,
    /// An HTTP answer with a status code other than the expected one.
    Status(u16),
    /// A DNS answer with an RCODE other than NOERROR.
    Rcode(String),
    /// The peer broke the protocol (unparsable answer, wrong message id).
    Protocol,
    /// Anything else (local resource exhaustion, unreachable network, …).
    Other,
}

impl ErrorClass {
    /// Short stable label, used as metric label and error-map key.
    pub fn label(&self) -> String {
        match self {
            ErrorClass::Refused => "refused".to_string(),
            ErrorClass::Timeout => "timeout".to_string(),
            ErrorClass::Reset => "reset".to_string(),
            ErrorClass::Tls => "tls".to_string(),
            ErrorClass::Dns => "dns".to_string(),
            ErrorClass::Status(code) => format!("status {code}"),
            ErrorClass::Rcode(rcode) => format!("rcode {rcode}"),
            ErrorClass::Protocol => "protocol".to_string(),
            ErrorClass::Other => "other".to_string(),
        }
    }
}

/// A failed request: its class and what the client library said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeError {
    /// The class.
    pub class: ErrorClass,
    /// A short description without addresses or ports, so equal faults count under one key.
    pub detail: String,
}

impl ProbeError {
    /// An error of `class` with `detail`.
    pub fn new(class: ErrorClass, detail: impl Into<String>) -> ProbeError {
        ProbeError {
            class,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            write!(f, "{}", self.class.label())
        } else {
            write!(f, "{}: {}", self.class.label(), self.detail)
        }
    }
}

/// The answer's code, when there was an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Code {
    /// HTTP status code.
    Http(u16),
    /// DNS RCODE name (`NOERROR`, `NXDOMAIN`, …).
    Dns(String),
}

/// What one request produced (timings are added by the engine).
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    /// Success, or why not.
    pub result: Result<(), ProbeError>,
    /// The answer's code, if an answer came.
    pub code: Option<Code>,
    /// Bytes of answer payload received (HTTP body, DNS message).
    pub bytes: u64,
    /// Time to open a new connection (TCP and TLS), when this request opened one.
    pub connect: Option<Duration>,
    /// Time spent waiting for a free connection before sending (not service time).
    pub queued: Duration,
    /// The parts of the request the prober timed separately (HTTP; metrics only).
    pub phases: Phases,
    /// What a UDP echo told beyond its latency.
    pub echo: Option<EchoReading>,
}

/// Disjoint parts of one HTTP request, where the prober measured them: exported as latency
/// histograms by phase (the report keeps its own histograms).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Phases {
    /// Name resolution and TCP connect, when the request opened a connection.
    pub tcp: Option<Duration>,
    /// The TLS handshake, when the request opened a TLS connection.
    pub tls: Option<Duration>,
    /// From handing the request to a connection to the answer's head (time to first byte).
    pub first_byte: Option<Duration>,
}

impl Attempt {
    /// A request that failed before any answer.
    pub fn failed(error: ProbeError) -> Attempt {
        Attempt {
            result: Err(error),
            code: None,
            bytes: 0,
            connect: None,
            queued: Duration::ZERO,
            phases: Phases::default(),
            echo: None,
        }
    }

    /// This attempt with the phases measured before it ended.
    pub fn with_phases(mut self, phases: Phases) -> Attempt {
        self.phases = phases;
        self
    }
}
