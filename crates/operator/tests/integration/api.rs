//! The CRDs generated from the Rust types, as the apiserver sees them.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use local_cluster::testing::{self, TestNamespace};
use sample_operator_api::{ExampleFoo, Foo, MyCustomResource, Network};
use serde_json::json;

const NETWORK_SAMPLE: &str = include_str!("../../../../samples/network.yaml");
const FOO_SAMPLE: &str = include_str!("../../../../samples/foo.yaml");
/// Seed 004's Foo, in the example.com group.
const EXAMPLE_FOO_SAMPLE: &str = include_str!("../../../../samples/example-foo.yaml");
const MY_CUSTOM_RESOURCE_SAMPLES: &str = include_str!("../../../../samples/my-custom-resource.yaml");

use crate::support::client_with_crds;

#[tokio::test]
async fn generated_crds_install_and_become_established() {
    let client = client_with_crds().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for crd in crate::support::all_crds() {
        let stored = crds.get(&crd.name_any()).await.unwrap();
        assert!(
            testing::is_established(&stored),
            "{} is not Established",
            crd.name_any()
        );
        // A protected group without the approval annotation would be refused outright; with it
        // the apiserver records that the API is unapproved.
        if crd.spec.group.ends_with(".k8s.io") {
            let conditions = stored.status.and_then(|s| s.conditions).unwrap_or_default();
            assert!(
                conditions
                    .iter()
                    .any(|c| c.type_ == "KubernetesAPIApprovalPolicyConformant"),
                "{}: {conditions:?}",
                crd.name_any()
            );
        }
    }
}

#[tokio::test]
async fn the_seeds_samples_apply_unchanged() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "samples").await;
    for manifest in [
        NETWORK_SAMPLE,
        FOO_SAMPLE,
        EXAMPLE_FOO_SAMPLE,
        MY_CUSTOM_RESOURCE_SAMPLES,
    ] {
        testing::create_manifest(&client, &ns.name, manifest)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{manifest}"));
    }

    let network = ns.api::<Network>().get("example-network").await.unwrap();
    assert_eq!(network.spec.cidr, "192.168.0.0/16");
    assert_eq!(network.spec.gateway, "192.168.0.1");
    let foo = ns.api::<Foo>().get("example-foo").await.unwrap();
    assert_eq!(foo.spec.deployment_name, "example-foo");
    assert_eq!(foo.spec.replicas, Some(1));
    let example = ns.api::<ExampleFoo>().get("foo-sample").await.unwrap();
    assert_eq!(example.spec.deployment_name, "foo-sample");
    assert_eq!(example.spec.replicas, Some(1));
    let mcrs = ns.api::<MyCustomResource>();
    assert_eq!(
        mcrs.get("my-custom-resource-01").await.unwrap().spec.name,
        "funny-joe"
    );
    assert!(mcrs.get("my-custom-resource-02").await.is_ok());
}

/// Creates `object` and returns the apiserver's refusal message, failing if it was accepted.
async fn refusal<K>(api: &Api<K>, object: serde_json::Value) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let value: K = serde_json::from_value(object.clone()).unwrap_or_else(|e| panic!("{e}: {object}"));
    match api.create(&PostParams::default(), &value).await {
        Ok(_) => panic!("{name} was accepted: {object}"),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{name}: {status:?}");
            status.message
        }
        Err(e) => panic!("{name}: unexpected error {e}"),
    }
}

fn foo(name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({ "apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo", "metadata": { "name": name }, "spec": spec })
}

fn network(name: &str, cidr: &str, gateway: &str) -> serde_json::Value {
    json!({
        "apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
        "metadata": { "name": name }, "spec": { "cidr": cidr, "gateway": gateway },
    })
}

#[tokio::test]
async fn invalid_foos_are_refused_naming_the_field() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "invalid-foo").await;
    let foos = ns.api::<Foo>();

    for replicas in [0, 11] {
        let message = refusal(
            &foos,
            foo(
                "replicas",
                json!({ "deploymentName": "web", "replicas": replicas }),
            ),
        )
        .await;
        assert!(message.contains("spec.replicas"), "{message}");
    }
    // The typed struct cannot even express a Foo without deploymentName, so send raw JSON.
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &kube::discovery::ApiResource::erase::<Foo>(&()),
    );
    let missing = serde_json::from_value(foo("no-deployment", json!({ "replicas": 1 }))).unwrap();
    match raw.create(&PostParams::default(), &missing).await {
        Err(kube::Error::Api(status)) => {
            assert!(
                status.message.contains("spec.deploymentName: Required value"),
                "{}",
                status.message
            )
        }
        other => panic!("a Foo without deploymentName was not refused: {other:?}"),
    }
    let message = refusal(&foos, foo("bad-name", json!({ "deploymentName": "Not_A_Name" }))).await;
    assert!(message.contains("spec.deploymentName"), "{message}");

    // The boundaries themselves are valid.
    for (name, replicas) in [("one", 1), ("ten", 10)] {
        let ok: Foo =
            serde_json::from_value(foo(name, json!({ "deploymentName": name, "replicas": replicas })))
                .unwrap();
        foos.create(&PostParams::default(), &ok).await.unwrap();
    }
}

