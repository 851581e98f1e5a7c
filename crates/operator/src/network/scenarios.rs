//! The Network reconcile over a scripted API server ([`crate::runtime::scenario`]) and a fake
//! backend that records what reaches it and answers as a test says: refusals never reach the
//! backend, its failures go into status once, and a steady Network costs nothing.

use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::watcher::Event;
use sample_operator_api::{Addressing, BackendReference, Network, NetworkSpec};

use super::backend::{BackendError, Ensured, NetworkBackend};
use super::conflicts::PrefixIndex;
use super::policy::AddressPolicy;
use super::{Error, FINALIZER, NetworkReconciler, status};
use crate::runtime::scenario::{ApiServer, Sent, event_reasons, with_status};
use crate::runtime::{ReconcileError, Reconciler};

/// What reached the backend, and what it answers to `ensure`.
#[derive(Clone, Default)]
struct FakeBackend {
    calls: Arc<Mutex<Vec<String>>>,
    /// `None`: it takes the Network, having written (`true`) or not.
    failing: Arc<Mutex<Option<BackendError>>>,
    writes: Arc<Mutex<bool>>,
}

impl FakeBackend {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }

    fn answer(&self, failing: Option<BackendError>, writes: bool) {
        *self.failing.lock().unwrap() = failing;
        *self.writes.lock().unwrap() = writes;
    }
}

impl NetworkBackend for FakeBackend {
    async fn ensure(&self, network: &Network, addressing: &Addressing) -> Result<Ensured, BackendError> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("ensure {} {}", network.name_any(), addressing.prefix));
        if let Some(error) = self.failing.lock().unwrap().clone() {
            return Err(error);
        }
        Ok(Ensured {
            changed: *self.writes.lock().unwrap(),
            reference: BackendReference {
                provider: "fake".into(),
                id: network.name_any(),
                subnet_id: None,
            },
            description: format!("fake network {}", network.name_any()),
        })
    }

    async fn remove(&self, network: &Network) -> Result<bool, BackendError> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("remove {}", network.name_any()));
        Ok(false)
    }
}

/// The Network `name` of namespace `team`, as the apiserver sends it once the finalizer is on.
fn network(name: &str, cidr: &str, gateway: &str, created_second: i64) -> Network {
    let mut network = Network::new(
        name,
        NetworkSpec {
            cidr: cidr.into(),
            gateway: gateway.into(),
        },
    );
    network.metadata.namespace = Some("team".into());
    network.metadata.uid = Some(format!("{name}-uid"));
    network.metadata.generation = Some(1);
    network.metadata.resource_version = Some("7".into());
    network.metadata.finalizers = Some(vec![FINALIZER.into()]);
    network.metadata.creation_timestamp = Some(Time(
        k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + created_second).unwrap(),
    ));
    network
}

fn status_path(name: &str) -> String {
    format!("/apis/samplecrd.k8s.io/v1/namespaces/team/networks/{name}/status")
}

/// A scene: the index holds `networks`, every status write of theirs is answered.
fn scene(networks: &[Network]) -> (ApiServer, FakeBackend, NetworkReconciler<FakeBackend>) {
    let conflicts = PrefixIndex::new(AddressPolicy::default(), super::conflicts::Scope::Namespace);
    for network in networks {
        conflicts.apply(&Event::Apply(network.clone()));
    }
    let known: Vec<Network> = networks.to_vec();
    let api = ApiServer::new(move |sent| {
        let network = known
            .iter()
            .find(|n| sent.is("PATCH", &status_path(&n.name_any())))?;
        Some((200, with_status(network, &sent.body)))
    });
    let backend = FakeBackend::default();
    let reconciler = NetworkReconciler {
        conflicts,
        policy: AddressPolicy::default(),
        cluster: Default::default(),
        backend: backend.clone(),
    };
    (api, backend, reconciler)
}

/// One reconcile: its result, the requests it sent, and the Network as its status write left it.
async fn reconcile(
    api: &ApiServer,
    reconciler: &NetworkReconciler<FakeBackend>,
    network: &Network,
) -> (Result<Action, Error>, Vec<Sent>, Network) {
    let (ctx, events) = api.context::<Network>();
    let result = reconciler.reconcile(Arc::new(network.clone()), &ctx).await;
    let sent = api.finish(ctx, events).await;
    let path = status_path(&network.name_any());
    let after = match sent.iter().find(|s| s.is("PATCH", &path)) {
        Some(write) => serde_json::from_value(with_status(network, &write.body)).unwrap(),
        None => network.clone(),
    };
    (result, sent, after)
}

fn ready(network: &Network) -> (String, String) {
    let status = network.status.as_ref().expect("a status");
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    (ready.status.clone(), ready.reason.clone())
}

