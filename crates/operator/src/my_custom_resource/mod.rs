//! The MyCustomResource controller: the kubebuilder seed's behaviour on kube-rs's runtime.
//!
//! A MyCustomResource names a Pod in `spec.name`; its `status.Healthy` is true while a Pod of
//! that name exists in the resource's own namespace and is not being deleted, and false
//! otherwise, always written explicitly. Reconcile is a short pipeline:
//!
//! 1. **look up the friend** in the cache of Pods ([`pods::PodCache::friend`]): no API request;
//! 2. **update the status** ([`status::desired`]) when it changed, with an event when the
//!    `Ready` reason changes.
//!
//! Two departures from the seed. Scope: the seed lists Pods cluster-wide, so a Pod of that name
//! in someone else's namespace made a resource healthy; here only the resource's own namespace
//! counts. Cost: the seed lists every MyCustomResource from the API on each Pod event and keeps
//! whole Pods in its cache; here Pods are watched as metadata only, and a Pod event reaches the
//! resources that name it through an index kept from the MyCustomResource watch, a lookup
//! whatever the number of resources.

pub mod pods;
pub mod status;

use std::sync::Arc;

use futures::future::{self, BoxFuture};
use futures::{FutureExt, StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Resource, ResourceExt};
use sample_operator_api::MyCustomResource;

use crate::backoff::Backoff;
use crate::index::Index;
use crate::own_writes::OwnWrites;
use crate::{Shared, events};
pub use pods::PodWatch;
use pods::{PodCache, PodKey};
use status::Friend;

/// The controller's name in metrics and readiness reports.
const CONTROLLER: &str = "my-custom-resource";

/// What can go wrong in a MyCustomResource reconcile. The variant names are the reasons in logs
/// and metrics; every one of them is retried with per-object backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the MyCustomResource has no {0}")]
    MissingObjectKey(&'static str),
    #[error("writing status: {0}")]
    WriteStatus(#[source] kube::Error),
}

impl Error {
    /// A short, stable name of the failure, for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::MissingObjectKey(_) => "MissingObjectKey",
            Error::WriteStatus(_) => "WriteStatus",
        }
    }
}

/// What every MyCustomResource reconcile shares.
pub struct Context {
    client: kube::Client,
    metrics: Arc<crate::metrics::Metrics>,
    events: events::Events,
    /// The Pods of the watched namespaces, by namespace and name.
    pods: PodCache,
    /// Status writes the cache has not caught up with.
    own_writes: OwnWrites<MyCustomResource>,
    backoff: Backoff<ObjectRef<MyCustomResource>>,
    /// Completes when the controller is asked to stop.
    stopping: future::Shared<BoxFuture<'static, ()>>,
}

/// Runs the MyCustomResource controller until `shutdown` completes.
pub async fn run(shared: Shared, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let stopping = shutdown.boxed().shared();
    let (store, writer) = reflector::store();
    let (resources_listed_tx, mut resources_listed) = tokio::sync::watch::channel(false);
    // Resources by the Pod they name. It follows the same stream as the store, and is updated
    // before the store: by the time a resource can be reconciled (and find its Pod missing),
    // a Pod event already maps to it, so no Pod event falls between the two.
    let by_pod = Index::new(named_pod);
    let index = by_pod.clone();
    let own_writes = OwnWrites::default();
    let seen = own_writes.clone();
    let resource_events = watcher(shared.api::<MyCustomResource>(), watcher::Config::default())
        .default_backoff()
        .inspect(shared.metrics.watch_observer("mycustomresources"))
        .modify(|mcr| mcr.managed_fields_mut().clear())
        .inspect_ok(move |event| index.apply(event))
        .reflect(writer)
        .inspect_ok(move |event| seen.observe(event))
        .inspect_ok(mark_ready(resources_listed_tx))
        .applied_objects()
        // Our own status writes do not change the generation: they need no reconcile.
        .predicate_filter(predicates::generation, Default::default());

    let (pods, pod_events) = pods::cache_and_events(&shared, shared.config.pod_watch);
    // Each Pod event maps to the resources naming that Pod, by index lookup: never a list of
    // resources from the API, never a scan of the cache.
    let controller = Controller::for_stream(resource_events, store)
        .watches_stream(pod_events, move |pod| by_pod.get(&pods::key(&pod)));

    let context = Arc::new(Context {
        client: shared.client.clone(),
        metrics: shared.metrics.clone(),
        events: shared.events.clone(),
        pods,
        own_writes,
        backoff: Backoff::default(),
        stopping: stopping.clone(),
    });
    // Ready (for /readyz) once both caches hold their first list.
    let health = shared.health.clone();
    let pods_listed = context.pods.clone();
    tokio::spawn(async move {
        if resources_listed.wait_for(|listed| *listed).await.is_ok() && pods_listed.wait_until_ready().await {
            health.synced(CONTROLLER);
        }
    });
    let controller = shared.with_resync(controller.with_config(shared.controller_config()));
    controller
        .graceful_shutdown_on(stopping)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "my-custom-resource controller");
            }
        })
        .await;
}

/// An `inspect_ok` callback that sets `listed` once the watch's first list has gone through the
/// reflector, so that any number of tasks can wait for the cache. (kube's
/// `Store::wait_until_ready` wakes only one of several concurrent waiters.)
fn mark_ready<K>(listed: tokio::sync::watch::Sender<bool>) -> impl FnMut(&watcher::Event<K>) {
    move |event| {
        if matches!(event, watcher::Event::InitDone) {
            listed.send_replace(true);
        }
    }
}

