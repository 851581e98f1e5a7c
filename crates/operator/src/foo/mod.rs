//! The Foo controller: kubernetes/sample-controller's behaviour on kube-rs's runtime.
//!
//! For each Foo it keeps an nginx Deployment named `spec.deploymentName`, controlled by the Foo
//! through an owner reference, and reports the Deployment's availability in the Foo's status.
//! Reconcile is a short pipeline:
//!
//! 1. **validate** the spec (objects stored before the schema had a rule get a condition and an
//!    event, then wait for a change instead of retrying);
//! 2. **ensure the Deployment**: build the whole desired object ([`deployment::desired`]) and
//!    server-side apply it, but only when a field we manage differs, and never to a Deployment
//!    this Foo does not control;
//! 3. **remove stale Deployments** this Foo controls under another name (after a rename);
//! 4. **update the status** ([`status::desired`]) when it changed, with events on transitions.
//!
//! Deployments are watched by label (only the operator's own), cached, and indexed by the Foo
//! that controls them; a Deployment event reaches its Foo through the owner reference.

pub mod cached;
pub mod deployment;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Resource, ResourceExt};
use sample_operator_api::Foo;

use crate::backoff::Backoff;
use crate::index::Index;
use crate::own_writes::OwnWrites;
use crate::{FIELD_MANAGER, Shared, events};
use cached::CachedDeployment;
use status::Observed;

/// The controller's name in metrics and readiness reports.
const CONTROLLER: &str = "foo";

/// What can go wrong in a Foo reconcile. The variant names are the reasons in logs and
/// metrics; every one of them is retried with per-object backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}", status::resource_exists_message(.0))]
    ResourceExists(String),
    #[error("the Foo has no {0}")]
    MissingObjectKey(&'static str),
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

impl Error {
    /// A short, stable name of the failure, for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::ResourceExists(_) => "ResourceExists",
            Error::MissingObjectKey(_) => "MissingObjectKey",
            Error::CreateDeployment(_) => "CreateDeployment",
            Error::ReadDeployment(_) => "ReadDeployment",
            Error::ApplyDeployment(_) => "ApplyDeployment",
            Error::DeleteDeployment(_) => "DeleteDeployment",
            Error::WriteStatus(_) => "WriteStatus",
        }
    }

    /// Nothing watches a foreign Deployment, so a conflict is noticed to be over only by
    /// retrying: keep those retries within half a minute.
    fn max_delay(&self) -> Duration {
        match self {
            Error::ResourceExists(_) => Duration::from_secs(30),
            _ => Duration::MAX,
        }
    }
}

/// What every Foo reconcile shares.
pub struct Context {
    client: kube::Client,
    metrics: Arc<crate::metrics::Metrics>,
    events: events::Events,
    /// The operator's Deployments, by namespace and name.
    deployments: Store<CachedDeployment>,
    /// The operator's Deployments, by the uid of the Foo that controls them.
    owned: Index<CachedDeployment, String>,
    /// Status writes the Foo cache has not caught up with.
    own_writes: OwnWrites<Foo>,
    backoff: Backoff<ObjectRef<Foo>>,
}

