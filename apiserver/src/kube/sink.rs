//! Streaming response bodies: a blocking producer (reading the store) writes into a [`Sink`],
//! which hands 64 KiB chunks to the async body through a small bounded channel, so memory does
//! not grow with the size of the response and a slow client slows the producer down.

use std::io::Write;

use axum::body::Body;
use bytes::Bytes;
use flate2::write::GzEncoder;
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::kube::status::ApiError;

const CHUNK: usize = 64 * 1024;
const IN_FLIGHT: usize = 4;

/// Where a producer writes the response: a channel to the socket, or only a buffer.
pub struct Sink {
    buffer: Vec<u8>,
    tx: Option<mpsc::Sender<Result<Bytes, std::io::Error>>>,
    /// Compresses what is written before it is sent, for a body sent gzip-encoded: done here,
    /// once, so the encoded body can be kept (a compression layer would encode it again at
    /// every request, and cannot keep what it made).
    gzip: Option<GzEncoder<Vec<u8>>>,
    /// A copy of everything sent, while it stays under its limit (to cache the response).
    copy: Option<(Vec<u8>, usize)>,
}

/// How a streamed body is encoded on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Identity,
    Gzip,
}

impl Sink {
    /// Appends bytes, sending a chunk when enough has gathered.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), ApiError> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= CHUNK {
            self.send()?;
        }
        Ok(())
    }

    /// Appends a JSON value.
    pub fn write_json(&mut self, value: &impl serde::Serialize) -> Result<(), ApiError> {
        serde_json::to_writer(&mut self.buffer, value)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        if self.buffer.len() >= CHUNK {
            self.send()?;
        }
        Ok(())
    }

    /// A sink that only collects (for responses built whole, such as watch events).
    pub fn buffer() -> Sink {
        Sink {
            buffer: Vec::new(),
            tx: None,
            gzip: None,
            copy: None,
        }
    }

    /// What a buffer-only sink collected.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buffer
    }

    /// Sends what the buffer holds (encoded, when the body is).
    fn send(&mut self) -> Result<(), ApiError> {
        if self.tx.is_none() {
            return Ok(());
        }
        let raw = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK));
        let chunk = match &mut self.gzip {
            None => raw,
            Some(encoder) => {
                encoder.write_all(&raw).map_err(gzip_failed)?;
                std::mem::take(encoder.get_mut())
            }
        };
        self.emit(chunk)
    }

    fn emit(&mut self, chunk: Vec<u8>) -> Result<(), ApiError> {
        let Some(tx) = &self.tx else { return Ok(()) };
        if chunk.is_empty() {
            return Ok(());
        }
        if let Some((copy, limit)) = &mut self.copy {
            if copy.len() + chunk.len() > *limit {
                self.copy = None;
            } else {
                copy.extend_from_slice(&chunk);
            }
        }
        // A closed channel means the client went away: stop producing.
        tx.blocking_send(Ok(Bytes::from(chunk)))
            .map_err(|_| ApiError::internal("client went away"))
    }

    /// Hands the copy of the whole body to `keep` (if one was kept), then sends what is left:
    /// in that order, so a client that has the whole body finds it kept.
    fn finish(mut self, keep: impl FnOnce(Bytes)) -> Result<(), ApiError> {
        let rest = std::mem::take(&mut self.buffer);
        let rest = match self.gzip.take() {
            None => rest,
            Some(mut encoder) => {
                encoder.write_all(&rest).map_err(gzip_failed)?;
                encoder.finish().map_err(gzip_failed)?
            }
        };
        if let Some((mut copy, limit)) = self.copy.take()
            && copy.len() + rest.len() <= limit
        {
            copy.extend_from_slice(&rest);
            keep(Bytes::from(copy));
        }
        self.emit(rest)
    }
}

fn gzip_failed(e: std::io::Error) -> ApiError {
    ApiError::internal(format!("gzip: {e}"))
}

/// A body produced by `produce` on a blocking thread. An error after the first chunk can only
/// cut the body short; it is logged.
pub fn stream<F>(produce: F) -> Body
where
    F: FnOnce(&mut Sink) -> Result<(), ApiError> + Send + 'static,
{
    stream_keeping(produce, Encoding::Identity, 0, |_| {})
}

/// Like [`stream`], encoded as `encoding`, and hands a complete body of at most `limit` bytes
/// as sent (encoded) to `keep` once it has been produced (a larger or failed one is not kept,
/// so memory stays bounded).
pub fn stream_keeping<F, K>(produce: F, encoding: Encoding, limit: usize, keep: K) -> Body
where
    F: FnOnce(&mut Sink) -> Result<(), ApiError> + Send + 'static,
    K: FnOnce(Bytes) + Send + 'static,
{
    let (tx, rx) = mpsc::channel(IN_FLIGHT);
    tokio::task::spawn_blocking(move || {
        let mut sink = Sink {
            buffer: Vec::with_capacity(CHUNK),
            tx: Some(tx.clone()),
            gzip: (encoding == Encoding::Gzip)
                .then(|| GzEncoder::new(Vec::with_capacity(CHUNK), flate2::Compression::default())),
            copy: (limit > 0).then(|| (Vec::new(), limit)),
        };
        match produce(&mut sink).and_then(|()| sink.finish(keep)) {
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(error = %e, "response stream ended early");
                let _ = tx.blocking_send(Err(std::io::Error::other(e.message)));
            }
        }
    });
    body_from(rx)
}

/// A body fed by a channel.
pub fn body_from(mut rx: mpsc::Receiver<Result<Bytes, std::io::Error>>) -> Body {
    Body::from_stream(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed())
}
