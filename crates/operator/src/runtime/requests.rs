//! Counts the operator's own API requests by HTTP method, as a tower layer on its client.
//!
//! Writes are what a controller must avoid in steady state, and the apiserver's own metrics
//! cannot tell one client from another; counting at the client can.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use http::{Method, Request};
use tower::{Layer, Service};

/// Shared counters; clones count into the same totals.
#[derive(Clone, Debug, Default)]
pub struct RequestCounter {
    counts: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    get: AtomicU64,
    post: AtomicU64,
    put: AtomicU64,
    patch: AtomicU64,
    delete: AtomicU64,
    other: AtomicU64,
}

/// Requests sent so far, by method. GET covers gets, lists and watches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestCounts {
    pub get: u64,
    pub post: u64,
    pub put: u64,
    pub patch: u64,
    pub delete: u64,
    pub other: u64,
}

impl RequestCounts {
    /// POST, PUT, PATCH and DELETE: every request that can change something.
    pub fn writes(&self) -> u64 {
        self.post + self.put + self.patch + self.delete
    }

    /// Requests sent since `earlier`.
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        RequestCounts {
            get: self.get - earlier.get,
            post: self.post - earlier.post,
            put: self.put - earlier.put,
            patch: self.patch - earlier.patch,
            delete: self.delete - earlier.delete,
            other: self.other - earlier.other,
        }
    }
}

impl RequestCounter {
    pub fn snapshot(&self) -> RequestCounts {
        let c = &self.counts;
        RequestCounts {
            get: c.get.load(Ordering::Relaxed),
            post: c.post.load(Ordering::Relaxed),
            put: c.put.load(Ordering::Relaxed),
            patch: c.patch.load(Ordering::Relaxed),
            delete: c.delete.load(Ordering::Relaxed),
            other: c.other.load(Ordering::Relaxed),
        }
    }

    fn count(&self, method: &Method) {
        let c = &self.counts;
        let counter = match *method {
            Method::GET => &c.get,
            Method::POST => &c.post,
            Method::PUT => &c.put,
            Method::PATCH => &c.patch,
            Method::DELETE => &c.delete,
            _ => &c.other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A client from `config` whose requests this counter counts.
    pub fn client(&self, config: kube::Config) -> Result<kube::Client, kube::Error> {
        Ok(kube::client::ClientBuilder::try_from(config)?
            .with_layer(self)
            .build())
    }
}

impl<S> Layer<S> for RequestCounter {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            counter: self.clone(),
        }
    }
}

/// The service a [`RequestCounter`] wraps around the client's stack.
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    counter: RequestCounter,
}

impl<S, B> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        self.counter.count(request.method());
        self.inner.call(request)
    }
}
