//! The reconcile runtime: everything the controllers share, so that a controller module holds
//! only its domain.
//!
//! kube-runtime's [`applier`](kube::runtime::applier) runs the reconciles (no two of one object
//! at once, requeues and retries on its own timers). Around it this module adds what an
//! operator in production needs and what every controller would otherwise write again:
//!
//! - [`triggers`] and [`fair`]: what triggers a controller (built as kube-runtime's `Controller`
//!   is) and the work queue those triggers wait in, where namespaces take turns;
//! - [`controller`]: the [`Reconciler`] a controller module implements, and [`run`], which
//!   wraps its reconcile with readiness, timing, metrics, tracing, per-object backoff that resets
//!   on success, and the rule that a terminal error (an invalid spec) waits for a change;
//! - [`watch`]: the watches of a controller, with their caches, metrics and [`Synced`] readiness,
//!   and [`consistent_streams`], which makes their streamed lists read the cluster's current state;
//! - [`status`]: conditions following the Kubernetes conventions, and status writes that are
//!   sent only when something changed and remembered until the watch delivers them
//!   ([`own_writes`]), with an event on each transition ([`events`]);
//! - [`children`]: ownership of the objects a controller creates, and writes that never touch
//!   another's;
//! - [`index`]: in-memory indexes kept from a watch, so an event maps to its objects by lookup;
//! - [`descriptor`]: what the process knows of each controller (its name, its resource, how to
//!   start it), and the [`manager`] that runs a set of them, supervised, until shutdown;
//! - the process around the controllers: [`metrics`], [`health`], the HTTP [`server`], the
//!   [`requests`] counter, [`leader`] election, and [`code_pages`], which gives back the pages
//!   of start-up code once the controllers are synced;
//! - [`sharding`]: replicas splitting the objects between them, on Kubernetes' sharded list and
//!   watch where the API server serves it.
//!
//! The runtime knows no domain: the controllers use it, never the other way round. What one
//! controller alone needs (a backend, how it watches Pods) is that controller's own setting,
//! handed to it by its descriptor.

pub mod backoff;
pub mod children;
pub mod code_pages;
pub mod consistent_streams;
pub mod controller;
pub mod descriptor;
pub mod events;
pub mod fair;
pub mod health;
pub mod index;
pub mod leader;
pub mod lean;
pub mod manager;
pub mod metrics;
pub mod own_writes;
pub mod requests;
#[cfg(test)]
pub(crate) mod scenario;
pub mod server;
pub mod sharding;
pub mod status;
pub mod transport;
pub mod triggers;
pub mod turns;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use kube::runtime::events::Reporter;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

pub use controller::{Context, ReconcileError, Reconciler, Wiring, run, start};
pub use descriptor::Descriptor;
pub use manager::{Manager, Stopping, Supervised};
pub use triggers::Triggers;
pub use watch::Synced;

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

/// An error and its causes as one line, each text once: most errors repeat their source's
/// message in their own, while some (hyper's "client error (Connect)") leave the cause, such as
/// a failed name lookup, to their source.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut chain: Vec<String> = Vec::new();
    let mut source = Some(error);
    while let Some(e) = source {
        let text = e.to_string();
        if !chain.last().is_some_and(|last| last.contains(&text)) {
            chain.push(text);
        }
        source = e.source();
    }
    chain.join(": ")
}

/// What every controller of a run shares: where to watch, how hard to work, who is speaking.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Watch one namespace only; all namespaces when `None`.
    pub namespace: Option<String>,
    /// Reconciles in flight at once, per controller.
    pub concurrency: u16,
    /// Reconcile every object this often even without a change; `None` never.
    pub resync: Option<Duration>,
    /// Names this instance in events (`reportingInstance`), such as the pod name.
    pub instance: String,
    /// How every watch fetches its first list.
    pub initial_list: watch::InitialList,
    /// Which Events are written.
    pub events: events::EventLevel,
    /// With `--sharding`, the buckets this replica reconciles; every object when `None`.
    pub shard: Option<sharding::ShardRun>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            concurrency: 16,
            resync: None,
            instance: default_instance(),
            initial_list: watch::InitialList::default(),
            events: events::EventLevel::default(),
            shard: None,
        }
    }
}

