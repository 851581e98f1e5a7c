//! The Foo controller on a real cluster: kubernetes/sample-controller's behaviour, and more.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use local_cluster::testing::{self, TestNamespace};
use sample_operator::ControllerName;
use sample_operator::runtime::watch::InitialList;
use sample_operator_api::{ExampleFoo, Foo, FooKind, FooSpec};
use serde_json::json;

use crate::support::{
    Operator, WithConditions, assert_quiet_across_resyncs_and_restarts, client_with_crds, config,
    events_about, ready_reason, store_despite_schema, wait_for_event,
};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A group the Foo is served in, as the scenarios that run in both see it.
pub trait Group: FooKind + WithConditions {
    const CONTROLLER: ControllerName;
    /// Starts the names of the tests' namespaces.
    const PREFIX: &str;
    fn make(name: &str, spec: FooSpec) -> Self;
}

impl Group for Foo {
    const CONTROLLER: ControllerName = ControllerName::Foo;
    const PREFIX: &str = "foo";
    fn make(name: &str, spec: FooSpec) -> Self {
        Foo::new(name, spec)
    }
}

impl Group for ExampleFoo {
    const CONTROLLER: ControllerName = ControllerName::FooExample;
    const PREFIX: &str = "exfoo";
    fn make(name: &str, spec: FooSpec) -> Self {
        ExampleFoo::new(name, spec)
    }
}

/// The scenarios that hold for a Foo of either group, each run for both.
macro_rules! in_both_groups {
    ($($scenario:ident),* $(,)?) => {
        mod samplecontroller_k8s_io {
            $(#[tokio::test]
            async fn $scenario() {
                super::$scenario::<sample_operator_api::Foo>().await
            })*
        }
        mod example_com {
            $(#[tokio::test]
            async fn $scenario() {
                super::$scenario::<sample_operator_api::ExampleFoo>().await
            })*
        }
    };
}

in_both_groups!(
    a_foo_gets_an_owned_nginx_deployment_and_reports_availability,
    available_replicas_follow_scaling_up_and_down,
    a_deployment_the_foo_does_not_own_is_left_alone_until_it_is_gone,
    deleting_a_foo_deletes_its_deployment,
    renaming_the_deployment_moves_the_workload,
);

pub fn new_foo<K: Group>(name: &str, deployment: &str, replicas: Option<i32>) -> K {
    K::make(
        name,
        FooSpec {
            deployment_name: deployment.into(),
            replicas,
        },
    )
}

fn foo(name: &str, deployment: &str, replicas: Option<i32>) -> Foo {
    new_foo(name, deployment, replicas)
}

fn available(foo: &impl FooKind) -> i32 {
    foo.status().map_or(-1, |s| s.available_replicas)
}

/// Waits until the Foo reports `replicas` available and Ready, for its current generation.
pub async fn wait_available<K: FooKind + WithConditions>(foos: &Api<K>, name: &str, replicas: i32) -> K {
    testing::wait_for(
        foos,
        name,
        &format!("{replicas} available and Ready"),
        TIMEOUT,
        |f| {
            available(f) == replicas
                && ready_reason(f) == Some(("True".into(), "Available".into()))
                && f.status().and_then(|s| s.observed_generation) == f.meta().generation
        },
    )
    .await
    .unwrap()
}

pub async fn scale<K: FooKind>(foos: &Api<K>, name: &str, replicas: i32) {
    let patch = json!({ "spec": { "replicas": replicas } });
    foos.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

pub fn plain_deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "team": "someone-else" } },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{ "name": "app", "image": "busybox:1" }] },
            },
        },
    }))
    .unwrap()
}

