//! Bounds on what one client of a server may hold. Every client of every kdoctor server is a
//! stranger until authenticated (the agents' echo targets answer any pod of the cluster), so a
//! connection has deadlines for its handshake and its request headers, and the number of
//! connections is capped below the file limit: idle or slow clients cannot take the descriptors
//! that the rest of the process needs.

use std::time::Duration;

/// Bounds on what one client may hold.
#[derive(Clone, Copy, Debug)]
pub struct ServeLimits {
    /// A TLS handshake not done in this time is dropped.
    pub handshake_timeout: Duration,
    /// Request headers not read in this time close the connection: over HTTP/1.1 including the
    /// wait for the next request on a kept-alive connection, and for any connection its first
    /// bytes (an HTTP/2 client's preface).
    pub header_timeout: Duration,
    /// Open connections at most; further clients wait in the listen backlog.
    pub max_connections: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(30),
            max_connections: default_max_connections(),
        }
    }
}

/// Half the soft file limit (the other half is the rest of the process's: stores, watches,
/// clients, probes), between 16 and 10,000.
pub fn default_max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct passed.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    };
    (soft / 2).clamp(16, 10_000)
}

/// Request headers a client may send, as kube-apiserver (Go's `http.DefaultMaxHeaderBytes`):
/// long label and field selectors fit, over HTTP/2 too (hyper's own default there is 16 KiB).
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// Header fields in one HTTP/1.1 request: hyper's default, which the server keeps (Go counts
/// only bytes).
pub const MAX_HEADERS: usize = 100;
