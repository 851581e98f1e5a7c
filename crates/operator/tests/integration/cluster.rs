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
