//! The shared reconcile loop around kube-runtime's `applier`.
//!
//! A controller module gives the runtime a [`Wiring`]: its [`Triggers`], built from its
//! watches (which say what triggers a reconcile), the caches its reconcile reads, and
//! a [`Reconciler`], whose `reconcile` is the domain's short driver of named steps. [`run`]
//! does the rest, the same for every controller:
//!
//! 1. a reconcile waits until the caches it reads have their first list (before that, every
//!    cached object would look missing), and gives up when the controller stops;
//! 2. it starts from the object our last status write returned while the cache still shows the
//!    version that write replaced ([`OwnWrites`]);
//! 3. it runs in a span that names the object, is timed and counted by result and reason;
//! 4. an error is retried with per-object exponential backoff (capped by
//!    [`ReconcileError::max_delay`]), reset by the next success, which kube-runtime's
//!    `error_policy` never hears of; a terminal error, such as an invalid spec, is not retried:
//!    the object waits for a change (controller-runtime's `TerminalError`);
//! 5. `/readyz` reports the controller ready once its caches are synced;
//! 6. triggers wait in a [`FairQueue`], where namespaces take turns, and go on to kube-runtime
//!    as it has room.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, Shared as SharedFuture};
use futures::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::Api;
use kube::core::object::HasStatus;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::utils::CancelableJoinHandle;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use super::backoff::Backoff;
use super::events::{Events, Report};
use super::fair::FairQueue;
use super::lean::Lean;
use super::metrics::{Metrics, Outcome};
use super::own_writes::OwnWrites;
use super::sharding::Ownership;
use super::status::{Conditions, ready_reason, status_differs};
use super::triggers::Triggers;
use super::{Shared, Stopping, Synced, resync_ticks};

/// What a controller's own resource must be: a namespaced Kubernetes object of a known type.
pub trait Object:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Object for K where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// The error of one controller's reconcile: one enum per controller, whose variant names are
/// the reasons in logs and metrics.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    /// A short, stable name of the failure.
    fn reason(&self) -> &'static str;

    /// Retrying cannot fix it (an invalid spec): the object waits for a change instead.
    fn is_terminal(&self) -> bool {
        false
    }

    /// The longest wait between retries. Failures whose end no watch event announces (a
    /// foreign object in the way, a missing CRD) are noticed only by retrying: those keep
    /// their retries close together.
    fn max_delay(&self) -> Duration {
        Duration::MAX
    }
}

/// A controller's domain: one pass that brings the world in line with one object.
pub trait Reconciler: Send + Sync + 'static {
    type Object: Object;
    type Error: ReconcileError;

    fn reconcile(
        &self,
        object: Arc<Self::Object>,
        ctx: &Context<Self::Object>,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;
}

/// What a controller module hands to [`run`].
pub struct Wiring<R: Reconciler> {
    /// The controller's name in metrics, logs and readiness reports.
    pub name: &'static str,
    /// What triggers reconciles (built like kube-runtime's `Controller`), and the cache of the
    /// controller's own objects.
    pub triggers: Triggers<R::Object>,
    pub reconciler: R,
    /// From [`Shared::watch_primary`]: the status writes its cache has not caught up with.
    pub own_writes: OwnWrites<R::Object>,
    /// The caches the reconcile reads: it waits for their first list, and the controller is
    /// ready (for `/readyz`) once they all have it.
    pub caches: Vec<Synced>,
}

/// What the runtime lends a reconcile: the client, status writes and events.
pub struct Context<K: Resource> {
    client: Client,
    events: Events,
    own_writes: OwnWrites<K>,
    metrics: Arc<Metrics>,
}

