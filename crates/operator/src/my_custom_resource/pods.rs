//! The Pod side of the controller: a cache of the Pods in the watched namespaces, and their
//! changes as triggers for the resources that name them.
//!
//! The controller needs a Pod's name, namespace and deletion mark, never its spec or status, so
//! Pods are watched as metadata only (`PartialObjectMetadata`): the apiserver sends a few
//! hundred bytes per Pod instead of the whole object, and the cache stays small however many
//! Pods the cluster runs. Whole Pods are cached only when a measurement asks for them
//! ([`PodWatch::Full`]), to show what the metadata-only watch saves.

use std::fmt::Debug;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::status::Friend;
use crate::metrics::Metrics;

/// Where a Pod is: (namespace, name), the key of the index of resources by the Pod they name.
pub type PodKey = (String, String);

/// How Pods are watched and cached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodWatch {
    /// Metadata only: what the controller runs with.
    #[default]
    Metadata,
    /// Whole Pods, as the seed's controller-runtime cache keeps them. A measurement aid, not for
    /// production: it costs memory for fields the controller never reads.
    Full,
}

/// The cached Pods of the watched namespaces.
#[derive(Clone)]
pub enum PodCache {
    Metadata(Store<PartialObjectMeta<Pod>>),
    /// Only with [`PodWatch::Full`].
    Full(Store<Pod>),
}

impl PodCache {
    /// What the cache says about the Pod `name` in `namespace`; no API request.
    pub fn friend(&self, namespace: &str, name: &str) -> Friend {
        match self {
            PodCache::Metadata(store) => {
                let pod = store.get(&ObjectRef::new(name).within(namespace));
                Friend::from_metadata(pod.as_deref().map(|p| &p.metadata))
            }
            PodCache::Full(store) => {
                let pod = store.get(&ObjectRef::new(name).within(namespace));
                Friend::from_metadata(pod.as_deref().map(|p| &p.metadata))
            }
        }
    }

    /// Completes once the first list of Pods is in the cache. Before that every Pod would look
    /// missing, and a healthy resource would be marked unhealthy for a moment.
    pub async fn wait_until_ready(&self) {
        // An error means the watch is gone because the controller is shutting down; the
        // reconcile then finishes on whatever the cache holds.
        let _ = match self {
            PodCache::Metadata(store) => store.wait_until_ready().await,
            PodCache::Full(store) => store.wait_until_ready().await,
        };
    }
}

/// Watches the Pods of `api` into a new cache; returns the cache and the stream of changed
/// Pods (including deleted ones), to be mapped to the resources that name them.
pub fn watch<P>(
    api: Api<P>,
    metrics: &Arc<Metrics>,
) -> (Store<P>, impl Stream<Item = Result<P, watcher::Error>> + Send + 'static)
where
    P: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let events = watcher(api, watcher::Config::default())
        .default_backoff()
        .inspect(metrics.watch_observer("pods"))
        .modify(|pod| trim(pod.meta_mut()))
        .reflect(writer)
        .touched_objects();
    (store, events)
}

/// The index key of a Pod.
pub fn key<P: Resource>(pod: &P) -> PodKey {
    (pod.namespace().unwrap_or_default(), pod.name_any())
}

/// Keeps only what the controller reads (name, namespace, deletion mark) and what identifies the
/// object (uid, resourceVersion). Even metadata-only, labels, annotations, owner references and
/// managed fields would be most of what is cached for each of thousands of Pods.
fn trim(meta: &mut ObjectMeta) {
    let full = std::mem::take(meta);
    *meta = ObjectMeta {
        name: full.name,
        namespace: full.namespace,
        uid: full.uid,
        resource_version: full.resource_version,
        deletion_timestamp: full.deletion_timestamp,
        ..ObjectMeta::default()
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn trimming_keeps_identity_and_the_deletion_mark() {
        let mut meta = ObjectMeta {
            name: Some("funny-joe".into()),
            namespace: Some("default".into()),
            uid: Some("u".into()),
            resource_version: Some("7".into()),
            deletion_timestamp: Some(Time(Timestamp::UNIX_EPOCH)),
            labels: Some([("app".to_owned(), "x".to_owned())].into()),
            annotations: Some([("note".to_owned(), "y".repeat(1000))].into()),
            finalizers: Some(vec!["hold".into()]),
            ..ObjectMeta::default()
        };
        trim(&mut meta);
        assert_eq!(meta.name.as_deref(), Some("funny-joe"));
        assert_eq!(meta.namespace.as_deref(), Some("default"));
        assert_eq!(meta.uid.as_deref(), Some("u"));
        assert_eq!(meta.resource_version.as_deref(), Some("7"));
        assert!(meta.deletion_timestamp.is_some());
        assert!(meta.labels.is_none() && meta.annotations.is_none() && meta.finalizers.is_none());
    }
}
