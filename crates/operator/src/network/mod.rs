//! The Network controller: the seeds' network controller (every Network in every namespace,
//! synced to a network backend, a `Synced` event on success, failures retried through a
//! rate-limited queue) with the parts the seeds leave as "FIX ME" made real.
//!
//! Each Network is materialised in a backend ([`backend::NetworkBackend`]; the first one,
//! [`backend::multus`], as a Multus NetworkAttachmentDefinition). Reconcile runs inside kube's
//! [`finalizer`] helper, so that deletion waits for the backend to let go of the network, even
//! a deletion that happened while the operator was down. Applying a Network is a short
//! pipeline:
//!
//! 1. **validate** the spec with [`Network::validate`] (objects stored before the schema had a
//!    rule get a condition and an event, then wait for a change instead of retrying);
//! 2. **check for conflicts** with the older Networks of the namespace ([`conflicts`], an index
//!    kept from the Network watch): a newer overlapping Network is refused, and it is not in
//!    the backend;
//! 3. **ensure the backend** holds the network as the spec says;
//! 4. **update the status** ([`status::desired`]) when it changed, with events on transitions.
//!
//! What triggers a reconcile: a change of the Network's spec or finalizers; a change of a
//! NetworkAttachmentDefinition it owns (so hand edits are reverted); a change of an older
//! Network that overlaps or overlapped it (so a refused Network recovers by itself when the
//! other goes away or moves); and, while the backend is missing, a retry with backoff.

pub mod backend;
pub mod conflicts;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Predicate, WatchStreamExt, predicates, watcher};
use kube::{Resource, ResourceExt};
use sample_operator_api::Network;

use crate::backoff::Backoff;
use crate::own_writes::OwnWrites;
use crate::{Shared, events};
use backend::multus::{self, Multus, NetworkAttachmentDefinition};
use backend::{BackendError, NetworkBackend};
use conflicts::PrefixIndex;
use status::Observed;

/// The controller's name in metrics and readiness reports.
const CONTROLLER: &str = "network";

/// Holds a deleted Network until the backend has let go of it.
pub const FINALIZER: &str = "samplecrd.k8s.io/network-backend";