/// The index key of a resource: the Pod it names, in its own namespace.
fn named_pod(mcr: &MyCustomResource) -> Vec<PodKey> {
    mcr.namespace()
        .map(|namespace| (namespace, mcr.spec.name.clone()))
        .into_iter()
        .collect()
}

async fn reconcile(mcr: Arc<MyCustomResource>, ctx: Arc<Context>) -> Result<Action, Error> {
    // The wait gives up when the controller stops: its Pod watch is then no longer polled, so
    // a cache still filling would never fill, and this reconcile would hold up the shutdown.
    let ready = tokio::select! {
        ready = ctx.pods.wait_until_ready() => ready,
        () = ctx.stopping.clone() => false,
    };
    if !ready {
        return Ok(Action::await_change());
    }
    let mcr = ctx.own_writes.latest(mcr);
    let timer = ctx.metrics.reconcile(CONTROLLER);
    let result = sync(&mcr, &ctx).await;
    timer.finish(result.as_ref().map(|_| ()).map_err(Error::reason));
    if result.is_ok() {
        ctx.backoff.reset(&ObjectRef::from_obj(&*mcr));
        ctx.metrics.set_awaiting_retry(CONTROLLER, ctx.backoff.len());
    }
    result
}

fn error_policy(mcr: Arc<MyCustomResource>, error: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx.backoff.next_delay(ObjectRef::from_obj(&*mcr));
    ctx.metrics.set_awaiting_retry(CONTROLLER, ctx.backoff.len());
    tracing::warn!(resource = %status::describe(&mcr), reason = error.reason(), %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// The reconcile pipeline; see the module docs.
async fn sync(mcr: &MyCustomResource, ctx: &Context) -> Result<Action, Error> {
    let namespace = mcr.namespace().ok_or(Error::MissingObjectKey("namespace"))?;
    let friend = ctx.pods.friend(&namespace, &mcr.spec.name);
    update_status(mcr, ctx, &namespace, friend).await?;
    // Pod events and spec changes trigger the next reconcile; nothing to poll for.
    Ok(Action::await_change())
}

/// Writes the status when it changed, with an event when the `Ready` reason changes.
async fn update_status(
    mcr: &MyCustomResource,
    ctx: &Context,
    namespace: &str,
    friend: Friend,
) -> Result<(), Error> {
    let new = status::desired(mcr, friend);
    if !status::differs(mcr, &new) {
        return Ok(());
    }
    let api: Api<MyCustomResource> = Api::namespaced(ctx.client.clone(), namespace);
    ctx.own_writes
        .write_status(&api, mcr, &new)
        .await
        .map_err(Error::WriteStatus)?;
    tracing::info!(resource = %status::describe(mcr), pod = %mcr.spec.name, healthy = new.healthy, "status updated");

    let Some(ready) = new.conditions.first() else {
        return Ok(());
    };
    if status::current_reason(mcr) != Some(ready.reason.as_str()) {
        // An unhealthy resource is worth a look: a Warning, so `kubectl get events
        // --field-selector type=Warning` shows it.
        let type_ = if new.healthy {
            EventType::Normal
        } else {
            EventType::Warning
        };
        ctx.events
            .publish(
                mcr.object_ref(&()),
                type_,
                &ready.reason,
                ready.message.clone(),
                "Sync",
            )
            .await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;
    use sample_operator_api::MyCustomResourceSpec;

    fn mcr(namespace: &str, name: &str, pod: &str) -> MyCustomResource {
        let mut mcr = MyCustomResource::new(name, MyCustomResourceSpec { name: pod.into() });
        mcr.metadata.namespace = Some(namespace.into());
        mcr
    }

    fn names(refs: Vec<ObjectRef<MyCustomResource>>) -> Vec<String> {
        let mut names: Vec<_> = refs
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
        names.sort();
        names
    }

    fn key(namespace: &str, pod: &str) -> PodKey {
        (namespace.into(), pod.into())
    }

    #[test]
    fn a_pod_maps_to_exactly_the_resources_naming_it_in_its_namespace() {
        let index = Index::new(named_pod);
        index.apply(&Event::Apply(mcr("a", "one", "funny-joe")));
        index.apply(&Event::Apply(mcr("a", "two", "funny-joe")));
        index.apply(&Event::Apply(mcr("a", "three", "lonely-jane")));
        index.apply(&Event::Apply(mcr("b", "four", "funny-joe")));
        assert_eq!(names(index.get(&key("a", "funny-joe"))), ["a/one", "a/two"]);
        assert_eq!(names(index.get(&key("b", "funny-joe"))), ["b/four"]);
        assert!(index.get(&key("c", "funny-joe")).is_empty());

        // A changed spec.name moves the resource; a deleted resource leaves the index.
        index.apply(&Event::Apply(mcr("a", "two", "lonely-jane")));
        assert_eq!(names(index.get(&key("a", "funny-joe"))), ["a/one"]);
        assert_eq!(names(index.get(&key("a", "lonely-jane"))), ["a/three", "a/two"]);
        index.apply(&Event::Delete(mcr("a", "one", "funny-joe")));
        assert!(index.get(&key("a", "funny-joe")).is_empty());
    }
}
