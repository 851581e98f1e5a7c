//! The watches of a controller: each one a kube-runtime watcher with backoff, counted in the
//! metrics, reflected into a cache, and marking its [`Synced`] once the first list is in.
//!
//! [`Shared::watch_primary`] watches the controller's own resource: its cache is the
//! controller's store, its changes trigger reconciles (filtered by a predicate, so that the
//! controller's own status writes trigger nothing), and it tells [`OwnWrites`] which writes the
//! cache has caught up with. [`Shared::watch_cache`] watches anything else the reconcile reads,
//! whose changes the controller maps to its objects (`owns_stream`, `watches_stream`).

use std::fmt::Debug;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{Predicate, WatchStreamExt};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch as channel;

use super::Shared;
use super::controller::Object;
use super::own_writes::OwnWrites;

/// How a watch fetches its first list of objects, and again after it lost its place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum InitialList {
    /// LIST requests in pages of 500, then a watch from the list's resourceVersion.
    #[default]
    List,
    /// One watch that first streams the current objects (Kubernetes' WatchList, served by
    /// default from 1.34): no LIST, and the API server sends from its watch cache.
    Stream,
}

impl InitialList {
    pub fn apply(self, selection: watcher::Config) -> watcher::Config {
        match self {
            InitialList::List => selection,
            InitialList::Stream => selection.streaming_lists(),
        }
    }
}

/// Whether a watch has delivered its first complete list into its cache. Any number of tasks
/// may wait for it. (kube's `Store::wait_until_ready` wakes only one of several concurrent
/// waiters: its readiness is a oneshot receiver, which keeps the waker of whoever polled last.)
#[derive(Clone, Debug)]
pub struct Synced(channel::Receiver<bool>);

impl Synced {
    /// A flag, and the callback that sets it, for `inspect_ok` after the reflector.
    pub fn new<K>() -> (Self, impl FnMut(&Event<K>) + Send + 'static) {
        let (tx, rx) = channel::channel(false);
        let mark = move |event: &Event<K>| {
            if matches!(event, Event::InitDone) {
                tx.send_replace(true);
            }
        };
        (Self(rx), mark)
    }

    /// Completes once the first list is in (true), or when the watch is gone before (false):
    /// a stopped controller no longer polls its watches, and its caches never fill.
    pub async fn wait(&self) -> bool {
        self.0.clone().wait_for(|synced| *synced).await.is_ok()
    }

    /// Whether the first list is in, now.
    pub fn is_synced(&self) -> bool {
        *self.0.borrow()
    }
}

/// The controller's own resource: its cache, its triggers, and its writes in flight.
pub struct Primary<K: Resource<DynamicType = ()> + 'static> {
    pub store: Store<K>,
    /// The changed objects that need a reconcile.
    pub events: BoxStream<'static, Result<K, watcher::Error>>,
    pub own_writes: OwnWrites<K>,
    pub synced: Synced,
}

/// Anything else a reconcile reads: its cache and its changed objects.
pub struct Cache<K: Resource<DynamicType = ()> + 'static> {
    pub store: Store<K>,
    /// Changed and deleted objects, to be mapped to the controller's objects.
    pub events: BoxStream<'static, Result<K, watcher::Error>>,
    pub synced: Synced,
}

impl Shared {
    /// Watches the controller's own resource `K` in the watched namespaces (as `selection`
    /// says). Only changes that `predicate` sees trigger a reconcile; `index` sees every event
    /// before the cache does, so that an index kept from it is never behind the cache.
    pub fn watch_primary<K>(
        &self,
        selection: watcher::Config,
        predicate: impl Predicate<K> + Send + 'static,
        mut index: impl FnMut(&Event<K>) + Send + 'static,
    ) -> Primary<K>
    where
        K: Object + kube::CustomResourceExt,
    {
        let (store, writer) = reflector::store();
        let own_writes = OwnWrites::default();
        let seen = own_writes.clone();
        let (synced, mark) = Synced::new();
        let selection = self.config.initial_list.apply(selection);
        let events = watcher::watcher(self.api::<K>(), selection)
            .default_backoff()
            // The CRD's name (`foos.example.com`) tells the kinds of one plural apart.
            .inspect(self.metrics.watch_observer(K::crd_name()))
            .modify(|obj| obj.managed_fields_mut().clear())
            .inspect_ok(move |event| index(event))
            .reflect(writer)
            .inspect_ok(move |event| seen.observe(event))
            .inspect_ok(mark)
            .applied_objects()
            .predicate_filter(predicate, Default::default())
            .boxed();
        Primary {
            store,
            events,
            own_writes,
            synced,
        }
    }

    /// Watches `api` (as `selection` says) into a cache. `prepare` trims each object before it
    /// is cached; `index` sees every event before the cache does.
    pub fn watch_cache<C>(
        &self,
        api: Api<C>,
        name: &'static str,
        selection: watcher::Config,
        prepare: impl FnMut(&mut C) + Send + 'static,
        mut index: impl FnMut(&Event<C>) + Send + 'static,
    ) -> Cache<C>
    where
        C: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let (store, writer) = reflector::store();
        let (synced, mark) = Synced::new();
        let selection = self.config.initial_list.apply(selection);
        let events = watcher::watcher(api, selection)
            .default_backoff()
            .inspect(self.metrics.watch_observer(name))
            .modify(prepare)
            .inspect_ok(move |event| index(event))
            .reflect(writer)
            .inspect_ok(mark)
            .touched_objects()
            .boxed();
        Cache {
            store,
            events,
            synced,
        }
    }
}

/// Caches objects as they come.
pub fn no_preparation<C>(_: &mut C) {}

/// For caches that no index follows.
pub fn no_index<C>(_: &Event<C>) {}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_waiter_wakes_once_the_first_list_is_in() {
        let (synced, mut mark) = Synced::new::<ConfigMap>();
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let synced = synced.clone();
                tokio::spawn(async move { synced.wait().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        mark(&Event::Init);
        mark(&Event::InitApply(ConfigMap::default()));
        assert!(!synced.is_synced(), "synced before the list is complete");
        mark(&Event::InitDone);
        for waiter in waiters {
            let synced = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("every waiter wakes")
                .expect("no panic");
            assert!(synced);
        }
        assert!(synced.is_synced());
    }

    #[tokio::test]
    async fn waiters_give_up_when_the_watch_is_gone() {
        let (synced, mark) = Synced::new::<ConfigMap>();
        drop(mark);
        assert!(!synced.wait().await);
    }
}
