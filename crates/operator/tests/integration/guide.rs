//! The controller that docs/adding-a-controller.md builds, step by step: a `Greeting`, whose
//! message the operator keeps in a ConfigMap of the Greeting's name. Every Rust block of the
//! guide is this file's, word for word (the first test checks that); the second test runs the
//! controller on the local cluster, so the guide's code is known to compile and to work.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{predicates, watcher};
use kube::{CustomResource, CustomResourceExt, KubeSchema, Resource, ResourceExt};
use local_cluster::testing::{self, TestNamespace};
use sample_operator::runtime::descriptor::{Descriptor, OwnResource};
use sample_operator::runtime::status::{Condition, Ready};
use sample_operator::runtime::watch::{no_index, no_preparation};
use sample_operator::runtime::{
    Context, FIELD_MANAGER, Manager, ReconcileError, Reconciler, RuntimeConfig, Shared, Telemetry, Triggers,
    Wiring, children,
};
use serde::{Deserialize, Serialize};

// Step 1: the resource.

/// A message the operator keeps in a ConfigMap of the Greeting's name.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "guide.sample-operator.dev",
    version = "v1",
    kind = "Greeting",
    namespaced,
    status = "GreetingStatus"
)]
pub struct GreetingSpec {
    /// What the ConfigMap says.
    #[schemars(length(min = 1, max = 1024))]
    pub message: String,
}

/// What the operator last saw of the Greeting.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct GreetingStatus {
    /// `Ready`, following the Kubernetes conventions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

// The runtime reads the conditions to tell transitions and count objects by readiness.
sample_operator::conditions_field!(GreetingStatus);

// Step 2: what the Greeting should have, as pure functions.

/// The label that marks the operator's ConfigMaps: its watch selects only those.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "sample-operator-guide");

/// The ConfigMap a Greeting should have, controlled by the Greeting.
pub fn desired_config_map(greeting: &Greeting) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(greeting.name_any()),
            namespace: greeting.namespace(),
            labels: Some(BTreeMap::from([(MANAGED_BY.0.into(), MANAGED_BY.1.into())])),
            owner_references: greeting.controller_owner_ref(&()).map(|owner| vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "message".into(),
            greeting.spec.message.clone(),
        )])),
        ..ConfigMap::default()
    }
}

/// The status a Greeting should show, given whether its ConfigMap holds the message.
pub fn desired_status(greeting: &Greeting, delivered: bool) -> GreetingStatus {
    let previous = greeting.status.as_ref().map(|s| s.conditions.as_slice());
    let ready = if delivered {
        Ready {
            status: true,
            reason: "Delivered",
            message: "the ConfigMap holds the message".into(),
        }
    } else {
        Ready {
            status: false,
            reason: "ResourceExists",
            message: "a ConfigMap of this name exists and is not the Greeting's".into(),
        }
    };
    GreetingStatus {
        conditions: ready.conditions(greeting.metadata.generation, previous.unwrap_or_default()),
    }
}

// Step 3: what can go wrong.