/// Runs the Foo controller until `shutdown` completes.
pub async fn run(shared: Shared, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let foos: Api<Foo> = shared.api();
    let (foo_store, foo_writer) = reflector::store();
    let own_writes = OwnWrites::default();
    let seen = own_writes.clone();
    let foo_events = watcher(foos, watcher::Config::default())
        .default_backoff()
        .inspect(shared.metrics.watch_observer("foos"))
        .modify(|foo| foo.managed_fields_mut().clear())
        .reflect(foo_writer)
        .inspect_ok(move |event| seen.observe(event))
        .applied_objects()
        // Our own status writes do not change the generation: they need no reconcile.
        .predicate_filter(predicates::generation, Default::default());

    let (deployment_store, deployment_writer) = reflector::store();
    let owned = Index::new(controlling_foo_uid);
    let index = owned.clone();
    let selector = format!("{}={}", deployment::MANAGED_BY_LABEL, deployment::MANAGED_BY);
    let deployment_events = watcher(
        shared.api::<CachedDeployment>(),
        watcher::Config::default().labels(&selector),
    )
    .default_backoff()
    .inspect(shared.metrics.watch_observer("deployments"))
    .inspect_ok(move |event| index.apply(event))
    .reflect(deployment_writer)
    .touched_objects();

    let context = Arc::new(Context {
        client: shared.client.clone(),
        metrics: shared.metrics.clone(),
        events: shared.events.clone(),
        deployments: deployment_store,
        owned,
        own_writes,
        backoff: Backoff::default(),
    });
    let health = shared.health.clone();
    let (foos_synced, deployments_synced) = (foo_store.clone(), context.deployments.clone());
    tokio::spawn(async move {
        crate::store_ready(&foos_synced).await;
        crate::store_ready(&deployments_synced).await;
        health.synced(CONTROLLER);
    });
    let controller = shared.with_resync(
        Controller::for_stream(foo_events, foo_store)
            .owns_stream(deployment_events)
            .with_config(shared.controller_config()),
    );
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "foo controller");
            }
        })
        .await;
}

fn controlling_foo_uid(deployment: &CachedDeployment) -> Vec<String> {
    deployment
        .owner_references()
        .iter()
        .filter(|o| o.controller == Some(true) && o.kind == "Foo")
        .map(|o| o.uid.clone())
        .collect()
}

async fn reconcile(foo: Arc<Foo>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Before the Deployment cache is filled, every Deployment would look missing.
    crate::store_ready(&ctx.deployments).await;
    let foo = ctx.own_writes.latest(foo);
    let timer = ctx.metrics.reconcile(CONTROLLER);
    let result = sync(&foo, &ctx).await;
    timer.finish(result.as_ref().map(|_| ()).map_err(Error::reason));
    if result.is_ok() {
        ctx.backoff.reset(&ObjectRef::from_obj(&*foo));
        ctx.metrics.set_awaiting_retry(CONTROLLER, ctx.backoff.len());
    }
    result
}

fn error_policy(foo: Arc<Foo>, error: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx
        .backoff
        .next_delay(ObjectRef::from_obj(&*foo))
        .min(error.max_delay());
    ctx.metrics.set_awaiting_retry(CONTROLLER, ctx.backoff.len());
    tracing::warn!(foo = %status::describe(&foo), reason = error.reason(), %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// The reconcile pipeline; see the module docs.
async fn sync(foo: &Foo, ctx: &Context) -> Result<Action, Error> {
    let namespace = foo.namespace().ok_or(Error::MissingObjectKey("namespace"))?;
    let uid = foo.uid().ok_or(Error::MissingObjectKey("uid"))?;

    if let Err(message) = foo.validate() {
        update_status(foo, ctx, Observed::Invalid(&message)).await?;
        // Retrying cannot fix a spec; the next change to it triggers a reconcile.
        return Ok(Action::await_change());
    }

    let (deployment, applied) = match ensure_deployment(foo, ctx, &namespace, &uid).await {
        Err(Error::ResourceExists(name)) => {
            update_status(foo, ctx, Observed::Conflict).await?;
            return Err(Error::ResourceExists(name));
        }
        other => other?,
    };
    let removed = remove_stale_deployments(foo, ctx, &namespace, &uid).await?;
    update_status(foo, ctx, Observed::Deployment(&deployment)).await?;
    if applied || removed {
        ctx.events
            .publish(
                foo.object_ref(&()),
                EventType::Normal,
                "Synced",
                "Foo synced successfully".into(),
                "Sync",
            )
            .await;
    }
    Ok(Action::await_change())
}

/// Makes the Deployment match the desired one. Returns it, and whether anything was written.
async fn ensure_deployment(
    foo: &Foo,
    ctx: &Context,
    namespace: &str,
    uid: &str,
) -> Result<(Arc<CachedDeployment>, bool), Error> {
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), namespace);
    // Reads and applies answer with the cached projection rather than a whole Deployment.
    let cached_api: Api<CachedDeployment> = Api::namespaced(ctx.client.clone(), namespace);
    let name = &foo.spec.deployment_name;
    let desired = deployment::desired(foo);
    let observed = match ctx.deployments.get(&ObjectRef::new(name).within(namespace)) {
        Some(cached) => cached,
        // Not among the operator's Deployments: create it, unless one of that name exists
        // (someone else's, or ours with its label removed), which the create then reports.
        None => {
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            match api.create(&params, &desired).await {
                Ok(created) => {
                    tracing::info!(foo = %status::describe(foo), deployment = %name, "created Deployment");
                    return Ok((Arc::new(created.into()), true));
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    Arc::new(cached_api.get(name).await.map_err(Error::ReadDeployment)?)
                }
                Err(e) => return Err(Error::CreateDeployment(e)),
            }
        }
    };
    if !deployment::is_controlled_by(&*observed, uid) {
        return Err(Error::ResourceExists(name.clone()));
    }
    if !deployment::needs_apply(&desired, &observed) {
        return Ok((observed, false));
    }
    // The uid makes the apply conditional on the object checked above: if it was replaced in
    // between by someone else's, the apiserver refuses instead of taking it over.
    let mut patch = desired;
    patch.metadata.uid = observed.metadata.uid.clone();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let applied = cached_api
        .patch(name, &params, &Patch::Apply(&patch))
        .await
        .map_err(Error::ApplyDeployment)?;
    tracing::info!(foo = %status::describe(foo), deployment = %name, "applied Deployment");
    Ok((Arc::new(applied), true))
}