impl<K: Object> Context<K> {
    /// A context apart from a running controller, for scenario tests of a reconcile.
    #[cfg(test)]
    pub(crate) fn new(client: Client, events: Events, metrics: Arc<Metrics>) -> Self {
        Self {
            client,
            events,
            own_writes: OwnWrites::default(),
            metrics,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Queues an event about the outcome of a pass over `object`; see [`Events`].
    pub async fn publish(&self, object: &K, type_: EventType, reason: &str, note: String) {
        self.events
            .publish(
                object.object_ref(&()),
                type_,
                Report::Outcome,
                reason,
                note,
                "Sync",
            )
            .await;
    }

    /// Writes `new` as the status of `object` when it says something else than the current
    /// one (timestamps aside). When the reason of its `Ready` condition changed, `transition`
    /// says which event to publish, if any. Returns whether it wrote.
    pub async fn update_status(
        &self,
        object: &K,
        new: K::Status,
        transition: fn(&Condition) -> Option<(EventType, &str)>,
    ) -> kube::Result<bool>
    where
        K: HasStatus,
        K::Status: Conditions + Clone + PartialEq + Serialize,
    {
        if !status_differs(object.status(), &new) {
            return Ok(false);
        }
        let namespace = object.namespace().unwrap_or_default();
        let api: Api<Lean<K>> = Api::namespaced(self.client.clone(), &namespace);
        self.own_writes.write_status(&api, object, &new).await?;

        let previous = object.status().and_then(|s| ready_reason(s.conditions()));
        let Some(ready) = sample_operator_api::conditions::find(new.conditions(), super::status::READY)
        else {
            return Ok(true);
        };
        if previous != Some(ready.reason.as_str())
            && let Some((type_, reason)) = transition(ready)
        {
            let regarding = object.object_ref(&());
            self.events
                .publish(
                    regarding,
                    type_,
                    Report::Transition,
                    reason,
                    ready.message.clone(),
                    "Sync",
                )
                .await;
        }
        Ok(true)
    }
}

/// A running controller: its domain, and the runtime's state around it.
struct Runner<R: Reconciler> {
    name: &'static str,
    reconciler: R,
    context: Context<R::Object>,
    backoff: Backoff<ObjectRef<R::Object>>,
    caches: Vec<Synced>,
    /// Completes when the controller is asked to stop.
    stopping: SharedFuture<BoxFuture<'static, ()>>,
    /// Where triggers wait their namespace's turn; told when each reconcile starts and ends.
    queue: Arc<FairQueue<R::Object>>,
    /// The controller's cache, read again as a reconcile starts (none in scenario tests).
    store: Option<Store<R::Object>>,
    /// Which objects this replica reconciles, when it holds a share of them only.
    owned: Option<Ownership>,
}

/// Tells the queue that a reconcile ended, however it ends.
struct Running<'a, K: Resource<DynamicType = ()>> {
    queue: &'a FairQueue<K>,
    object: ObjectRef<K>,
}

impl<K: Resource<DynamicType = ()>> Drop for Running<'_, K> {
    fn drop(&mut self) {
        self.queue.finished(&self.object);
    }
}

impl<R: Reconciler> Runner<R> {
    /// Whether every cache has its first list; false when the controller stops first.
    async fn caches_synced(&self) -> bool {
        let synced = futures::future::join_all(self.caches.iter().map(Synced::wait))
            .map(|all| all.into_iter().all(|synced| synced));
        tokio::select! {
            synced = synced => synced,
            () = self.stopping.clone() => false,
        }
    }