/// The pod name in a cluster (`POD_NAME`, `HOSTNAME`), else the host name.
fn default_instance() -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "sample-operator".into())
}

/// What every controller of one run shares.
#[derive(Clone)]
pub struct Shared {
    pub client: Client,
    pub events: events::Events,
    pub config: RuntimeConfig,
    pub metrics: Arc<metrics::Metrics>,
    pub health: Arc<health::Health>,
    /// What this controller's sharded watches hash on; see [`Shared::sharded_by`].
    shard_key: Option<sharding::Key>,
}

impl Shared {
    /// Also starts the task that publishes the controllers' events; the run waits for it with
    /// [`events::Publisher::finish`] once every `Shared` is dropped.
    pub fn new(client: Client, config: RuntimeConfig, telemetry: Telemetry) -> (Self, events::Publisher) {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(config.instance.clone()),
        };
        let (events, publisher) = events::Events::start(client.clone(), reporter, telemetry.metrics.clone());
        let events = events.with_level(config.events);
        let shared = Self {
            client,
            events,
            config,
            metrics: telemetry.metrics,
            health: telemetry.health,
            shard_key: None,
        };
        (shared, publisher)
    }

    /// These handles for a controller whose objects are sharded on `key`: with `--sharding`,
    /// its watches ([`Shared::watch_primary`], [`Shared::watch_cache`], …) bring only the
    /// objects of this replica's buckets. A controller that never calls this is not sharded.
    pub fn sharded_by(&self, key: sharding::Key) -> Shared {
        Shared {
            shard_key: Some(key),
            ..self.clone()
        }
    }

    /// The buckets this replica reconciles, with `--sharding`.
    pub fn buckets(&self) -> Option<sharding::Buckets> {
        self.config.shard.as_ref().map(|s| s.buckets)
    }

    /// An `Api` over the watched namespaces.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()> + DeserializeOwned + Clone,
    {
        scoped(&self.client, self.config.namespace.as_deref())
    }
}

/// `K`'s objects in `namespace`, or in all namespaces.
pub fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Creates `object` in `api`'s collection and reads the apiserver's answer as `T`, which need
/// not be `K`: a projection of the object when the caller keeps a few fields of it
/// ([`children::create`]), or `serde::de::IgnoredAny` when it keeps nothing (an Event), so that
/// nothing is decoded only to be dropped.
pub async fn create_reading<K, T>(
    api: &Api<K>,
    params: &kube::api::PostParams,
    object: &impl serde::Serialize,
) -> kube::Result<T>
where
    K: Resource + Clone,
    T: DeserializeOwned,
{
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let mut request = kube::core::Request::new(api.resource_url())
        .create(params, body)
        .map_err(kube::Error::BuildRequest)?;
    // What kube's own create marks its requests with, naming the trace span of kube-rs's HTTP
    // stack (the one a kubeconfig with a proxy-url still gets; `transport` builds the others).
    request.extensions_mut().insert("create");
    api.clone().into_client().request::<T>(request).await
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

#[cfg(test)]
mod tests {
    use super::error_chain;

    /// An error that names itself only, leaving its cause to `source`.
    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("client error (Connect)")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn an_error_chain_names_each_cause_once() {
        let lookup = std::io::Error::other("failed to lookup address information: Name or service not known");
        assert_eq!(
            error_chain(&Outer(lookup)),
            "client error (Connect): failed to lookup address information: Name or service not known"
        );
        // A message that already holds its source's is not repeated.
        let repeated = Repeats(std::io::Error::other("connection refused"));
        assert_eq!(error_chain(&repeated), "connecting: connection refused");
    }

    /// An error whose message holds its source's.
    #[derive(Debug)]
    struct Repeats(std::io::Error);

    impl std::fmt::Display for Repeats {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "connecting: {}", self.0)
        }
    }

    impl std::error::Error for Repeats {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
}