/// What can go wrong in a Network reconcile. The reasons name the failure in logs and
/// metrics; every one of them is retried with per-object backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the Network has no {0}")]
    MissingObjectKey(&'static str),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("writing status: {0}")]
    WriteStatus(#[source] kube::Error),
    #[error("adding the finalizer: {0}")]
    AddFinalizer(#[source] kube::Error),
    #[error("removing the finalizer: {0}")]
    RemoveFinalizer(#[source] kube::Error),
    #[error("the finalizer name {FINALIZER:?} is not a valid JSON pointer segment")]
    InvalidFinalizer,
}

impl Error {
    /// A short, stable name of the failure, for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::MissingObjectKey(_) => "MissingObjectKey",
            Error::Backend(e) => e.reason(),
            Error::WriteStatus(_) => "WriteStatus",
            Error::AddFinalizer(_) => "AddFinalizer",
            Error::RemoveFinalizer(_) => "RemoveFinalizer",
            Error::InvalidFinalizer => "InvalidFinalizer",
        }
    }

    /// Failures that no watch event ends are noticed to be over only by retrying: keep those
    /// retries close together.
    fn max_delay(&self) -> Duration {
        match self {
            // Installing the CRD changes nothing the controller watches (its own watch of the
            // definitions retries with a backoff of its own).
            Error::Backend(BackendError::Unavailable(_)) => Duration::from_secs(10),
            // The foreign object carries no label of ours, so its removal is not watched.
            Error::Backend(BackendError::NotOwned(_)) => Duration::from_secs(30),
            _ => Duration::MAX,
        }
    }
}

impl From<finalizer::Error<Error>> for Error {
    fn from(error: finalizer::Error<Error>) -> Self {
        match error {
            finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
            finalizer::Error::AddFinalizer(e) => Error::AddFinalizer(e),
            finalizer::Error::RemoveFinalizer(e) => Error::RemoveFinalizer(e),
            finalizer::Error::UnnamedObject => Error::MissingObjectKey("name"),
            finalizer::Error::InvalidFinalizer => Error::InvalidFinalizer,
        }
    }
}

/// What every Network reconcile shares.
pub struct Context<B> {
    client: kube::Client,
    metrics: Arc<crate::metrics::Metrics>,
    events: events::Events,
    /// Every watched Network; reconciles wait for its first list (see [`reconcile`]).
    networks: Store<Network>,
    conflicts: PrefixIndex,
    backend: B,
    /// Status writes the cache has not caught up with.
    own_writes: OwnWrites<Network>,
    backoff: Backoff<ObjectRef<Network>>,
}

/// Runs the Network controller until `shutdown` completes.
pub async fn run(shared: Shared, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    run_selected(shared, watcher::Config::default(), shutdown).await
}

/// [`run`] for the Networks that `selection` selects (by label or field) among the watched
/// namespaces. Tests use it to run across all namespaces on their own Networks only.
pub async fn run_selected(
    shared: Shared,
    selection: watcher::Config,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (network_store, network_writer) = reflector::store();
    let own_writes = OwnWrites::default();
    let seen = own_writes.clone();
    let conflicts = PrefixIndex::default();
    // The Networks whose conflict decision a watch event may have changed: the index finds
    // them as it follows the stream, and the controller reconciles them.
    let (neighbours_tx, neighbours) = futures::channel::mpsc::unbounded();
    let index = conflicts.clone();
    let network_events = watcher(shared.api::<Network>(), selection)
        .default_backoff()
        .inspect(shared.metrics.watch_observer("networks"))
        .modify(|network| network.managed_fields_mut().clear())
        .inspect_ok(move |event| {
            for neighbour in index.apply(event) {
                // Fails only once the controller, and with it the receiver, is gone.
                let _ = neighbours_tx.unbounded_send(neighbour);
            }
        })
        .reflect(network_writer)
        .inspect_ok(move |event| seen.observe(event))
        .applied_objects()
        // Our own status writes change neither: they need no reconcile. The finalizer is
        // added without a new generation, and the reconcile after it does the first sync.
        .predicate_filter(
            predicates::generation.combine(predicates::finalizers),
            Default::default(),
        );

    let (nad_store, nad_writer) = reflector::store();
    let nad_events = watcher(
        shared.api::<NetworkAttachmentDefinition>(),
        watcher::Config::default().labels(&multus::selector()),
    )
    // While the CRD is missing this fails and retries with backoff; the controller goes on.
    .default_backoff()
    .inspect(shared.metrics.watch_observer("network-attachment-definitions"))
    .modify(|nad| nad.managed_fields_mut().clear())
    .reflect(nad_writer)
    .touched_objects();

    let context = Arc::new(Context {
        client: shared.client.clone(),
        metrics: shared.metrics.clone(),
        events: shared.events.clone(),
        networks: network_store.clone(),
        conflicts,
        backend: Multus::new(shared.client.clone(), nad_store),
        own_writes,
        backoff: Backoff::default(),
    });
    // Ready once the Networks are listed. Not waiting for the definitions: their cache never
    // fills while Multus is missing, and the controller works (and reports) without it.
    let health = shared.health.clone();
    let networks_synced = network_store.clone();
    tokio::spawn(async move {
        crate::store_ready(&networks_synced).await;
        health.synced(CONTROLLER);
    });
    let controller = shared.with_resync(
        Controller::for_stream(network_events, network_store)
            .owns_stream(nad_events)
            .reconcile_on(neighbours)
            .with_config(shared.controller_config()),
    );
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "network controller");
            }
        })
        .await;
}

async fn reconcile<B: NetworkBackend>(network: Arc<Network>, ctx: Arc<Context<B>>) -> Result<Action, Error> {
    // Until every Network is listed, an older overlapping one could be missing from the index
    // and a newer Network would be synced, only to be refused a moment later.
    crate::store_ready(&ctx.networks).await;
    let network = ctx.own_writes.latest(network);
    let timer = ctx.metrics.reconcile(CONTROLLER);
    let result = with_finalizer(network.clone(), &ctx).await;
    timer.finish(result.as_ref().map(|_| ()).map_err(Error::reason));
    if result.is_ok() {
        ctx.backoff.reset(&ObjectRef::from_obj(&*network));
        ctx.metrics.set_awaiting_retry(CONTROLLER, ctx.backoff.len());
    }
    result
}

