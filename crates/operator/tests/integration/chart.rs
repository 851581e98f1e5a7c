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

use sample_operator::ControllerName;
use sample_operator_api::{Foo, FooSpec};

use crate::support::{Operator, client_with_crds, config};

const RELEASE: &str = "sample-operator";
/// The namespace the one-namespace combinations watch.
const TEAM: &str = "chart-team-a";
const UNPRIVILEGED_NGINX: &str = "fooDeployments.image=nginxinc/nginx-unprivileged:1.29";
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
            [
                sets(&["rbac.clusterWide=false", "metrics.secure=false"]),
                vec![team.clone()],
            ]
            .concat(),
        ),
        (
            "neutron behind a network policy",
            sets(&[
                "networkBackend=neutron",
                "neutron.cloud=prod",
                "neutron.cloudsSecret=clouds",
                "neutron.clusterId=east-1",
                "neutron.adoptClusterIds[0]=east-0",
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
                "metrics.readers[0].namespace=monitoring",
                "metrics.readers[0].name=prometheus-k8s",
                "metrics.prometheusRule.enabled=true",
                "metrics.prometheusRule.labels.release=prometheus",
                "metrics.dashboard.enabled=true",
            ]),
        ),
        (
            "scraped through a PodMonitor",
            sets(&[
                "metrics.podMonitor.enabled=true",
                "metrics.podMonitor.interval=15s",
                "metrics.podMonitor.tokenSecret.name=metrics-scraper",
                "metrics.certSecret=sample-operator-metrics-tls",
                "metrics.prometheusRule.enabled=true",
                "metrics.prometheusRule.errorPercent=25",
                "metrics.prometheusRule.latencySeconds=2.5",
                "metrics.prometheusRule.notReadyFor=1h",
                "metrics.dashboard.enabled=true",
                "metrics.dashboard.namespace=monitoring",
                "metrics.dashboard.annotations.grafana_folder=Operators",
            ]),
        ),
        (
            "plain HTTP metrics, scraped through a ServiceMonitor",
            sets(&["metrics.secure=false", "metrics.serviceMonitor.enabled=true"]),
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
            "Foo Deployments for Pod Security restricted",
            sets(&[
                UNPRIVILEGED_NGINX,
                "fooDeployments.securityContext.runAsNonRoot=true",
                "fooDeployments.securityContext.capabilities.drop[0]=ALL",
                "fooDeployments.resources.limits.memory=64Mi",
            ]),
        ),
        (
            "one namespace, example.com, Neutron, no election, own spread",
            [
                sets(&[
                    "rbac.clusterWide=false",
                    "metrics.secure=false",
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

/// Runs the helm built here; against the local cluster unless the tests use an existing one.
pub(crate) async fn helm<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    let helm = tokio::task::spawn_blocking(local_cluster::toolchain::helm)
        .await
        .unwrap()
        .expect("helm builds");
    let mut cmd = tokio::process::Command::new(helm);
    if !testing::uses_existing_cluster() {
        cmd.env("KUBECONFIG", local_cluster::LocalCluster::default().kubeconfig());
    }
    cmd.args(args).output().await.unwrap()
}

fn with_sets(mut args: Vec<String>, sets: &[String]) -> Vec<String> {
    for set in sets {
        args.push("--set".into());
        args.push(set.clone());
    }
    args
}

/// `helm template` with `sets`: the rendered objects, or helm's error.
pub(crate) async fn render(sets: &[String]) -> Result<Vec<serde_json::Value>, String> {
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

pub(crate) fn find<'a>(objects: &'a [serde_json::Value], kind: &str) -> Option<&'a serde_json::Value> {
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
            "rbac.clusterWide=false,watchNamespace=a",
            "metrics.secure needs rbac.clusterWide",
        ),
        (
            "metrics.podMonitor.enabled=true",
            "needs metrics.podMonitor.tokenSecret.name",
        ),
        ("metrics.readers[0].name=prometheus", "/metrics/readers/0"),
        ("probePort=0", "/probePort"),
        ("metrics.certSecret=Metrics_TLS", "/metrics/certSecret"),
        (
            "metrics.serviceMonitor.enabled=true,metrics.podMonitor.enabled=true",
            "choose one",
        ),
        ("networkPolicy.enabled=true", "needs networkPolicy.apiServer"),
        (
            "metrics.prometheusRule.enabled=true",
            "needs metrics.prometheusRule.selector",
        ),
        (
            "metrics.prometheusRule.errorPercent=0",
            "/metrics/prometheusRule/errorPercent",
        ),
        (
            "metrics.prometheusRule.selector=sample-operator",
            "/metrics/prometheusRule/selector",
        ),
        (
            "metrics.prometheusRule.runbookURL=docs/runbooks.md",
            "/metrics/prometheusRule/runbookURL",
        ),
        (
            "metrics.dashboard.namespace=Monitoring",
            "/metrics/dashboard/namespace",
        ),
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
    ensure_namespace(&client, "monitoring", serde_json::json!({})).await;
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
            assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], "metrics");
            // The kubelet's probes, from the node.
            assert_eq!(policy["spec"]["ingress"][1]["ports"][0]["port"], "probes");
        } else {
            assert!(!kinds.contains(&"NetworkPolicy"), "{name}");
        }
        assert_eq!(
            kinds.contains(&"ServiceMonitor"),
            has("metrics.serviceMonitor.enabled=true"),
            "{name}"
        );
        check_metrics_access(name, &objects, !has("metrics.secure=false"));
        assert_eq!(
            kinds.contains(&"PodMonitor"),
            has("metrics.podMonitor.enabled=true"),
            "{name}"
        );
        let rule = find(&objects, "PrometheusRule");
        assert_eq!(
            rule.is_some(),
            has("metrics.prometheusRule.enabled=true"),
            "{name}"
        );
        if let Some(rule) = rule {
            let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
            let expr = |alert: &str| {
                rules.iter().find(|r| r["alert"] == alert).unwrap()["expr"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            };
            let ratio = if has("metrics.prometheusRule.errorPercent=25") {
                "0.25"
            } else {
                "0.1"
            };
            assert!(
                expr("SampleOperatorReconcileErrors").ends_with(&format!("> {ratio}")),
                "{name}"
            );
        }
        let dashboard = objects
            .iter()
            .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "sample-operator-dashboard");
        assert_eq!(
            dashboard.is_some(),
            has("metrics.dashboard.enabled=true"),
            "{name}"
        );
        if let Some(dashboard) = dashboard {
            assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
            let json: serde_json::Value =
                serde_json::from_str(dashboard["data"]["sample-operator.json"].as_str().unwrap())
                    .expect("the dashboard's JSON");
            assert_eq!(json["uid"], "sample-operator", "{name}");
        }
        assert_foo_deployments(name, &objects, has(UNPRIVILEGED_NGINX));
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

