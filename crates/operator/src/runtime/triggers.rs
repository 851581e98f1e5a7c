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
    /// sharded by UID is looked up in the cache; one no longer there passes, and kube-runtime
    /// drops it as gone.
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
                            Key::Uid => store.get(object).is_none_or(|cached| owned.owns(&*cached)),
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
