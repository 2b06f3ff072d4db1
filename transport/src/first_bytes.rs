//! A deadline for a connection's first bytes (after the TLS handshake, if any). hyper's HTTP/1
//! header timeout covers requests, but an HTTP/2 client (chosen by ALPN, or by its preface on a
//! plain connection, which hyper reads with no deadline of its own) that sends nothing would
//! otherwise hold its connection for ever.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// An IO whose reads fail with `TimedOut` when nothing arrived within the deadline.
pub struct FirstBytes<I> {
    io: I,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<I> FirstBytes<I> {
    /// `io`, which must receive its first bytes within `timeout`.
    pub fn new(io: I, timeout: Duration) -> FirstBytes<I> {
        FirstBytes {
            io,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for FirstBytes<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    self.deadline = None;
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                let expired = self
                    .deadline
                    .as_mut()
                    .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if expired {
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request within the deadline",
                    )))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for FirstBytes<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
