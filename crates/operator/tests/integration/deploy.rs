//! The deployment manifests and the Helm chart pass a server-side dry run against the real
//! apiserver, and agree with each other.

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use local_cluster::testing;
use serde::Deserialize;

use crate::support::client_with_crds;

pub const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

pub fn documents(yaml: &str) -> Vec<serde_json::Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| serde_json::Value::deserialize(doc).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// Server-side applies `object` with `dryRun=All`: the apiserver validates and admits it
/// without storing it.
pub async fn dry_run(client: &Client, object: &serde_json::Value) {
    let obj: DynamicObject = serde_json::from_value(object.clone()).expect("an object");
    let api = testing::api_for(client, &obj, "sample-operator")
        .await
        .expect("a known kind");
    let name = obj.metadata.name.clone().expect("a name");
    let params = PatchParams::apply("sample-operator-dry-run").force().dry_run();
    if let Err(e) = api.patch(&name, &params, &Patch::Apply(&obj)).await {
        panic!("{object} fails a dry run: {e}");
    }
}

/// The namespace the manifests install into must exist for a dry run of what goes in it.
pub async fn ensure_operator_namespace(client: &Client) {
    let namespace = include_str!("../../../../deploy/operator/namespace.yaml");
    testing::apply_manifest(client, namespace)
        .await
        .expect("namespace");
    assert!(
        Api::<Namespace>::all(client.clone())
            .get("sample-operator")
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn the_deploy_manifests_pass_a_server_side_dry_run() {
    let client = client_with_crds().await;
    ensure_operator_namespace(&client).await;
    let kustomization: serde_yaml::Value =
        serde_yaml::from_str(include_str!("../../../../deploy/operator/kustomization.yaml")).unwrap();
    let files: Vec<String> = kustomization["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_owned())
        .collect();
    let mut kinds = Vec::new();
    for file in &files {
        let yaml = std::fs::read_to_string(format!("{ROOT}/deploy/operator/{file}")).unwrap();
        for object in documents(&yaml) {
            kinds.push(object["kind"].as_str().unwrap().to_owned());
            dry_run(&client, &object).await;
        }
    }
    for kind in [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "Deployment",
        "PodDisruptionBudget",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "no {kind} in deploy/operator: {kinds:?}"
        );
    }
}

#[test]
fn the_plain_manifests_and_the_chart_check_networks_with_one_admission_policy() {
    let plain = documents(include_str!(
        "../../../../deploy/operator/network-address-policy.yaml"
    ));
    let policy = plain
        .iter()
        .find(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .expect("a ValidatingAdmissionPolicy");
    let charts: serde_json::Value = serde_yaml::from_str(include_str!(
        "../../../../deploy/helm/sample-operator/files/network-address-policy.yaml"
    ))
    .unwrap();
    assert_eq!(policy["spec"], charts);
    // The ConfigMap's defaults are the operator's.
    let params = plain
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("its ConfigMap");
    let defaults = sample_operator::network::policy::AddressPolicy::default();
    assert_eq!(params["data"]["allowedPrefixes"], "");
    assert_eq!(
        params["data"]["minPrefixLengthV4"],
        defaults.min_prefix_v4.to_string()
    );
    assert_eq!(
        params["data"]["minPrefixLengthV6"],
        defaults.min_prefix_v6.to_string()
    );
}

fn cluster_role_rules(objects: &[serde_json::Value]) -> serde_json::Value {
    objects
        .iter()
        .find(|o| o["kind"] == "ClusterRole")
        .expect("a ClusterRole")["rules"]
        .clone()
}

#[tokio::test]
async fn the_helm_chart_renders_what_its_values_say_and_passes_a_dry_run() {
    let client = client_with_crds().await;
    ensure_operator_namespace(&client).await;
    let helm = tokio::task::spawn_blocking(local_cluster::toolchain::helm)
        .await
        .unwrap()
        .expect("helm builds");
    let output = tokio::process::Command::new(helm)
        .args([
            "template",
            "sample-operator",
            &format!("{ROOT}/deploy/helm/sample-operator"),
            "--namespace",
            "sample-operator",
        ])
        .args([
            "--set",
            "watchNamespace=team-a",
            "--set",
            "controllers={foo,network}",
            "--set",
            "log.format=plain",
        ])
        .args(["--set", "replicaCount=3"])
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rendered = documents(&String::from_utf8(output.stdout).unwrap());
    for object in &rendered {
        dry_run(&client, object).await;
    }

    let deployment = rendered
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let args: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for expected in [
        "run",
        "--namespace=team-a",
        "--controllers=foo,network",
        "--log-format=plain",
        "--leader-elect",
    ] {
        assert!(args.contains(&expected), "{expected} missing from {args:?}");
    }
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"],
        true
    );

    // The chart grants exactly what the plain manifests grant.
    let plain = documents(include_str!("../../../../deploy/operator/rbac.yaml"));
    assert_eq!(cluster_role_rules(&rendered), cluster_role_rules(&plain));
    assert!(
        !rendered.iter().any(|o| o["kind"] == "CustomResourceDefinition"),
        "the example.com Foo is installed only when asked for"
    );

    // Asked for: its CRD (kept on uninstall) and its controller beside the default ones.
    let output = tokio::process::Command::new(local_cluster::toolchain::helm().unwrap())
        .args([
            "template",
            "sample-operator",
            &format!("{ROOT}/deploy/helm/sample-operator"),
            "--namespace",
            "sample-operator",
            "--set",
            "exampleCom.enabled=true",
        ])
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rendered = documents(&String::from_utf8(output.stdout).unwrap());
    for object in &rendered {
        dry_run(&client, object).await;
    }
    let crd = rendered
        .iter()
        .find(|o| o["kind"] == "CustomResourceDefinition")
        .expect("the example.com Foo's CRD");
    assert_eq!(crd["metadata"]["name"], "foos.example.com");
    assert_eq!(crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
    let deployment = rendered.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap();
    assert!(
        args.iter()
            .any(|a| a == "--controllers=network,foo,foo-example,my-custom-resource"),
        "{args:?}"
    );

    // The Neutron backend: the cloud's options, and clouds.yaml from a Secret where the
    // operator looks for it.
    let output = tokio::process::Command::new(local_cluster::toolchain::helm().unwrap())
        .args([
            "template",
            "sample-operator",
            &format!("{ROOT}/deploy/helm/sample-operator"),
            "--namespace",
            "sample-operator",
            "--set",
            "networkBackend=neutron,neutron.cloud=prod,neutron.cloudsSecret=openstack-clouds,neutron.region=RegionTwo,neutron.clusterId=east-1",
        ])
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rendered = documents(&String::from_utf8(output.stdout).unwrap());
    for object in &rendered {
        dry_run(&client, object).await;
    }
    let deployment = rendered.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    let args = pod["containers"][0]["args"].as_array().unwrap();
    for expected in [
        "--network-backend=neutron",
        "--os-cloud=prod",
        "--os-region-name=RegionTwo",
        "--cluster-id=east-1",
        "--neutron-resync-seconds=300",
    ] {
        assert!(
            args.iter().any(|a| a == expected),
            "{expected} missing from {args:?}"
        );
    }
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "openstack-clouds");
    assert_eq!(
        pod["containers"][0]["volumeMounts"][0]["mountPath"],
        "/etc/openstack"
    );
}