/// The operator takes the chart's arguments, and runs Foos' Deployments as the values say: the
/// defaults are the operator's own, the workload policy allows the image it runs, and values
/// set over the defaults keep the rest of them.
fn assert_foo_deployments(name: &str, objects: &[serde_json::Value], restricted: bool) {
    use sample_operator::cli::{Args, Command};
    use sample_operator::foo::Settings;

    let deployment = find(objects, "Deployment").expect("a Deployment");
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned());
    let parsed =
        <Args as clap::Parser>::try_parse_from(std::iter::once("sample-operator".to_owned()).chain(args))
            .unwrap_or_else(|e| panic!("{name}: the operator refuses the chart's arguments: {e}"));
    let Command::Run(run) = parsed.command else {
        panic!("{name}: the chart runs `run`")
    };
    let settings = run.foo_workload.settings();
    let defaults = Settings::default();
    if restricted {
        assert_eq!(settings.image, "nginxinc/nginx-unprivileged:1.29", "{name}");
        let context = &settings.security_context;
        assert_eq!(context.run_as_non_root, Some(true), "{name}");
        assert_eq!(
            context.capabilities.as_ref().and_then(|c| c.drop.clone()),
            Some(vec!["ALL".to_owned()]),
            "{name}"
        );
        assert_eq!(
            context.allow_privilege_escalation,
            Some(false),
            "{name}: a default kept"
        );
        assert_eq!(
            context.seccomp_profile, defaults.security_context.seccomp_profile,
            "{name}"
        );
        assert_eq!(
            settings.resources.limits.as_ref().unwrap()["memory"].0,
            "64Mi",
            "{name}"
        );
        assert_eq!(settings.resources.requests, defaults.resources.requests, "{name}");
    } else {
        assert_eq!(
            settings, defaults,
            "{name}: the chart's defaults are the operator's"
        );
    }
    if let Some(policy) = objects.iter().find(|o| {
        o["kind"] == "ValidatingAdmissionPolicy"
            && o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-workloads"))
    }) {
        let image = crate::deploy::policy_variable(policy, "image");
        assert_eq!(image["expression"], format!("'{}'", settings.image), "{name}");
    }
}

