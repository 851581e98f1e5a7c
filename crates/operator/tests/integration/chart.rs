//! The Helm chart, checked with the field's own tools: `helm lint --strict`, bad values refused
//! by values.schema.json naming the field, every option combination rendered and passed
//! through a server-side dry run with the Prometheus Operator's CRDs installed, and the
//! operator's Pod admitted under Pod Security "restricted".

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use local_cluster::testing;
use serde::Deserialize;

use crate::deploy::{ROOT, documents, dry_run, ensure_operator_namespace};
use std::time::Duration;

use sample_operator::{ControllerName, RunConfig};
use sample_operator_api::{Foo, FooSpec};

use crate::support::{Operator, client_with_crds};

const RELEASE: &str = "sample-operator";
/// The namespace the one-namespace combinations watch.
const TEAM: &str = "chart-team-a";
const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Every option of the chart, in the combinations a platform team would choose.
fn combinations() -> Vec<(&'static str, Vec<String>)> {
    let team = format!("watchNamespace={TEAM}");
    let digest = format!("image.digest={DIGEST}");
    let sets = |values: &[&str]| values.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>();
    vec![
        ("defaults", vec![]),
        ("one replica", sets(&["replicaCount=1"])),
        (
            "one namespace",
            [sets(&["rbac.clusterWide=false"]), vec![team.clone()]].concat(),
        ),
        (
            "neutron behind a network policy",
            sets(&[
                "networkBackend=neutron",
                "neutron.cloud=prod",
                "neutron.cloudsSecret=clouds",
                "neutron.clusterId=east-1",
                "networkPolicy.enabled=true",
                "networkPolicy.apiServer[0].cidr=10.0.0.1/32",
                "networkPolicy.apiServer[0].port=6443",
                "networkPolicy.openstack[0].cidr=192.0.2.10/32",
                "networkPolicy.openstack[0].port=5000",
                "networkPolicy.openstack[1].cidr=192.0.2.11/32",
                "networkPolicy.openstack[1].port=9696",
                "networkPolicy.dns=true",
                "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring",
            ]),
        ),
        (
            "scraped through a ServiceMonitor",
            sets(&[
                "metrics.serviceMonitor.enabled=true",
                "metrics.serviceMonitor.labels.release=prometheus",
            ]),
        ),
        (
            "scraped through a PodMonitor",
            sets(&["metrics.podMonitor.enabled=true", "metrics.podMonitor.interval=15s"]),
        ),
        (
            "by digest, with priority, pull secrets and extra env and volumes",
            [
                vec![digest],
                sets(&[
                    "priorityClassName=system-cluster-critical",
                    "imagePullSecrets[0].name=registry",
                    "extraEnv[0].name=RUST_BACKTRACE",
                    "extraEnv[0].value=full",
                    "extraVolumes[0].name=clouds",
                    "extraVolumes[0].secret.secretName=my-clouds",
                    "extraVolumeMounts[0].name=clouds",
                    "extraVolumeMounts[0].mountPath=/etc/openstack",
                    "extraVolumeMounts[0].readOnly=true",
                    "podAnnotations.team=networking",
                    "podLabels.team=networking",
                ]),
            ]
            .concat(),
        ),
        (
            "one namespace, example.com, Neutron, no election, own spread",
            [
                sets(&[
                    "rbac.clusterWide=false",
                    "exampleCom.enabled=true",
                    "networkBackend=neutron",
                    "neutron.clusterId=east-1",
                    "leaderElection.enabled=false",
                    "replicaCount=1",
                    "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
                    "topologySpreadConstraints[0].maxSkew=1",
                    "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
                    "topologySpreadConstraints[0].labelSelector.matchLabels.app\\.kubernetes\\.io/name=sample-operator",
                ]),
                vec![team],
            ]
            .concat(),
        ),
    ]
}

fn chart() -> String {
    format!("{ROOT}/deploy/helm/sample-operator")
}

