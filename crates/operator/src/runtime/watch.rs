//! The watches of a controller: each one a kube-runtime watcher with backoff, counted in the
//! metrics, reflected into a cache, and marking its [`Synced`] once the first list is in.
//!
//! [`Shared::watch_primary`] watches the controller's own resource: its cache is the
//! controller's store, its changes trigger reconciles (filtered by a predicate, so that the
//! controller's own status writes trigger nothing), and it tells [`OwnWrites`] which writes the
//! cache has caught up with. [`Shared::watch_cache`] watches anything else the reconcile reads,
//! whose changes the controller maps to its objects (`owns_stream`, `watches_stream`);
//! [`Shared::watch_followed`] does the same for a controller that keeps a table of its own.

use std::fmt::Debug;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use kube::Resource;
use kube::api::{Api, WatchEvent, WatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{Predicate, WatchStreamExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch as channel;

use super::Shared;
use super::controller::Object;
use super::lean::Lean;
use super::metrics::Filtering;
use super::own_writes::OwnWrites;
use super::sharding::{self, Ownership};

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

/// `--initial-list`: a way, or `auto`, which streams where the API server serves streaming
/// lists and pages elsewhere (WatchList is off by default in Kubernetes 1.33 and before 1.32,
/// and can be turned off; kube-runtime's watcher does not fall back by itself, it would retry
/// the refused watch forever).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum InitialListChoice {
    #[default]
    Auto,
    List,
    Stream,
}

impl InitialListChoice {
    /// The way to use; when `auto`, `streams_lists` asks the API server whether it streams
    /// lists (see [`serves_streaming_lists`]).
    pub async fn resolve<F>(self, streams_lists: impl FnOnce() -> F) -> Result<InitialList, kube::Error>
    where
        F: Future<Output = Result<bool, kube::Error>>,
    {
        Ok(match self {
            InitialListChoice::List => InitialList::List,
            InitialListChoice::Stream => InitialList::Stream,
            InitialListChoice::Auto if streams_lists().await? => InitialList::Stream,
            InitialListChoice::Auto => InitialList::List,
        })
    }
}

/// The annotation on the bookmark that ends a streamed list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Whether the API server streams lists of `api`'s kind: asks for a streamed list that matches
/// no object, which a server that serves them ends with the bookmark marking the end of the
/// initial events. A server that refuses the parameters (a 4xx), reports an error in the
/// stream, or ends the watch without that bookmark does not.
pub async fn serves_streaming_lists<K>(api: &Api<K>) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let params = WatchParams::streaming_lists()
        .labels("sample-operator.local/streaming-list-probe in (none)")
        // A server that ignores the parameters sends nothing and ends the watch at this.
        .timeout(5);
    let stream = match api.watch(&params, "0").await {
        Ok(stream) => stream,
        Err(kube::Error::Api(status)) if (400..500).contains(&status.code) && status.code != 403 => {
            return Ok(false);
        }
        Err(e) => return Err(e),
    };
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.try_next().await? {
        match event {
            WatchEvent::Bookmark(bookmark)
                if bookmark
                    .metadata
                    .annotations
                    .get(INITIAL_EVENTS_END)
                    .is_some_and(|v| v == "true") =>
            {
                return Ok(true);
            }
            WatchEvent::Error(_) => return Ok(false),
            _ => {}
        }
    }
    Ok(false)
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

/// Objects a controller follows into a table of its own: their changes, and when the first
/// list is in.
pub struct Followed<K: Resource<DynamicType = ()> + 'static> {
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
        // Read without the metadata that `strip_unread_metadata` would drop (selecting by label
        // is the apiserver's work, done before the object gets here).
        let api = self.api::<Lean<K>>();
        let owned = self.owned_only(&api, K::crd_name());
        let events = watcher::watcher(api, selection)
            .default_backoff()
            // The CRD's name (`foos.example.com`) tells the kinds of one plural apart.
            .inspect(self.metrics.watch_observer(K::crd_name()))
            .try_filter(owned)
            .map_ok(unwrap_lean)
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
        let (store, mut writer) = reflector::store();
        let followed = self.watch_followed(api, name, selection, prepare, move |event| {
            index(event);
            writer.apply_watcher_event(event);
        });
        Cache {
            store,
            events: followed.events,
            synced: followed.synced,
        }
    }

    /// Watches `api` (as `selection` says) for a controller that keeps what it reads of the
    /// objects in a table of its own rather than a cache of whole objects: `follow` sees every
    /// event, in order, after `prepare` and before the changed objects are passed on.
    pub fn watch_followed<C>(
        &self,
        api: Api<C>,
        name: &'static str,
        selection: watcher::Config,
        prepare: impl FnMut(&mut C) + Send + 'static,
        mut follow: impl FnMut(&Event<C>) + Send + 'static,
    ) -> Followed<C>
    where
        C: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        self.watch_followed_deciding(api, name, selection, prepare, move |event| {
            follow(event);
            true
        })
    }

    /// [`watch_followed`](Shared::watch_followed), for a table that also knows which changes
    /// matter: `follow` returns whether the event's object is passed on, which a reconcile that
    /// reads only the table needs for nothing but a change of what the table keeps.
    pub fn watch_followed_deciding<C>(
        &self,
        api: Api<C>,
        name: &'static str,
        selection: watcher::Config,
        prepare: impl FnMut(&mut C) + Send + 'static,
        mut follow: impl FnMut(&Event<C>) -> bool + Send + 'static,
    ) -> Followed<C>
    where
        C: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let (synced, mut mark) = Synced::new();
        let selection = self.config.initial_list.apply(selection);
        let owned = self.owned_only(&api, name);
        let events = watcher::watcher(api, selection)
            .default_backoff()
            .inspect(self.metrics.watch_observer(name))
            .try_filter(owned)
            .modify(prepare)
            .try_filter_map(move |event| {
                let passed = follow(&event);
                mark(&event);
                futures::future::ready(Ok(passed.then_some(event)))
            })
            .touched_objects()
            .boxed();
        Followed { events, synced }
    }

    /// With `--sharding`, for a controller [`sharded_by`](Shared::sharded_by) a key: asks the
    /// API server for `api`'s objects of this replica's buckets only, and returns the filter
    /// that drops any other (a server without KEP-5866 ignores the selector). Checks once, in
    /// the background, which of the two filters, for the metrics and the log.
    fn owned_only<C>(
        &self,
        api: &Api<C>,
        name: &'static str,
    ) -> impl FnMut(&Event<C>) -> std::future::Ready<bool> + Send + 'static
    where
        C: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        // Held by the filter, so that the check below ends with the watch.
        let alive = std::sync::Arc::new(());
        let ownership = self.shard_key.zip(self.config.shard.as_ref()).map(|(key, run)| {
            let collection = api.resource_url().to_owned();
            run.selectors.set(&collection, run.buckets.selector(key));
            let (client, metrics, watching) = (self.client.clone(), self.metrics.clone(), std::sync::Arc::downgrade(&alive));
            tokio::spawn(async move {
                // Until the answers tell (an empty collection does not), while the watch lives.
                while watching.strong_count() > 0 {
                    match sharding::server_filters(&client, &collection, key).await {
                        Ok(Some(true)) => {
                            metrics.set_shard_filtering(name, Filtering::Server);
                            return;
                        }
                        Ok(Some(false)) => {
                            tracing::warn!(resource = name, "the API server ignores shardSelector (feature gate ShardedListAndWatch off?): this replica receives every object and drops the other replicas' itself");
                            metrics.set_shard_filtering(name, Filtering::Client);
                            return;
                        }
                        // The watch reports errors; the filter holds either way.
                        Ok(None) | Err(_) => tokio::time::sleep(std::time::Duration::from_secs(5)).await,
                    }
                }
            });
            Ownership {
                key,
                buckets: run.buckets,
            }
        });
        let metrics = self.metrics.clone();
        move |event: &Event<C>| {
            let _alive = &alive;
            let admitted = ownership.is_none_or(|o| o.admits(event));
            if !admitted {
                metrics.shard_event_filtered(name);
            }
            std::future::ready(admitted)
        }
    }

    /// Watches `api`'s objects (as `selection` says) without caching them, for a controller to
    /// map to its objects: those whose change may end what they block ([`owner_changes`]).
    /// For objects that only ever trigger, such as a foreign object in the way of one of the
    /// controller's; watched as `PartialObjectMeta`, their metadata is all that comes, and of
    /// each only two hashes are kept.
    pub fn watch_triggers<C>(
        &self,
        api: Api<C>,
        name: &'static str,
        selection: watcher::Config,
    ) -> BoxStream<'static, Result<C, watcher::Error>>
    where
        C: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let selection = self.config.initial_list.apply(selection);
        owner_changes(
            watcher::watcher(api, selection)
                .default_backoff()
                .inspect(self.metrics.watch_observer(name)),
        )
        .boxed()
    }
}

