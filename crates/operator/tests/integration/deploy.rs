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

/// The ValidatingAdmissionPolicy of a manifest.
fn admission_policy(yaml: &str) -> serde_json::Value {
    documents(yaml)
        .into_iter()
        .find(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .expect("a ValidatingAdmissionPolicy")
}

#[test]
fn the_plain_manifests_and_the_chart_check_networks_with_one_admission_policy() {
    let policy = admission_policy(include_str!(
        "../../../../deploy/operator/network-address-policy.yaml"
    ));
    let checks: serde_json::Value = serde_yaml::from_str(include_str!(
        "../../../../deploy/helm/sample-operator/files/network-address-policy-checks.yaml"
    ))
    .unwrap();
    assert_eq!(policy["spec"]["validations"], checks["validations"]);
    assert_eq!(policy["spec"]["matchConditions"], checks["matchConditions"]);
    let variables = policy["spec"]["variables"].as_array().unwrap();
    // Its parameters first, then the chart's checks.
    assert_eq!(variables[3..], checks["variables"].as_array().unwrap()[..]);
    // Its parameters are the operator's defaults.
    let parameter = |name: &str| {
        variables.iter().find(|v| v["name"] == name).unwrap()["expression"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let defaults = sample_operator::network::policy::AddressPolicy::default();
    assert_eq!(parameter("shortestV4"), defaults.min_prefix_v4.to_string());
    assert_eq!(parameter("shortestV6"), defaults.min_prefix_v6.to_string());
    // The prefixes they allow are those the Deployment gives the operator.
    assert_eq!(parameter("allowed"), "['192.168.0.0/16']");
    let deployment = documents(include_str!("../../../../deploy/operator/deployment.yaml"));
    let args = deployment[0]["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    assert!(
        args.as_array()
            .unwrap()
            .contains(&"--network-allowed-prefixes=192.168.0.0/16".into()),
        "{args}"
    );
}

#[test]
fn the_plain_manifests_and_the_chart_confine_the_operator_by_the_same_rules() {
    let policy = admission_policy(include_str!("../../../../deploy/operator/workload-policy.yaml"));
    let charts: serde_json::Value = serde_yaml::from_str(include_str!(
        "../../../../deploy/helm/sample-operator/files/workload-policy-rules.yaml"
    ))
    .unwrap();
    assert_eq!(policy["spec"]["validations"], charts);
    // The image it allows is the one the Foo controller runs.
    let image = policy_variable(&policy, "image");
    assert_eq!(
        image["expression"],
        format!("'{}'", sample_operator::foo::settings::DEFAULT_IMAGE)
    );
}

/// The variable `name` of a ValidatingAdmissionPolicy.
pub(crate) fn policy_variable<'a>(policy: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    policy["spec"]["variables"]
        .as_array()
        .expect("the policy's variables")
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no variable {name} in the policy"))
}

/// The workload policy of deploy/operator, bound to two namespaces of this test's own (the tests
/// share the cluster), with the second one standing for kube-system: the operator's
/// ServiceAccount (impersonated) cannot create a Deployment of another image, a privileged one,
/// one with a hostPath, a host port, an unconfined seccomp profile, a command, a secret volume
/// or a ServiceAccount, one in a forbidden namespace, or a macvlan attachment definition; nor
/// add a privileged init container or a command to a Deployment it may write; nor delete a
/// Deployment or definition it does not manage; while the Foo and Network controllers, running
/// as that ServiceAccount, do their work.
#[tokio::test]
async fn the_workload_policy_confines_the_operators_service_account() {
    use std::time::{Duration, Instant};

    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{DeleteParams, PostParams};
    use sample_operator::ControllerName;
    use sample_operator::network::backend::multus::NetworkAttachmentDefinition;
    use sample_operator_api::{Foo, FooSpec, Network};
    use serde_json::json;

    const TIMEOUT: Duration = Duration::from_secs(60);
    let client = client_with_crds().await;
    crate::network::install_nad_crd(&client).await;
    let allowed = testing::TestNamespace::create(&client, "workloads").await;
    let forbidden = testing::TestNamespace::create(&client, "workloads-forbidden").await;
    let policy_name = format!("workloads-{}", allowed.name);
    for mut object in documents(include_str!("../../../../deploy/operator/workload-policy.yaml")) {
        object["metadata"]["name"] = policy_name.clone().into();
        if object["kind"] == "ValidatingAdmissionPolicy" {
            for variable in object["spec"]["variables"].as_array_mut().unwrap() {
                if variable["name"] == "forbiddenNamespaces" {
                    variable["expression"] = format!("['kube-system', '{}']", forbidden.name).into();
                }
            }
        } else {
            object["spec"]["policyName"] = policy_name.clone().into();
            object["spec"]["matchResources"] = json!({ "namespaceSelector": { "matchExpressions": [{
                "key": "kubernetes.io/metadata.name",
                "operator": "In",
                "values": [allowed.name, forbidden.name],
            }]}});
        }
        testing::apply_manifest(&client, &serde_yaml::to_string(&object).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{object}: {e}"));
    }

    let as_operator = kube::Client::try_from(crate::support::operator_config(&client).await).unwrap();
    let deployment = |name: &str, pod: serde_json::Value| -> Deployment {
        serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": {
                "selector": { "matchLabels": { "app": name } },
                "template": { "metadata": { "labels": { "app": name } }, "spec": pod },
            },
        }))
        .unwrap()
    };
    let nginx = json!({ "containers": [{ "name": "nginx", "image": sample_operator::foo::settings::DEFAULT_IMAGE }] });
    // The API server picks a new policy up within seconds: until the first refusal, retry.
    let refusal = |namespace: String, name: &'static str, pod: serde_json::Value| {
        let api: Api<Deployment> = Api::namespaced(as_operator.clone(), &namespace);
        // What got in before the policy took effect goes as the admin: the policy may refuse
        // the operator's delete of it by then.
        let admin: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
        let object = deployment(name, pod);
        async move {
            let start = Instant::now();
            loop {
                match api.create(&PostParams::default(), &object).await {
                    Err(kube::Error::Api(status))
                        if status.code != 403 || status.message.contains("ValidatingAdmissionPolicy") =>
                    {
                        return status.message;
                    }
                    Ok(_) if start.elapsed() < TIMEOUT => {
                        admin.delete(name, &DeleteParams::default()).await.unwrap();
                        testing::wait_for_deletion(&admin, name, TIMEOUT).await.unwrap();
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    other => panic!("{name} in {namespace} was not refused: {other:?}"),
                }
            }
        }
    };
    let mut privileged = nginx.clone();
    privileged["containers"][0]["securityContext"] = json!({ "privileged": true });
    let mut host_path = nginx.clone();
    host_path["volumes"] = json!([{ "name": "root", "hostPath": { "path": "/" } }]);
    let mut host_port = nginx.clone();
    host_port["containers"][0]["ports"] = json!([{ "containerPort": 80, "hostPort": 80 }]);
    let mut unconfined = nginx.clone();
    unconfined["securityContext"] = json!({ "seccompProfile": { "type": "Unconfined" } });
    let mut command = nginx.clone();
    command["containers"][0]["command"] = json!(["sh", "-c", "cat /var/run/secrets/*"]);
    let mut secret = nginx.clone();
    secret["volumes"] = json!([{ "name": "keys", "secret": { "secretName": "someone-elses" } }]);
    let mut account = nginx.clone();
    account["serviceAccountName"] = json!("cluster-admin-ish");
    for (namespace, name, pod, rule) in [
        (
            &allowed,
            "other-image",
            json!({ "containers": [{ "name": "sh", "image": "busybox" }] }),
            "only its configured image",
        ),
        (&allowed, "privileged", privileged, "unprivileged"),
        (&allowed, "host-path", host_path, "hostPath"),
        (&allowed, "host-port", host_port, "host ports"),
        (&allowed, "unconfined", unconfined, "unconfined seccomp"),
        (&allowed, "command", command, "sets no command"),
        (&allowed, "secret", secret, "volumes"),
        (&allowed, "account", account, "ServiceAccount"),
        (
            &forbidden,
            "nginx",
            nginx.clone(),
            "may not write workloads or networks in namespace",
        ),
    ] {
        let message = refusal(namespace.name.clone(), name, pod).await;
        assert!(message.contains(rule), "{name}: {message}");
    }
    let macvlan: NetworkAttachmentDefinition = serde_json::from_value(json!({
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": { "name": "uplink" },
        "spec": { "config": r#"{"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0"}"# },
    }))
    .unwrap();
    let nads: Api<NetworkAttachmentDefinition> = Api::namespaced(as_operator.clone(), &allowed.name);
    let refused = nads.create(&PostParams::default(), &macvlan).await.unwrap_err();
    assert!(
        refused.to_string().contains("bridge attachment definitions"),
        "{refused}"
    );
    // A bridge configuration like the operator's, but on the node's own bridge, or with a
    // JSON escape that a substring test would not see.
    let ours = sample_operator::network::backend::multus::cni_config(
        &allowed.name,
        "6a1e6a38-2d7c-4b54-9b8e-1f6f3a0c9d21",
        &crate::support::network("any", "10.63.0.0/24", "10.63.0.1")
            .validate()
            .unwrap(),
    );
    let bridge = ours.split('"').nth(3).unwrap().to_owned();
    for (name, config) in [
        ("on-cni0", ours.replace(&bridge, "cni0")),
        ("escaped", ours.replace("\"bridge\"\n}", "\"bri\\u0064ge\"\n}")),
        (
            "with-master",
            ours.replace("\"isGateway\"", "\"master\": \"eth0\",\n  \"isGateway\""),
        ),
    ] {
        let nad: NetworkAttachmentDefinition = serde_json::from_value(json!({
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": { "name": name },
            "spec": { "config": config },
        }))
        .unwrap();
        let refused = nads.create(&PostParams::default(), &nad).await.unwrap_err();
        assert!(
            refused.to_string().contains("of its own bridges"),
            "{name}: {refused}"
        );
    }

    // Updates: what a Deployment it may write did not have cannot come in.
    let deployments: Api<Deployment> = Api::namespaced(as_operator.clone(), &allowed.name);
    let mut managed = deployment("managed", nginx.clone());
    managed
        .metadata
        .labels
        .get_or_insert_default()
        .insert("app.kubernetes.io/managed-by".into(), "sample-operator".into());
    deployments
        .create(&PostParams::default(), &managed)
        .await
        .unwrap();
    let patch = |pod: serde_json::Value| {
        let deployments = deployments.clone();
        async move {
            let patch = json!({ "spec": { "template": { "spec": pod } } });
            deployments
                .patch(
                    "managed",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Strategic(&patch),
                )
                .await
                .unwrap_err()
                .to_string()
        }
    };
    let init = json!({ "initContainers": [{
        "name": "init", "image": sample_operator::foo::settings::DEFAULT_IMAGE,
        "securityContext": { "privileged": true },
    }] });
    let refused = patch(init).await;
    assert!(refused.contains("no init or ephemeral containers"), "{refused}");
    let refused = patch(json!({ "containers": [{ "name": "nginx", "command": ["sh"] }] })).await;
    assert!(refused.contains("sets no command"), "{refused}");
    // Deletes: only what it manages.
    let theirs = deployment("theirs", nginx.clone());
    Api::<Deployment>::namespaced(client.clone(), &allowed.name)
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let refused = deployments
        .delete("theirs", &DeleteParams::default())
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("deletes only"), "{refused}");
    Api::<NetworkAttachmentDefinition>::namespaced(client.clone(), &allowed.name)
        .create(
            &PostParams::default(),
            &crate::network::foreign_definition("theirs"),
        )
        .await
        .unwrap();
    let refused = nads.delete("theirs", &DeleteParams::default()).await.unwrap_err();
    assert!(refused.to_string().contains("deletes only"), "{refused}");
    deployments
        .delete("managed", &DeleteParams::default())
        .await
        .expect("a Deployment it manages may go");

    // What the controllers write themselves passes.
    let operator =
        crate::support::Operator::start(&allowed.name, &[ControllerName::Foo, ControllerName::Network]).await;
    let foos = allowed.api::<Foo>();
    let spec = FooSpec {
        deployment_name: "example-foo".into(),
        replicas: Some(1),
    };
    foos.create(&PostParams::default(), &Foo::new("example-foo", spec))
        .await
        .unwrap();
    crate::foo::wait_available(&foos, "example-foo", 1).await;
    let networks = allowed.api::<Network>();
    networks
        .create(
            &PostParams::default(),
            &crate::support::network("lab", "10.62.0.0/24", "10.62.0.1"),
        )
        .await
        .unwrap();
    crate::network::wait_synced(&networks, "lab", TIMEOUT).await;
    operator.stop().await;

    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    bindings
        .delete(&policy_name, &DeleteParams::default())
        .await
        .unwrap();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    policies
        .delete(&policy_name, &DeleteParams::default())
        .await
        .unwrap();
}