/// How /metrics is served and scraped: over HTTPS to reviewed tokens when `secure` (the
/// operator may review them, a metrics-reader ClusterRole exists, the monitors send a token and
/// check the certificate as they can), else plain HTTP; the probes on their own port either way.
fn check_metrics_access(name: &str, objects: &[serde_json::Value], secure: bool) {
    let container = &find(objects, "Deployment").unwrap()["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args.contains(&"--metrics-secure"), secure, "{name}: {args:?}");
    assert!(args.contains(&"--probe-address=0.0.0.0:8081"), "{name}: {args:?}");
    assert!(
        args.contains(&"--metrics-address=0.0.0.0:8080"),
        "{name}: {args:?}"
    );
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(container[probe]["httpGet"]["port"], "probes", "{name}: {probe}");
    }
    let ports: Vec<(&str, i64)> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["containerPort"].as_i64().unwrap()))
        .collect();
    assert_eq!(ports, [("metrics", 8080), ("probes", 8081)], "{name}");
    let cluster_role = |suffix: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == format!("{RELEASE}{suffix}"))
    };
    let reviews = cluster_role("").is_some_and(|role| {
        let rules = role["rules"].as_array().unwrap();
        [
            ("authentication.k8s.io", "tokenreviews"),
            ("authorization.k8s.io", "subjectaccessreviews"),
        ]
        .iter()
        .all(|(group, resource)| {
            rules.iter().any(|r| {
                r["apiGroups"] == serde_json::json!([group])
                    && r["resources"] == serde_json::json!([resource])
                    && r["verbs"] == serde_json::json!(["create"])
            })
        })
    });
    assert_eq!(reviews, secure, "{name}: the operator may review tokens");
    let reader = cluster_role("-metrics-reader");
    assert_eq!(reader.is_some(), secure, "{name}: a metrics-reader ClusterRole");
    if let Some(reader) = reader {
        assert_eq!(
            reader["rules"],
            serde_json::json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]),
            "{name}"
        );
    }
    let monitor = find(objects, "ServiceMonitor")
        .map(|m| &m["spec"]["endpoints"][0])
        .or_else(|| find(objects, "PodMonitor").map(|m| &m["spec"]["podMetricsEndpoints"][0]));
    if let Some(endpoint) = monitor {
        assert_eq!(endpoint["port"], "metrics", "{name}");
        if secure {
            assert_eq!(endpoint["scheme"], "https", "{name}");
            let token = endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
                || endpoint["authorization"]["credentials"]["name"] == "metrics-scraper";
            assert!(token, "{name}: the monitor sends a token: {endpoint}");
            let tls = &endpoint["tlsConfig"];
            let verified = tls["ca"]["secret"]["name"] == "sample-operator-metrics-tls"
                && tls["serverName"] == format!("{RELEASE}-metrics.{RELEASE}.svc");
            assert!(verified || tls["insecureSkipVerify"] == true, "{name}: {tls}");
        } else {
            assert!(endpoint.get("scheme").is_none(), "{name}: {endpoint}");
        }
    }
}

/// The Pod the rendered Deployment would make, with `change` applied to its template. Without
/// its ServiceAccount, which admission does not need.
fn operator_pod(objects: &[serde_json::Value], change: impl FnOnce(&mut serde_json::Value)) -> Pod {
    let mut template = find(objects, "Deployment").expect("a Deployment")["spec"]["template"].clone();
    template["metadata"]["name"] = "operator".into();
    change(&mut template);
    let mut pod: Pod = serde_json::from_value(template).expect("a Pod template");
    pod.spec.as_mut().expect("a Pod spec").service_account_name = None;
    pod
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
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    for (name, sets) in combinations() {
        let objects = render(&sets).await.unwrap();
        let pod = operator_pod(&objects, |_| {});
        if let Err(e) = pods.create(&dry_run, &pod).await {
            panic!("{name}: the operator's Pod is refused under Pod Security restricted: {e}");
        }
    }
    // The check can fail: a Pod that breaks the profile is refused.
    let objects = render(&[]).await.unwrap();
    let pod = operator_pod(&objects, |template| {
        template["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = true.into();
    });
    let refused = pods.create(&dry_run, &pod).await;
    assert!(refused.is_err(), "Pod Security admission is not enforcing");
}

#[tokio::test]
async fn watching_one_namespace_the_operator_needs_only_the_charts_role() {
    let client = client_with_crds().await;
    let ns = testing::TestNamespace::create(&client, "chart-role").await;
    let sets = [
        "rbac.clusterWide=false".to_owned(),
        "metrics.secure=false".to_owned(),
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
    let mut config = config(
        Some(&ns.name),
        &[ControllerName::Foo, ControllerName::MyCustomResource],
    );
    config.runtime.instance = "chart-role-test".into();
    let operator = Operator::start_as(config, as_operator).await;

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
}

/// The chart's ClusterRoles and the plain manifests' grant the same, the rules for serving
/// /metrics securely included (the tests run the operator with the manifests' RBAC).
#[test]
fn the_chart_and_the_manifests_grant_the_same() {
    let manifests: Vec<serde_json::Value> = ["rbac.yaml", "metrics-reader.yaml"]
        .iter()
        .flat_map(|f| documents(&std::fs::read_to_string(format!("{ROOT}/deploy/operator/{f}")).unwrap()))
        .collect();
    let helm = local_cluster::toolchain::helm().expect("helm builds");
    let output = std::process::Command::new(helm)
        .args(["template", RELEASE, &chart(), "--namespace", RELEASE])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let chart = documents(&String::from_utf8(output.stdout).unwrap());
    let rules = |objects: &[serde_json::Value], name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("a ClusterRole {name}"))["rules"]
            .clone()
    };
    for name in [RELEASE.to_owned(), format!("{RELEASE}-metrics-reader")] {
        assert_eq!(rules(&chart, &name), rules(&manifests, &name), "{name}");
    }
}

