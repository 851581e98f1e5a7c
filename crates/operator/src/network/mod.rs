//! The Network controller: the seeds' network controller (every Network in every namespace,
//! synced to a network backend, a `Synced` event on success, failures retried through a
//! rate-limited queue) with the parts the seeds leave as "FIX ME" made real.
//!
//! Each Network is materialised in a backend ([`backend::NetworkBackend`]): [`backend::multus`]
//! as a Multus NetworkAttachmentDefinition (the default), or [`backend::neutron`] as an
//! OpenStack Neutron network and subnet. Reconcile runs inside kube's
//! [`finalizer`] helper, so that deletion waits for the backend to let go of the network, even
//! a deletion that happened while the operator was down. Applying a Network is a short
//! pipeline:
//!
//! 1. **validate** the spec with [`Network::validate`] (objects stored before the schema had a
//!    rule get a condition and an event, then wait for a change: a terminal error);
//! 2. **check for conflicts** with the older Networks of the namespace, or with Multus of the
//!    cluster ([`conflicts`], an index kept from the Network watch): a newer overlapping
//!    Network is refused, and it is not in the backend;
//! 3. **ensure the backend** holds the network as the spec says;
//! 4. **update the status** ([`status::desired`]) when it changed, with events on transitions.
//!
//! What triggers a reconcile: a change of the Network's spec or finalizers; a change of a
//! NetworkAttachmentDefinition it owns (so hand edits are reverted); a change of an older
//! Network that overlaps or overlapped it (so a refused Network recovers by itself when the
//! other goes away or moves), or of one that moved it within or beyond its namespace's limit; a
//! change of the cluster's own addresses ([`cluster`]), which reconciles every Network; and,
//! while the backend is missing, a retry with backoff.

pub mod backend;
pub mod cluster;
pub mod conflicts;
pub mod metrics;
pub mod policy;
pub mod status;

#[cfg(test)]
mod scenarios;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Predicate, predicates, watcher};
use sample_operator_api::Network;

use crate::runtime::descriptor::{Descriptor, OwnResource};
use crate::runtime::sharding::{self, Ownership};
use crate::runtime::{Context, ReconcileError, Reconciler, Shared, Triggers, Wiring};
use backend::multus::{self, Multus, NetworkAttachmentDefinition};
use backend::neutron::NeutronConfig;
use backend::{Backend, BackendError, NetworkBackend};
use cluster::ClusterAddresses;
use conflicts::PrefixIndex;
use policy::AddressPolicy;
use status::Observed;

/// The controller's name in metrics and readiness reports.
const CONTROLLER: &str = "network";

/// The Network controller, for the operator's list of controllers.
pub const DESCRIPTOR: Descriptor<Settings> = Descriptor {
    name: CONTROLLER,
    runs_by_default: true,
    resource: OwnResource::of::<Network>(),
    start: |shared, settings, stopping| crate::runtime::start(shared, wiring(shared, settings), stopping),
};

/// Holds a deleted Network until the backend has let go of it.
pub const FINALIZER: &str = "samplecrd.k8s.io/network-backend";

