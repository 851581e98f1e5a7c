//! Sending a replica's buckets to the API server: a tower layer on the client that adds
//! `shardSelector` to the list and watch requests of the collections a sharded watch names.
//!
//! kube's `ListParams`, `WatchParams` and `watcher::Config` have no shard selector, and the
//! watcher builds its requests itself; the layer adds the parameter below them, so the watcher
//! (its paging, its streaming lists, its resumes) stays kube-runtime's own.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use http::{Method, Request, Uri};
use tower::{Layer, Service};

/// The selectors to send, by collection path (`/apis/samplecontroller.k8s.io/v1alpha1/foos`);
/// shared by the layer and the watches that set them. Clones share one table.
#[derive(Clone, Debug, Default)]
pub struct Selectors(Arc<RwLock<HashMap<String, String>>>);

impl Selectors {
    /// Lists and watches of `collection` carry `selector` from now on; `None` stops it.
    pub fn set(&self, collection: &str, selector: Option<String>) {
        let mut table = self.0.write().unwrap_or_else(|e| e.into_inner());
        match selector {
            Some(selector) => table.insert(collection.to_owned(), selector),
            None => table.remove(collection),
        };
    }

    /// Sends no selector anywhere: between two runs of a replica's controllers.
    pub fn clear(&self) {
        self.0.write().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// `uri` with its collection's selector added, when a GET of a collection has one.
    fn rewrite(&self, method: &Method, uri: &Uri) -> Option<Uri> {
        if method != Method::GET {
            return None;
        }
        let table = self.0.read().unwrap_or_else(|e| e.into_inner());
        let selector = table.get(uri.path())?;
        // A request that names its own selector (the probe of the server's filtering) keeps it.
        if form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
            .any(|(k, _)| k == "shardSelector")
        {
            return None;
        }
        let query: String = form_urlencoded::Serializer::new(uri.query().unwrap_or_default().to_owned())
            .append_pair("shardSelector", selector)
            .finish();
        let mut parts = uri.clone().into_parts();
        parts.path_and_query = Some(format!("{}?{query}", uri.path()).parse().ok()?);
        Uri::from_parts(parts).ok()
    }

    pub fn layer(&self) -> SelectorLayer {
        SelectorLayer(self.clone())
    }
}

#[derive(Clone, Debug)]
pub struct SelectorLayer(Selectors);

impl<S> Layer<S> for SelectorLayer {
    type Service = WithSelectors<S>;

    fn layer(&self, inner: S) -> WithSelectors<S> {
        WithSelectors {
            inner,
            selectors: self.0.clone(),
        }
    }
}

/// The service a [`SelectorLayer`] wraps around the client's stack.
#[derive(Clone, Debug)]
pub struct WithSelectors<S> {
    inner: S,
    selectors: Selectors,
}

impl<S, B> Service<Request<B>> for WithSelectors<S>
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
        if let Some(uri) = self.selectors.rewrite(request.method(), request.uri()) {
            *request.uri_mut() = uri;
        }
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(selectors: &Selectors, method: Method, uri: &str) -> String {
        let mut service = selectors
            .layer()
            .layer(tower::service_fn(|request: Request<()>| async move {
                Ok::<_, std::convert::Infallible>(request.uri().to_string())
            }));
        let request = Request::builder().method(method).uri(uri).body(()).unwrap();
        futures::executor::block_on(service.call(request)).unwrap()
    }

    #[test]
    fn lists_and_watches_of_a_sharded_collection_carry_its_selector() {
        let selectors = Selectors::default();
        let selector = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
        selectors.set(
            "/apis/samplecontroller.k8s.io/v1alpha1/foos",
            Some(selector.into()),
        );
        let watch = sent(
            &selectors,
            Method::GET,
            "https://127.0.0.1:6443/apis/samplecontroller.k8s.io/v1alpha1/foos?watch=true&resourceVersion=7",
        );
        let query = watch.split_once('?').unwrap().1;
        let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
        assert_eq!(
            pairs,
            [
                ("watch".to_owned(), "true".to_owned()),
                ("resourceVersion".to_owned(), "7".to_owned()),
                ("shardSelector".to_owned(), selector.to_owned()),
            ]
        );
        let list = sent(
            &selectors,
            Method::GET,
            "/apis/samplecontroller.k8s.io/v1alpha1/foos",
        );
        assert!(
            list.contains("?shardSelector=shardRange%28object.metadata.uid"),
            "{list}"
        );
    }

    #[test]
    fn other_requests_pass_unchanged() {
        let selectors = Selectors::default();
        selectors.set(
            "/apis/samplecontroller.k8s.io/v1alpha1/foos",
            Some("shardRange(x)".into()),
        );
        for (method, uri) in [
            // One object, not the collection.
            (
                Method::GET,
                "/apis/samplecontroller.k8s.io/v1alpha1/namespaces/a/foos/b",
            ),
            // Another collection.
            (Method::GET, "/apis/apps/v1/deployments?watch=true"),
            // A write.
            (Method::POST, "/apis/samplecontroller.k8s.io/v1alpha1/foos"),
        ] {
            assert_eq!(sent(&selectors, method, uri), uri);
        }
        // A request with a selector of its own keeps it.
        let own = "/apis/samplecontroller.k8s.io/v1alpha1/foos?limit=1&shardSelector=x";
        assert_eq!(sent(&selectors, Method::GET, own), own);
        selectors.clear();
        let uri = "/apis/samplecontroller.k8s.io/v1alpha1/foos?watch=true";
        assert_eq!(sent(&selectors, Method::GET, uri), uri);
    }
}