/// kube-score's checks the chart does not follow on purpose, and why. Besides these,
/// `--ignore-container-cpu-limit`: the CPU is requested and not limited, since a CFS quota
/// throttles reconcile bursts for no gain.
const KUBE_SCORE_EXCEPTIONS: &[(&str, &str)] = &[
    (
        "container-cpu-requests-equal-limits",
        "no CPU limit, as above (memory requests do equal limits)",
    ),
    (
        "container-resource-requests-equal-limits",
        "CPU and memory together; memory is held to it by container-memory-requests-equal-limits",
    ),
    (
        "container-image-pull-policy",
        "IfNotPresent: the image is pulled by digest or by its immutable release tag, and with \
         Always a registry outage would keep a standby from starting",
    ),
    (
        "deployment-has-host-podantiaffinity",
        "topologySpreadConstraints spread the replicas across nodes and zones (preferred, so a \
         one-node cluster still runs them all); kube-score reads only podAntiAffinity",
    ),
];

/// kube-score (the linter the Go module proxy lets us build, in place of kube-linter) on every
/// option combination, with every check, the optional ones too: nothing found but the
/// explained exceptions.
#[tokio::test]
async fn kube_score_finds_nothing_but_the_explained_exceptions() {
    let kube_score = tokio::task::spawn_blocking(local_cluster::toolchain::kube_score)
        .await
        .unwrap()
        .expect("kube-score builds");
    // `kube-score list`: id,target,description,default|optional.
    let list = std::process::Command::new(&kube_score)
        .arg("list")
        .output()
        .unwrap();
    let list = String::from_utf8(list.stdout).unwrap();
    let checks: Vec<(&str, bool)> = list
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split(',').collect();
            Some((*fields.first()?, *fields.last()? == "optional"))
        })
        .collect();
    assert!(checks.len() > 30, "{list}");
    let excepted = |id: &str| KUBE_SCORE_EXCEPTIONS.iter().any(|(e, _)| *e == id);
    for (id, _) in KUBE_SCORE_EXCEPTIONS {
        assert!(checks.iter().any(|c| c.0 == *id), "{id} is a kube-score check");
    }
    for (name, sets) in combinations() {
        let objects = render(&sets).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let yaml: String = objects
            .iter()
            .map(|o| format!("---\n{}", serde_yaml::to_string(o).unwrap()))
            .collect();
        let file = std::env::temp_dir().join(format!("kube-score-{}.yaml", std::process::id()));
        std::fs::write(&file, yaml).unwrap();
        let mut command = tokio::process::Command::new(&kube_score);
        command.args([
            "score",
            "--kubernetes-version=v1.36",
            "--exit-one-on-warning",
            "--ignore-container-cpu-limit",
            "--output-format=ci",
        ]);
        for (id, optional) in &checks {
            match (optional, excepted(id)) {
                (true, false) => command.arg(format!("--enable-optional-test={id}")),
                (false, true) => command.arg(format!("--ignore-test={id}")),
                _ => &mut command,
            };
        }
        // The NetworkPolicy needs the cluster's API server endpoints, so it is off by default;
        // where it is on, kube-score checks it covers the Pods.
        if !sets.iter().any(|s| s == "networkPolicy.enabled=true") {
            command.arg("--ignore-test=pod-networkpolicy");
        }
        // One replica is a choice the combination makes (no standby), not a default.
        if sets.iter().any(|s| s == "replicaCount=1") {
            command.arg("--ignore-test=deployment-replicas");
        }
        let output = command.arg(&file).output().await.unwrap();
        let _ = std::fs::remove_file(&file);
        let report = String::from_utf8_lossy(&output.stdout);
        let findings: Vec<&str> = report
            .lines()
            .filter(|l| !l.starts_with("[OK]") && !l.starts_with("[SKIPPED]"))
            .collect();
        assert!(
            output.status.success() && findings.is_empty(),
            "kube-score on {name}:\n{}\n{}",
            findings.join("\n"),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
