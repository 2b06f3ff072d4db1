//! The TCP connect prober: each request opens a connection (SYN to established, what the
//! kernel reports when `connect` returns) and closes it at once with a reset.
//!
//! The reset (`SO_LINGER` 0) is what lets the prober hold a rate: a graceful close leaves the
//! four-tuple in TIME_WAIT for a minute on this side, so that at 28,000 ephemeral ports a
//! closing client runs out above ~470 connects a second to one address, and every later
//! connect fails locally while the path is fine. A reset leaves nothing; the peer sees a
//! connection that was established and aborted, which no server logs as an error of its own.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpSocket;
use tokio::time::Instant;

use super::Prober;
use super::http::classify_io;
use super::outcome::{Attempt, Phases, ProbeError};

/// A socket of `addr`'s family that closes with a reset (`SO_LINGER` 0): nothing left in
/// TIME_WAIT on this side (see the module's comment).
pub fn resetting_socket(addr: SocketAddr) -> std::io::Result<TcpSocket> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_zero_linger()?;
    Ok(socket)
}

/// Probes one address with TCP connects.
#[derive(Clone, Debug)]
pub struct TcpProber {
    addr: SocketAddr,
}

impl TcpProber {
    /// A prober of `addr`.
    pub fn new(addr: SocketAddr) -> TcpProber {
        TcpProber { addr }
    }

    /// The address probed.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    async fn connect(&self) -> Result<Duration, ProbeError> {
        let socket = resetting_socket(self.addr).map_err(|e| classify_io(&e))?;
        let began = Instant::now();
        let stream = socket
            .connect(self.addr)
            .await
            .map_err(|e| classify_io(&e))?;
        let connected = began.elapsed();
        drop(stream);
        Ok(connected)
    }
}

impl Prober for TcpProber {
    fn kind(&self) -> &'static str {
        "tcp"
    }

    async fn probe(&self) -> Attempt {
        match self.connect().await {
            Ok(connect) => Attempt {
                result: Ok(()),
                code: None,
                bytes: 0,
                connect: Some(connect),
                queued: Duration::ZERO,
                phases: Phases {
                    tcp: Some(connect),
                    ..Phases::default()
                },
                echo: None,
            },
            Err(error) => Attempt::failed(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;
    use crate::probe::outcome::ErrorClass;

    #[tokio::test]
    async fn a_listener_is_connected_to_and_a_closed_port_is_refused() {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("bind");
        let prober = TcpProber::new(listener.local_addr().expect("addr"));
        let accepted = tokio::spawn(async move { listener.accept().await.map(|(_, peer)| peer) });
        let attempt = prober.probe().await;
        assert_eq!(attempt.result, Ok(()));
        assert!(attempt.connect.is_some() && attempt.phases.tcp == attempt.connect);
        accepted
            .await
            .expect("join")
            .expect("the listener saw the connection");

        // A port bound but not listening refuses.
        let closed = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = closed.local_addr().expect("addr").port();
        drop(closed);
        let refused = TcpProber::new(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            .probe()
            .await;
        assert_eq!(
            refused.result.map_err(|e| e.class),
            Err(ErrorClass::Refused)
        );
    }

    #[tokio::test]
    async fn connects_close_with_a_reset_and_leave_no_time_wait() {
        // A graceful close by the prober would leave each connection in TIME_WAIT on its side;
        // with a reset the listener reads a reset, not an end of stream.
        let listener = tokio::net::TcpListener::bind((Ipv6Addr::LOCALHOST, 0))
            .await
            .or(tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await)
            .expect("bind");
        let prober = TcpProber::new(listener.local_addr().expect("addr"));
        for _ in 0..3 {
            assert_eq!(prober.probe().await.result, Ok(()));
            let (mut stream, _) = listener.accept().await.expect("accept");
            let mut buf = [0u8; 1];
            let read = tokio::io::AsyncReadExt::read(&mut stream, &mut buf).await;
            assert_eq!(
                read.map_err(|e| e.kind()),
                Err(std::io::ErrorKind::ConnectionReset),
                "the prober's close must be a reset"
            );
        }
    }
}