    async fn reconcile(&self, object: Arc<R::Object>) -> Result<Action, Failure<R::Error>> {
        let object_ref = ObjectRef::from_obj(&*object);
        self.queue.started(&object_ref);
        let running = Running {
            queue: &self.queue,
            object: object_ref,
        };
        if !self.caches_synced().await {
            // Stopping: the object is reconciled by whoever runs next.
            return Ok(Action::await_change());
        }
        // kube-runtime read the cache when it took the object, and the task may start a while
        // later: in between, the watch may have delivered our last status write, and
        // `OwnWrites` forgotten it, so that the earlier copy would look as if that write had
        // never happened. Read again now.
        let object = self
            .store
            .as_ref()
            .and_then(|store| store.get(&running.object))
            .unwrap_or(object);
        // Ownership again, of the object as it is now: the one its trigger named may since have
        // been deleted and made again under its name (another UID, maybe another replica's).
        // A replica that does not own it would do another replica's work.
        if self.owned.is_some_and(|owned| !owned.owns(&*object)) {
            tracing::debug!(controller = self.name, object = %describe(&*object), "not this replica's");
            return Ok(Action::await_change());
        }
        let object = self.context.own_writes.latest(object);
        let span = tracing::info_span!("reconcile", controller = self.name, object = %describe(&*object));
        let timer = self.context.metrics.reconcile(self.name);
        // A panic would end the whole controller (kube-runtime runs reconciles inside its own
        // stream): like controller-runtime's RecoverPanic, it fails this reconcile only.
        let reconcile =
            std::panic::AssertUnwindSafe(self.reconciler.reconcile(object.clone(), &self.context));
        let result = match reconcile.catch_unwind().instrument(span).await {
            Ok(result) => result.map_err(Failure::Reconcile),
            Err(panic) => Err(Failure::Panic(panic_message(&*panic))),
        };
        timer.finish(match &result {
            Ok(action) if *action == Action::await_change() => Outcome::Success,
            Ok(_) => Outcome::RequeueAfter,
            Err(Failure::Panic(_)) => Outcome::Panic,
            Err(error) => Outcome::Error {
                reason: error.reason(),
                terminal: error.is_terminal(),
            },
        });
        match &result {
            // A terminal error waits for a change, not for a retry: its backoff is over too.
            Ok(_) => self.forget_failures(&object),
            Err(error) if error.is_terminal() => self.forget_failures(&object),
            Err(_) => {}
        }
        result
    }

    /// Forgets the backoff and own writes of objects no longer in `store`, every [`SWEEP`]
    /// until `stopping` completes: a deleted object gets no reconcile that would reset them, and
    /// one deleted while the watch was away gets no deletion event either.
    async fn forget_the_gone_until(
        self: Arc<Self>,
        store: Store<R::Object>,
        stopping: SharedFuture<BoxFuture<'static, ()>>,
    ) {
        let mut ticks = tokio::time::interval(SWEEP);
        let mut stopping = std::pin::pin!(stopping);
        loop {
            tokio::select! {
                _ = ticks.tick() => self.forget_the_gone(&store),
                () = &mut stopping => return,
            }
        }
    }

    fn forget_the_gone(&self, store: &Store<R::Object>) {
        self.backoff.retain(|key| store.get(key).is_some());
        self.context.own_writes.retain(|key| store.get(key).is_some());
        self.context
            .metrics
            .set_awaiting_retry(self.name, self.backoff.len());
    }

    fn forget_failures(&self, object: &R::Object) {
        self.backoff.reset(&ObjectRef::from_obj(object));
        self.context
            .metrics
            .set_awaiting_retry(self.name, self.backoff.len());
    }

    fn error_policy(&self, object: &R::Object, error: &Failure<R::Error>) -> Action {
        self.retry_delay(object, error)
            .map_or_else(Action::await_change, Action::requeue)
    }

    /// How long `object` waits before it is retried after `error`; `None` when it waits for a
    /// change instead.
    fn retry_delay(&self, object: &R::Object, error: &Failure<R::Error>) -> Option<Duration> {
        let object_name = describe(object);
        if error.is_terminal() {
            tracing::info!(controller = self.name, object = %object_name, reason = error.reason(), %error, "waiting for a change");
            return None;
        }
        let delay = self
            .backoff
            .next_delay(ObjectRef::from_obj(object))
            .min(error.max_delay());
        self.context.metrics.retry(self.name);
        self.context
            .metrics
            .set_awaiting_retry(self.name, self.backoff.len());
        tracing::warn!(controller = self.name, object = %object_name, reason = error.reason(), %error, retry_in = ?delay, "reconcile failed");
        Some(delay)
    }
}

/// One reconcile in [`retries`]: when it ran (on tokio's clock, which the test pauses), the
/// requests it sent but its Events, and whether it succeeded.
#[cfg(test)]
pub(crate) struct Retry {
    pub at: Duration,
    pub sent: Vec<super::scenario::Sent>,
    pub succeeded: bool,
}

