//! The Foo controller: kubernetes/sample-controller's behaviour on the shared runtime.
//!
//! One domain for both groups a Foo is served in (`samplecontroller.k8s.io` and `example.com`):
//! the code is generic over [`FooKind`], and each group runs as a controller of its own. For
//! each Foo it keeps an nginx Deployment named `spec.deploymentName`, controlled by the Foo
//! through an owner reference, and reports the Deployment's availability in the Foo's status.
//! Reconcile is a short pipeline:
//!
//! 1. **validate** the spec (objects stored before the schema had a rule get a condition and an
//!    event, then wait for a change: a terminal error);
//! 2. **ensure the Deployment**: build the whole desired object ([`deployment::desired`]) and
//!    server-side apply it, but only when a field we manage differs, and never to a Deployment
//!    this Foo does not control;
//! 3. **remove stale Deployments** this Foo controls under another name (after a rename);
//! 4. **update the status** ([`status::desired`]) when it changed, with events on transitions.
//!
//! Deployments are watched by label (only the operator's own) into a table of what reconcile
//! reads of them ([`table`]), not cached as objects; a Deployment event reaches its Foo through
//! the owner reference when it changed what the table keeps, other than by the Foo's own create.

pub mod cached;
pub mod deployment;
pub mod settings;
pub mod status;
pub mod table;

#[cfg(test)]
mod scenarios;

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::{predicates, watcher};
use sample_operator_api::{ExampleFoo, Foo, FooKind};

use crate::runtime::children;
use crate::runtime::descriptor::{Descriptor, OwnResource};
use crate::runtime::index::Index;
use crate::runtime::sharding;
use crate::runtime::watch::no_preparation;
use crate::runtime::{Context, FIELD_MANAGER, ReconcileError, Reconciler, Shared, Triggers, Wiring};
use cached::CachedDeployment;
pub use settings::Settings;
use status::Observed;
use table::{DeploymentTable, Row};

/// A group the Foo is served in, and the name of its controller.
pub trait Kind: FooKind {
    /// The controller's name in metrics, logs and readiness reports.
    const CONTROLLER: &'static str;
}

impl Kind for Foo {
    const CONTROLLER: &'static str = "foo";
}

impl Kind for ExampleFoo {
    const CONTROLLER: &'static str = "foo-example";
}

/// The Foo controller of `samplecontroller.k8s.io`, for the operator's list of controllers.
pub const DESCRIPTOR: Descriptor<Settings> = descriptor::<Foo>(true);

/// The Foo controller of `example.com` (seed 004's group), which runs only when asked for: its
/// CRD is not installed by default.
pub const EXAMPLE_DESCRIPTOR: Descriptor<Settings> = descriptor::<ExampleFoo>(false);

/// Both groups' controllers share one [`Settings`].
const fn descriptor<K: Kind>(runs_by_default: bool) -> Descriptor<Settings> {
    Descriptor {
        name: K::CONTROLLER,
        runs_by_default,
        resource: OwnResource::of::<K>(),
        start: |shared, settings, stopping| {
            crate::runtime::start(shared, wiring::<K>(shared, settings), stopping)
        },
    }
}