async fn a_foo_gets_an_owned_nginx_deployment_and_reports_availability<K: Group>() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, &format!("{}-basic", K::PREFIX)).await;
    let operator = Operator::start(&ns.name, &[K::CONTROLLER]).await;
    let foos = ns.api::<K>();
    let created = foos
        .create(
            &PostParams::default(),
            &new_foo::<K>("example-foo", "example-foo", Some(1)),
        )
        .await
        .unwrap();

    let deployments = ns.api::<Deployment>();
    let d = testing::wait_for(&deployments, "example-foo", "created", TIMEOUT, |_| true)
        .await
        .unwrap();
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(1));
    let labels = BTreeMap::from([
        ("app".to_owned(), "nginx".to_owned()),
        ("controller".to_owned(), "example-foo".to_owned()),
    ]);
    assert_eq!(spec.selector.match_labels.as_ref(), Some(&labels));
    assert_eq!(
        spec.template.metadata.as_ref().unwrap().labels.as_ref(),
        Some(&labels)
    );
    let containers = &spec.template.spec.as_ref().unwrap().containers;
    assert_eq!(
        containers
            .iter()
            .map(|c| (c.name.as_str(), c.image.as_deref()))
            .collect::<Vec<_>>(),
        [("nginx", Some("nginx:latest"))]
    );
    let owner = &d.owner_references()[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.uid.as_str(),
            owner.controller
        ),
        (
            &*K::api_version(&()),
            "Foo",
            created.uid().unwrap().as_str(),
            Some(true)
        )
    );

    let f = wait_available(&foos, "example-foo", 1).await;
    assert_eq!(f.status().unwrap().observed_generation, created.meta().generation);
    let synced = wait_for_event(&client, &ns.name, "example-foo", "Synced").await;
    assert_eq!(synced.note.as_deref(), Some("Foo synced successfully"));
    assert_eq!(synced.type_.as_deref(), Some("Normal"));
    assert_eq!(synced.reporting_controller.as_deref(), Some("sample-operator"));
    operator.stop().await;
}

async fn available_replicas_follow_scaling_up_and_down<K: Group>() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, &format!("{}-scale", K::PREFIX)).await;
    let operator = Operator::start(&ns.name, &[K::CONTROLLER]).await;
    let foos = ns.api::<K>();
    foos.create(
        &PostParams::default(),
        &new_foo::<K>("scaled", "scaled-web", Some(1)),
    )
    .await
    .unwrap();
    wait_available(&foos, "scaled", 1).await;

    scale(&foos, "scaled", 3).await;
    wait_available(&foos, "scaled", 3).await;
    let d = ns.api::<Deployment>().get("scaled-web").await.unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(3));

    scale(&foos, "scaled", 1).await;
    wait_available(&foos, "scaled", 1).await;
    operator.stop().await;
}

async fn a_deployment_the_foo_does_not_own_is_left_alone_until_it_is_gone<K: Group>() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, &format!("{}-conflict", K::PREFIX)).await;
    let deployments = ns.api::<Deployment>();
    let foreign = deployments
        .create(&PostParams::default(), &plain_deployment("taken"))
        .await
        .unwrap();
    let operator = Operator::start(&ns.name, &[K::CONTROLLER]).await;
    let foos = ns.api::<K>();
    foos.create(
        &PostParams::default(),
        &new_foo::<K>("intruder", "taken", Some(1)),
    )
    .await
    .unwrap();

    let f = testing::wait_for(&foos, "intruder", "ResourceExists", TIMEOUT, |f| {
        ready_reason(f) == Some(("False".into(), "ResourceExists".into()))
    })
    .await
    .unwrap();
    let message = r#"Resource "taken" already exists and is not managed by Foo"#;
    assert_eq!(f.status().unwrap().conditions[0].message, message);
    let event = wait_for_event(&client, &ns.name, "intruder", "ErrResourceExists").await;
    assert_eq!(
        (event.type_.as_deref(), event.note.as_deref()),
        (Some("Warning"), Some(message))
    );

    // Retries went by (the backoff starts in milliseconds), and the Deployment is untouched.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // (Its status moves as the controller-manager rolls it out; its spec and metadata may not.)
    let now = deployments.get("taken").await.unwrap();
    assert_eq!(
        now.metadata.generation, foreign.metadata.generation,
        "the foreign Deployment's spec was changed"
    );
    assert_eq!(now.labels(), foreign.labels());
    assert!(now.owner_references().is_empty());
    let managers: Vec<_> = now
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        !managers.iter().any(|m| m == "sample-operator"),
        "managers: {managers:?}"
    );

    deployments
        .delete("taken", &DeleteParams::foreground())
        .await
        .unwrap();
    // The foreign Deployment's deletion is watched: the Foo's own takes the name at once, so
    // the name never looks free for long; what matters is whose object holds it.
    testing::wait_for(&deployments, "taken", "the Foo's own", TIMEOUT, |d| {
        d.uid() != foreign.uid() && d.owner_references().iter().any(|o| o.name == "intruder")
    })
    .await
    .unwrap();
    wait_available(&foos, "intruder", 1).await;
    operator.stop().await;
}