/// An object that keeps failing, reconciled over the scripted `api` as production retries it:
/// through the same runner (own writes, backoff, error policy) with the default backoff, again
/// after each delay its error policy asks for, until a reconcile succeeds, waits for a change,
/// or `span` has passed. Before each reconcile, `world` may change what the apiserver answers,
/// knowing the time. Run with tokio's clock paused (`start_paused`), it waits for nothing.
/// Returns the reconciles and the reasons of the Events they recorded.
#[cfg(test)]
pub(crate) async fn retries<R: Reconciler>(
    api: &super::scenario::ApiServer,
    reconciler: R,
    object: R::Object,
    span: Duration,
    mut world: impl FnMut(Duration),
) -> (Vec<Retry>, Vec<String>) {
    let (context, publisher) = api.context::<R::Object>();
    let runner = Runner {
        name: "scenario",
        reconciler,
        context,
        backoff: Backoff::default(),
        caches: Vec::new(),
        stopping: futures::future::pending().boxed().shared(),
        queue: Arc::new(FairQueue::new(0)),
        store: None,
        owned: None,
    };
    let object = Arc::new(object);
    let start = tokio::time::Instant::now();
    let (mut done, mut events) = (Vec::new(), Vec::new());
    loop {
        let at = start.elapsed();
        world(at);
        let result = runner.reconcile(object.clone()).await;
        let delay = match &result {
            Ok(_) => None,
            Err(error) => runner.retry_delay(&object, error),
        };
        let (recorded, sent) = api.take().into_iter().partition(|s| s.event_reason().is_some());
        events.extend(recorded);
        done.push(Retry {
            at,
            sent,
            succeeded: result.is_ok(),
        });
        match delay {
            Some(delay) if at + delay <= span => tokio::time::sleep(delay).await,
            _ => break,
        }
    }
    let Runner { context, .. } = runner;
    events.extend(api.finish(context, publisher).await);
    (done, super::scenario::event_reasons(&events))
}

/// A reconcile's failure: the domain's error, or a panic the runtime caught.
#[derive(Debug, thiserror::Error)]
enum Failure<E> {
    #[error(transparent)]
    Reconcile(E),
    #[error("the reconcile panicked: {0}")]
    Panic(String),
}

impl<E: ReconcileError> ReconcileError for Failure<E> {
    fn reason(&self) -> &'static str {
        match self {
            Failure::Reconcile(e) => e.reason(),
            Failure::Panic(_) => "Panic",
        }
    }

    fn is_terminal(&self) -> bool {
        matches!(self, Failure::Reconcile(e) if e.is_terminal())
    }

    fn max_delay(&self) -> Duration {
        match self {
            Failure::Reconcile(e) => e.max_delay(),
            Failure::Panic(_) => Duration::MAX,
        }
    }
}

/// What a panic said, when it said it with a string.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// `namespace/name`, for logs.
pub fn describe(object: &impl Resource) -> String {
    format!("{}/{}", object.namespace().unwrap_or_default(), object.name_any())
}

/// [`run`], in the form a [`Descriptor`](super::Descriptor)'s `start` returns.
pub fn start<R: Reconciler>(shared: &Shared, wiring: Wiring<R>, stopping: Stopping) -> BoxFuture<'static, ()>
where
    R::Object: HasStatus,
    <R::Object as HasStatus>::Status: Conditions,
{
    let shared = shared.clone();
    async move { run(&shared, wiring, stopping).await }.boxed()
}

