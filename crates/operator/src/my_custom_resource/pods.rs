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

use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::mark_ready;
use super::status::Friend;
use crate::Shared;
use crate::metrics::Metrics;

/// Where a Pod is: (namespace, name), the key of the index of resources by the Pod they name.
pub type PodKey = (String, String);

/// A changed Pod, as the mapper to resources sees it: its metadata, however Pods are watched.
pub type PodEvent = Result<PartialObjectMeta<Pod>, watcher::Error>;

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
pub struct PodCache {
    store: PodStore,
    /// True once the first list of Pods is in the store.
    listed: watch::Receiver<bool>,
}

#[derive(Clone)]
enum PodStore {
    Metadata(Store<PartialObjectMeta<Pod>>),
    /// Only with [`PodWatch::Full`].
    Full(Store<Pod>),
}

impl PodCache {
    /// What the cache says about the Pod `name` in `namespace`; no API request.
    pub fn friend(&self, namespace: &str, name: &str) -> Friend {
        match &self.store {
            PodStore::Metadata(store) => {
                let pod = store.get(&ObjectRef::new(name).within(namespace));
                Friend::from_metadata(pod.as_deref().map(|p| &p.metadata))
            }
            PodStore::Full(store) => {
                let pod = store.get(&ObjectRef::new(name).within(namespace));
                Friend::from_metadata(pod.as_deref().map(|p| &p.metadata))
            }
        }
    }

    /// Completes once the first list of Pods is in the cache (true), or when the watch is gone
    /// (false). Before the first list every Pod would look missing, and a healthy resource
    /// would be marked unhealthy for a moment.
    ///
    /// Any number of reconciles may wait at once. (kube's `Store::wait_until_ready` wakes only
    /// one of several concurrent waiters: its readiness is a single oneshot receiver, which
    /// keeps the waker of whoever polled it last. The others would wait forever.)
    pub async fn wait_until_ready(&self) -> bool {
        self.listed.clone().wait_for(|listed| *listed).await.is_ok()
    }
}

/// Watches the Pods of the watched namespaces into a new cache, as `how` says. Returns the cache
/// and the stream of changed Pods (deleted ones included), to be mapped to the resources that
/// name them.
pub fn cache_and_events(shared: &Shared, how: PodWatch) -> (PodCache, BoxStream<'static, PodEvent>) {
    let (listed_tx, listed) = watch::channel(false);
    match how {
        PodWatch::Metadata => {
            let (store, events) = reflect(shared.api::<PartialObjectMeta<Pod>>(), &shared.metrics, listed_tx);
            let store = PodStore::Metadata(store);
            (PodCache { store, listed }, events.boxed())
        }
        PodWatch::Full => {
            let (store, events) = reflect(shared.api::<Pod>(), &shared.metrics, listed_tx);
            // The cache keeps the whole Pods; the mapper needs only their metadata.
            let events = events.map_ok(|pod| pod.metadata.into_response_partial::<Pod>());
            let store = PodStore::Full(store);
            (PodCache { store, listed }, events.boxed())
        }
    }
}

fn reflect<P>(
    api: Api<P>,
    metrics: &Arc<Metrics>,
    listed: watch::Sender<bool>,
) -> (
    Store<P>,
    impl Stream<Item = Result<P, watcher::Error>> + Send + 'static,
)
where
    P: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let events = watcher(api, watcher::Config::default())
        .default_backoff()
        .inspect(metrics.watch_observer("pods"))
        .modify(|pod| trim(pod.meta_mut()))
        .reflect(writer)
        .inspect_ok(mark_ready(listed))
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
    use kube::runtime::watcher::Event;
    use std::time::Duration;

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

    fn pod(name: &str, terminating: bool) -> PartialObjectMeta<Pod> {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            deletion_timestamp: terminating.then_some(Time(Timestamp::UNIX_EPOCH)),
            ..ObjectMeta::default()
        }
        .into_response_partial()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_waiter_wakes_when_the_first_list_is_in() {
        let (store, mut writer) = reflector::store();
        let (listed_tx, listed) = watch::channel(false);
        let cache = PodCache {
            store: PodStore::Metadata(store),
            listed,
        };
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.wait_until_ready().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut mark = mark_ready(listed_tx);
        for event in [
            Event::Init,
            Event::InitApply(pod("funny-joe", false)),
            Event::InitApply(pod("leaving", true)),
            Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
            mark(&event);
        }
        for waiter in waiters {
            let ready = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("every waiter wakes")
                .expect("the waiter does not panic");
            assert!(ready);
        }
        assert_eq!(cache.friend("default", "funny-joe"), Friend::Found);
        assert_eq!(cache.friend("default", "leaving"), Friend::Terminating);
        assert_eq!(cache.friend("default", "lonely-jane"), Friend::Missing);
        assert_eq!(cache.friend("elsewhere", "funny-joe"), Friend::Missing);
    }
}