/// Deletes the Deployments this Foo controls under a name it no longer asks for.
async fn remove_stale_deployments(
    foo: &Foo,
    ctx: &Context,
    namespace: &str,
    uid: &str,
) -> Result<bool, Error> {
    let mut removed = false;
    for stale in ctx.owned.get(&uid.to_owned()) {
        if stale.name == foo.spec.deployment_name || stale.namespace.as_deref() != Some(namespace) {
            continue;
        }
        let Some(cached) = ctx.deployments.get(&stale) else {
            continue;
        };
        if !deployment::is_controlled_by(&*cached, uid) {
            continue;
        }
        let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), namespace);
        let params = DeleteParams {
            // Only the object that was checked: never a same-named successor.
            preconditions: Some(Preconditions {
                uid: cached.uid(),
                resource_version: None,
            }),
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        match api.delete(&stale.name, &params).await {
            Ok(_) => {
                tracing::info!(foo = %status::describe(foo), deployment = %stale.name, "deleted stale Deployment");
                removed = true;
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(Error::DeleteDeployment(e)),
        }
    }
    Ok(removed)
}

/// Writes the status when it changed, with a Warning event when the Foo enters a failure.
async fn update_status(foo: &Foo, ctx: &Context, observed: Observed<'_>) -> Result<(), Error> {
    let new = status::desired(foo, observed);
    if !status::differs(foo, &new) {
        return Ok(());
    }
    let previous_reason = status::current_reason(foo);
    let api: Api<Foo> = Api::namespaced(ctx.client.clone(), &foo.namespace().unwrap_or_default());
    ctx.own_writes
        .write_status(&api, foo, &new)
        .await
        .map_err(Error::WriteStatus)?;

    let ready = &new.conditions[0];
    if previous_reason.as_deref() != Some(ready.reason.as_str()) {
        let event_reason = match ready.reason.as_str() {
            status::reason::RESOURCE_EXISTS => Some("ErrResourceExists"),
            status::reason::INVALID_SPEC => Some("InvalidSpec"),
            _ => None,
        };
        if let Some(event_reason) = event_reason {
            ctx.events
                .publish(
                    foo.object_ref(&()),
                    EventType::Warning,
                    event_reason,
                    ready.message.clone(),
                    "Sync",
                )
                .await;
        }
    }
    Ok(())
}