#[tokio::test]
async fn invalid_networks_are_refused_naming_the_field() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "invalid-network").await;
    let networks = ns.api::<Network>();

    let cases = [
        ("prefix-too-long", "192.168.0.0/33", "192.168.0.1", "spec.cidr"),
        ("not-a-cidr", "192.168.0.0", "192.168.0.1", "spec.cidr"),
        ("gateway-outside", "192.168.0.0/16", "10.0.0.1", "spec.gateway"),
        ("gateway-not-ip", "192.168.0.0/16", "not-an-ip", "spec.gateway"),
        ("family-mismatch", "fd00::/64", "192.168.0.1", "spec.gateway"),
    ];
    for (name, cidr, gateway, field) in cases {
        let message = refusal(&networks, network(name, cidr, gateway)).await;
        assert!(message.contains(field), "{name}: {message}");
    }
    // A bad cidr is reported once, on the cidr: the gateway rule waits for a valid prefix.
    let message = refusal(&networks, network("only-cidr", "192.168.0.0/33", "192.168.0.1")).await;
    assert!(!message.contains("spec.gateway"), "{message}");

    for (name, cidr, gateway) in [
        ("v4", "10.1.0.0/24", "10.1.0.1"),
        ("v6", "fd00:1::/64", "fd00:1::1"),
    ] {
        let ok: Network = serde_json::from_value(network(name, cidr, gateway)).unwrap();
        networks
            .create(&PostParams::default(), &ok)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[tokio::test]
async fn kubectl_lists_each_resource_with_its_printer_columns() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "columns").await;
    for manifest in [
        NETWORK_SAMPLE,
        FOO_SAMPLE,
        EXAMPLE_FOO_SAMPLE,
        MY_CUSTOM_RESOURCE_SAMPLES,
    ] {
        testing::create_manifest(&client, &ns.name, manifest)
            .await
            .unwrap();
    }
    let expectations = [
        (
            "networks",
            ["NAME", "CIDR", "GATEWAY", "READY", "AGE"].as_slice(),
            "192.168.0.0/16",
        ),
        // With the example.com Foo installed too, `foos` alone names that one: the group tells
        // them apart.
        (
            "foos.samplecontroller.k8s.io",
            ["NAME", "DEPLOYMENT", "REPLICAS", "AVAILABLE", "READY", "AGE"].as_slice(),
            "example-foo",
        ),
        (
            "foos.example.com",
            ["NAME", "DEPLOYMENT", "REPLICAS", "AVAILABLE", "READY", "AGE"].as_slice(),
            "foo-sample",
        ),
        (
            "mycustomresources",
            ["NAME", "POD", "HEALTHY", "AGE"].as_slice(),
            "funny-joe",
        ),
        // Short names resolve too.
        (
            "net",
            ["NAME", "CIDR", "GATEWAY", "READY", "AGE"].as_slice(),
            "example-network",
        ),
        (
            "fo",
            ["NAME", "DEPLOYMENT", "REPLICAS", "AVAILABLE", "READY", "AGE"].as_slice(),
            "example-foo",
        ),
        (
            "exfoo",
            ["NAME", "DEPLOYMENT", "REPLICAS", "AVAILABLE", "READY", "AGE"].as_slice(),
            "foo-sample",
        ),
        (
            "mcr",
            ["NAME", "POD", "HEALTHY", "AGE"].as_slice(),
            "my-custom-resource-02",
        ),
    ];
    for (resource, columns, value) in expectations {
        let output = testing::kubectl(&["get", resource, "-n", &ns.name]).await;
        let header: Vec<&str> = output
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(header, columns, "kubectl get {resource}:\n{output}");
        assert!(output.contains(value), "kubectl get {resource}:\n{output}");
    }
    let wide = testing::kubectl(&["get", "foos", "-n", &ns.name, "-o", "wide"]).await;
    assert!(
        wide.lines().next().unwrap_or_default().contains("REASON"),
        "{wide}"
    );
}

/// The ResourceQuota of docs/operating.md caps each kind it names: applied to a namespace, it
/// lets in as many Networks as it says, and refuses one more with the quota's message.
#[tokio::test]
async fn the_documented_resource_quota_caps_a_tenants_objects() {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let page = include_str!("../../../../docs/operating.md");
    let yaml = page
        .split_once("<!-- resource-quota:")
        .and_then(|(_, rest)| rest.split_once("```yaml\n"))
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(yaml, _)| yaml)
        .expect("the quota's YAML block in docs/operating.md");
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "quota").await;
    testing::create_manifest(&client, &ns.name, yaml).await.unwrap();
    let quotas: Api<ResourceQuota> = ns.api();
    let quota = quotas.get("sample-operator-objects").await.unwrap();
    let hard = quota.spec.as_ref().and_then(|s| s.hard.clone()).unwrap();
    for kind in [
        "count/foos.samplecontroller.k8s.io",
        "count/networks.samplecrd.k8s.io",
        "count/mycustomresources.poc.test.domain",
    ] {
        assert!(hard.contains_key(kind), "{kind} is not capped: {hard:?}");
    }
    let allowed: u32 = hard["count/networks.samplecrd.k8s.io"].0.parse().unwrap();
    // The quota admits only once the controller-manager has counted what is there.
    testing::wait_for(
        &quotas,
        "sample-operator-objects",
        "counted",
        Duration::from_secs(60),
        |q| q.status.as_ref().and_then(|s| s.used.as_ref()).is_some(),
    )
    .await
    .unwrap();
    let networks: Api<Network> = ns.api();
    let create = |i: u32| {
        let network = crate::support::network(
            &format!("n{i}"),
            &format!("10.210.{i}.0/24"),
            &format!("10.210.{i}.1"),
        );
        let networks = networks.clone();
        async move { networks.create(&PostParams::default(), &network).await }
    };
    for i in 0..allowed {
        create(i)
            .await
            .unwrap_or_else(|e| panic!("network {i} of {allowed}: {e}"));
    }
    let refused = create(allowed).await.expect_err("one Network over the quota");
    assert!(
        refused
            .to_string()
            .contains("exceeded quota: sample-operator-objects"),
        "{refused}"
    );
}
