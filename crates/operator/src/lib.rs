//! sample-operator: the controllers of the classic Kubernetes controller tutorials, on
//! kube-rs's controller runtime.
//!
//! One module per controller ([`foo`]); what they share is here: the configuration of a run,
//! the client, the event reporter, and the function that runs the selected controllers until
//! shutdown.

pub mod backoff;
pub mod cli;
pub mod conditions;
pub mod events;
pub mod foo;
pub mod health;
pub mod index;
pub mod leader;
pub mod metrics;
pub mod my_custom_resource;
pub mod network;
pub mod own_writes;
pub mod requests;
pub mod server;

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use kube::runtime::events::Reporter;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

/// The field manager of every write: one owner for everything the operator applies.
pub const FIELD_MANAGER: &str = "sample-operator";

/// The controllers this operator runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum ControllerName {
    /// Network: syncs networks to a backend, Multus NetworkAttachmentDefinitions (the
    /// samplecrd tutorials).
    Network,
    /// Foo: owns an nginx Deployment (kubernetes/sample-controller).
    Foo,
    /// MyCustomResource: healthy while its friend Pod exists (kubebuilder tutorial).
    MyCustomResource,
}

impl ControllerName {
    pub const ALL: &[ControllerName] = &[
        ControllerName::Network,
        ControllerName::Foo,
        ControllerName::MyCustomResource,
    ];

    /// The name in metrics, logs and readiness reports.
    pub fn label(self) -> &'static str {
        match self {
            ControllerName::Network => "network",
            ControllerName::Foo => "foo",
            ControllerName::MyCustomResource => "my-custom-resource",
        }
    }
}

/// How a run of the operator is configured.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Watch one namespace only; all namespaces when `None`.
    pub namespace: Option<String>,
    pub controllers: Vec<ControllerName>,
    /// Reconciles in flight at once, per controller.
    pub concurrency: u16,
    /// Reconcile every object this often even without a change; `None` never.
    pub resync: Option<Duration>,
    /// Names this instance in events (`reportingInstance`), such as the pod name.
    pub instance: String,
    /// How the MyCustomResource controller watches Pods: metadata only, except when measuring
    /// what that saves.
    pub pod_watch: my_custom_resource::PodWatch,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            controllers: ControllerName::ALL.to_vec(),
            concurrency: 16,
            resync: None,
            instance: default_instance(),
            pod_watch: my_custom_resource::PodWatch::Metadata,
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

    /// Adds the periodic resync of the run's configuration, if any, to `controller`.
    pub fn with_resync<K>(&self, controller: kube::runtime::Controller<K>) -> kube::runtime::Controller<K>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone,
    {
        match self.config.resync {
            Some(interval) => controller.reconcile_all_on(resync_ticks(interval)),
            None => controller,
        }
    }

    pub fn controller_config(&self) -> kube::runtime::controller::Config {
        kube::runtime::controller::Config::default().concurrency(self.config.concurrency)
    }
}

/// Completes once `store` has its first full list.
///
/// `Store::wait_until_ready` wakes only the last task that polled it (its readiness is a
/// oneshot channel, which keeps one waker), so with several waiters, such as the controller's
/// runner and concurrent reconciles, the others would wait forever. Polling is safe for any
/// number of waiters, and costs nothing once the store is ready.
pub async fn store_ready<K>(store: &kube::runtime::reflector::Store<K>)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    use futures::FutureExt;
    while store.wait_until_ready().now_or_never().is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
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

/// Runs the configured controllers until `shutdown` completes; each then finishes the
/// reconciles it has in flight.
pub async fn run(client: Client, config: RunConfig, shutdown: impl Future<Output = ()> + Send + 'static) {
    run_with(client, config, Telemetry::new(Default::default()), shutdown).await
}

/// [`run`], reporting to `telemetry`.
pub async fn run_with(
    client: Client,
    config: RunConfig,
    telemetry: Telemetry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let (shared, events) = Shared::new(client, config, telemetry);
    shared
        .health
        .starting(shared.config.controllers.iter().map(|c| c.label()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    let mut controllers = Vec::new();
    for name in &shared.config.controllers {
        let controller = match name {
            ControllerName::Network => tokio::spawn(network::run(shared.clone(), stopped())),
            ControllerName::Foo => tokio::spawn(foo::run(shared.clone(), stopped())),
            ControllerName::MyCustomResource => {
                tokio::spawn(my_custom_resource::run(shared.clone(), stopped()))
            }
        };
        controllers.push(controller);
    }
    shutdown.await;
    let _ = stop_tx.send(true);
    for controller in controllers {
        let _ = controller.await;
    }
    let health = shared.health.clone();
    drop(shared);
    events.finish(EVENTS_AT_SHUTDOWN).await;
    health.stopped();
}

/// How long a stopping run waits for its queued events to be published.
const EVENTS_AT_SHUTDOWN: Duration = Duration::from_secs(5);
