//! What triggers a controller's reconciles: built like kube-runtime's `Controller` (from the
//! same trigger functions), but only collected here, so that every trigger goes through the
//! runtime's [`FairQueue`](super::fair::FairQueue) before kube-runtime runs it.

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::controller::{trigger_owners, trigger_self, trigger_with};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use super::sharding::{Key, Ownership};

/// The triggers of a controller of `K`, and the cache its reconciles read.
pub struct Triggers<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    streams: Vec<BoxStream<'static, ObjectRef<K>>>,
    /// Only the objects this replica owns are reconciled.
    owned: Option<Ownership>,
}

/// The objects a trigger stream asks for; a watch's errors are its own to report and retry.
fn requested<K, E>(
    requests: impl Stream<Item = Result<kube::runtime::controller::ReconcileRequest<K>, E>> + Send + 'static,
) -> BoxStream<'static, ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + 'static,
{
    requests
        .filter_map(|request| futures::future::ready(request.ok().map(|r| r.obj_ref)))
        .boxed()
}

impl<K> Triggers<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    /// Each object of `events` (the controller's own watch, which fills `store`) triggers
    /// itself.
    pub fn for_stream(
        events: impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
        store: Store<K>,
    ) -> Self {
        Self {
            store,
            streams: vec![requested(trigger_self(events, ()))],
            owned: None,
        }
    }

    /// Each object of `events` triggers the `K` that controls it (its controller owner
    /// reference).
    pub fn owns_stream<Child>(
        mut self,
        events: impl Stream<Item = Result<Child, watcher::Error>> + Send + 'static,
    ) -> Self
    where
        Child: Resource<DynamicType = ()> + Send + 'static,
    {
        self.streams.push(requested(trigger_owners(events, (), ())));
        self
    }

    /// Each object of `events` triggers the objects `mapper` names.
    pub fn watches_stream<Other, I>(
        mut self,
        events: impl Stream<Item = Result<Other, watcher::Error>> + Send + 'static,
        mapper: impl Fn(Other) -> I + Send + 'static,
    ) -> Self
    where
        Other: Send + 'static,
        I: IntoIterator<Item = ObjectRef<K>> + 'static,
        I::IntoIter: Send,
    {
        self.streams.push(requested(trigger_with(events, mapper)));
        self
    }

    /// Each object of `objects` is triggered.
    pub fn reconcile_on(mut self, objects: impl Stream<Item = ObjectRef<K>> + Send + 'static) -> Self {
        self.streams.push(objects.boxed());
        self
    }

    /// Every cached object is triggered at each tick of `ticks`.
    pub fn reconcile_all_on(mut self, ticks: impl Stream<Item = ()> + Send + 'static) -> Self {
        let store = self.store.clone();
        self.streams.push(
            ticks
                .flat_map(move |()| {
                    futures::stream::iter(
                        store
                            .state()
                            .into_iter()
                            .map(|object| ObjectRef::from_obj(&*object)),
                    )
                })
                .boxed(),
        );
        self
    }

    /// Only the objects `ownership` gives this replica are reconciled: for a sharded controller
    /// that caches every object (a decision needs them all) but reconciles its share. An object
    /// sharded by UID is looked up in the cache; one not there is dropped: gone, or not yet
    /// cached (a child's or a neighbour's event during the first list), when its own event
    /// triggers it once it is. The runner checks ownership again as each reconcile starts.
    pub fn only_owned(mut self, ownership: Option<Ownership>) -> Self {
        self.owned = ownership;
        self
    }

    /// Which of the cached objects this replica reconciles, when not all of them.
    pub(crate) fn owned(&self) -> Option<Ownership> {
        self.owned
    }

    /// The cache the controller's reconciles read.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Every trigger, in one stream.
    pub(crate) fn into_stream(self) -> (Store<K>, BoxStream<'static, ObjectRef<K>>) {
        let triggers = futures::stream::select_all(self.streams);
        let stream = match self.owned {
            Some(owned) => {
                let store = self.store.clone();
                triggers
                    .filter(move |object| {
                        let mine = match owned.key {
                            Key::Namespace => owned
                                .buckets
                                .admits(object.namespace.as_deref().unwrap_or_default()),
                            Key::Uid => store.get(object).is_some_and(|cached| owned.owns(&*cached)),
                        };
                        futures::future::ready(mine)
                    })
                    .boxed()
            }
            None => triggers.boxed(),
        };
        (self.store, stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::sharding::{Buckets, bucket_of, fnv1a};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;

    fn config_map(name: &str, uid: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.uid = Some(uid.into());
        cm
    }

    #[tokio::test]
    async fn a_uid_sharded_controller_is_triggered_for_its_cached_objects_only() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let mine = config_map("mine", "0b0c6a52-3c1e-4d6f-9a2b-5e8f7c1d2a01");
        let theirs = config_map("theirs", "9f4e2d1c-7b6a-4c5d-8e9f-0a1b2c3d4e5f");
        let bucket = |cm: &ConfigMap| bucket_of(fnv1a(cm.metadata.uid.as_deref().unwrap()));
        assert_ne!(bucket(&mine), bucket(&theirs), "two UIDs of different buckets");
        for cm in [&mine, &theirs] {
            writer.apply_watcher_event(&watcher::Event::Apply(cm.clone()));
        }
        // A child's or a neighbour's event may name an object before the first list has
        // cached it: which replica owns it cannot be told yet, and its own event comes later.
        let not_yet_cached = ObjectRef::<ConfigMap>::new("not-yet").within("ns");
        let refs = vec![
            ObjectRef::from_obj(&theirs),
            not_yet_cached,
            ObjectRef::from_obj(&mine),
        ];
        let (_, triggered) = Triggers::for_stream(futures::stream::empty(), store)
            .reconcile_on(futures::stream::iter(refs))
            .only_owned(Some(Ownership {
                key: Key::Uid,
                buckets: Buckets::NONE.with(bucket(&mine)),
            }))
            .into_stream();
        let triggered: Vec<ObjectRef<ConfigMap>> = triggered.collect().await;
        assert_eq!(triggered, [ObjectRef::from_obj(&mine)]);
    }
}