async fn deleting_a_foo_deletes_its_deployment<K: Group>() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, &format!("{}-delete", K::PREFIX)).await;
    let operator = Operator::start(&ns.name, &[K::CONTROLLER]).await;
    let foos = ns.api::<K>();
    foos.create(
        &PostParams::default(),
        &new_foo::<K>("short-lived", "short-lived", Some(2)),
    )
    .await
    .unwrap();
    wait_available(&foos, "short-lived", 2).await;

    foos.delete("short-lived", &DeleteParams::background())
        .await
        .unwrap();
    // The controller-manager's garbage collector follows the owner reference.
    testing::wait_for_deletion(&ns.api::<Deployment>(), "short-lived", TIMEOUT)
        .await
        .unwrap();
    operator.stop().await;
}

#[tokio::test]
async fn hand_edits_of_managed_fields_are_reverted_and_others_kept() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "foo-drift").await;
    let operator = Operator::start(&ns.name, &[ControllerName::Foo]).await;
    let foos = ns.api::<Foo>();
    foos.create(&PostParams::default(), &foo("kept", "kept", Some(2)))
        .await
        .unwrap();
    wait_available(&foos, "kept", 2).await;

    let deployments = ns.api::<Deployment>();
    let edit = json!({
        "metadata": { "annotations": { "team": "payments" } },
        "spec": {
            "replicas": 5,
            "template": { "spec": { "containers": [{ "name": "nginx", "image": "nginx:1.0" }] } },
        },
    });
    let edited = deployments
        .patch("kept", &PatchParams::default(), &Patch::Strategic(&edit))
        .await
        .unwrap();
    assert_eq!(edited.spec.as_ref().unwrap().replicas, Some(5));

    let restored = testing::wait_for(
        &deployments,
        "kept",
        "replicas and image restored",
        TIMEOUT,
        |d| {
            let spec = d.spec.as_ref().unwrap();
            let image = spec.template.spec.as_ref().unwrap().containers[0]
                .image
                .as_deref();
            spec.replicas == Some(2) && image == Some("nginx:latest")
        },
    )
    .await
    .unwrap();
    assert_eq!(
        restored.annotations().get("team").map(String::as_str),
        Some("payments"),
        "an unmanaged field was removed"
    );
    wait_available(&foos, "kept", 2).await;
    operator.stop().await;
}

