//! The MyCustomResource controller: the kubebuilder seed's behaviour on the shared runtime.
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

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::{predicates, watcher};
use sample_operator_api::MyCustomResource;

use crate::runtime::descriptor::{Descriptor, OwnResource};
use crate::runtime::index::Index;
use crate::runtime::sharding;
use crate::runtime::{Context, ReconcileError, Reconciler, Shared, Triggers, Wiring};
pub use pods::PodWatch;
use pods::{PodCache, PodKey};

/// The controller's name in metrics and readiness reports.
const CONTROLLER: &str = "my-custom-resource";

/// The MyCustomResource controller, for the operator's list of controllers.
pub const DESCRIPTOR: Descriptor<Settings> = Descriptor {
    name: CONTROLLER,
    runs_by_default: true,
    resource: OwnResource::of::<MyCustomResource>(),
    start: |shared, settings, stopping| crate::runtime::start(shared, wiring(shared, settings), stopping),
};

/// The MyCustomResource controller's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// How Pods are watched: metadata only, except when measuring what that saves.
    pub pod_watch: PodWatch,
}

/// What can go wrong in a MyCustomResource reconcile. The variant names are the reasons in logs
/// and metrics; every one of them is retried with per-object backoff.
#[derive(Debug, thiserror::Error, strum::IntoStaticStr)]
pub enum Error {
    #[error("writing status: {0}")]
    WriteStatus(#[source] kube::Error),
    #[error("the MyCustomResource has no {0}")]
    MissingObjectKey(&'static str),
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        self.into()
    }
}

/// The MyCustomResource domain.
pub struct MyCustomResourceReconciler {
    /// The Pods of the watched namespaces, by namespace and name.
    pods: PodCache,
}

/// The controller of every MyCustomResource in the watched namespaces.
pub fn wiring(shared: &Shared, settings: &Settings) -> Wiring<MyCustomResourceReconciler> {
    // Resources by the Pod they name. It follows the same stream as the store, and is updated
    // before the store: by the time a resource can be reconciled (and find its Pod missing),
    // a Pod event already maps to it, so no Pod event falls between the two.
    let by_pod = Index::new(named_pod);
    let index = by_pod.clone();
    // Sharded by namespace: a resource and the Pod it names share one, so a replica's Pod
    // cache holds the Pods of its own namespaces only.
    let shared = &shared.sharded_by(sharding::Key::Namespace);
    // Our own status writes do not change the generation: they need no reconcile.
    let resources = shared.watch_primary::<MyCustomResource>(
        watcher::Config::default(),
        predicates::generation,
        move |event| index.apply(event),
    );
    let pods = pods::cache(shared, settings.pod_watch);
    // Each Pod event maps to the resources naming that Pod, by index lookup: never a list of
    // resources from the API, never a scan of the cache.
    let triggers = Triggers::for_stream(resources.events, resources.store)
        .watches_stream(pods.events, move |pod| by_pod.get(&pods::key(&pod)));
    Wiring {
        name: CONTROLLER,
        triggers,
        reconciler: MyCustomResourceReconciler { pods: pods.cache },
        own_writes: resources.own_writes,
        // Before the first list of Pods every Pod would look missing, and a healthy resource
        // would be marked unhealthy for a moment.
        caches: vec![resources.synced, pods.synced],
    }
}

/// The index key of a resource: the Pod it names, in its own namespace.
fn named_pod(mcr: &MyCustomResource) -> Vec<PodKey> {
    mcr.namespace()
        .map(|namespace| (namespace, mcr.spec.name.clone()))
        .into_iter()
        .collect()
}

impl Reconciler for MyCustomResourceReconciler {
    type Object = MyCustomResource;
    type Error = Error;

