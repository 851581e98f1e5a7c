//! Streamed lists that start from the cluster's current state: a tower layer on the client that
//! removes `resourceVersion=0` from the watches that stream a list (`sendInitialEvents=true`).
//!
//! kube-runtime's watcher (kube 5.0) opens a streaming list with `resourceVersion=0`, which the
//! API server reads as "any state": it may stream its watch cache as it is, behind etcd, so an
//! operator that starts, or lists again after its watch expired, can reconcile from objects
//! older than the ones it has already written or seen. Without a resourceVersion the same watch
//! is a consistent read: the API server first waits until its cache has caught up with etcd at
//! the moment of the request (Kubernetes' WatchList, KEP-3157; `getWatchCacheResourceVersion` in
//! k8s.io/apiserver v0.36's cacher; client-go's reflector asks so). That is what kube-runtime's
//! paged lists already ask for by default (`ListSemantic::MostRecent`), so with the layer both
//! ways of listing read the same.
//!
//! The watcher builds its requests itself and has no setting for this, so the layer works below
//! it, as the shard selectors do ([`super::sharding::layer`]).

use std::task::{Context, Poll};

use http::{Method, Request, Uri};
use tower::{Layer, Service};

/// `uri` without `resourceVersion=0` when it is a GET that streams a list; `None` otherwise.
fn rewrite(method: &Method, uri: &Uri) -> Option<Uri> {
    if method != Method::GET {
        return None;
    }
    let query = uri.query()?;
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
    let has = |key: &str, values: &[&str]| {
        pairs
            .iter()
            .any(|(k, v)| k == key && values.contains(&v.as_str()))
    };
    // Only "any state": a resourceVersion the caller names is a floor it chose, and kept.
    if !(has("watch", &["true", "1"])
        && has("sendInitialEvents", &["true"])
        && has("resourceVersion", &["0"]))
    {
        return None;
    }
    let kept = pairs.iter().filter(|(k, _)| k != "resourceVersion");
    let query = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(kept)
        .finish();
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(format!("{}?{query}", uri.path()).parse().ok()?);
    Uri::from_parts(parts).ok()
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ConsistentStreamsLayer;

impl<S> Layer<S> for ConsistentStreamsLayer {
    type Service = ConsistentStreams<S>;

    fn layer(&self, inner: S) -> ConsistentStreams<S> {
        ConsistentStreams { inner }
    }
}

/// The service a [`ConsistentStreamsLayer`] wraps around the client's stack.
#[derive(Clone, Debug)]
pub struct ConsistentStreams<S> {
    inner: S,
}

impl<S, B> Service<Request<B>> for ConsistentStreams<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        if let Some(uri) = rewrite(request.method(), request.uri()) {
            *request.uri_mut() = uri;
        }
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(method: Method, uri: &str) -> String {
        let mut service =
            ConsistentStreamsLayer.layer(tower::service_fn(|request: Request<()>| async move {
                Ok::<_, std::convert::Infallible>(request.uri().to_string())
            }));
        let request = Request::builder().method(method).uri(uri).body(()).unwrap();
        futures::executor::block_on(service.call(request)).unwrap()
    }

    #[test]
    fn a_streamed_list_from_any_state_becomes_a_consistent_read() {
        // What kube-runtime's watcher sends to start a streaming list (kube-core 5.0's own test
        // of `WatchParams::streaming_lists`).
        let uri = "https://127.0.0.1:6443/api/v1/namespaces/ns/pods?&watch=true&timeoutSeconds=290\
                   &allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
                   &resourceVersion=0";
        assert_eq!(
            sent(Method::GET, uri),
            "https://127.0.0.1:6443/api/v1/namespaces/ns/pods?watch=true&timeoutSeconds=290\
             &allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        );
    }

    #[test]
    fn every_other_request_passes_unchanged() {
        for (method, uri) in [
            // Watches that stream no list.
            (
                Method::GET,
                "/api/v1/pods?&watch=true&allowWatchBookmarks=true&resourceVersion=0",
            ),
            (Method::GET, "/api/v1/pods?&watch=true&resourceVersion=4711"),
            // A streamed list from a state the caller names.
            (
                Method::GET,
                "/api/v1/pods?&watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=4711",
            ),
            // A streamed list that is a consistent read already.
            (
                Method::GET,
                "/api/v1/pods?&watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
            ),
            // A paged list that chose "any state" (`ListSemantic::Any`).
            (
                Method::GET,
                "/api/v1/pods?&limit=500&resourceVersion=0&resourceVersionMatch=NotOlderThan",
            ),
            (Method::GET, "/api/v1/namespaces/ns/pods/p"),
            (
                Method::POST,
                "/api/v1/pods?watch=true&sendInitialEvents=true&resourceVersion=0",
            ),
        ] {
            assert_eq!(sent(method, uri), uri);
        }
    }

    /// A plain-HTTP server on loopback that records each request's path and query and answers
    /// with the one bookmark that ends a streamed list's initial events.
    async fn recording_server() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let answer = hyper::service::service_fn(
                        move |request: Request<hyper::body::Incoming>| {
                            record.lock().unwrap().push(request.uri().to_string());
                            async {
                                let body = concat!(
                                    r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","#,
                                    r#""metadata":{"resourceVersion":"7","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
                                    "\n"
                                );
                                Ok::<_, std::convert::Infallible>(http::Response::new(
                                    http_body_util::Full::new(hyper::body::Bytes::from_static(
                                        body.as_bytes(),
                                    )),
                                ))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), answer)
                        .await;
                });
            }
        });
        (port, seen)
    }

    #[tokio::test]
    async fn the_operators_client_streams_the_watchers_first_list_as_a_consistent_read() {
        use futures::StreamExt;
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::watcher;

        let (port, seen) = recording_server().await;
        let config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
        let client = crate::runtime::requests::RequestCounter::default()
            .client(config)
            .unwrap();
        let selection = crate::runtime::watch::InitialList::Stream.apply(watcher::Config::default());
        let mut events = std::pin::pin!(watcher(kube::Api::<ConfigMap>::all(client), selection));
        let done = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while let Some(event) = events.next().await {
                if matches!(event, Ok(watcher::Event::InitDone)) {
                    return;
                }
            }
        });
        done.await.expect("the streamed list ends with its bookmark");
        let first = seen.lock().unwrap()[0].clone();
        let query = first.split_once('?').map(|(_, q)| q).unwrap_or_default();
        let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
        assert!(
            pairs.iter().any(|(k, v)| k == "sendInitialEvents" && v == "true"),
            "{first}"
        );
        assert!(
            pairs.iter().all(|(k, _)| k != "resourceVersion"),
            "a streamed list from any state: {first}"
        );
    }
}