fn status_writes(sent: &[Sent]) -> usize {
    sent.iter()
        .filter(|s| s.is_write() && s.event_reason().is_none())
        .count()
}

#[tokio::test]
async fn a_prefix_outside_the_policy_never_reaches_the_backend_and_is_reported_once() {
    let loopback = network("local", "127.0.0.0/24", "127.0.0.1", 0);
    let (api, backend, reconciler) = scene(std::slice::from_ref(&loopback));

    let (result, sent, after) = reconcile(&api, &reconciler, &loopback).await;
    let error = result.unwrap_err();
    assert_eq!(error.reason(), "PrefixNotAllowed");
    assert_eq!(
        ready(&after),
        ("False".into(), status::reason::PREFIX_NOT_ALLOWED.into())
    );
    assert_eq!(
        (status_writes(&sent), event_reasons(&sent)),
        (1, vec!["PrefixNotAllowed".into()])
    );
    let message = &after.status.as_ref().unwrap().conditions[0].message;
    assert!(message.contains("(loopback)"), "names the rule: {message}");
    let event = &sent.iter().find(|s| s.event_reason().is_some()).unwrap().body;
    assert_eq!(event["type"], "Warning");
    // Only taken out of it, in case an earlier policy let it in.
    assert_eq!(backend.take(), ["remove local"]);

    let (_, sent, _) = reconcile(&api, &reconciler, &after).await;
    assert!(sent.is_empty(), "reported already: {sent:#?}");
    // Released already: a resync asks nothing of the backend (with Neutron, no request).
    assert_eq!(backend.take(), Vec::<String>::new());
}

#[tokio::test]
async fn the_newer_of_two_overlapping_networks_waits_without_reaching_the_backend() {
    let older = network("older", "10.1.0.0/16", "10.1.0.1", 0);
    let newer = network("newer", "10.1.2.0/24", "10.1.2.1", 5);
    let (api, backend, reconciler) = scene(&[older.clone(), newer.clone()]);

    let (result, sent, after) = reconcile(&api, &reconciler, &newer).await;
    assert_eq!(
        result.unwrap(),
        Action::await_change(),
        "no retry: the index brings the change"
    );
    assert_eq!(
        ready(&after),
        ("False".into(), status::reason::CIDR_CONFLICT.into())
    );
    assert_eq!(
        (status_writes(&sent), event_reasons(&sent)),
        (1, vec!["CIDRConflict".into()])
    );
    assert_eq!(backend.take(), ["remove newer"]);
    let (_, sent, _) = reconcile(&api, &reconciler, &after).await;
    assert!(sent.is_empty(), "reported already: {sent:#?}");
    assert_eq!(backend.take(), Vec::<String>::new(), "released already");

    backend.answer(None, true);
    let (result, sent, after) = reconcile(&api, &reconciler, &older).await;
    result.unwrap();
    assert_eq!(ready(&after), ("True".into(), status::reason::SYNCED.into()));
    assert_eq!(event_reasons(&sent), ["Synced"]);
    assert_eq!(backend.take(), ["ensure older 10.1.0.0/16"]);
}

#[tokio::test]
async fn a_backend_failure_goes_into_status_once_and_a_steady_network_costs_nothing() {
    let blue = network("blue", "10.2.0.0/24", "10.2.0.1", 0);
    let (api, backend, reconciler) = scene(std::slice::from_ref(&blue));
    backend.answer(
        Some(BackendError::Unreachable("the backend cannot be reached".into())),
        false,
    );

    let (result, sent, blue) = reconcile(&api, &reconciler, &blue).await;
    let error = result.unwrap_err();
    assert!(!error.is_terminal(), "retried");
    assert_eq!(
        ready(&blue),
        ("False".into(), status::reason::BACKEND_UNAVAILABLE.into())
    );
    assert_eq!(
        (status_writes(&sent), event_reasons(&sent)),
        (1, vec!["BackendUnavailable".into()])
    );
    // Still down at the retry: nothing new to say.
    let (result, sent, blue) = reconcile(&api, &reconciler, &blue).await;
    assert!(result.is_err());
    assert!(sent.is_empty(), "reported already: {sent:#?}");

    // Back: synced, said once; then steady.
    backend.answer(None, true);
    let (result, sent, blue) = reconcile(&api, &reconciler, &blue).await;
    result.unwrap();
    assert_eq!(ready(&blue), ("True".into(), status::reason::SYNCED.into()));
    assert_eq!(
        (status_writes(&sent), event_reasons(&sent)),
        (1, vec!["Synced".into()])
    );
    backend.answer(None, false);
    let (result, sent, _) = reconcile(&api, &reconciler, &blue).await;
    result.unwrap();
    assert!(sent.is_empty(), "a steady Network sends nothing: {sent:#?}");
    assert_eq!(backend.take().len(), 4, "one ensure a reconcile");
}