/// The objects of a trigger watch whose change may end what they block: one seen for the first
/// time (also at a re-list), one whose owner references changed (adopted or let go), and one
/// deleted (or moved out of the watch's selection, which the API server reports as a
/// deletion). Any other change (its status, its spec, its annotations) passes by: a controller's
/// object waits for a foreign object in its way to go or to become its own, never for it to
/// change otherwise, and a busy foreign Deployment would otherwise wake every object it blocks
/// on each of its status updates.
pub fn owner_changes<C: Resource>(
    events: impl futures::Stream<Item = Result<Event<C>, watcher::Error>>,
) -> impl futures::Stream<Item = Result<C, watcher::Error>> {
    use std::collections::HashMap;
    use std::hash::{BuildHasher, RandomState};
    let hashes = RandomState::new();
    // The hash of an object's namespace and name, and the hash of its owner references.
    let hash = move |object: &C| {
        let meta = object.meta();
        let owners: Vec<(&str, bool)> = meta
            .owner_references
            .iter()
            .flatten()
            .map(|o| (o.uid.as_str(), o.controller == Some(true)))
            .collect();
        (
            hashes.hash_one((meta.namespace.as_deref(), meta.name.as_deref())),
            hashes.hash_one(owners),
        )
    };
    // By the hash of each object's namespace and name, the hash of its owners.
    let mut seen: HashMap<u64, u64> = HashMap::new();
    let mut relisted: Option<HashMap<u64, u64>> = None;
    events.try_filter_map(move |event| {
        let passed = match event {
            Event::Apply(object) => {
                let (key, owners) = hash(&object);
                (seen.insert(key, owners) != Some(owners)).then_some(object)
            }
            Event::Delete(object) => {
                seen.remove(&hash(&object).0);
                Some(object)
            }
            Event::Init => {
                relisted = Some(HashMap::new());
                None
            }
            Event::InitApply(object) => {
                let (key, owners) = hash(&object);
                if let Some(relisted) = relisted.as_mut() {
                    relisted.insert(key, owners);
                }
                (seen.get(&key) != Some(&owners)).then_some(object)
            }
            Event::InitDone => {
                if let Some(relisted) = relisted.take() {
                    seen = relisted;
                }
                None
            }
        };
        futures::future::ready(Ok(passed))
    })
}