fn error_policy<B: NetworkBackend>(network: Arc<Network>, error: &Error, ctx: Arc<Context<B>>) -> Action {
    let delay = ctx
        .backoff
        .next_delay(ObjectRef::from_obj(&*network))
        .min(error.max_delay());
    ctx.metrics.set_awaiting_retry(CONTROLLER, ctx.backoff.len());
    tracing::warn!(network = %status::describe(&network), reason = error.reason(), %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Adds the finalizer to a new Network, applies a live one, cleans up a deleted one and then
/// lets it go.
async fn with_finalizer<B: NetworkBackend>(network: Arc<Network>, ctx: &Context<B>) -> Result<Action, Error> {
    let namespace = network.namespace().ok_or(Error::MissingObjectKey("namespace"))?;
    let api: Api<Network> = Api::namespaced(ctx.client.clone(), &namespace);
    finalizer(&api, FINALIZER, network, |event| async move {
        match event {
            finalizer::Event::Apply(network) => apply(&network, ctx).await,
            finalizer::Event::Cleanup(network) => cleanup(&network, ctx).await,
        }
    })
    .await
    .map_err(Error::from)
}

/// The apply pipeline; see the module docs.
async fn apply<B: NetworkBackend>(network: &Network, ctx: &Context<B>) -> Result<Action, Error> {
    let addressing = match network.validate() {
        Ok(addressing) => addressing,
        Err(message) => {
            // An invalid spec describes no network: none stays in the backend.
            release(network, ctx).await?;
            update_status(network, ctx, Observed::Invalid(&message)).await?;
            // Retrying cannot fix a spec; the next change to it triggers a reconcile.
            return Ok(Action::await_change());
        }
    };

    if let Some(overlap) = ctx.conflicts.winner_over(network, &addressing.prefix) {
        release(network, ctx).await?;
        update_status(network, ctx, Observed::Conflict(&addressing, &overlap)).await?;
        // No retry: a change of the other Network reaches this one through the index.
        return Ok(Action::await_change());
    }

    match ctx.backend.ensure(network, &addressing).await {
        Ok(ensured) => {
            update_status(network, ctx, Observed::Synced(&addressing, &ensured)).await?;
            if ensured.changed {
                tracing::info!(network = %status::describe(network), backend = %ensured.description, "synced");
                ctx.events
                    .publish(
                        network.object_ref(&()),
                        EventType::Normal,
                        status::reason::SYNCED,
                        "Network synced successfully".into(),
                        "Sync",
                    )
                    .await;
            }
            Ok(Action::await_change())
        }
        Err(error) => {
            update_status(network, ctx, Observed::BackendFailed(&addressing, &error)).await?;
            Err(error.into())
        }
    }
}

/// Takes a Network that must not be in the backend (invalid, or refused) out of it.
async fn release<B: NetworkBackend>(network: &Network, ctx: &Context<B>) -> Result<(), Error> {
    if ctx.backend.remove(network).await? {
        tracing::info!(network = %status::describe(network), "removed from the backend");
    }
    Ok(())
}

/// The finalizer's cleanup: the backend lets go of a deleted Network. Idempotent, and content
/// with a backend that never had it.
async fn cleanup<B: NetworkBackend>(network: &Network, ctx: &Context<B>) -> Result<Action, Error> {
    let removed = ctx.backend.remove(network).await?;
    tracing::info!(network = %status::describe(network), removed, "cleaned up the deleted Network");
    Ok(Action::await_change())
}

/// Writes the status when it changed, with a Warning event when the Network enters a failure.
async fn update_status<B>(network: &Network, ctx: &Context<B>, observed: Observed<'_>) -> Result<(), Error> {
    let new = status::desired(network, observed);
    if !status::differs(network, &new) {
        return Ok(());
    }
    let previous_reason = status::current_reason(network);
    let namespace = network.namespace().ok_or(Error::MissingObjectKey("namespace"))?;
    let api: Api<Network> = Api::namespaced(ctx.client.clone(), &namespace);
    ctx.own_writes
        .write_status(&api, network, &new)
        .await
        .map_err(Error::WriteStatus)?;

    let Some(ready) = new.conditions.first() else {
        return Ok(());
    };
    let entered = previous_reason.as_deref() != Some(ready.reason.as_str());
    if entered && ready.reason != status::reason::SYNCED {
        ctx.events
            .publish(
                network.object_ref(&()),
                EventType::Warning,
                &ready.reason,
                ready.message.clone(),
                "Sync",
            )
            .await;
    }
    Ok(())
}