    /// The reconcile pipeline; see the module docs.
    async fn reconcile(
        &self,
        mcr: Arc<MyCustomResource>,
        ctx: &Context<MyCustomResource>,
    ) -> Result<Action, Error> {
        let namespace = mcr.namespace().ok_or(Error::MissingObjectKey("namespace"))?;
        let friend = self.pods.friend(&namespace, &mcr.spec.name);
        let new = status::desired(&mcr, friend);
        let healthy = new.healthy;
        let written = ctx
            .update_status(&*mcr, new, transition_event)
            .await
            .map_err(Error::WriteStatus)?;
        if written {
            tracing::info!(pod = %mcr.spec.name, healthy, "status updated");
        }
        // Pod events and spec changes trigger the next reconcile; nothing to poll for.
        Ok(Action::await_change())
    }
}

/// Every change of the `Ready` reason is an event; an unhealthy resource is worth a look: a
/// Warning, so `kubectl get events --field-selector type=Warning` shows it.
fn transition_event(ready: &Condition) -> Option<(EventType, &str)> {
    let type_ = if ready.status == "True" {
        EventType::Normal
    } else {
        EventType::Warning
    };
    Some((type_, ready.reason.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::ObjectRef;
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

/// The reconcile over a scripted API server ([`crate::runtime::scenario`]), its Pods in a cache
/// the test fills: status written only when it changes, an Event on each transition only.
#[cfg(test)]
mod scenarios {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use sample_operator_api::{MyCustomResource, MyCustomResourceSpec};

    use super::MyCustomResourceReconciler;
    use super::pods::PodCache;
    use crate::runtime::Reconciler;
    use crate::runtime::scenario::{ApiServer, Sent, event_reasons, with_status};

    const STATUS: &str = "/apis/poc.test.domain/v1/namespaces/team/mycustomresources/example/status";

    fn pod(deleting: bool) -> PartialObjectMeta<Pod> {
        ObjectMeta {
            name: Some("friend".into()),
            namespace: Some("team".into()),
            deletion_timestamp: deleting.then(|| Time(k8s_openapi::jiff::Timestamp::now())),
            ..ObjectMeta::default()
        }
        .into_response_partial()
    }

    /// One reconcile of `mcr`: what it sent, and the resource as its status write left it.
    async fn reconcile(
        api: &ApiServer,
        reconciler: &MyCustomResourceReconciler,
        mcr: MyCustomResource,
    ) -> (Vec<Sent>, MyCustomResource) {
        let (ctx, events) = api.context::<MyCustomResource>();
        reconciler.reconcile(Arc::new(mcr.clone()), &ctx).await.unwrap();
        let sent = api.finish(ctx, events).await;
        let after = match sent.iter().find(|s| s.is("PATCH", STATUS)) {
            Some(write) => serde_json::from_value(with_status(&mcr, &write.body)).unwrap(),
            None => mcr,
        };
        (sent, after)
    }

    /// (writes of the status, Event reasons, Healthy) of one reconcile.
    fn summary(sent: &[Sent], mcr: &MyCustomResource) -> (usize, Vec<String>, bool) {
        let writes = sent
            .iter()
            .filter(|s| s.is_write() && s.event_reason().is_none())
            .count();
        let healthy = mcr.status.as_ref().is_some_and(|s| s.healthy);
        (writes, event_reasons(sent), healthy)
    }

    #[tokio::test]
    async fn status_follows_the_pod_with_one_write_and_one_event_per_transition() {
        let mut mcr = MyCustomResource::new(
            "example",
            MyCustomResourceSpec {
                name: "friend".into(),
            },
        );
        mcr.metadata.namespace = Some("team".into());
        mcr.metadata.uid = Some("mcr-uid".into());
        mcr.metadata.generation = Some(1);
        let answering = mcr.clone();
        let api = ApiServer::new(move |sent| {
            sent.is("PATCH", STATUS)
                .then(|| (200, with_status(&answering, &sent.body)))
        });
        let (store, mut writer) = reflector::store::<PartialObjectMeta<Pod>>();
        let reconciler = MyCustomResourceReconciler {
            pods: PodCache::Metadata(store),
        };
        let missing = || (1, vec!["FriendMissing".to_owned()], false);
        let found = || (1, vec!["FriendFound".to_owned()], true);
        let nothing = |healthy| (0, Vec::<String>::new(), healthy);

        // The Event of a transition: its type and note, from the operator's reporter.
        let said = |sent: &[Sent]| {
            let event = &sent.iter().find(|s| s.event_reason().is_some()).unwrap().body;
            assert_eq!(event["reportingController"], crate::runtime::FIELD_MANAGER);
            (event["type"].clone(), event["note"].clone())
        };

        // No Pod: unhealthy, said once, as a Warning.
        let (sent, mcr) = reconcile(&api, &reconciler, mcr).await;
        assert_eq!(summary(&sent, &mcr), missing());
        assert_eq!(said(&sent).0, "Warning");
        let (sent, mcr) = reconcile(&api, &reconciler, mcr).await;
        assert_eq!(summary(&sent, &mcr), nothing(false));

        // The Pod appears: healthy, said once.
        writer.apply_watcher_event(&Event::Apply(pod(false)));
        let (sent, mcr) = reconcile(&api, &reconciler, mcr).await;
        assert_eq!(summary(&sent, &mcr), found());
        assert_eq!(
            said(&sent),
            (
                "Normal".into(),
                "Pod \"friend\" exists in namespace \"team\"".into()
            )
        );
        let (sent, mcr) = reconcile(&api, &reconciler, mcr).await;
        assert_eq!(summary(&sent, &mcr), nothing(true));

        // Being deleted, it is no friend: unhealthy again, said once.
        writer.apply_watcher_event(&Event::Apply(pod(true)));
        let (sent, mcr) = reconcile(&api, &reconciler, mcr).await;
        assert_eq!(summary(&sent, &mcr), missing());
        // Gone: the message says so, under the same reason, so no Event.
        writer.apply_watcher_event(&Event::Delete(pod(true)));
        let (sent, mcr) = reconcile(&api, &reconciler, mcr).await;
        assert_eq!(summary(&sent, &mcr), (1, Vec::new(), false));
        let (sent, mcr) = reconcile(&api, &reconciler, mcr).await;
        assert_eq!(summary(&sent, &mcr), nothing(false));
    }
}