async fn renaming_the_deployment_moves_the_workload<K: Group>() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, &format!("{}-rename", K::PREFIX)).await;
    let deployments = ns.api::<Deployment>();
    deployments
        .create(&PostParams::default(), &plain_deployment("someone-elses"))
        .await
        .unwrap();
    let operator = Operator::start(&ns.name, &[K::CONTROLLER]).await;
    let foos = ns.api::<K>();
    foos.create(
        &PostParams::default(),
        &new_foo::<K>("mover", "old-name", Some(1)),
    )
    .await
    .unwrap();
    wait_available(&foos, "mover", 1).await;

    let patch = json!({ "spec": { "deploymentName": "new-name" } });
    foos.patch("mover", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    testing::wait_for_deletion(&deployments, "old-name", TIMEOUT)
        .await
        .unwrap();
    let moved = wait_available(&foos, "mover", 1).await;
    assert!(deployments.get("new-name").await.is_ok());
    assert_eq!(
        moved.status().unwrap().conditions[0].message,
        r#"Deployment "new-name" has 1 of 1 replicas available"#
    );

    // Moving onto a Deployment it does not own is refused, and deletes nothing.
    let patch = json!({ "spec": { "deploymentName": "someone-elses" } });
    foos.patch("mover", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    testing::wait_for(&foos, "mover", "ResourceExists", TIMEOUT, |f| {
        ready_reason(f).is_some_and(|r| r.1 == "ResourceExists")
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        deployments
            .get("someone-elses")
            .await
            .unwrap()
            .owner_references()
            .is_empty()
    );
    assert!(
        deployments.get("new-name").await.is_ok(),
        "its own Deployment stays until the move can happen"
    );
    operator.stop().await;
}

/// A Foo blocked by a foreign Deployment backs off to minutes between retries, so that many of
/// them cost few requests; the Deployment's removal, which the operator watches, unblocks it at
/// once. Blocked for 16 s, its next retry is some 16 s away (the backoff doubles from 250 ms):
/// its Deployment made within 8 s of the removal is the watch's doing.
#[tokio::test]
async fn a_conflict_backs_off_and_ends_as_soon_as_the_foreign_deployment_goes() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "foo-conflict-ends").await;
    let deployments = ns.api::<Deployment>();
    deployments
        .create(&PostParams::default(), &plain_deployment("blocking"))
        .await
        .unwrap();
    let operator = Operator::start(&ns.name, &[ControllerName::Foo]).await;
    let foos = ns.api::<Foo>();
    foos.create(&PostParams::default(), &foo("blocked", "blocking", Some(1)))
        .await
        .unwrap();
    testing::wait_for(&foos, "blocked", "ResourceExists", TIMEOUT, |f| {
        ready_reason(f).is_some_and(|r| r.1 == "ResourceExists")
    })
    .await
    .unwrap();
    crate::support::assert_conflict_backs_off_and_ends_at_once(
        &operator,
        "Foo",
        async {
            deployments
                .delete("blocking", &DeleteParams::background())
                .await
                .unwrap();
        },
        async {
            testing::wait_for(&deployments, "blocking", "the Foo's own", TIMEOUT, |d| {
                d.owner_references().iter().any(|o| o.name == "blocked")
            })
            .await
            .unwrap();
        },
    )
    .await;
    wait_available(&foos, "blocked", 1).await;
    operator.stop().await;
}

/// 150 Foos with a 150 KB annotation (`kubectl apply`'s last-applied configuration of a large
/// object, say) and 300 KB of labels each (the apiserver caps neither's total): 67 MB that cost
/// the operator's cache next to nothing, since no reconcile reads them and the controller's own
/// watch drops them before caching.
#[tokio::test]
async fn large_annotations_and_labels_are_not_cached() {
    use futures::StreamExt;
    use sample_operator::runtime::{RuntimeConfig, Shared, Telemetry};
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "foo-annotated").await;
    let foos = ns.api::<Foo>();
    let annotation = "x".repeat(150 * 1024);
    // 2,400 labels of 128 bytes: a 63-character name under a short prefix, and a 63-character
    // value.
    let labels: std::collections::BTreeMap<String, String> = (0..2400)
        .map(|l| (format!("t.io/{l:0>63}"), "v".repeat(63)))
        .collect();
    let creates = (0..150).map(|i| {
        let mut annotated = foo(&format!("annotated-{i}"), &format!("annotated-{i}"), Some(1));
        annotated
            .annotations_mut()
            .insert("example.com/large".into(), annotation.clone());
        annotated.labels_mut().extend(labels.clone());
        let foos = foos.clone();
        async move {
            match foos.create(&PostParams::default(), &annotated).await {
                Ok(_) => {}
                // Seen once in CI, under load: a create answered "already exists" that this test
                // sent once (a retry below the client, of a write that had been stored). In the
                // test's own namespace the object of that name is this one.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    let stored = foos.get(&annotated.name_any()).await.unwrap();
                    assert_eq!(stored.annotations(), annotated.annotations());
                }
                Err(error) => panic!("creating {}: {error}", annotated.name_any()),
            }
        }
    });
    // 16 at a time: 67 MB at once would only test how etcd copes with a burst.
    futures::stream::iter(creates)
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let runtime = RuntimeConfig {
        namespace: Some(ns.name.clone()),
        ..RuntimeConfig::default()
    };
    let (shared, _publisher) = Shared::new(client.clone(), runtime, Telemetry::new(Default::default()));
    let primary = shared.watch_primary::<Foo>(
        kube::runtime::watcher::Config::default(),
        kube::runtime::predicates::generation,
        |_| {},
    );
    let watch = tokio::spawn(primary.events.for_each(|_| async {}));
    assert!(
        tokio::time::timeout(TIMEOUT, primary.synced.wait())
            .await
            .unwrap(),
        "the Foo watch lists"
    );
    let cached = primary.store.state();
    assert_eq!(cached.len(), 150);
    let bytes: usize = cached
        .iter()
        .map(|foo| serde_json::to_vec(&**foo).unwrap().len())
        .sum();
    assert!(
        cached
            .iter()
            .all(|foo| foo.metadata.annotations.is_none() && foo.metadata.labels.is_none()),
        "annotations or labels cached"
    );
    assert!(bytes < 256 * 1024, "the cached Foos take {bytes} bytes");
    watch.abort();
}

