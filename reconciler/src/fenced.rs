//! The controller's Kubernetes client, fenced: a request that changes anything (every verb but
//! GET, HEAD and OPTIONS) leaves only while this replica's leader lease holds for a while yet
//! (kdoctor_store::raft::Fence). A leader that cannot prove its leadership — cut off from the
//! other replicas, paused, replaced — writes nothing more, before another can be elected.
//! Watches and reads are not fenced: the caches stay warm for the next leadership.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{BoxFuture, Either, Ready};
use http::{Method, Request};
use kdoctor_store::Writes;
use kdoctor_store::raft::Fenced as NoLease;
use tower::{BoxError, Layer, Service};

/// The lease must hold at least this long after a write is sent: the time a request takes to
/// reach kube-apiserver, with room.
pub const WRITE_MARGIN: Duration = Duration::from_millis(500);

/// Whether a write may leave now.
pub type Check = Arc<dyn Fn() -> Result<(), NoLease> + Send + Sync>;

/// Adds the fence to a client's stack.
#[derive(Clone)]
pub struct FenceLayer {
    check: Check,
}

impl FenceLayer {
    /// A fence asking `check` before each write.
    pub fn new(check: Check) -> FenceLayer {
        FenceLayer { check }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = Fenced<S>;

    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            check: self.check.clone(),
        }
    }
}

/// A client stack that refuses writes without the lease.
#[derive(Clone)]
pub struct Fenced<S> {
    inner: S,
    check: Check,
}

fn changes_something(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl<S, B> Service<Request<B>> for Fenced<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Either<
        BoxFuture<'static, Result<S::Response, BoxError>>,
        Ready<Result<S::Response, BoxError>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if changes_something(request.method())
            && let Err(fenced) = (self.check)()
        {
            tracing::warn!(method = %request.method(), uri = %request.uri(), %fenced, "Kubernetes write refused");
            return Either::Right(futures::future::ready(Err(fenced.into())));
        }
        let future = self.inner.call(request);
        Either::Left(Box::pin(async move { future.await.map_err(Into::into) }))
    }
}

/// `client`, its writes fenced by `writes`' leader lease (make it on the runtime that uses
/// it: kube's client spawns its request buffer there).
pub fn wrap(client: kube::Client, writes: Writes) -> kube::Client {
    let check: Check = Arc::new(move || writes.may_act(WRITE_MARGIN));
    let namespace = client.default_namespace().to_string();
    let inner = tower::service_fn(move |request: Request<kube::client::Body>| {
        let client = client.clone();
        async move { client.send(request).await }
    });
    kube::Client::new(FenceLayer::new(check).layer(inner), namespace)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_write_without_the_lease_never_leaves_and_reads_always_do() {
        let held = Arc::new(AtomicBool::new(true));
        let sent = Arc::new(AtomicUsize::new(0));
        let lease = held.clone();
        let check: Check = Arc::new(move || {
            if lease.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err(NoLease::expired())
            }
        });
        let counter = sent.clone();
        let inner = tower::service_fn(move |_: Request<()>| {
            counter.fetch_add(1, Ordering::SeqCst);
            futures::future::ready(Ok::<_, BoxError>(http::Response::new(())))
        });
        let mut client = FenceLayer::new(check).layer(inner);
        let request = |method| Request::builder().method(method).body(()).expect("request");
        client
            .call(request(Method::PATCH))
            .await
            .expect("a write with the lease");
        held.store(false, Ordering::SeqCst);
        let refused = client
            .call(request(Method::PATCH))
            .await
            .expect_err("refused");
        assert!(
            refused.to_string().contains("cannot prove it leads"),
            "{refused}"
        );
        client
            .call(request(Method::GET))
            .await
            .expect("a read without the lease");
        assert_eq!(
            sent.load(Ordering::SeqCst),
            2,
            "the refused write never reached the server"
        );
    }

    #[test]
    fn only_reads_pass_without_the_lease() {
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(!changes_something(&method), "{method}");
        }
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(changes_something(&method), "{method}");
        }
    }
}
