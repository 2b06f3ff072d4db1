//! The UDP echo port every agent serves as a probe target (`spec.target.udp`): each kdoctor
//! echo request (probe::datagram::wire) is sent back, the same size, with the TTL or hop limit it
//! arrived with and the kernel's receive time written in. Anything else is dropped.
//!
//! What a hostile sender can do with it is bounded: an echo is never larger than its request,
//! only requests are echoed (two echo ports cannot be set bouncing at each other), and the
//! port echoes at most [`MAX_ECHOES_PER_SECOND`]; beyond that it drops and counts.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::UdpSocket;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};

use crate::metrics::Metrics;
use crate::probe::datagram::socket::{self, enable_receive_info, wall_ns};
use crate::probe::datagram::wire::{MAX_BYTES, make_echo};

/// Most echoes a port sends per second: a NetReach round of 5,000 agents at 10 datagrams a
/// second each, with room; more is an attack or a mistake, not a probe.
pub const MAX_ECHOES_PER_SECOND: u32 = 100_000;

/// A per-second budget of echoes: at most `per_second` in any one-second window that starts
/// at the first echo after the last window ended. Pure: the caller says what time it is.
#[derive(Clone, Debug)]
pub struct Budget {
    per_second: u32,
    window: Option<Instant>,
    used: u32,
}

impl Budget {
    /// A budget of `per_second`.
    pub fn new(per_second: u32) -> Budget {
        Budget {
            per_second,
            window: None,
            used: 0,
        }
    }

    /// Takes one echo from the budget at `now`; `false` when the window's budget is spent.
    pub fn take(&mut self, now: Instant) -> bool {
        let fresh = self
            .window
            .is_none_or(|start| now.saturating_duration_since(start) >= Duration::from_secs(1));
        if fresh {
            self.window = Some(now);
            self.used = 0;
        }
        if self.used >= self.per_second {
            return false;
        }
        self.used += 1;
        true
    }
}

/// Opens the echo port on `addr`.
pub fn bind(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let socket = crate::server::socket::udp(addr)?;
    enable_receive_info(&socket, addr.is_ipv6())?;
    Ok(socket)
}

/// Echoes on `socket` until aborted.
pub fn serve(socket: UdpSocket, metrics: Metrics) -> JoinHandle<()> {
    let socket = Arc::new(socket);
    let echoed = metrics.udp_echo.with_label_values(&["echoed"]);
    let malformed = metrics.udp_echo.with_label_values(&["malformed"]);
    let limited = metrics.udp_echo.with_label_values(&["limited"]);
    tokio::spawn(async move {
        // One byte more than the largest datagram, so that a cut one is seen as cut.
        let mut buf = vec![0u8; MAX_BYTES + 1];
        let mut budget = Budget::new(MAX_ECHOES_PER_SECOND);
        loop {
            let datagram = match socket::recv(&socket, &mut buf).await {
                Ok(d) => d,
                // An ICMP error queued by an earlier echo (the sender left): nothing to do.
                Err(_) => continue,
            };
            let Some(from) = datagram.from.filter(|a| a.port() != 0) else {
                malformed.inc();
                continue;
            };
            let received_ns = datagram.info.kernel_time_ns.unwrap_or_else(wall_ns);
            let request = &mut buf[..datagram.len];
            if datagram.truncated || !make_echo(request, datagram.info.ttl, received_ns) {
                malformed.inc();
                continue;
            }
            if !budget.take(Instant::now()) {
                limited.inc();
                continue;
            }
            if socket.send_to(request, from).await.is_ok() {
                echoed.inc();
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_holds_a_rate_per_second_window() {
        let start = Instant::now();
        let mut budget = Budget::new(3);
        assert!((0..3).all(|_| budget.take(start)));
        assert!(!budget.take(start + Duration::from_millis(999)));
        assert!(budget.take(start + Duration::from_secs(1)));
        assert!(budget.take(start + Duration::from_millis(1_500)));
        assert!(budget.take(start + Duration::from_millis(1_999)));
        assert!(!budget.take(start + Duration::from_millis(1_999)));
    }
}