#[tokio::test]
async fn steady_state_sends_no_writes_across_resyncs_and_restarts() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "foo-steady").await;
    let mut config = config(Some(&ns.name), &[ControllerName::Foo]);
    config.runtime.resync = Some(Duration::from_secs(1));
    let operator = Operator::start_with(config.clone()).await;
    let foos = ns.api::<Foo>();
    for i in 0..20 {
        foos.create(
            &PostParams::default(),
            &foo(&format!("steady-{i}"), &format!("steady-{i}"), Some(1)),
        )
        .await
        .unwrap();
    }
    for i in 0..20 {
        wait_available(&foos, &format!("steady-{i}"), 1).await;
    }
    // Restarted with either way of fetching the first list.
    let restarts = [InitialList::List, InitialList::Stream];
    assert_quiet_across_resyncs_and_restarts(operator, &config, &restarts, async |initial_list| {
        if initial_list == InitialList::Stream {
            // Its watches are live: a new Foo converges.
            foos.create(&PostParams::default(), &foo("streamed", "streamed", Some(1)))
                .await
                .unwrap();
            wait_available(&foos, "streamed", 1).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_foo_that_slipped_past_admission_is_reported_and_not_retried() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "foo-invalid").await;
    // Stored as if before the schema had its maximum.
    store_despite_schema(&client, &ns.name, &foo("stale", "stale", Some(11)), |spec| {
        let properties = spec.properties.as_mut().unwrap();
        properties.get_mut("replicas").unwrap().maximum = None;
    })
    .await;
    let operator = Operator::start(&ns.name, &[ControllerName::Foo]).await;
    let foos = ns.api::<Foo>();

    let f = testing::wait_for(&foos, "stale", "InvalidSpec", TIMEOUT, |f| {
        ready_reason(f) == Some(("False".into(), "InvalidSpec".into()))
    })
    .await
    .unwrap();
    let message = &f.status.unwrap().conditions[0].message;
    assert!(message.starts_with("spec.replicas:"), "{message}");
    let event = wait_for_event(&client, &ns.name, "stale", "InvalidSpec").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        ns.api::<Deployment>().get_opt("stale").await.unwrap().is_none(),
        "an invalid Foo got a Deployment"
    );

    // It waits for a change instead of retrying.
    let before = operator.requests();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(operator.requests().since(&before).writes(), 0);
    assert_eq!(events_about(&client, &ns.name, "stale").await.len(), 1);

    // A fix is picked up at once.
    scale(&foos, "stale", 2).await;
    wait_available(&foos, "stale", 2).await;
    operator.stop().await;
}

