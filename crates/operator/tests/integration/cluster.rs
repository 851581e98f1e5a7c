//! The local control plane does what the controllers rely on: scheduling, Pods that run, and
//! Deployments that become available.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::PostParams;
use local_cluster::testing::{self, TestNamespace};
use serde_json::json;

#[tokio::test]
async fn a_deployment_of_three_replicas_becomes_available() {
    let client = testing::client().await;
    let ns = TestNamespace::create(&client, "deployment").await;
    let deployments = ns.api::<Deployment>();
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 3,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "nginx", "image": "nginx:latest" }] },
            },
        },
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    // controller-manager creates the ReplicaSet and Pods, the scheduler binds them to the fake
    // nodes and kwok reports them Running and Ready.
    testing::wait_for(
        &deployments,
        "web",
        "3 available replicas",
        Duration::from_secs(60),
        |d| d.status.as_ref().and_then(|s| s.available_replicas) == Some(3),
    )
    .await
    .unwrap();
    ns.delete().await;
}

/// The local cluster's access is its owner's: the kubeconfigs and private keys are 0600, so
/// another local user can neither read the keys nor edit what they point at.
#[tokio::test]
async fn the_local_clusters_kubeconfigs_and_keys_are_private() {
    use std::os::unix::fs::PermissionsExt;

    if testing::uses_existing_cluster() {
        testing::skipped(
            "cluster::the_local_clusters_kubeconfigs_and_keys_are_private",
            "an existing cluster's files are not this project's",
        );
        return;
    }
    testing::client().await;
    let cluster = local_cluster::LocalCluster::default();
    let mut private = Vec::new();
    for folder in [cluster.dir().to_owned(), cluster.dir().join("pki")] {
        for entry in std::fs::read_dir(folder).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".key") || name.ends_with("kubeconfig") {
                private.push(path);
            }
        }
    }
    assert!(private.contains(&cluster.kubeconfig()), "{private:?}");
    assert!(private.len() > 6, "{private:?}");
    for path in private {
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
    }
}
