//! sample-operator: the controllers of the classic Kubernetes controller tutorials, on
//! kube-rs's controller runtime.
//!
//! [`runtime`] holds everything the controllers share (the reconcile loop around kube-runtime's
//! `Controller`, watches and readiness, status writes and events, metrics, health, leader
//! election); each controller module holds only its domain: [`foo`] (for both groups of Foo),
//! [`network`] and [`my_custom_resource`]. This file names the controllers and runs the
//! selected ones until shutdown.

pub mod cli;
pub mod foo;
pub mod my_custom_resource;
pub mod network;
pub mod runtime;

use std::time::Duration;

use kube::Client;
use sample_operator_api::{ExampleFoo, Foo};

use runtime::{Shared, Telemetry};

/// The controllers this operator runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum ControllerName {
    /// Network: syncs networks to a backend, Multus NetworkAttachmentDefinitions or OpenStack
    /// Neutron (the samplecrd tutorials).
    Network,
    /// Foo (samplecontroller.k8s.io): owns an nginx Deployment (kubernetes/sample-controller).
    Foo,
    /// Foo (example.com): the same Foo in the group of the nakamasato/sample-controller tutorial.
    FooExample,
    /// MyCustomResource: healthy while its friend Pod exists (kubebuilder tutorial).
    MyCustomResource,
}

impl ControllerName {
    /// What runs unless `--controllers` says otherwise: the controllers of the CRDs installed by
    /// default. `foo-example` runs when asked for, where its CRD is installed.
    pub const DEFAULT: &[ControllerName] = &[
        ControllerName::Network,
        ControllerName::Foo,
        ControllerName::MyCustomResource,
    ];

    /// The name in metrics, logs and readiness reports.
    pub fn label(self) -> &'static str {
        match self {
            ControllerName::Network => "network",
            ControllerName::Foo => "foo",
            ControllerName::FooExample => "foo-example",
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
    /// Where the Network controller syncs Networks to.
    pub network_backend: network::BackendConfig,
    /// How every watch fetches its first list.
    pub initial_list: runtime::watch::InitialList,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            controllers: ControllerName::DEFAULT.to_vec(),
            concurrency: 16,
            resync: None,
            instance: default_instance(),
            pod_watch: my_custom_resource::PodWatch::Metadata,
            network_backend: network::BackendConfig::Multus,
            initial_list: runtime::watch::InitialList::default(),
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
        let (shared, stopped) = (shared.clone(), stopped());
        controllers.push(match name {
            ControllerName::Network => tokio::spawn(network::run_selected(
                shared,
                kube::runtime::watcher::Config::default(),
                stopped,
            )),
            ControllerName::Foo => {
                tokio::spawn(async move { runtime::run(&shared, foo::wiring::<Foo>(&shared), stopped).await })
            }
            ControllerName::FooExample => tokio::spawn(async move {
                runtime::run(&shared, foo::wiring::<ExampleFoo>(&shared), stopped).await
            }),
            ControllerName::MyCustomResource => tokio::spawn(async move {
                runtime::run(&shared, my_custom_resource::wiring(&shared), stopped).await
            }),
        });
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