/// Runs a controller until `shutdown` completes; it then finishes the reconciles in flight.
pub async fn run<R: Reconciler>(
    shared: &Shared,
    wiring: Wiring<R>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    R::Object: HasStatus,
    <R::Object as HasStatus>::Status: Conditions,
{
    let Wiring {
        name,
        triggers,
        reconciler,
        own_writes,
        caches,
    } = wiring;
    let stopping = shutdown.boxed().shared();
    let queue = Arc::new(FairQueue::new(shared.config.concurrency));
    let triggers = match shared.config.resync {
        Some(interval) => triggers.reconcile_all_on(resync_ticks(interval)),
        None => triggers,
    };
    let owned = triggers.owned();
    let (store, triggers) = triggers.into_stream();
    let runner = Arc::new(Runner {
        name,
        reconciler,
        context: Context {
            client: shared.client.clone(),
            events: shared.events.clone(),
            own_writes,
            metrics: shared.metrics.clone(),
        },
        backoff: Backoff::default(),
        caches,
        stopping: stopping.clone(),
        queue: queue.clone(),
        store: Some(store.clone()),
        owned,
    });

    let ready = runner.clone();
    let health = shared.health.clone();
    tokio::spawn(async move {
        if ready.caches_synced().await {
            health.synced(ready.name);
            // Start-up is over once every controller has its first lists: what its code
            // mapped and no longer runs need not stay resident in every replica.
            if health.readiness().is_ok() {
                super::code_pages::release_once();
            }
        }
    });

    shared.metrics.controller_started(name, shared.config.concurrency);
    shared.metrics.observe_readiness(name, store.clone(), owned);
    let sweeps = runner
        .clone()
        .forget_the_gone_until(store.clone(), stopping.clone());
    // Triggers wait in the fair queue; kube-runtime gets them as it has room. Both end when
    // the controller is asked to stop, and kube-runtime then finishes the reconciles in flight.
    let fill = {
        let (queue, metrics) = (queue.clone(), shared.metrics.clone());
        triggers.take_until(stopping.clone()).for_each(move |object| {
            if queue.push(object) {
                metrics.queue_added(name);
            }
            metrics.set_queue_depth(name, queue.depth());
            futures::future::ready(())
        })
    };
    let turns = futures::stream::unfold(queue.clone(), |queue| async move {
        let next = queue.next().await;
        Some((Ok::<_, std::convert::Infallible>(next), queue))
    })
    .take_until(stopping.clone());
    let metrics = shared.metrics.clone();
    let reconciles = kube::runtime::applier(
        // Each reconcile in a task of its own, as kube-runtime's `Controller::run` does, so that
        // reconciles run on every core.
        |object, runner: Arc<Runner<R>>| {
            CancelableJoinHandle::spawn(
                async move { runner.reconcile(object).await }.in_current_span(),
                &tokio::runtime::Handle::current(),
            )
        },
        |object, error, runner| runner.error_policy(&object, error),
        runner,
        store,
        turns,
        kube::runtime::controller::Config::default().concurrency(shared.config.concurrency),
    )
    .for_each(move |result| {
        // After each reconcile: the depth the queue is left with as the next takes its turn.
        metrics.set_queue_depth(name, queue.depth());
        match result {
            Err(kube::runtime::controller::Error::ObjectNotFound(gone)) => {
                queue.dropped(
                    &ObjectRef::new(&gone.name).within(gone.namespace.as_deref().unwrap_or_default()),
                );
            }
            Err(error) => tracing::debug!(controller = name, %error, "controller"),
            Ok(_) => {}
        }
        futures::future::ready(())
    });
    futures::join!(reconciles, sweeps, fill);
}

/// How often a controller forgets what it kept about objects that are gone.
const SWEEP: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::sync::Mutex;

    #[derive(Debug, thiserror::Error)]
    enum FakeError {
        #[error("the backend is down")]
        Down,
        #[error("the spec is invalid")]
        Invalid,
    }

    impl ReconcileError for FakeError {
        fn reason(&self) -> &'static str {
            match self {
                FakeError::Down => "Down",
                FakeError::Invalid => "Invalid",
            }
        }
        fn is_terminal(&self) -> bool {
            matches!(self, FakeError::Invalid)
        }
        fn max_delay(&self) -> Duration {
            Duration::from_secs(1)
        }
    }

    /// A domain whose next results are scripted.
    struct Fake {
        results: Mutex<Vec<Result<(), FakeError>>>,
    }

    impl Reconciler for Fake {
        type Object = ConfigMap;
        type Error = FakeError;

        async fn reconcile(&self, _: Arc<ConfigMap>, _: &Context<ConfigMap>) -> Result<Action, FakeError> {
            self.results
                .lock()
                .unwrap()
                .remove(0)
                .map(|()| Action::await_change())
        }
    }

    fn object(name: &str) -> Arc<ConfigMap> {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        Arc::new(cm)
    }

    /// A runner of `fake` with the given caches, never stopping, whose client points nowhere
    /// (the fake sends no request).
    fn runner(fake: Fake, caches: Vec<Synced>) -> (Runner<Fake>, Arc<Metrics>) {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let metrics = Arc::new(Metrics::new(Default::default()));
        let reporter = kube::runtime::events::Reporter {
            controller: "test".into(),
            instance: None,
        };
        let (events, _publisher) = Events::start(client.clone(), reporter, metrics.clone());
        let runner = Runner {
            name: "fake",
            reconciler: fake,
            context: Context {
                client,
                events,
                own_writes: OwnWrites::default(),
                metrics: metrics.clone(),
            },
            backoff: Backoff::new(Duration::from_millis(100), Duration::from_secs(60)),
            caches,
            stopping: futures::future::pending().boxed().shared(),
            queue: Arc::new(FairQueue::new(0)),
            store: None,
            owned: None,
        };
        (runner, metrics)
    }

    #[tokio::test]
    async fn backoff_grows_per_object_and_resets_on_success() {
        use FakeError::Down;
        let fake = Fake {
            results: Mutex::new(vec![Err(Down), Err(Down), Err(Down), Ok(()), Err(Down)]),
        };
        let (runner, metrics) = runner(fake, vec![]);
        let cm = object("a");
        let mut delays = Vec::new();
        for _ in 0..3 {
            let error = runner.reconcile(cm.clone()).await.unwrap_err();
            delays.push(runner.error_policy(&cm, &error));
        }
        assert_eq!(
            delays,
            [100, 200, 400].map(|ms| Action::requeue(Duration::from_millis(ms)))
        );
        assert_eq!(runner.backoff.len(), 1);
        assert!(
            metrics
                .render()
                .contains(r#"objects_awaiting_retry{controller="fake"} 1"#)
        );

        runner.reconcile(cm.clone()).await.unwrap();
        assert_eq!(runner.backoff.len(), 0, "a success resets the backoff");
        assert!(
            metrics
                .render()
                .contains(r#"objects_awaiting_retry{controller="fake"} 0"#)
        );
        let error = runner.reconcile(cm.clone()).await.unwrap_err();
        assert_eq!(
            runner.error_policy(&cm, &error),
            Action::requeue(Duration::from_millis(100)),
            "the first failure after a success waits the shortest time"
        );
    }

    #[tokio::test]
    async fn a_sharded_controller_reconciles_only_the_objects_it_owns() {
        use super::super::sharding::{Buckets, Key, bucket_of, fnv1a};
        // One scripted result: a second reconcile would panic, and fail the test.
        let fake = Fake {
            results: Mutex::new(vec![Ok(())]),
        };
        let (mut runner, _) = runner(fake, vec![]);
        let with_uid = |name: &str, uid: &str| {
            let mut cm = (*object(name)).clone();
            cm.metadata.uid = Some(uid.into());
            Arc::new(cm)
        };
        let (mine, theirs) = (
            with_uid("mine", "0b0c6a52-3c1e-4d6f-9a2b-5e8f7c1d2a01"),
            with_uid("theirs", "9f4e2d1c-7b6a-4c5d-8e9f-0a1b2c3d4e5f"),
        );
        let bucket = |cm: &ConfigMap| bucket_of(fnv1a(cm.metadata.uid.as_deref().unwrap()));
        assert_ne!(bucket(&mine), bucket(&theirs), "two UIDs of different buckets");
        runner.owned = Some(Ownership {
            key: Key::Uid,
            buckets: Buckets::NONE.with(bucket(&mine)),
        });
        assert_eq!(
            runner.reconcile(theirs).await.unwrap(),
            Action::await_change(),
            "another replica's object is left alone"
        );
        // Its own is reconciled: the one scripted result is used up, not a panic.
        runner.reconcile(mine).await.unwrap();
        assert!(runner.reconciler.results.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn what_is_kept_about_a_deleted_object_is_forgotten() {
        use FakeError::Down;
        let fake = Fake {
            results: Mutex::new(vec![Err(Down), Err(Down)]),
        };
        let (runner, metrics) = runner(fake, vec![]);
        let (store, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        let (gone, here) = (object("gone"), object("here"));
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply((*here).clone()));
        for cm in [&gone, &here] {
            let error = runner.reconcile(cm.clone()).await.unwrap_err();
            runner.error_policy(cm, &error);
        }
        assert_eq!(runner.backoff.len(), 2);
        runner.forget_the_gone(&store);
        assert_eq!(
            runner.backoff.len(),
            1,
            "only the object still cached waits for a retry"
        );
        assert!(
            metrics
                .render()
                .contains(r#"objects_awaiting_retry{controller="fake"} 1"#)
        );
    }

    #[tokio::test]
    async fn a_terminal_error_waits_for_a_change_and_counts_as_an_error() {
        let fake = Fake {
            results: Mutex::new(vec![Err(FakeError::Down), Err(FakeError::Invalid)]),
        };
        let (runner, metrics) = runner(fake, vec![]);
        let cm = object("a");
        let error = runner.reconcile(cm.clone()).await.unwrap_err();
        runner.error_policy(&cm, &error);
        let error = runner.reconcile(cm.clone()).await.unwrap_err();
        assert_eq!(runner.error_policy(&cm, &error), Action::await_change());
        assert_eq!(runner.backoff.len(), 0, "nothing waits for a retry");
        let rendered = metrics.render();
        assert!(
            rendered.contains(r#"reconcile_errors_total{controller="fake",reason="Invalid"} 1"#),
            "{rendered}"
        );
    }

    #[tokio::test]
    async fn a_panicking_reconcile_fails_with_backoff_and_is_counted() {
        // No scripted result left: the fake's reconcile panics.
        let fake = Fake {
            results: Mutex::new(vec![]),
        };
        let (runner, metrics) = runner(fake, vec![]);
        let cm = object("a");
        let error = runner.reconcile(cm.clone()).await.unwrap_err();
        assert_eq!(error.reason(), "Panic");
        assert!(error.to_string().contains("removal index"), "{error}");
        assert_eq!(
            runner.error_policy(&cm, &error),
            Action::requeue(Duration::from_millis(100))
        );
        let rendered = metrics.render();
        for line in [
            r#"controller_runtime_reconcile_panics_total{controller="fake"} 1"#,
            r#"controller_runtime_reconcile_total{controller="fake",result="error"} 1"#,
            r#"sample_operator_reconcile_errors_total{controller="fake",reason="Panic"} 1"#,
            r#"controller_runtime_active_workers{controller="fake"} 0"#,
        ] {
            assert!(rendered.contains(line), "missing {line} in\n{rendered}");
        }
    }

    #[tokio::test]
    async fn a_reconcile_waits_for_the_caches_it_reads() {
        let fake = Fake {
            results: Mutex::new(vec![Ok(())]),
        };
        let (synced, mut mark) = Synced::new::<ConfigMap>();
        let (runner, _) = runner(fake, vec![synced]);
        let runner = Arc::new(runner);
        let pending = tokio::spawn({
            let runner = runner.clone();
            async move { runner.reconcile(object("a")).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!pending.is_finished(), "reconciled before the cache was synced");
        mark(&kube::runtime::watcher::Event::InitDone);
        tokio::time::timeout(Duration::from_secs(5), pending)
            .await
            .expect("runs once synced")
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_stopping_controller_does_not_wait_for_caches_that_never_fill() {
        let fake = Fake {
            results: Mutex::new(vec![]),
        };
        let (synced, _mark) = Synced::new::<ConfigMap>();
        let (mut runner, _) = runner(fake, vec![synced]);
        runner.stopping = futures::future::ready(()).boxed().shared();
        let action = tokio::time::timeout(Duration::from_secs(5), runner.reconcile(object("a")))
            .await
            .expect("gives up at once")
            .unwrap();
        assert_eq!(action, Action::await_change());
    }
}