/// What can go wrong in a Foo reconcile. The variant names are the reasons in logs and
/// metrics; every one but `InvalidSpec` is retried with per-object backoff.
#[derive(Debug, thiserror::Error, strum::IntoStaticStr)]
pub enum Error {
    #[error("the Foo has no {0}")]
    MissingObjectKey(&'static str),
    #[error("{0}")]
    InvalidSpec(String),
    #[error("{}", status::resource_exists_message(.0))]
    ResourceExists(String),
    #[error("creating Deployment: {0}")]
    CreateDeployment(#[source] kube::Error),
    #[error("reading Deployment: {0}")]
    ReadDeployment(#[source] kube::Error),
    #[error("applying Deployment: {0}")]
    ApplyDeployment(#[source] kube::Error),
    #[error("deleting stale Deployment: {0}")]
    DeleteDeployment(#[source] kube::Error),
    #[error("writing status: {0}")]
    WriteStatus(#[source] kube::Error),
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        self.into()
    }

    fn is_terminal(&self) -> bool {
        matches!(self, Error::InvalidSpec(_))
    }

    /// A foreign Deployment in the way is watched (its metadata), so the end of a conflict
    /// triggers a reconcile at once; retries only back that up, up to the backoff's cap of
    /// minutes, so that thousands of blocked Foos cost few requests.
    fn max_delay(&self) -> Duration {
        Duration::MAX
    }
}

/// The Foo domain, for Foos of kind `K`.
pub struct FooReconciler<K> {
    /// What reconcile reads of the operator's Deployments.
    deployments: DeploymentTable,
    settings: Arc<Settings>,
    kind: PhantomData<fn() -> K>,
}

/// The controller of Foos of kind `K`: its watches, caches and domain.
pub fn wiring<K: Kind>(shared: &Shared, settings: &Settings) -> Wiring<FooReconciler<K>> {
    // Foos by the Deployment they name, so that a foreign Deployment's event reaches the Foos
    // it blocks; kept from the Foo watch, ahead of its cache.
    let by_deployment = Index::new(named_deployment::<K>);
    let index = by_deployment.clone();
    // Our own status writes do not change the generation: they need no reconcile. Sharded, a
    // replica holds the Foos whose UIDs hash into its buckets.
    let foos = shared.sharded_by(sharding::Key::Uid).watch_primary::<K>(
        watcher::Config::default(),
        predicates::generation,
        move |event| index.apply(event),
    );
    let table = DeploymentTable::default();
    let follow = table.clone();
    // A Deployment carries its Foo's bucket as a label (its own UID hashes elsewhere), so a
    // sharded replica selects its Foos' Deployments by label.
    let mut selector = format!("{}={}", deployment::MANAGED_BY_LABEL, deployment::MANAGED_BY);
    if let Some(buckets) = shared.buckets() {
        selector = format!("{selector},{}", buckets.label_selector());
    }
    // Only a change of what reconcile reads of a Deployment triggers its Foo (see [`table`]).
    let deployments = shared.watch_followed_deciding(
        shared.api::<CachedDeployment>(),
        "deployments",
        watcher::Config::default().labels(&selector),
        no_preparation,
        move |event| follow.apply(event),
    );
    // Any other Deployment may be in a Foo's way: watched (its metadata, not cached), its
    // deletion or a change of its owners reaches the Foos that name it; its other changes (a
    // status update every few seconds) wake no one.
    let foreign = shared.watch_triggers(
        shared.api::<PartialObjectMeta<Deployment>>(),
        "foreign-deployments",
        watcher::Config::default().labels(&format!(
            "{}!={}",
            deployment::MANAGED_BY_LABEL,
            deployment::MANAGED_BY
        )),
    );
    let triggers = Triggers::for_stream(foos.events, foos.store)
        .owns_stream(deployments.events)
        .watches_stream(foreign, move |d| {
            let key = (d.namespace().unwrap_or_default().into(), d.name_any().into());
            by_deployment.get(&key)
        });
    Wiring {
        name: K::CONTROLLER,
        triggers,
        reconciler: FooReconciler {
            deployments: table,
            settings: Arc::new(settings.clone()),
            kind: PhantomData,
        },
        own_writes: foos.own_writes,
        caches: vec![foos.synced, deployments.synced],
    }
}

/// The index key of a Foo: the Deployment it names, in its own namespace.
fn named_deployment<K: Kind>(foo: &K) -> Vec<(Box<str>, Box<str>)> {
    foo.meta()
        .namespace
        .as_deref()
        .map(|namespace| (namespace.into(), foo.spec().deployment_name.as_str().into()))
        .into_iter()
        .collect()
}

impl<K: Kind> Reconciler for FooReconciler<K> {
    type Object = K;
    type Error = Error;

    /// The reconcile pipeline; see the module docs.
    async fn reconcile(&self, foo: Arc<K>, ctx: &Context<K>) -> Result<Action, Error> {
        let foo = &*foo;
        let namespace = foo.namespace().ok_or(Error::MissingObjectKey("namespace"))?;
        let uid = foo.uid().ok_or(Error::MissingObjectKey("uid"))?;

        if let Err(message) = foo.validate() {
            update_status(foo, ctx, Observed::Invalid(&message)).await?;
            return Err(Error::InvalidSpec(message));
        }

        let (deployment, applied) = match self.ensure_deployment(foo, ctx, &namespace, &uid).await {
            Err(Error::ResourceExists(name)) => {
                update_status(foo, ctx, Observed::Conflict).await?;
                return Err(Error::ResourceExists(name));
            }
            other => other?,
        };
        let removed = self.remove_stale_deployments(foo, ctx, &namespace, &uid).await?;
        update_status(foo, ctx, Observed::Deployment(&deployment)).await?;
        if applied || removed {
            ctx.publish(foo, EventType::Normal, "Synced", "Foo synced successfully".into())
                .await;
        }
        Ok(Action::await_change())
    }
}

impl<K: Kind> FooReconciler<K> {
    /// Makes the Deployment match the desired one. Returns its row, and whether anything was
    /// written.
    async fn ensure_deployment(
        &self,
        foo: &K,
        ctx: &Context<K>,
        namespace: &str,
        uid: &str,
    ) -> Result<(Row, bool), Error> {
        // Creates, reads and applies answer with the cached projection rather than a whole
        // Deployment.
        let cached_api: Api<CachedDeployment> = Api::namespaced(ctx.client().clone(), namespace);
        let name = &foo.spec().deployment_name;
        let desired = deployment::desired(foo, &self.settings);
        let observed = match self.deployments.get(namespace, name) {
            Some(row) => row,
            // Not among the operator's Deployments: create it, unless one of that name exists
            // (someone else's, or ours with its label removed), which is then read.
            None => match children::create(&cached_api, &desired)
                .await
                .map_err(Error::CreateDeployment)?
            {
                Some(created) => {
                    tracing::info!(deployment = %name, "created Deployment");
                    self.deployments.record_created(&created);
                    return Ok((Row::of(&created), true));
                }
                None => Row::of(&cached_api.get(name).await.map_err(Error::ReadDeployment)?),
            },
        };
        if !observed.is_controlled_by(uid) {
            return Err(Error::ResourceExists(name.clone()));
        }
        if !deployment::needs_apply(&desired, &observed) {
            return Ok((observed, false));
        }
        // The uid makes the apply conditional on the object checked above: if it was replaced in
        // between by someone else's, the apiserver refuses instead of taking it over.
        let mut patch = desired;
        patch.metadata.uid = Some(observed.uid.into());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let applied = cached_api
            .patch(name, &params, &Patch::Apply(&patch))
            .await
            .map_err(Error::ApplyDeployment)?;
        tracing::info!(deployment = %name, "applied Deployment");
        Ok((Row::of(&applied), true))
    }

    /// Deletes the Deployments this Foo controls under a name it no longer asks for.
    async fn remove_stale_deployments(
        &self,
        foo: &K,
        ctx: &Context<K>,
        namespace: &str,
        uid: &str,
    ) -> Result<bool, Error> {
        let mut removed = false;
        for (name, stale) in self.deployments.controlled_by(namespace, uid) {
            if *name == *foo.spec().deployment_name {
                continue;
            }
            let api: Api<Deployment> = Api::namespaced(ctx.client().clone(), namespace);
            if children::delete(&api, &name, &stale.uid)
                .await
                .map_err(Error::DeleteDeployment)?
            {
                tracing::info!(deployment = %name, "deleted stale Deployment");
                removed = true;
            }
        }
        Ok(removed)
    }
}

/// Writes the status when it changed, with a Warning event when the Foo enters a failure.
async fn update_status<K: Kind>(foo: &K, ctx: &Context<K>, observed: Observed<'_>) -> Result<(), Error> {
    ctx.update_status(foo, status::desired(foo, observed), transition_event)
        .await
        .map_err(Error::WriteStatus)?;
    Ok(())
}

/// The event of a Foo entering a `Ready` reason: the seed's `ErrResourceExists`, and invalid
/// specs; recovering is reported by `Synced`.
fn transition_event(ready: &Condition) -> Option<(EventType, &str)> {
    match ready.reason.as_str() {
        status::reason::RESOURCE_EXISTS => Some((EventType::Warning, "ErrResourceExists")),
        status::reason::INVALID_SPEC => Some((EventType::Warning, "InvalidSpec")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_the_variant_names_and_only_invalid_specs_are_terminal() {
        let invalid = Error::InvalidSpec("spec.replicas: 11 is out of range".into());
        assert_eq!(invalid.reason(), "InvalidSpec");
        assert!(invalid.is_terminal());
        let conflict = Error::ResourceExists("web".into());
        assert_eq!(conflict.reason(), "ResourceExists");
        assert!(!conflict.is_terminal());
        // Its end is watched: retries back off to the runtime's cap of minutes.
        assert_eq!(conflict.max_delay(), Duration::MAX);
        assert_eq!(Error::MissingObjectKey("uid").reason(), "MissingObjectKey");
    }
}
