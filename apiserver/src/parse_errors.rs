//! hyper answers an HTTP/1.1 request it cannot parse (headers over its buffer or more than it
//! counts, a URI over 65,534 bytes, a malformed request line) by itself: an empty 400, 414 or
//! 431, then it closes the connection, and it offers no hook to give that answer a body.
//! Clients of a Kubernetes API expect a `Status` for every error, so this IO recognises hyper's
//! automatic answer as it is written and writes a Status in its place.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::kube::status::ApiError;
use kdoctor_transport::limits::{MAX_HEADER_BYTES, MAX_HEADERS};

/// An IO that turns hyper's bodiless parse-error answers into Status objects.
pub struct StatusForParseErrors<I> {
    io: I,
    /// The replacement answer not yet written, and how much of it has been.
    pending: Vec<u8>,
    written: usize,
}

impl<I> StatusForParseErrors<I> {
    /// Wraps one connection's IO.
    pub fn new(io: I) -> StatusForParseErrors<I> {
        StatusForParseErrors {
            io,
            pending: Vec::new(),
            written: 0,
        }
    }
}

/// The code of hyper's automatic answer when `bytes` are one: a whole 400, 414 or 431 head and
/// nothing else, without a content type. Every answer of the API itself carries a content type.
pub fn automatic_answer(bytes: &[u8]) -> Option<StatusCode> {
    let head = bytes.strip_prefix(b"HTTP/1.1 ")?;
    let head = head.strip_suffix(b"\r\n\r\n")?;
    let code = match head.get(..4)? {
        b"400 " => StatusCode::BAD_REQUEST,
        b"414 " => StatusCode::URI_TOO_LONG,
        b"431 " => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        _ => return None,
    };
    let typed = head
        .split(|&b| b == b'\n')
        .skip(1)
        .any(|line| line.len() > 13 && line[..13].eq_ignore_ascii_case(b"content-type:"));
    (!typed).then_some(code)
}

/// The whole HTTP/1.1 answer written instead of hyper's.
pub fn status_answer(code: StatusCode) -> Vec<u8> {
    let message = match code {
        StatusCode::URI_TOO_LONG => "the request URI is longer than 65,534 bytes".to_string(),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => format!(
            "the request's headers are over {} bytes or more than {MAX_HEADERS} fields",
            MAX_HEADER_BYTES
        ),
        _ => "the request is not valid HTTP/1.1: its request line or a header could not be parsed"
            .to_string(),
    };
    let status = ApiError::of_code(code, &message).to_status();
    let body = serde_json::to_vec(&status).unwrap_or_default();
    let mut answer = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        code.as_u16(),
        code.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

impl<I: AsyncWrite + Unpin> StatusForParseErrors<I> {
    /// Writes what is left of the replacement answer.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Takes `bytes` as written, replaced by a Status answer, when they are hyper's own answer.
    fn replaced(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Option<io::Result<usize>> {
        let code = automatic_answer(bytes)?;
        tracing::debug!(
            code = code.as_u16(),
            "request not parsed; answering with a Status"
        );
        self.pending = status_answer(code);
        self.written = 0;
        // Pending is fine: hyper flushes next, and the flush finishes the answer.
        match self.poll_drain(cx) {
            Poll::Ready(Err(e)) => Some(Err(e)),
            _ => Some(Ok(bytes.len())),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for StatusForParseErrors<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for StatusForParseErrors<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        if let Some(result) = this.replaced(cx, buf) {
            return Poll::Ready(result);
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        let mut filled = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (filled.next(), filled.next())
            && let Some(result) = this.replaced(cx, only)
        {
            return Poll::Ready(result);
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
