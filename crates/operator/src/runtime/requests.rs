//! Counts the operator's own API requests by method and response code, as a tower layer on its
//! client: `rest_client_requests_total`, under client-go's name and labels.
//!
//! Writes are what a controller must avoid in steady state, and the apiserver's own metrics
//! cannot tell one client from another; counting at the client can.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use tower::{Layer, Service};

use super::consistent_streams::ConsistentStreamsLayer;
use super::sharding::layer::Selectors;
use super::transport::{self, HttpVersion};

/// What client-go's `code` label says of a request that got no response.
pub const NO_RESPONSE: &str = "<error>";

/// One series of `rest_client_requests_total`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    /// The apiserver's `host:port`.
    pub host: String,
    /// `GET`, `PATCH`, …
    pub method: String,
    /// The HTTP status code, or [`NO_RESPONSE`].
    pub code: String,
}

/// Shared counters; clones count into the same totals.
#[derive(Clone, Debug, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<RequestKey, u64>>>,
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
    /// Totals by method, whatever the response.
    pub fn snapshot(&self) -> RequestCounts {
        let mut counts = RequestCounts::default();
        for (key, n) in self.series() {
            let slot = match key.method.as_str() {
                "GET" => &mut counts.get,
                "POST" => &mut counts.post,
                "PUT" => &mut counts.put,
                "PATCH" => &mut counts.patch,
                "DELETE" => &mut counts.delete,
                _ => &mut counts.other,
            };
            *slot += n;
        }
        counts
    }

    /// Every series counted so far.
    pub fn series(&self) -> Vec<(RequestKey, u64)> {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.iter().map(|(k, n)| (k.clone(), *n)).collect()
    }

    pub(super) fn count(&self, host: &str, method: &Method, code: String) {
        let key = RequestKey {
            host: host.to_owned(),
            method: method.as_str().to_owned(),
            code,
        };
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        *counts.entry(key).or_default() += 1;
    }

    /// A client from `config` whose requests this counter counts, on the default HTTP version.
    pub fn client(&self, config: kube::Config) -> Result<kube::Client, kube::Error> {
        self.client_with(config, &Selectors::default(), HttpVersion::default())
    }

    /// [`RequestCounter::client`] speaking `version`, whose lists and watches carry
    /// `selectors`' shard selectors.
    pub fn client_with(
        &self,
        config: kube::Config,
        selectors: &Selectors,
        version: HttpVersion,
    ) -> Result<kube::Client, kube::Error> {
        let host = config
            .cluster_url
            .authority()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let layer = CountLayer {
            counter: self.clone(),
            host: host.into(),
        };
        Ok(transport::client_builder(config, version)?
            .with_layer(&layer)
            .with_layer(&selectors.layer())
            .with_layer(&ConsistentStreamsLayer)
            .build())
    }
}

/// The layer a [`RequestCounter`] puts on the client of one apiserver.
#[derive(Clone, Debug)]
struct CountLayer {
    counter: RequestCounter,
    host: Arc<str>,
}

impl<S> Layer<S> for CountLayer {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service a [`RequestCounter`] wraps around the client's stack.
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    layer: CountLayer,
}

impl<S, B, RB> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let method = request.method().clone();
        let layer = self.layer.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            let code = match &response {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => NO_RESPONSE.to_owned(),
            };
            layer.counter.count(&layer.host, &method, code);
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_by_method_and_code_and_no_response_as_error() {
        let counter = RequestCounter::default();
        let layer = CountLayer {
            counter: counter.clone(),
            host: "127.0.0.1:6443".into(),
        };
        let mut service = layer.layer(tower::service_fn(|request: Request<()>| async move {
            match request.uri().path() {
                "/missing" => Ok(Response::builder().status(404).body(()).unwrap()),
                "/down" => Err("connection refused"),
                _ => Ok(Response::new(())),
            }
        }));
        for (method, path) in [
            (Method::GET, "/"),
            (Method::GET, "/missing"),
            (Method::PATCH, "/"),
            (Method::DELETE, "/down"),
        ] {
            let request = Request::builder().method(method).uri(path).body(()).unwrap();
            let _ = service.call(request).await;
        }
        let series: Vec<(String, String, u64)> = counter
            .series()
            .into_iter()
            .map(|(k, n)| (k.method, k.code, n))
            .collect();
        assert_eq!(
            series,
            [
                ("DELETE".to_owned(), NO_RESPONSE.to_owned(), 1),
                ("GET".to_owned(), "200".to_owned(), 1),
                ("GET".to_owned(), "404".to_owned(), 1),
                ("PATCH".to_owned(), "200".to_owned(), 1),
            ]
        );
        let totals = counter.snapshot();
        assert_eq!((totals.get, totals.writes()), (2, 2));
    }
}