/// What can go wrong in a Network reconcile. The reasons name the failure in logs and
/// metrics; every one but `InvalidSpec` is retried with per-object backoff.
#[derive(Debug, thiserror::Error, strum::IntoStaticStr)]
pub enum Error {
    #[error("the Network has no {0}")]
    MissingObjectKey(&'static str),
    #[error("adding the finalizer: {0}")]
    AddFinalizer(#[source] kube::Error),
    #[error("removing the finalizer: {0}")]
    RemoveFinalizer(#[source] kube::Error),
    #[error("the finalizer name {FINALIZER:?} is not a valid JSON pointer segment")]
    InvalidFinalizer,
    #[error("{0}")]
    InvalidSpec(String),
    #[error("{0}")]
    PrefixNotAllowed(String),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("writing status: {0}")]
    WriteStatus(#[source] kube::Error),
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::Backend(e) => e.reason(),
            other => other.into(),
        }
    }

    /// A spec the schema or the address policy refuses waits for a change.
    fn is_terminal(&self) -> bool {
        matches!(self, Error::InvalidSpec(_) | Error::PrefixNotAllowed(_))
    }

    fn max_delay(&self) -> Duration {
        match self {
            // Installing the CRD changes nothing the controller watches (its own watch of the
            // definitions retries with a backoff of its own); nor does a backend's return.
            Error::Backend(BackendError::Unavailable(_) | BackendError::Unreachable(_)) => {
                Duration::from_secs(10)
            }
            // A foreign definition in the way is watched (only Multus reports one), so the end
            // of that conflict triggers a reconcile at once; retries only back that up, up to
            // the runtime's cap of minutes, so that thousands of blocked Networks cost little.
            Error::Backend(BackendError::NotOwned(_)) => Duration::MAX,
            // Fixed credentials, a raised quota or the end of a concurrent change are not
            // watched.
            Error::Backend(
                BackendError::AuthFailed(_)
                | BackendError::Forbidden(_)
                | BackendError::Misconfigured(_)
                | BackendError::QuotaExceeded(_)
                | BackendError::Conflict(_)
                | BackendError::BridgeTaken(_),
            ) => Duration::from_secs(30),
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

/// The Network domain, on backend `B`.
pub struct NetworkReconciler<B> {
    conflicts: PrefixIndex,
    policy: AddressPolicy,
    cluster: ClusterAddresses,
    backend: B,
}

/// Which backend the Network controller syncs Networks to (`--network-backend`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BackendConfig {
    /// A Multus NetworkAttachmentDefinition per Network.
    #[default]
    Multus,
    /// An OpenStack Neutron network and subnet per Network.
    Neutron(NeutronConfig),
}

/// The Network controller's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Where Networks are synced to.
    pub backend: BackendConfig,
    /// Only the Networks with these labels (`key=value,...`) among the watched namespaces; all
    /// when `None`. Tests use it to run across all namespaces on their own Networks only.
    pub label_selector: Option<String>,
    /// Which prefixes Networks may have.
    pub policy: AddressPolicy,
    /// Whether (and how) the cluster's own addresses are refused too.
    pub cluster: cluster::Settings,
    /// Let Networks of different namespaces overlap with the Multus backend, where the admin
    /// says the nodes keep namespaces apart (Neutron's networks always are).
    pub overlap_across_namespaces: bool,
    /// The most Networks of one namespace in the backend (the oldest); any number when `None`.
    /// One namespace cannot then take a shared backend quota (a Neutron project's) from all.
    pub max_per_namespace: Option<usize>,
}

impl Settings {
    /// How far prefixes must not overlap: with Multus every node routes every Network it hosts,
    /// so across the cluster unless the admin says otherwise.
    fn conflict_scope(&self) -> conflicts::Scope {
        match self.backend {
            BackendConfig::Multus if !self.overlap_across_namespaces => conflicts::Scope::Cluster,
            _ => conflicts::Scope::Namespace,
        }
    }

    fn selection(&self) -> watcher::Config {
        match &self.label_selector {
            Some(selector) => watcher::Config::default().labels(selector),
            None => watcher::Config::default(),
        }
    }
}

/// What every backend's wiring starts from: the Network watch, with the conflicts index it
/// feeds and the neighbours it finds.
struct Primary {
    triggers: Triggers<Network>,
    conflicts: PrefixIndex,
    own_writes: crate::runtime::own_writes::OwnWrites<Network>,
    synced: crate::runtime::Synced,
}

fn primary(shared: &Shared, settings: &Settings) -> Primary {
    let conflicts = PrefixIndex::new(settings.policy.clone(), settings.conflict_scope())
        .with_limit(settings.max_per_namespace);
    let selection = settings.selection();
    // The Networks whose conflict decision a watch event may have changed: the index finds
    // them as it follows the stream, and the controller reconciles them.
    let (neighbours_tx, neighbours) = futures::channel::mpsc::unbounded();
    let index = conflicts.clone();
    let networks = shared.watch_primary::<Network>(
        selection,
        // Our own status writes change neither. The finalizer is added without a new
        // generation, and the reconcile after it does the first sync.
        predicates::generation.combine(predicates::finalizers),
        move |event| {
            for neighbour in index.apply(event) {
                // Fails only once the controller, and with it the receiver, is gone.
                let _ = neighbours_tx.unbounded_send(neighbour);
            }
        },
    );
    Primary {
        // Sharded by UID, and by its reconciles only: whether a prefix conflicts is decided
        // from every Network (across namespaces with Multus), so each replica caches them all,
        // and Networks are few.
        triggers: Triggers::for_stream(networks.events, networks.store)
            .reconcile_on(neighbours)
            .only_owned(shared.buckets().map(|buckets| Ownership {
                key: sharding::Key::Uid,
                buckets,
            })),
        conflicts,
        own_writes: networks.own_writes,
        synced: networks.synced,
    }
}

/// The controller of the Networks `settings` selects in the watched namespaces, on the
/// backend it names. Multus objects are watched, so that an edit of one is reverted; Neutron
/// has no watch, so besides Network events every Network is reconciled after each periodic
/// listing of Neutron (see [`neutron`](backend::neutron)).
pub fn wiring(shared: &Shared, settings: &Settings) -> Wiring<NetworkReconciler<Backend>> {
    let primary = primary(shared, settings);
    let cluster = cluster::follow(shared, &settings.cluster);
    let (triggers, backend) = match &settings.backend {
        BackendConfig::Multus => {
            // Which Network holds each bridge name, followed from the definitions' watch.
            let bridges = multus::Bridges::default();
            // While the CRD is missing this watch fails and retries with backoff; the
            // controller goes on, and its Networks say why they are not synced.
            let definitions = shared.watch_cache(
                shared.api::<NetworkAttachmentDefinition>(),
                "network-attachment-definitions",
                watcher::Config::default().labels(&multus::selector()),
                multus::trim,
                {
                    let bridges = bridges.clone();
                    move |event| bridges.apply(event)
                },
            );
            tokio::spawn(multus::warn_if_missing(
                shared.api::<NetworkAttachmentDefinition>(),
            ));
            // Any other definition may be in a Network's way (it has the Network's name):
            // watched (its metadata, not cached), its deletion or a change of its owners
            // reaches the Network of that name at once; its other changes wake no one.
            let foreign = shared.watch_triggers(
                shared.api::<PartialObjectMeta<NetworkAttachmentDefinition>>(),
                "foreign-network-attachment-definitions",
                watcher::Config::default().labels(&multus::foreign_selector()),
            );
            let backend = Multus::new(
                shared.client.clone(),
                shared.config.namespace.clone(),
                definitions.store,
                definitions.synced,
                bridges,
            );
            (
                primary
                    .triggers
                    .owns_stream(definitions.events)
                    .watches_stream(foreign, |nad| {
                        let namespace = nad.namespace()?;
                        Some(ObjectRef::<Network>::new(&nad.name_any()).within(&namespace))
                    }),
                Backend::Multus(backend),
            )
        }
        BackendConfig::Neutron(config) => {
            let (backend, resyncs) = backend::neutron::Neutron::new(config.clone(), shared.metrics.clone());
            (
                primary.triggers.reconcile_all_on(resyncs),
                Backend::Neutron(backend),
            )
        }
    };
    // A change of the cluster's addresses may refuse a synced Network or free a refused one.
    let triggers = triggers.reconcile_all_on(cluster.changes);
    let mut caches = vec![primary.synced];
    caches.extend(cluster.synced);
    Wiring {
        name: CONTROLLER,
        triggers,
        reconciler: NetworkReconciler {
            conflicts: primary.conflicts,
            policy: settings.policy.clone(),
            cluster: cluster.addresses,
            backend,
        },
        own_writes: primary.own_writes,
        // Until every Network is listed, an older overlapping one could be missing from the
        // index, and a newer Network would be synced only to be refused a moment later; so too
        // with the cluster's addresses. Not waiting for the Multus definitions: their cache
        // never fills while Multus is missing, and the controller works (and reports) without
        // it.
        caches,
    }
}

impl<B: NetworkBackend> Reconciler for NetworkReconciler<B> {
    type Object = Network;
    type Error = Error;

    /// Adds the finalizer to a new Network, applies a live one, cleans up a deleted one and then
    /// lets it go.
    async fn reconcile(&self, network: Arc<Network>, ctx: &Context<Network>) -> Result<Action, Error> {
        let namespace = network.namespace().ok_or(Error::MissingObjectKey("namespace"))?;
        let api: Api<Network> = Api::namespaced(ctx.client().clone(), &namespace);
        finalizer(&api, FINALIZER, network, |event| async move {
            match event {
                finalizer::Event::Apply(network) => self.apply(&network, ctx).await,
                finalizer::Event::Cleanup(network) => self.cleanup(&network, ctx).await,
            }
        })
        .await
        .map_err(Error::from)
    }
}

impl<B: NetworkBackend> NetworkReconciler<B> {
    /// The apply pipeline; see the module docs.
    async fn apply(&self, network: &Network, ctx: &Context<Network>) -> Result<Action, Error> {
        let addressing = match network.validate() {
            Ok(addressing) => addressing,
            Err(message) => {
                // An invalid spec describes no network: none stays in the backend.
                self.release(network).await?;
                update_status(network, ctx, Observed::Invalid(&message)).await?;
                return Err(Error::InvalidSpec(message));
            }
        };

        let allowed = self.policy.check(&addressing.prefix);
        if let Err(message) = allowed.and_then(|()| self.cluster.check(&addressing.prefix)) {
            // Nothing of it may reach the nodes or a cloud: none stays in the backend.
            self.release(network).await?;
            update_status(network, ctx, Observed::NotAllowed(&message)).await?;
            return Err(Error::PrefixNotAllowed(message));
        }

        if let Some(overlap) = self.conflicts.winner_over(network, &addressing.prefix) {
            self.release(network).await?;
            update_status(network, ctx, Observed::Conflict(&addressing, &overlap)).await?;
            // No retry: a change of the other Network reaches this one through the index.
            return Ok(Action::await_change());
        }

        if let Some(limit) = self.conflicts.beyond_limit(network) {
            self.release(network).await?;
            update_status(network, ctx, Observed::OverLimit(&addressing, limit)).await?;
            // No retry either: the deletion of an older Network of the namespace reaches it.
            return Ok(Action::await_change());
        }

        match self.backend.ensure(network, &addressing).await {
            Ok(ensured) => {
                update_status(network, ctx, Observed::Synced(&addressing, &ensured)).await?;
                if ensured.changed {
                    tracing::info!(backend = %ensured.description, "synced");
                    ctx.publish(
                        network,
                        EventType::Normal,
                        status::reason::SYNCED,
                        "Network synced successfully".into(),
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

    /// Takes a Network that must not be in the backend (invalid, or refused) out of it, unless
    /// its status says that was done: a refusal is recorded only after the release, and a
    /// backend reference only by a sync. So a refused Network costs the backend (2 or 3 Neutron
    /// requests) once, not at every resync.
    async fn release(&self, network: &Network) -> Result<(), Error> {
        if status::released(network) {
            return Ok(());
        }
        if self.backend.remove(network).await? {
            tracing::info!("removed from the backend");
        }
        Ok(())
    }

    /// The finalizer's cleanup: the backend lets go of a deleted Network. Idempotent, and
    /// content with a backend that never had it. A backend that refuses (Neutron, while ports
    /// still use the network) is reported in status and events as for a live Network, since the
    /// Network stays until it lets go.
    async fn cleanup(&self, network: &Network, ctx: &Context<Network>) -> Result<Action, Error> {
        match self.backend.remove(network).await {
            Ok(removed) => {
                tracing::info!(removed, "cleaned up the deleted Network");
                Ok(Action::await_change())
            }
            Err(error) => {
                if let Ok(addressing) = network.validate() {
                    update_status(network, ctx, Observed::BackendFailed(&addressing, &error)).await?;
                }
                Err(error.into())
            }
        }
    }
}

/// Writes the status when it changed, with a Warning event when the Network enters a failure.
async fn update_status(
    network: &Network,
    ctx: &Context<Network>,
    observed: Observed<'_>,
) -> Result<(), Error> {
    ctx.update_status(network, status::desired(network, observed), transition_event)
        .await
        .map_err(Error::WriteStatus)?;
    Ok(())
}

/// Entering any `Ready` reason but `Synced` is worth a Warning of that reason; a sync that
/// changed something is reported by its own `Synced` event.
fn transition_event(ready: &Condition) -> Option<(EventType, &str)> {
    (ready.reason != status::reason::SYNCED).then_some((EventType::Warning, ready.reason.as_str()))
}
