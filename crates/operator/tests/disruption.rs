//! The API server going away under a running operator. A test binary of its own, which
//! .config/nextest.toml runs alone, so the outage cannot disturb the other suites.

#[path = "integration/support/mod.rs"]
#[allow(dead_code, unused_imports)]
mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use local_cluster::LocalCluster;
use local_cluster::testing::{self, TestNamespace};
use sample_operator::ControllerName;
use sample_operator_api::{Foo, FooSpec};

use support::{Operator, client_with_crds};

const FOOS: usize = 40;

/// Creates a Foo, retrying through the outage; a create whose answer was lost shows up as
/// AlreadyExists on the retry, which is success.
async fn create_until_stored(foos: &Api<Foo>, name: &str) {
    let foo = Foo::new(
        name,
        FooSpec {
            deployment_name: name.into(),
            replicas: Some(1),
        },
    );
    loop {
        match foos.create(&PostParams::default(), &foo).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The process id of the local cluster's etcd, as recorded.
fn etcd_pid(cluster: &LocalCluster) -> i32 {
    let state = cluster.state().expect("the local cluster's record");
    let etcd = state.components.iter().find(|c| c.name == "etcd");
    etcd.expect("etcd in the record").pid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_reconnects_after_an_apiserver_restart_and_converges() {
    if testing::uses_existing_cluster() {
        eprintln!("skipped: restarting the API server needs the local cluster");
        return;
    }
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "apiserver-restart").await;
    let operator = Operator::start(&ns.name, &[ControllerName::Foo]).await;
    let foos = ns.api::<Foo>();

    let creator = {
        let foos = foos.clone();
        tokio::spawn(async move {
            for i in 0..FOOS {
                create_until_stored(&foos, &format!("outage-{i}")).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cluster = LocalCluster::default();
    let etcd_before = etcd_pid(&cluster);
    let restart = tokio::spawn({
        let cluster = cluster.clone();
        async move { cluster.restart("kube-apiserver").await }
    });
    // Another process's `up` while the apiserver is down (a test starting) waits for the
    // restart and keeps the cluster, instead of finding a process stopped and replacing it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.up().await.expect("up beside a restart");
    restart.await.unwrap().expect("the apiserver restarts");
    assert_eq!(
        etcd_pid(&cluster),
        etcd_before,
        "the cluster was replaced during the restart"
    );
    creator.await.unwrap();

    // Every Foo converges, each with exactly its own Deployment.
    let start = std::time::Instant::now();
    loop {
        let list = foos.list(&ListParams::default()).await.unwrap();
        let available = list
            .items
            .iter()
            .filter(|f| f.status.as_ref().is_some_and(|s| s.available_replicas == 1))
            .count();
        if list.items.len() == FOOS && available == FOOS {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "{available} of {} Foos available after 180s",
            list.items.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let deployments = ns.api::<Deployment>().list(&ListParams::default()).await.unwrap();
    assert_eq!(deployments.items.len(), FOOS);
    for d in &deployments.items {
        let owners = d.owner_references();
        assert_eq!(owners.len(), 1, "{}: {owners:?}", d.name_any());
        assert_eq!(owners[0].name, d.name_any());
    }
    operator.stop().await;
}