async fn helm(args: &[String]) -> std::process::Output {
    let helm = tokio::task::spawn_blocking(local_cluster::toolchain::helm)
        .await
        .unwrap()
        .expect("helm builds");
    tokio::process::Command::new(helm)
        .args(args)
        .output()
        .await
        .unwrap()
}

fn with_sets(mut args: Vec<String>, sets: &[String]) -> Vec<String> {
    for set in sets {
        args.push("--set".into());
        args.push(set.clone());
    }
    args
}

/// `helm template` with `sets`: the rendered objects, or helm's error.
async fn render(sets: &[String]) -> Result<Vec<serde_json::Value>, String> {
    render_in(RELEASE, sets).await
}

/// `helm template` into the release namespace `namespace`.
async fn render_in(namespace: &str, sets: &[String]) -> Result<Vec<serde_json::Value>, String> {
    let args = vec![
        "template".into(),
        RELEASE.into(),
        chart(),
        "--namespace".into(),
        namespace.into(),
    ];
    let output = helm(&with_sets(args, sets)).await;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Ok(documents(&String::from_utf8(output.stdout).unwrap()))
}

fn kinds(objects: &[serde_json::Value]) -> Vec<&str> {
    objects.iter().filter_map(|o| o["kind"].as_str()).collect()
}

fn find<'a>(objects: &'a [serde_json::Value], kind: &str) -> Option<&'a serde_json::Value> {
    objects.iter().find(|o| o["kind"] == kind)
}

