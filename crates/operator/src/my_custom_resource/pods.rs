//! The Pod side of the controller: a cache of the Pods in the watched namespaces, and their
//! changes as triggers for the resources that name them.
//!
//! The controller needs a Pod's name, namespace and deletion mark, never its spec or status, so
//! Pods are watched as metadata only (`PartialObjectMetadata`): the apiserver sends a few
//! hundred bytes per Pod instead of the whole object, and the cache stays small however many
//! Pods the cluster runs. Whole Pods are cached only when a measurement asks for them
//! ([`PodWatch::Full`]), to show what the metadata-only watch saves.

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::status::Friend;
use crate::runtime::watch::no_index;
use crate::runtime::{Shared, Synced};

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
}

/// The Pod watch: its cache, and the changed Pods (deleted ones included), to be mapped to the
/// resources that name them.
pub struct Pods {
    pub cache: PodCache,
    pub synced: Synced,
    pub events: BoxStream<'static, PodEvent>,
}

/// Watches the Pods of the watched namespaces into a new cache, as `how` says.
pub fn cache(shared: &Shared, how: PodWatch) -> Pods {
    match how {
        PodWatch::Metadata => {
            let pods = shared.watch_cache(
                shared.api::<PartialObjectMeta<Pod>>(),
                "pods",
                watcher::Config::default(),
                |pod: &mut PartialObjectMeta<Pod>| trim(pod.meta_mut()),
                no_index,
            );
            Pods {
                cache: PodCache::Metadata(pods.store),
                synced: pods.synced,
                events: pods.events,
            }
        }
        PodWatch::Full => {
            let pods = shared.watch_cache(
                shared.api::<Pod>(),
                "pods",
                watcher::Config::default(),
                |pod: &mut Pod| trim(pod.meta_mut()),
                no_index,
            );
            Pods {
                cache: PodCache::Full(pods.store),
                synced: pods.synced,
                // The cache keeps the whole Pods; the mapper needs only their metadata.
                events: pods
                    .events
                    .map_ok(|pod| pod.metadata.into_response_partial::<Pod>())
                    .boxed(),
            }
        }
    }
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
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

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

    #[test]
    fn a_friend_is_found_terminating_or_missing_in_its_own_namespace() {
        let (store, mut writer) = reflector::store();
        let cache = PodCache::Metadata(store);
        for event in [
            Event::Init,
            Event::InitApply(pod("funny-joe", false)),
            Event::InitApply(pod("leaving", true)),
            Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
        }
        assert_eq!(cache.friend("default", "funny-joe"), Friend::Found);
        assert_eq!(cache.friend("default", "leaving"), Friend::Terminating);
        assert_eq!(cache.friend("default", "lonely-jane"), Friend::Missing);
        assert_eq!(cache.friend("elsewhere", "funny-joe"), Friend::Missing);
    }
}