/// The variant names are the reasons in logs and metrics; each one is retried with backoff.
#[derive(Debug, thiserror::Error, strum::IntoStaticStr)]
pub enum Error {
    #[error("the Greeting has no {0}")]
    MissingObjectKey(&'static str),
    #[error("ConfigMap {0:?} exists and is not this Greeting's")]
    ResourceExists(String),
    #[error("creating the ConfigMap: {0}")]
    CreateConfigMap(#[source] kube::Error),
    #[error("reading the ConfigMap: {0}")]
    ReadConfigMap(#[source] kube::Error),
    #[error("applying the ConfigMap: {0}")]
    ApplyConfigMap(#[source] kube::Error),
    #[error("writing status: {0}")]
    WriteStatus(#[source] kube::Error),
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        self.into()
    }

    /// Nothing watches a foreign ConfigMap: a conflict is noticed to be over only by retrying.
    fn max_delay(&self) -> Duration {
        match self {
            Error::ResourceExists(_) => Duration::from_secs(30),
            _ => Duration::MAX,
        }
    }
}

// Step 4: reconcile, a short driver of named steps.

/// The Greeting domain; it reads the operator's ConfigMaps from their cache.
pub struct GreetingReconciler {
    config_maps: Store<ConfigMap>,
}

impl Reconciler for GreetingReconciler {
    type Object = Greeting;
    type Error = Error;

    async fn reconcile(&self, greeting: Arc<Greeting>, ctx: &Context<Greeting>) -> Result<Action, Error> {
        let namespace = greeting.namespace().ok_or(Error::MissingObjectKey("namespace"))?;
        let api: Api<ConfigMap> = Api::namespaced(ctx.client().clone(), &namespace);
        let delivered = match self.ensure_config_map(&greeting, &api).await {
            Err(Error::ResourceExists(name)) => {
                update_status(&greeting, ctx, false).await?;
                return Err(Error::ResourceExists(name));
            }
            other => other?,
        };
        update_status(&greeting, ctx, true).await?;
        if delivered {
            let note = "the ConfigMap holds the new message".to_owned();
            ctx.publish(&greeting, EventType::Normal, "Delivered", note).await;
        }
        Ok(Action::await_change())
    }
}

impl GreetingReconciler {
    /// Makes the ConfigMap hold the message; returns whether it wrote. Never touches a
    /// ConfigMap the Greeting does not control.
    async fn ensure_config_map(&self, greeting: &Greeting, api: &Api<ConfigMap>) -> Result<bool, Error> {
        let desired = desired_config_map(greeting);
        let uid = greeting.uid().ok_or(Error::MissingObjectKey("uid"))?;
        let current = match self.config_maps.get(&ObjectRef::from_obj(&desired)) {
            Some(cached) => cached,
            None => match children::create(api, &desired)
                .await
                .map_err(Error::CreateConfigMap)?
            {
                Some(_) => return Ok(true),
                // One of that name exists: ours, not cached yet, or someone else's.
                None => Arc::new(api.get(&desired.name_any()).await.map_err(Error::ReadConfigMap)?),
            },
        };
        if !children::is_controlled_by(&*current, &uid) {
            return Err(Error::ResourceExists(desired.name_any()));
        }
        if current.data == desired.data {
            return Ok(false);
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(&desired.name_any(), &params, &Patch::Apply(&desired))
            .await
            .map_err(Error::ApplyConfigMap)?;
        Ok(true)
    }
}

/// Writes the status when it changed, with a Warning event when the Greeting becomes blocked.
async fn update_status(greeting: &Greeting, ctx: &Context<Greeting>, delivered: bool) -> Result<(), Error> {
    ctx.update_status(greeting, desired_status(greeting, delivered), transition_event)
        .await
        .map_err(Error::WriteStatus)?;
    Ok(())
}

fn transition_event(ready: &Condition) -> Option<(EventType, &str)> {
    (ready.status == "False").then_some((EventType::Warning, ready.reason.as_str()))
}

// Step 5: the watches, and what triggers a reconcile.

/// The controller of every Greeting in the watched namespaces.
pub fn wiring(shared: &Shared) -> Wiring<GreetingReconciler> {
    // Our own status writes do not change the generation: they trigger nothing.
    let greetings =
        shared.watch_primary::<Greeting>(watcher::Config::default(), predicates::generation, |_| {});
    let selector = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
    let config_maps = shared.watch_cache(
        shared.api::<ConfigMap>(),
        "configmaps",
        watcher::Config::default().labels(&selector),
        no_preparation,
        no_index,
    );
    Wiring {
        name: DESCRIPTOR.name,
        // A changed or deleted ConfigMap reaches its Greeting through the owner reference.
        triggers: Triggers::for_stream(greetings.events, greetings.store).owns_stream(config_maps.events),
        reconciler: GreetingReconciler {
            config_maps: config_maps.store,
        },
        own_writes: greetings.own_writes,
        caches: vec![greetings.synced, config_maps.synced],
    }
}

// Step 6: the descriptor, which the operator's list of controllers names.

/// The Greeting controller, for the operator's list of controllers. It has no settings of
/// its own: `()`.
pub const DESCRIPTOR: Descriptor<()> = Descriptor {
    name: "greeting",
    runs_by_default: true,
    resource: OwnResource::of::<Greeting>(),
    start: |shared, _settings, stopping| sample_operator::runtime::start(shared, wiring(shared), stopping),
};

// The tests.

/// The Rust blocks of `guide`, in order.
fn rust_blocks(guide: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut lines = guide.lines();
    while let Some(line) = lines.next() {
        if line.trim_end() == "```rust" {
            let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim_end() != "```").collect();
            blocks.push(block.join("\n"));
        }
    }
    blocks
}

#[test]
fn every_rust_block_of_the_guide_is_this_files_code() {
    let guide = include_str!("../../../../docs/adding-a-controller.md");
    let this_file = include_str!("guide.rs");
    let blocks = rust_blocks(guide);
    assert!(
        blocks.len() >= 6,
        "the guide shows each step: {} blocks",
        blocks.len()
    );
    for block in blocks {
        assert!(
            this_file.contains(&block),
            "docs/adding-a-controller.md shows code that tests/integration/guide.rs does not have:\n{block}"
        );
    }
}

#[test]
fn the_desired_config_map_is_controlled_by_its_greeting_and_holds_the_message() {
    let mut greeting = Greeting::new("hello", GreetingSpec { message: "hi".into() });
    greeting.metadata.namespace = Some("ns".into());
    greeting.metadata.uid = Some("uid-1".into());
    let config_map = desired_config_map(&greeting);
    assert!(children::is_controlled_by(&config_map, "uid-1"));
    assert_eq!(config_map.data.unwrap()["message"], "hi");
    assert_eq!(config_map.metadata.namespace.as_deref(), Some("ns"));
}

#[tokio::test]
async fn the_guides_controller_keeps_the_message_and_leaves_a_foreign_config_map_alone() {
    const TIMEOUT: Duration = Duration::from_secs(60);
    let client = testing::client().await;
    testing::install_crds(&client, &[Greeting::crd()])
        .await
        .expect("the Greeting CRD installs");
    let ns = TestNamespace::create(&client, "guide").await;
    let runtime = RuntimeConfig {
        namespace: Some(ns.name.clone()),
        instance: "integration-test".into(),
        ..RuntimeConfig::default()
    };
    let mut manager = Manager::new(client.clone(), runtime, Telemetry::new(Default::default()));
    manager.start(DESCRIPTOR.name, |shared, stopping| {
        (DESCRIPTOR.start)(shared, &(), stopping)
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(manager.run_until(async move {
        let _ = stopped.await;
    }));

    let greetings = ns.api::<Greeting>();
    let config_maps = ns.api::<ConfigMap>();
    let message = |text: &str| GreetingSpec { message: text.into() };
    greetings
        .create(&PostParams::default(), &Greeting::new("hello", message("hi")))
        .await
        .unwrap();
    let holds = |text: &'static str| {
        move |cm: &ConfigMap| {
            cm.data
                .as_ref()
                .and_then(|d| d.get("message"))
                .is_some_and(|m| m == text)
        }
    };
    testing::wait_for(&config_maps, "hello", "holds the message", TIMEOUT, holds("hi"))
        .await
        .unwrap();
    let ready = |reason: &'static str| {
        move |g: &Greeting| {
            let conditions = g
                .status
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or_default();
            sample_operator_api::conditions::find(conditions, "Ready").is_some_and(|c| c.reason == reason)
        }
    };
    testing::wait_for(&greetings, "hello", "Delivered", TIMEOUT, ready("Delivered"))
        .await
        .unwrap();

    // A new message reaches the ConfigMap.
    let patch = serde_json::json!({ "spec": { "message": "hello again" } });
    greetings
        .patch("hello", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    testing::wait_for(
        &config_maps,
        "hello",
        "the new message",
        TIMEOUT,
        holds("hello again"),
    )
    .await
    .unwrap();

    // Someone else's ConfigMap of the name a Greeting wants is reported and left alone.
    let foreign = ConfigMap {
        metadata: ObjectMeta {
            name: Some("taken".into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("message".into(), "theirs".into())])),
        ..ConfigMap::default()
    };
    config_maps
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    greetings
        .create(&PostParams::default(), &Greeting::new("taken", message("ours")))
        .await
        .unwrap();
    testing::wait_for(
        &greetings,
        "taken",
        "ResourceExists",
        TIMEOUT,
        ready("ResourceExists"),
    )
    .await
    .unwrap();
    let untouched = config_maps.get("taken").await.unwrap();
    assert_eq!(untouched.data, foreign.data);
    assert!(untouched.owner_references().is_empty());

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), operator)
        .await
        .expect("the manager stops within 30s")
        .expect("the manager does not panic");
}
