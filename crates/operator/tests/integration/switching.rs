//! Switching from kubernetes/sample-controller, as a user would: upstream's controller (the
//! release the benchmark builds) converges Foos, stops, and ours takes over its Deployments.
//! With the Foo Deployments' resources and security context left unset (docs/switching.md) no
//! Deployment changes and no Pod restarts; with the secure defaults chosen afterwards, each
//! Deployment rolls once, which is also what tells that the first check can fail.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use local_cluster::testing::{self, TestNamespace};
use sample_operator::ControllerName;
use sample_operator::foo::Settings;
use sample_operator_api::Foo;

use crate::foo::new_foo;
use crate::support::{Operator, client_with_crds, config, ready_reason, scratch_dir};

const FOOS: usize = 10;
const TIMEOUT: Duration = Duration::from_secs(120);

/// What a rollout would change: each Deployment's uid, generation and pod template, and the
/// namespace's ReplicaSets and Pods.
#[derive(Debug, PartialEq)]
struct Workloads {
    deployments: BTreeMap<String, (String, i64, serde_json::Value)>,
    replica_sets: BTreeSet<String>,
    pods: BTreeSet<String>,
}

async fn workloads(client: &Client, namespace: &str) -> Workloads {
    let list = ListParams::default();
    let deployments = Api::<Deployment>::namespaced(client.clone(), namespace)
        .list(&list)
        .await
        .unwrap()
        .into_iter()
        .map(|d| {
            let template = serde_json::to_value(&d.spec.as_ref().unwrap().template).unwrap();
            (
                d.name_any(),
                (d.uid().unwrap(), d.metadata.generation.unwrap(), template),
            )
        })
        .collect();
    let replica_sets = Api::<ReplicaSet>::namespaced(client.clone(), namespace)
        .list(&list)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.name_any())
        .collect();
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&list)
        .await
        .unwrap()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.uid().unwrap())
        .collect();
    Workloads {
        deployments,
        replica_sets,
        pods,
    }
}

/// Waits until every Deployment of the namespace is settled: the deployment controller has
/// seen its last change and all its replicas are updated and available.
async fn settled(client: &Client, namespace: &str) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    testing::eventually("every Deployment settled", TIMEOUT, async || {
        let list = deployments.list(&ListParams::default()).await.ok()?;
        let settled = list.items.len() == FOOS
            && list.iter().all(|d| {
                let status = d.status.as_ref();
                status.and_then(|s| s.observed_generation) == d.metadata.generation
                    && status.and_then(|s| s.updated_replicas) == Some(1)
                    && status.and_then(|s| s.available_replicas) == Some(1)
                    && status.and_then(|s| s.replicas) == Some(1)
            });
        settled.then_some(())
    })
    .await;
}

/// Waits until ours has every Foo Ready and every Deployment labelled as its own.
async fn taken_over(client: &Client, namespace: &str) {
    let foos: Api<Foo> = Api::namespaced(client.clone(), namespace);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    testing::eventually("every Foo Ready through ours", TIMEOUT, async || {
        let foos = foos.list(&ListParams::default()).await.ok()?;
        let ready = foos
            .iter()
            .all(|f| ready_reason(f) == Some(("True".into(), "Available".into())));
        let owned = deployments
            .list(&ListParams::default())
            .await
            .ok()?
            .iter()
            .filter(|d| {
                d.labels().get("app.kubernetes.io/managed-by").map(String::as_str) == Some("sample-operator")
            })
            .count();
        (ready && owned == FOOS).then_some(())
    })
    .await;
}

/// Runs upstream's sample-controller against the cluster, as its README does, until dropped.
async fn upstream_sample_controller(log: &std::path::Path) -> tokio::process::Child {
    let binary = tokio::task::spawn_blocking(local_cluster::toolchain::sample_controller)
        .await
        .unwrap()
        .expect("kubernetes/sample-controller builds from the benchmark's Go module");
    let kubeconfig = if testing::uses_existing_cluster() {
        std::env::var("KUBECONFIG")
            .unwrap_or_else(|_| format!("{}/.kube/config", std::env::var("HOME").unwrap_or_default()))
    } else {
        local_cluster::LocalCluster::default()
            .kubeconfig()
            .display()
            .to_string()
    };
    let log = std::fs::File::create(log).unwrap();
    tokio::process::Command::new(binary)
        .arg(format!("-kubeconfig={kubeconfig}"))
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("sample-controller starts")
}

#[tokio::test]
async fn taking_over_from_sample_controller_rolls_nothing_until_the_secure_defaults_are_chosen() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "switching").await;
    let scratch = scratch_dir("switching");
    let log = scratch.join("sample-controller.log");

    // Upstream's controller converges the Foos, then stops, as a user switching would stop it.
    let mut upstream = upstream_sample_controller(&log).await;
    let foos = ns.api::<Foo>();
    for i in 0..FOOS {
        foos.create(
            &PostParams::default(),
            &new_foo(&format!("foo-{i}"), &format!("foo-{i}-web"), Some(1)),
        )
        .await
        .unwrap();
    }
    testing::eventually(
        "sample-controller reports every Foo available",
        TIMEOUT,
        async || {
            let list = foos.list(&ListParams::default()).await.ok()?;
            list.iter()
                .all(|f| f.status.as_ref().is_some_and(|s| s.available_replicas == 1))
                .then_some(())
        },
    )
    .await;
    settled(&client, &ns.name).await;
    upstream.kill().await.unwrap();
    let before = workloads(&client, &ns.name).await;
    assert_eq!(
        before.deployments.len(),
        FOOS,
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    assert_eq!(before.pods.len(), FOOS);

    // Ours, with the Foo Deployments' resources and security context unset.
    let tutorial = Settings {
        resources: Default::default(),
        security_context: Default::default(),
        ..Settings::default()
    };
    let mut run = config(Some(&ns.name), &[ControllerName::Foo]);
    run.foo = tutorial;
    let operator = Operator::start_with(run).await;
    taken_over(&client, &ns.name).await;
    settled(&client, &ns.name).await;
    let after = workloads(&client, &ns.name).await;
    assert_eq!(
        after, before,
        "taking over changed a Deployment, made a ReplicaSet or replaced a Pod"
    );
    operator.stop().await;

    // The secure defaults, chosen later: every Deployment rolls once, to the new template.
    let operator = Operator::start(&ns.name, &[ControllerName::Foo]).await;
    let deployments: Api<Deployment> = ns.api();
    testing::eventually("every Deployment on the secure defaults", TIMEOUT, async || {
        let list = deployments.list(&ListParams::default()).await.ok()?;
        list.iter()
            .all(|d| {
                d.spec
                    .as_ref()
                    .unwrap()
                    .template
                    .spec
                    .as_ref()
                    .unwrap()
                    .containers[0]
                    .security_context
                    .is_some()
            })
            .then_some(())
    })
    .await;
    settled(&client, &ns.name).await;
    let rolled = workloads(&client, &ns.name).await;
    for (name, (uid, generation, _)) in &before.deployments {
        let (new_uid, new_generation, _) = &rolled.deployments[name];
        assert_eq!(new_uid, uid, "{name} is the same Deployment");
        assert_eq!(*new_generation, generation + 1, "{name} changed once");
    }
    assert_eq!(
        rolled.replica_sets.difference(&before.replica_sets).count(),
        FOOS,
        "one new ReplicaSet a Deployment"
    );
    assert!(rolled.pods.is_disjoint(&before.pods), "every Pod replaced");
    operator.stop().await;
}