#[tokio::test]
async fn the_chart_passes_helm_lint_strict_in_every_combination() {
    for (name, sets) in combinations() {
        let args = vec!["lint".into(), "--strict".into(), chart()];
        let output = helm(&with_sets(args, &sets)).await;
        assert!(
            output.status.success(),
            "helm lint --strict fails for {name}:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[tokio::test]
async fn bad_values_are_refused_with_a_message_that_names_them() {
    for (set, named) in [
        ("replicaCount=0", "/replicaCount"),
        ("replicas=2", "'replicas' not allowed"),
        ("image.digest=latest", "/image/digest"),
        ("networkBackend=nova", "/networkBackend"),
        ("controllers={foo,bar}", "/controllers/1"),
        ("log.format=xml", "/log/format"),
        ("concurrency=0", "/concurrency"),
        (
            "metrics.serviceMonitor.interval=often",
            "/metrics/serviceMonitor/interval",
        ),
        (
            "networkPolicy.apiServer[0].cidr=10.0.0.1",
            "/networkPolicy/apiServer/0",
        ),
        ("neutron.interface=private", "/neutron/interface"),
        ("extraEnv[0].name=DEBUG,extraEnv[0].value=1", "/extraEnv/0/value"),
        ("rbac.clusterWide=false", "needs watchNamespace"),
        (
            "metrics.serviceMonitor.enabled=true,metrics.podMonitor.enabled=true",
            "choose one",
        ),
        ("networkPolicy.enabled=true", "needs networkPolicy.apiServer"),
        (
            "rbac.clusterWide=false,watchNamespace=a,networkBackend=neutron",
            "needs neutron.clusterId",
        ),
    ] {
        let error = render(&[set.to_owned()])
            .await
            .expect_err(&format!("{set} is refused"));
        assert!(error.contains(named), "{set}: {error}");
    }
}

/// The Prometheus Operator's CRDs, from its pinned Go module, so that ServiceMonitor,
/// PodMonitor and PrometheusRule pass the same server-side validation as in a cluster.
async fn install_prometheus_operator_crds(client: &Client) {
    let folder = tokio::task::spawn_blocking(local_cluster::toolchain::prometheus_operator_crds)
        .await
        .unwrap()
        .expect("the Prometheus Operator's CRDs");
    let mut crds = Vec::new();
    for entry in std::fs::read_dir(&folder).unwrap() {
        let path = entry.unwrap().path();
        let yaml = std::fs::read_to_string(&path).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&yaml) {
            let value = serde_json::Value::deserialize(doc).unwrap();
            if value["kind"] == "CustomResourceDefinition" {
                crds.push(serde_json::from_value::<CustomResourceDefinition>(value).unwrap());
            }
        }
    }
    let names: Vec<_> = crds.iter().filter_map(|c| c.metadata.name.clone()).collect();
    for expected in [
        "servicemonitors.monitoring.coreos.com",
        "podmonitors.monitoring.coreos.com",
        "prometheusrules.monitoring.coreos.com",
    ] {
        assert!(names.iter().any(|n| n == expected), "{expected} in {names:?}");
    }
    testing::install_crds(client, &crds).await.expect("CRDs install");
}

async fn ensure_namespace(client: &Client, name: &str, labels: serde_json::Value) {
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply(testing::TEST_MANAGER).force(),
            &Patch::Apply(&namespace),
        )
        .await
        .expect("namespace");
}

#[tokio::test]
async fn every_option_combination_renders_what_it_says_and_passes_a_dry_run() {
    let client = client_with_crds().await;
    ensure_operator_namespace(&client).await;
    ensure_namespace(&client, TEAM, serde_json::json!({})).await;
    install_prometheus_operator_crds(&client).await;

    for (name, sets) in combinations() {
        let objects = render(&sets).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        for object in &objects {
            dry_run(&client, object).await;
        }
        let has = |set: &str| sets.iter().any(|s| s == set);
        let kinds = kinds(&objects);
        let deployment = find(&objects, "Deployment").expect("a Deployment");
        let pod = &deployment["spec"]["template"]["spec"];
        let replicas = deployment["spec"]["replicas"].as_i64().unwrap();

        assert_eq!(
            kinds.contains(&"PodDisruptionBudget"),
            replicas > 1,
            "{name}: a PodDisruptionBudget exactly when there are standbys"
        );
        let namespaced = has("rbac.clusterWide=false");
        assert_eq!(kinds.contains(&"ClusterRole"), !namespaced, "{name}");
        if namespaced {
            let role = objects
                .iter()
                .find(|o| o["kind"] == "Role" && o["metadata"]["namespace"] == TEAM)
                .unwrap_or_else(|| panic!("{name}: a Role in the watched namespace"));
            let rules = role["rules"].as_array().unwrap();
            assert!(
                rules
                    .iter()
                    .all(|r| r["resources"] != serde_json::json!(["namespaces"])),
                "{name}: no rule on namespaces in a Role"
            );
            assert!(
                pod["containers"][0]["args"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a == format!("--namespace={TEAM}").as_str()),
                "{name}"
            );
        }
        if has("networkPolicy.enabled=true") {
            let policy = find(&objects, "NetworkPolicy").expect("a NetworkPolicy");
            let egress = policy["spec"]["egress"].as_array().unwrap();
            // The API server, Keystone, Neutron, DNS: nothing else.
            assert_eq!(egress.len(), 4, "{name}: {egress:?}");
            assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], "http");
        } else {
            assert!(!kinds.contains(&"NetworkPolicy"), "{name}");
        }
        assert_eq!(
            kinds.contains(&"ServiceMonitor"),
            has("metrics.serviceMonitor.enabled=true"),
            "{name}"
        );
        assert_eq!(
            kinds.contains(&"PodMonitor"),
            has("metrics.podMonitor.enabled=true"),
            "{name}"
        );
        let image = pod["containers"][0]["image"].as_str().unwrap();
        if sets.iter().any(|s| s.starts_with("image.digest=")) {
            assert_eq!(image, format!("sample-operator@{DIGEST}"));
            assert_eq!(pod["priorityClassName"], "system-cluster-critical");
            assert_eq!(pod["volumes"][0]["secret"]["secretName"], "my-clouds");
            assert_eq!(pod["containers"][0]["env"][0]["name"], "RUST_BACKTRACE");
        } else {
            assert_eq!(image, "sample-operator:0.1.0");
        }
        let spread: Vec<&str> = pod["topologySpreadConstraints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["topologyKey"].as_str().unwrap())
            .collect();
        if sets.iter().any(|s| s.starts_with("topologySpreadConstraints")) {
            assert_eq!(spread, ["kubernetes.io/hostname"], "{name}");
        } else {
            assert_eq!(
                spread,
                ["kubernetes.io/hostname", "topology.kubernetes.io/zone"],
                "{name}: spread across nodes and zones by default"
            );
        }
    }
}

