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
pub mod index;
pub mod requests;

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
    /// Foo: owns an nginx Deployment (kubernetes/sample-controller).
    Foo,
}

impl ControllerName {
    pub const ALL: &[ControllerName] = &[ControllerName::Foo];
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
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            controllers: ControllerName::ALL.to_vec(),
            concurrency: 16,
            resync: None,
            instance: default_instance(),
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
    pub reporter: Reporter,
    pub config: RunConfig,
}

impl Shared {
    pub fn new(client: Client, config: RunConfig) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(config.instance.clone()),
        };
        Self {
            client,
            reporter,
            config,
        }
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

    pub fn controller_config(&self) -> kube::runtime::controller::Config {
        kube::runtime::controller::Config::default().concurrency(self.config.concurrency)
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
    let shared = Shared::new(client, config);
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
            ControllerName::Foo => tokio::spawn(foo::run(shared.clone(), stopped())),
        };
        controllers.push(controller);
    }
    shutdown.await;
    let _ = stop_tx.send(true);
    for controller in controllers {
        let _ = controller.await;
    }
}