#[tokio::test]
async fn many_foos_converge_including_in_a_namespace_created_later() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "foo-many").await;
    // All namespaces: a namespace created after the start works like any other.
    let operator = Operator::start_with(config(None, &[ControllerName::Foo])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let later = TestNamespace::create(&client, "foo-later").await;
    let foos = ns.api::<Foo>();
    let creates = (0..200).map(|i| {
        let foos = foos.clone();
        async move {
            foos.create(
                &PostParams::default(),
                &foo(&format!("many-{i}"), &format!("many-{i}"), Some(1)),
            )
            .await
        }
    });
    for result in futures::future::join_all(creates).await {
        result.unwrap();
    }
    later
        .api::<Foo>()
        .create(&PostParams::default(), &foo("late", "late", Some(1)))
        .await
        .unwrap();

    // One budget for all 201: under CI's load the late one once took more than a minute.
    let start = std::time::Instant::now();
    let converged = |f: &Foo| available(f) == 1 && ready_reason(f).is_some_and(|r| r.0 == "True");
    loop {
        let list = foos.list(&Default::default()).await.unwrap();
        let many = list.items.iter().filter(|f| converged(f)).count();
        let late = later.api::<Foo>().get("late").await.unwrap();
        if many == 200 && converged(&late) {
            break;
        }
        if start.elapsed() > Duration::from_secs(180) {
            // Whether the Deployment or the Foo's status lags.
            let deployment = later.api::<Deployment>().get_opt("late").await.unwrap();
            panic!(
                "{many} of 200 Foos converged in 180 s; the late one: {:?}; its Deployment: {:?}",
                late.status,
                deployment.and_then(|d| d.status)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    operator.stop().await;
}

#[tokio::test]
async fn foos_of_the_two_groups_never_fight_over_one_deployment() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "foo-groups").await;
    let operator = Operator::start(&ns.name, &[ControllerName::Foo, ControllerName::FooExample]).await;
    let (foos, example_foos) = (ns.api::<Foo>(), ns.api::<ExampleFoo>());
    foos.create(&PostParams::default(), &foo("first", "shared", Some(2)))
        .await
        .unwrap();
    wait_available(&foos, "first", 2).await;
    let deployments = ns.api::<Deployment>();
    let before = deployments.get("shared").await.unwrap();

    // The example.com Foo asks for the same Deployment: the first owner keeps it.
    example_foos
        .create(
            &PostParams::default(),
            &new_foo::<ExampleFoo>("second", "shared", Some(5)),
        )
        .await
        .unwrap();
    let refused = testing::wait_for(&example_foos, "second", "ResourceExists", TIMEOUT, |f| {
        ready_reason(f) == Some(("False".into(), "ResourceExists".into()))
    })
    .await
    .unwrap();
    assert_eq!(
        refused.status.unwrap().conditions[0].message,
        r#"Resource "shared" already exists and is not managed by Foo"#
    );
    wait_for_event(&client, &ns.name, "second", "ErrResourceExists").await;
    // Retries go by; the Deployment keeps its owner, its replicas and its spec.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = deployments.get("shared").await.unwrap();
    assert_eq!(
        now.metadata.generation, before.metadata.generation,
        "the spec was changed"
    );
    assert_eq!(now.spec.as_ref().unwrap().replicas, Some(2));
    let owners: Vec<_> = now
        .owner_references()
        .iter()
        .map(|o| (o.api_version.as_str(), o.name.as_str()))
        .collect();
    assert_eq!(owners, [("samplecontroller.k8s.io/v1alpha1", "first")]);
    wait_available(&foos, "first", 2).await;

    // Once the first owner is gone (and the garbage collector took its Deployment), the other
    // gets the name.
    foos.delete("first", &DeleteParams::background()).await.unwrap();
    let taken = testing::wait_for(
        &deployments,
        "shared",
        "owned by the example.com Foo",
        TIMEOUT,
        |d| {
            d.owner_references()
                .iter()
                .any(|o| o.api_version == "example.com/v1alpha1" && o.name == "second")
        },
    )
    .await
    .unwrap();
    assert_eq!(taken.owner_references().len(), 1);
    wait_available(&example_foos, "second", 5).await;
    operator.stop().await;
}

/// Pod Security: the Foo Deployments' defaults are admitted where `baseline` is enforced, and
/// with restricted settings where `restricted` is: the seeds' Foo (samples/foo.yaml) converges
/// unchanged in both. The control, that the namespaces' labels bite: the defaults are refused
/// under `restricted`.
#[tokio::test]
async fn foo_deployments_meet_pod_security_baseline_by_default_and_restricted_when_configured() {
    use k8s_openapi::api::core::v1::Namespace;
    use sample_operator::foo::Settings;
    use sample_operator::foo::settings::parse_json;

    let client = client_with_crds().await;
    let restricted = Settings {
        image: "nginxinc/nginx-unprivileged:1.29".into(),
        security_context: parse_json(
            r#"{"allowPrivilegeEscalation": false, "runAsNonRoot": true,
                "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}"#,
        )
        .unwrap(),
        ..Settings::default()
    };
    let seeds_foo: Foo = serde_yaml::from_str(include_str!("../../../../samples/foo.yaml")).unwrap();
    let enforcing = |level: &'static str| {
        let client = client.clone();
        async move {
            let ns = TestNamespace::create(&client, &format!("foo-pss-{level}")).await;
            let labels = json!({ "metadata": { "labels": {
                "pod-security.kubernetes.io/enforce": level,
                "pod-security.kubernetes.io/enforce-version": "latest",
            }}});
            Api::<Namespace>::all(client)
                .patch(&ns.name, &PatchParams::default(), &Patch::Merge(&labels))
                .await
                .unwrap();
            ns
        }
    };

    for (level, settings) in [("baseline", Settings::default()), ("restricted", restricted)] {
        let ns = enforcing(level).await;
        let mut run = config(Some(&ns.name), &[ControllerName::Foo]);
        run.foo = settings.clone();
        let operator = Operator::start_with(run).await;
        let foos = ns.api::<Foo>();
        let mut foo = seeds_foo.clone();
        foo.metadata.namespace = Some(ns.name.clone());
        foos.create(&PostParams::default(), &foo).await.unwrap();
        let replicas = foo.spec.replicas.unwrap();
        wait_available(&foos, &foo.name_any(), replicas).await;
        let d = ns
            .api::<Deployment>()
            .get(&foo.spec.deployment_name)
            .await
            .unwrap();
        let container = &d.spec.unwrap().template.spec.unwrap().containers[0];
        assert_eq!(
            container.image.as_deref(),
            Some(settings.image.as_str()),
            "{level}"
        );
        assert_eq!(
            container.security_context.as_ref(),
            Some(&settings.security_context),
            "{level}"
        );
        operator.stop().await;
    }

    let ns = enforcing("restricted").await;
    let operator = Operator::start(&ns.name, &[ControllerName::Foo]).await;
    let mut foo = seeds_foo.clone();
    foo.metadata.namespace = Some(ns.name.clone());
    ns.api::<Foo>()
        .create(&PostParams::default(), &foo)
        .await
        .unwrap();
    // The deployment controller copies its ReplicaSet's refusal into the Deployment's status.
    let replica_failure = |d: &Deployment| {
        let conditions = d.status.as_ref()?.conditions.as_ref()?;
        let failure = conditions.iter().find(|c| c.type_ == "ReplicaFailure")?;
        failure.message.clone()
    };
    let deployments = ns.api::<Deployment>();
    let refused = testing::wait_for(
        &deployments,
        &foo.spec.deployment_name,
        "its Pods refused by Pod Security",
        TIMEOUT,
        |d| replica_failure(d).is_some_and(|m| m.contains("violates PodSecurity")),
    )
    .await
    .unwrap();
    let refused = replica_failure(&refused).unwrap();
    assert!(refused.contains("restricted"), "{refused}");
    operator.stop().await;
}