#[tokio::test]
async fn the_operator_pod_is_admitted_under_pod_security_restricted() {
    let client = client_with_crds().await;
    let namespace = "chart-restricted";
    ensure_namespace(
        &client,
        namespace,
        serde_json::json!({"pod-security.kubernetes.io/enforce": "restricted"}),
    )
    .await;
    for (name, sets) in combinations() {
        let objects = render(&sets).await.unwrap();
        let deployment = find(&objects, "Deployment").unwrap();
        let mut template = deployment["spec"]["template"].clone();
        template["metadata"]["name"] = "operator".into();
        template["metadata"]["namespace"] = namespace.into();
        let mut pod: Pod = serde_json::from_value(template).unwrap();
        // The ServiceAccount is not installed in this namespace; admission does not need it.
        pod.spec.as_mut().unwrap().service_account_name = None;
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        if let Err(e) = api.create(&params, &pod).await {
            panic!("{name}: the operator's Pod is refused under Pod Security restricted: {e}");
        }
    }
    // The check can fail: a Pod that breaks the profile is refused.
    let objects = render(&[]).await.unwrap();
    let mut template = find(&objects, "Deployment").unwrap()["spec"]["template"].clone();
    template["metadata"]["name"] = "privileged".into();
    template["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = true.into();
    let mut pod: Pod = serde_json::from_value(template).unwrap();
    pod.spec.as_mut().unwrap().service_account_name = None;
    let refused = Api::<Pod>::namespaced(client.clone(), namespace)
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &pod,
        )
        .await;
    assert!(refused.is_err(), "Pod Security admission is not enforcing");
}

#[tokio::test]
async fn watching_one_namespace_the_operator_needs_only_the_charts_role() {
    let client = client_with_crds().await;
    let ns = testing::TestNamespace::create(&client, "chart-role").await;
    let sets = [
        "rbac.clusterWide=false".to_owned(),
        format!("watchNamespace={}", ns.name),
    ];
    let objects = render_in(&ns.name, &sets).await.unwrap();
    // The chart's identity and grants, for real; the operator itself runs in this process.
    for object in &objects {
        if ["ServiceAccount", "Role", "RoleBinding"].contains(&object["kind"].as_str().unwrap()) {
            testing::apply_manifest(&client, &serde_yaml::to_string(object).unwrap())
                .await
                .unwrap_or_else(|e| panic!("{object}: {e}"));
        }
    }
    assert!(!kinds(&objects).contains(&"ClusterRole"));
    let mut as_operator = testing::config().await;
    as_operator.auth_info.impersonate = Some(format!("system:serviceaccount:{}:{RELEASE}", ns.name));
    as_operator.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{}", ns.name),
        "system:authenticated".into(),
    ]);
    let operator = Operator::start_as(
        RunConfig {
            namespace: Some(ns.name.clone()),
            controllers: vec![ControllerName::Foo, ControllerName::MyCustomResource],
            instance: "chart-role-test".into(),
            ..RunConfig::default()
        },
        as_operator,
    )
    .await;

    let foos = ns.api::<Foo>();
    let foo = Foo::new(
        "web",
        FooSpec {
            deployment_name: "web".into(),
            replicas: Some(1),
        },
    );
    foos.create(&PostParams::default(), &foo).await.unwrap();
    testing::wait_for(&foos, "web", "Ready", Duration::from_secs(60), |f| {
        f.status.as_ref().is_some_and(|s| {
            s.available_replicas == 1
                && sample_operator_api::conditions::find(&s.conditions, "Ready")
                    .is_some_and(|c| c.status == "True")
        })
    })
    .await
    .expect("the Foo converges through an operator holding only the Role");
    // Its events were published with the Role's grants too.
    crate::support::wait_for_event(&client, &ns.name, "web", "Synced").await;
    operator.stop().await;
    ns.delete().await;
}
