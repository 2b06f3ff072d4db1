//! Streaming response bodies: a blocking producer (reading the store) writes into a [`Sink`],
//! which hands 64 KiB chunks to the async body through a small bounded channel, so memory does
//! not grow with the size of the response and a slow client slows the producer down.

use axum::body::Body;
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::kube::status::ApiError;

const CHUNK: usize = 64 * 1024;
const IN_FLIGHT: usize = 4;

/// Where a producer writes the response: a channel to the socket, or only a buffer.
pub struct Sink {
    buffer: Vec<u8>,
    tx: Option<mpsc::Sender<Result<Bytes, std::io::Error>>>,
    /// A copy of everything sent, while it stays under its limit (to cache the response).
    copy: Option<(Vec<u8>, usize)>,
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
            copy: None,
        }
    }

    /// What a buffer-only sink collected.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buffer
    }

    fn send(&mut self) -> Result<(), ApiError> {
        let Some(tx) = &self.tx else { return Ok(()) };
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(CHUNK),
        ));
        if let Some((copy, limit)) = &mut self.copy {
            if copy.len() + chunk.len() > *limit {
                self.copy = None;
            } else {
                copy.extend_from_slice(&chunk);
            }
        }
        // A closed channel means the client went away: stop producing.
        tx.blocking_send(Ok(chunk))
            .map_err(|_| ApiError::internal("client went away"))
    }

    /// Hands the copy of the whole body to `keep` (if one was kept), then sends what is left:
    /// in that order, so a client that has the whole body finds it kept.
    fn finish(mut self, keep: impl FnOnce(Bytes)) {
        if let Some((mut copy, limit)) = self.copy.take()
            && copy.len() + self.buffer.len() <= limit
        {
            copy.extend_from_slice(&self.buffer);
            keep(Bytes::from(copy));
        }
        if !self.buffer.is_empty() {
            let _ = self.send();
        }
    }
}

/// A body produced by `produce` on a blocking thread. An error after the first chunk can only
/// cut the body short; it is logged.
pub fn stream<F>(produce: F) -> Body
where
    F: FnOnce(&mut Sink) -> Result<(), ApiError> + Send + 'static,
{
    stream_keeping(produce, 0, |_| {})
}

/// Like [`stream`], and hands a complete body of at most `limit` bytes to `keep` once it has
/// been produced (a larger or failed one is not kept, so memory stays bounded).
pub fn stream_keeping<F, K>(produce: F, limit: usize, keep: K) -> Body
where
    F: FnOnce(&mut Sink) -> Result<(), ApiError> + Send + 'static,
    K: FnOnce(Bytes) + Send + 'static,
{
    let (tx, rx) = mpsc::channel(IN_FLIGHT);
    tokio::task::spawn_blocking(move || {
        let mut sink = Sink {
            buffer: Vec::with_capacity(CHUNK),
            tx: Some(tx.clone()),
            copy: (limit > 0).then(|| (Vec::new(), limit)),
        };
        match produce(&mut sink) {
            Ok(()) => sink.finish(keep),
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
