//! The reconcile runtime: everything the controllers share, so that a controller module holds
//! only its domain.
//!
//! kube-runtime's [`Controller`](kube::runtime::Controller) does the queueing (de-duplicated
//! triggers, no two reconciles of one object at once, requeues). Around it this module adds
//! what an operator in production needs and what every controller would otherwise write again:
//!
//! - [`controller`]: the [`Reconciler`] a controller module implements, and [`run`], which
//!   wraps its reconcile with readiness, timing, metrics, tracing, per-object backoff that resets
//!   on success, and the rule that a terminal error (an invalid spec) waits for a change;
//! - [`watch`]: the watches of a controller, with their caches, metrics and [`Synced`] readiness;
//! - [`status`]: conditions following the Kubernetes conventions, and status writes that are
//!   sent only when something changed and remembered until the watch delivers them
//!   ([`own_writes`]), with an event on each transition ([`events`]);
//! - [`children`]: ownership of the objects a controller creates, and writes that never touch
//!   another's;
//! - [`index`]: in-memory indexes kept from a watch, so an event maps to its objects by lookup;
//! - the process around the controllers: [`metrics`], [`health`], the HTTP [`server`], the
//!   [`requests`] counter and [`leader`] election.

pub mod backoff;
pub mod children;
pub mod controller;
pub mod events;
pub mod health;
pub mod index;
pub mod leader;
pub mod metrics;
pub mod own_writes;
pub mod requests;
pub mod server;
pub mod status;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use kube::runtime::events::Reporter;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

pub use controller::{Context, ReconcileError, Reconciler, Wiring, run};
pub use watch::Synced;

use crate::RunConfig;

/// The field manager of every write: one owner for everything the operator applies.
pub const FIELD_MANAGER: &str = "sample-operator";

/// Metrics and health of one operator process, shared by its controllers and its HTTP server.
#[derive(Clone, Debug)]
pub struct Telemetry {
    pub metrics: Arc<metrics::Metrics>,
    pub health: Arc<health::Health>,
}

impl Telemetry {
    pub fn new(requests: requests::RequestCounter) -> Self {
        Self {
            metrics: Arc::new(metrics::Metrics::new(requests)),
            health: Arc::default(),
        }
    }
}

/// What every controller of one run shares.
#[derive(Clone)]
pub struct Shared {
    pub client: Client,
    pub events: events::Events,
    pub config: RunConfig,
    pub metrics: Arc<metrics::Metrics>,
    pub health: Arc<health::Health>,
}

impl Shared {
    /// Also starts the task that publishes the controllers' events; the run waits for it with
    /// [`events::Publisher::finish`] once every `Shared` is dropped.
    pub fn new(client: Client, config: RunConfig, telemetry: Telemetry) -> (Self, events::Publisher) {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(config.instance.clone()),
        };
        let (events, publisher) = events::Events::start(client.clone(), reporter, telemetry.metrics.clone());
        let shared = Self {
            client,
            events,
            config,
            metrics: telemetry.metrics,
            health: telemetry.health,
        };
        (shared, publisher)
    }

    /// An `Api` over the watched namespaces.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()> + DeserializeOwned + Clone,
    {
        match &self.config.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }
}

/// A tick every `interval`, for `reconcile_all_on`.
pub(crate) fn resync_ticks(interval: Duration) -> impl Stream<Item = ()> + Send {
    futures::stream::unfold(
        tokio::time::interval_at(tokio::time::Instant::now() + interval, interval),
        |mut t| async {
            t.tick().await;
            Some(((), t))
        },
    )
}