/// The object of an event, as its own type.
fn unwrap_lean<K>(event: Event<Lean<K>>) -> Event<K> {
    match event {
        Event::Apply(Lean(object)) => Event::Apply(object),
        Event::Delete(Lean(object)) => Event::Delete(object),
        Event::Init => Event::Init,
        Event::InitApply(Lean(object)) => Event::InitApply(object),
        Event::InitDone => Event::InitDone,
    }
}

/// Drops what no reconcile reads and whose size the object's writer, not the operator, decides:
/// managed fields, annotations (kubectl's last-applied configuration of a large object is
/// 250 KB) and labels (the apiserver does not cap them in total: a megabyte fits). For every
/// object the operator keeps of a kind whose labels it does not select on; the controllers' own
/// objects are read without them ([`Lean`]).
pub fn strip_unread_metadata<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
    obj.meta_mut().annotations = None;
    obj.meta_mut().labels = None;
}

/// Caches objects as they come.
pub fn no_preparation<C>(_: &mut C) {}

/// For caches that no index follows.
pub fn no_index<C>(_: &Event<C>) {}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;
    use std::time::Duration;

    /// A client whose API server answers every request with `status` and `body`, after
    /// checking that it is the streamed-list probe.
    fn answering(status: u16, body: &'static str) -> kube::Client {
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| async move {
            let query = request.uri().query().unwrap_or_default().to_owned();
            assert!(query.contains("watch=true"), "{query}");
            assert!(query.contains("sendInitialEvents=true"), "{query}");
            assert!(query.contains("resourceVersionMatch=NotOlderThan"), "{query}");
            assert!(query.contains("allowWatchBookmarks=true"), "{query}");
            assert!(query.contains("labelSelector="), "{query}");
            http::Response::builder()
                .status(status)
                .body(kube::client::Body::from(body.as_bytes().to_vec()))
        });
        kube::Client::new(service, "default")
    }

    async fn served(status: u16, body: &'static str) -> Result<bool, kube::Error> {
        serves_streaming_lists(&Api::<ConfigMap>::all(answering(status, body))).await
    }

    #[tokio::test]
    async fn a_server_that_ends_the_initial_events_serves_streaming_lists() {
        let events = concat!(
            r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"7","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
            "\n"
        );
        assert!(served(200, events).await.unwrap());
    }

    #[tokio::test]
    async fn a_server_that_refuses_or_ignores_the_parameters_does_not() {
        // 1.33 and before 1.32 by default: the parameters are invalid there.
        let invalid = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled","reason":"Invalid","code":422}"#;
        assert!(!served(422, invalid).await.unwrap());
        // A server that does not know them watches as before: a bookmark, but not the one
        // that ends initial events, and the watch ends at its timeout.
        let plain = concat!(
            r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"7"}}}"#,
            "\n"
        );
        assert!(!served(200, plain).await.unwrap());
        let error = concat!(
            r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old","reason":"Expired","code":410}}"#,
            "\n"
        );
        assert!(!served(200, error).await.unwrap());
    }

    #[tokio::test]
    async fn a_forbidden_watch_is_an_error_not_an_answer() {
        let forbidden = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"configmaps is forbidden","reason":"Forbidden","code":403}"#;
        assert!(served(403, forbidden).await.is_err());
    }

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

    #[tokio::test]
    async fn a_trigger_watch_passes_on_coming_going_and_a_change_of_owner_only() {
        let object = |name: &str, owner: Option<&str>, data: &str| {
            let mut cm = ConfigMap::default();
            cm.metadata.namespace = Some("ns".into());
            cm.metadata.name = Some(name.into());
            cm.metadata.owner_references = owner.map(|uid| {
                vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    uid: uid.into(),
                    controller: Some(true),
                    ..Default::default()
                }]
            });
            cm.data = Some([("k".to_owned(), data.to_owned())].into());
            cm
        };
        let events = vec![
            Event::Init,
            Event::InitApply(object("a", None, "1")),
            Event::InitApply(object("b", None, "1")),
            Event::InitDone,
            // Changes that end no conflict: nothing passes.
            Event::Apply(object("a", None, "2")),
            Event::Apply(object("a", None, "3")),
            // Adopted, then let go: each passes.
            Event::Apply(object("a", Some("uid-1"), "3")),
            Event::Apply(object("a", Some("uid-1"), "4")),
            Event::Apply(object("a", None, "4")),
            // Gone: passes.
            Event::Delete(object("b", None, "1")),
            // A re-list: what is unchanged since passes by; what is new or changed passes.
            Event::Init,
            Event::InitApply(object("a", None, "5")),
            Event::InitApply(object("c", None, "1")),
            Event::InitDone,
            Event::Apply(object("c", None, "2")),
            Event::Apply(object("b", None, "2")),
        ];
        let passed: Vec<String> = owner_changes(futures::stream::iter(events.into_iter().map(Ok)))
            .map(|object| {
                let object = object.unwrap();
                format!("{}:{}", object.name_any(), object.data.unwrap()["k"])
            })
            .collect()
            .await;
        assert_eq!(passed, ["a:1", "b:1", "a:3", "a:4", "b:1", "c:1", "b:2"]);
    }
}
