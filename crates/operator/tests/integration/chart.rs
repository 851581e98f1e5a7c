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
/// The first of the two values that take over kubernetes/sample-controller's Deployments
/// unchanged (docs/switching.md).
const TUTORIAL_TEMPLATE: &str = "fooDeployments.resources=null";
const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Every option of the chart, in the combinations a platform team would choose.
fn combinations() -> Vec<(&'static str, Vec<String>)> {
    let team = format!("watchNamespace={TEAM}");
    let digest = format!("image.digest={DIGEST}");
    let sets = |values: &[&str]| values.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>();
    vec![
        ("defaults, with the prefixes tenants may use", vec![]),
        (
            "one replica, nothing of the cluster's addresses",
            sets(&["replicaCount=1", "networkAddressPolicy.clusterAddresses=false"]),
        ),
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
                "neutron.region=RegionTwo",
                "neutron.interface=internal",
                "neutron.resyncSeconds=600",
                "neutron.maxNetworksPerNamespace=20",
                "neutron.dhcp=true",
                "networkPolicy.enabled=true",
                "networkPolicy.apiServer[0].cidr=10.0.0.1/32",
                "networkPolicy.apiServer[0].port=6443",
                "networkPolicy.openstack[0].cidr=192.0.2.10/32",
                "networkPolicy.openstack[0].port=5000",
                "networkPolicy.openstack[1].cidr=192.0.2.11/32",
                "networkPolicy.openstack[1].port=9696",
                "networkPolicy.dns=true",
                "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring",
                // Neutron's networks reach no node's routing table.
                "networkAddressPolicy.anyPrefix=true",
                "networkAddressPolicy.serviceCIDRs[0]=10.96.0.0/16",
            ]),
        ),
        (
            "scraped through a ServiceMonitor",
            sets(&[
                "metrics.serviceMonitor.enabled=true",
                "metrics.serviceMonitor.labels.release=prometheus",
                "metrics.serviceMonitor.interval=15s",
                "metrics.serviceMonitor.scrapeTimeout=5s",
                "metrics.readers[0].namespace=monitoring",
                "metrics.readers[0].name=prometheus-k8s",
                "metrics.certManager.issuer.name=metrics-ca",
                "metrics.certManager.issuer.kind=ClusterIssuer",
                "metrics.certManager.issuer.group=cert-manager.io",
                "metrics.tokenAudience=sample-operator-metrics",
                "metrics.serviceMonitor.tokenFile=/var/run/secrets/tokens/sample-operator-metrics",
                "metrics.prometheusRule.enabled=true",
                "metrics.prometheusRule.labels.release=prometheus",
                "metrics.dashboard.enabled=true",
            ]),
        ),
        (
            "scraped without a certificate Prometheus can verify, as asked",
            sets(&["metrics.serviceMonitor.enabled=true", "metrics.insecureSkipVerify=true"]),
        ),
        (
            "scraped through a PodMonitor",
            sets(&[
                "metrics.podMonitor.enabled=true",
                "metrics.podMonitor.interval=15s",
                "metrics.podMonitor.tokenSecret.name=metrics-scraper",
                "metrics.podMonitor.tokenSecret.key=scraper-token",
                "metrics.podMonitor.scrapeTimeout=5s",
                "metrics.podMonitor.labels.release=prometheus",
                "metrics.prometheusRule.selector=namespace=\"sample-operator\"",
                "metrics.prometheusRule.runbookURL=https://git.example.com/ops/runbooks.md",
                "metrics.prometheusRule.errorsFor=30m",
                "metrics.prometheusRule.latencyFor=30m",
                "metrics.dashboard.labels.team=operations",
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
                    "replicaCount=3",
                    "podDisruptionBudget.minAvailable=2",
                ]),
            ]
            .concat(),
        ),
        (
            "taking over kubernetes/sample-controller's Deployments unchanged",
            sets(&[TUTORIAL_TEMPLATE, "fooDeployments.securityContext=null"]),
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
            "every other knob: two controllers, tuned, own ports, placement and policy",
            sets(&[
                "image.repository=registry.example.com/sample-operator",
                "image.tag=1.2.3",
                "image.pullPolicy=Always",
                "controllers[0]=foo",
                "controllers[1]=network",
                "concurrency=4",
                "workerThreads=4",
                "initialList=stream",
                "apiserverHttp2=true",
                "log.format=plain",
                "log.level=sample_operator=debug",
                "events=warnings",
                "leaderElection.leaseDurationSeconds=30",
                "leaderElection.leaseGraceSeconds=10",
                "metrics.port=9090",
                "probePort=9091",
                "networkAddressPolicy.admission=false",
                "networkAddressPolicy.allowedPrefixes[0]=10.0.0.0/8",
                "networkAddressPolicy.minPrefixLengthV4=20",
                "networkAddressPolicy.minPrefixLengthV6=56",
                "networkAddressPolicy.overlapAcrossNamespaces=true",
                "workloadPolicy.enabled=false",
                "podDisruptionBudget.enabled=false",
                "resources.requests.cpu=100m",
                "resources.requests.memory=512Mi",
                "resources.limits.memory=512Mi",
                "podSecurityContext.fsGroup=65532",
                "securityContext.runAsNonRoot=true",
                "nodeSelector.kubernetes\\.io/os=linux",
                "tolerations[0].key=dedicated",
                "tolerations[0].operator=Exists",
                "tolerations[0].effect=NoSchedule",
                "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
                "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].key=dedicated",
                "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].operator=Exists",
                "hostAliases[0].ip=192.0.2.10",
                "hostAliases[0].hostnames[0]=keystone.example.com",
            ]),
        ),
        (
            "sharded over four replicas",
            sets(&["sharding.enabled=true", "replicaCount=4"]),
        ),
        (
            "the node clean-up, on the nodes that attach Networks",
            sets(&[
                "nodeCleanup.enabled=true",
                "nodeCleanup.cniConfDir=/etc/kubernetes/cni/net.d",
                "nodeCleanup.ipamDir=/var/lib/cni/pools",
                "nodeCleanup.intervalSeconds=10",
                "nodeCleanup.graceSeconds=120",
                "nodeCleanup.nodeSelector.multus=attached",
                "nodeCleanup.tolerations[0].key=dedicated",
                "nodeCleanup.tolerations[0].operator=Exists",
                "nodeCleanup.resources.limits.memory=128Mi",
                "nodeCleanup.resources.requests.memory=128Mi",
            ]),
        ),
        (
            "one namespace, example.com, Neutron, no election, own spread, no NetworkPolicy",
            [
                sets(&[
                    "rbac.clusterWide=false",
                    "metrics.secure=false",
                    "exampleCom.enabled=true",
                    "networkBackend=neutron",
                    "neutron.clusterId=east-1",
                    "networkPolicy.enabled=false",
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

/// The paths of values.yaml that are values: in values.schema.json, a property with no
/// properties of its own (a scalar, a list, or a map the user fills).
fn value_paths() -> Vec<String> {
    fn walk(schema: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
        let Some(properties) = schema["properties"].as_object() else {
            out.push(prefix.to_owned());
            return;
        };
        for (name, child) in properties {
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            walk(child, &path, out);
        }
    }
    let schema: serde_json::Value = serde_json::from_str(include_str!(
        "../../../../deploy/helm/sample-operator/values.schema.json"
    ))
    .unwrap();
    let mut out = Vec::new();
    walk(&schema, "", &mut out);
    out
}

/// Each key of values.yaml by its dotted path, and whether a comment says what it is: on its
/// line, or on the lines just above it.
fn commented_keys(values: &str) -> Vec<(String, bool)> {
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut previous_is_comment = false;
    let mut keys = Vec::new();
    for line in values.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.starts_with('#') {
            previous_is_comment = true;
            continue;
        }
        let key = trimmed
            .split_once(':')
            .map(|(k, _)| k)
            .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)));
        if let Some(key) = key.filter(|_| !trimmed.starts_with('-')) {
            stack.retain(|(i, _)| *i < indent);
            stack.push((indent, key.to_owned()));
            let path: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
            keys.push((path.join("."), previous_is_comment || trimmed.contains(" #")));
        }
        previous_is_comment = false;
    }
    keys
}

#[test]
fn every_value_of_the_chart_says_what_it_is() {
    let keys = commented_keys(include_str!(
        "../../../../deploy/helm/sample-operator/values.yaml"
    ));
    let mut silent = Vec::new();
    for path in value_paths() {
        match keys.iter().find(|(k, _)| *k == path) {
            Some((_, true)) => {}
            Some((_, false)) => silent.push(path),
            None => panic!("values.schema.json has {path}, which values.yaml does not set"),
        }
    }
    assert!(
        silent.is_empty(),
        "values without a comment in values.yaml: {silent:?}"
    );
}

/// The docs promise that the combinations set every value: each value of values.yaml is set
/// away from its default in at least one of them.
#[test]
fn the_combinations_set_every_value() {
    let combinations = combinations();
    let sets: Vec<&str> = combinations
        .iter()
        .flat_map(|(_, sets)| sets.iter())
        .map(|set| set.split_once('=').map_or(set.as_str(), |(path, _)| path))
        .collect();
    let unset: Vec<String> = value_paths()
        .into_iter()
        .filter(|path| {
            !sets.iter().any(|set| {
                let set = set.split('[').next().unwrap_or_default();
                set == path || set.starts_with(&format!("{path}."))
            })
        })
        .collect();
    assert!(unset.is_empty(), "values no combination sets: {unset:?}");
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

/// The one value the chart requires, unless `sets` choose the prefixes tenants may use.
const TENANT_PREFIXES: &str = "networkAddressPolicy.allowedPrefixes[0]=192.168.0.0/16";

fn with_sets(mut args: Vec<String>, sets: &[String]) -> Vec<String> {
    let chosen = sets.iter().any(|set| {
        set.starts_with("networkAddressPolicy.allowedPrefixes")
            || set.starts_with("networkAddressPolicy.anyPrefix")
    });
    if !chosen {
        args.push("--set".into());
        args.push(TENANT_PREFIXES.into());
    }
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
        ("events=some", "/events"),
        ("concurrency=0", "/concurrency"),
        ("workerThreads=2000", "/workerThreads"),
        ("initialList=sometimes", "/initialList"),
        ("apiserverHttp2=yes", "/apiserverHttp2"),
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
        (
            "leaderElection.leaseGraceSeconds=0",
            "/leaderElection/leaseGraceSeconds",
        ),
        (
            "leaderElection.leaseGraceSeconds=15",
            "leaseGraceSeconds must be less than leaderElection.leaseDurationSeconds",
        ),
        ("metrics.certSecret=Metrics_TLS", "/metrics/certSecret"),
        (
            "metrics.serviceMonitor.enabled=true",
            "a certificate it cannot verify",
        ),
        (
            "metrics.certSecret=tls,metrics.certManager.issuer.name=ca",
            "choose one source of the metrics certificate",
        ),
        (
            "metrics.secure=false,metrics.tokenAudience=metrics",
            "metrics.tokenAudience needs metrics.secure",
        ),
        (
            "metrics.serviceMonitor.enabled=true,metrics.certSecret=tls,metrics.tokenAudience=metrics",
            "set metrics.serviceMonitor.tokenFile",
        ),
        (
            "metrics.serviceMonitor.tokenFile=token",
            "/metrics/serviceMonitor/tokenFile",
        ),
        (
            "metrics.serviceMonitor.enabled=true,metrics.podMonitor.enabled=true",
            "choose one",
        ),
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
        (
            "networkBackend=neutron",
            "networkPolicy.enabled with networkBackend=neutron needs networkPolicy.openstack",
        ),
        (
            "networkAddressPolicy.allowedPrefixes[0]=10.0.0.0/8,networkAddressPolicy.anyPrefix=true",
            "allowedPrefixes and anyPrefix=true contradict each other",
        ),
        (
            "networkAddressPolicy.serviceCIDRs[0]=10.96.0.0",
            "/networkAddressPolicy/serviceCIDRs/0",
        ),
        (
            "nodeCleanup.enabled=true,rbac.clusterWide=false,watchNamespace=a,metrics.secure=false",
            "nodeCleanup.enabled needs rbac.clusterWide",
        ),
        (
            "nodeCleanup.enabled=true,networkBackend=neutron,networkPolicy.enabled=false",
            "nodeCleanup.enabled is for networkBackend=multus",
        ),
        ("nodeCleanup.ipamDir=var/lib/cni", "/nodeCleanup/ipamDir"),
        ("nodeCleanup.intervalSeconds=0", "/nodeCleanup/intervalSeconds"),
    ] {
        let error = render(&[set.to_owned()])
            .await
            .expect_err(&format!("{set} is refused"));
        assert!(error.contains(named), "{set}: {error}");
    }
}

/// What `helm install` prints after installing: whether scrapers can verify the metrics
/// certificate, said plainly when they cannot.
#[tokio::test]
async fn the_install_notes_say_whether_prometheus_can_verify_the_certificate() {
    let notes = async |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
        let args = [
            "install",
            RELEASE,
            &chart(),
            "--dry-run=client",
            "--namespace",
            RELEASE,
        ]
        .map(String::from);
        let output = helm(&with_sets(args.to_vec(), &sets)).await;
        let out = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{sets:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        out.split_once("NOTES:")
            .map(|(_, notes)| notes.to_owned())
            .expect("notes")
    };
    let unverified = notes(&[
        "metrics.serviceMonitor.enabled=true",
        "metrics.insecureSkipVerify=true",
    ])
    .await;
    assert!(
        unverified.contains("WARNING: its certificate is self-signed")
            && unverified.contains("The ServiceMonitor is rendered with insecureSkipVerify"),
        "{unverified}"
    );
    let verified = notes(&[
        "metrics.serviceMonitor.enabled=true",
        "metrics.certManager.issuer.name=metrics-ca",
        "metrics.tokenAudience=sample-operator-metrics",
        "metrics.serviceMonitor.tokenFile=/var/run/secrets/tokens/metrics",
    ])
    .await;
    assert!(
        !verified.contains("WARNING")
            && verified.contains("which cert-manager keeps for the Certificate")
            && verified.contains("issued for the audience \"sample-operator-metrics\""),
        "{verified}"
    );
    let plain = notes(&["metrics.secure=false"]).await;
    assert!(plain.contains("plain HTTP"), "{plain}");
}

/// Secure by default: the chart does not render until the admin states the prefixes tenants'
/// Networks may use, or that any is allowed; not even with the Network controller's other
/// values at their defaults.
#[tokio::test]
async fn the_chart_asks_which_prefixes_tenants_may_use() {
    let output = helm(&["template", RELEASE, &chart()]).await;
    assert!(!output.status.success(), "rendered without a choice of prefixes");
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(
        error.contains("networkAddressPolicy: state the prefixes tenants' Networks may use (allowedPrefixes"),
        "{error}"
    );
    // Without the Network controller there is nothing to choose.
    let output = helm(&["template", RELEASE, &chart(), "--set", "controllers={foo}"]).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
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

/// cert-manager's CRDs, from its pinned Go module, so that the chart's Certificate passes
/// cert-manager's own schema.
async fn install_cert_manager_crds(client: &Client) {
    let folder = tokio::task::spawn_blocking(local_cluster::toolchain::cert_manager_crds)
        .await
        .unwrap()
        .expect("cert-manager's CRDs");
    let crds: Vec<CustomResourceDefinition> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap())
        .collect();
    assert!(
        crds.iter()
            .any(|c| c.metadata.name.as_deref() == Some("certificates.cert-manager.io")),
        "certificates.cert-manager.io in {}",
        folder.display()
    );
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
    install_cert_manager_crds(&client).await;

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
            replicas > 1 && !has("podDisruptionBudget.enabled=false"),
            "{name}: a PodDisruptionBudget exactly when there are standbys, unless disabled"
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
        if !has("networkPolicy.enabled=false") {
            let policy = find(&objects, "NetworkPolicy").expect("a NetworkPolicy, by default");
            let egress = policy["spec"]["egress"].as_array().unwrap();
            let ingress = policy["spec"]["ingress"].as_array().unwrap();
            // The probes: never named, so only the Pod's own node (the kubelet) reaches them.
            assert!(
                !policy["spec"]["ingress"].to_string().contains("probes"),
                "{name}"
            );
            if has("networkPolicy.enabled=true") {
                // The API server, Keystone, Neutron, DNS: nothing else; metrics from the
                // monitoring namespace only.
                assert_eq!(egress.len(), 4, "{name}: {egress:?}");
                assert_eq!(ingress.len(), 1, "{name}");
                assert_eq!(ingress[0]["ports"][0]["port"], "metrics");
                assert_eq!(
                    ingress[0]["from"][0]["namespaceSelector"]["matchLabels"]["name"],
                    "monitoring"
                );
            } else {
                // Unknown to helm template: the API server's ports, to any address.
                assert_eq!(egress.len(), 1, "{name}: {egress:?}");
                assert_eq!(egress[0]["ports"][0]["port"], 443, "{name}");
                assert!(egress[0].get("to").is_none(), "{name}");
                // /metrics from the readers' namespaces, or from nobody without readers.
                let readers = has("metrics.readers[0].namespace=monitoring");
                assert_eq!(ingress.len(), usize::from(readers), "{name}: {ingress:?}");
                if readers {
                    assert_eq!(
                        ingress[0]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
                        "monitoring",
                        "{name}"
                    );
                }
            }
        } else {
            assert!(!kinds.contains(&"NetworkPolicy"), "{name}");
        }
        assert_eq!(
            kinds.contains(&"ServiceMonitor"),
            has("metrics.serviceMonitor.enabled=true"),
            "{name}"
        );
        check_metrics_access(name, &sets, &objects, !has("metrics.secure=false"));
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
        assert_foo_deployments(name, &objects, has(UNPRIVILEGED_NGINX), has(TUTORIAL_TEMPLATE));
        assert_values_reach_the_operator(name, &sets, &objects);
        assert_node_cleanup(name, &sets, &objects);
        let image = pod["containers"][0]["image"].as_str().unwrap();
        if sets.iter().any(|s| s.starts_with("image.digest=")) {
            assert_eq!(image, format!("sample-operator@{DIGEST}"));
            assert_eq!(pod["priorityClassName"], "system-cluster-critical");
            assert_eq!(pod["volumes"][0]["secret"]["secretName"], "my-clouds");
            assert_eq!(pod["containers"][0]["env"][0]["name"], "RUST_BACKTRACE");
        } else if !has("image.tag=1.2.3") {
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

/// A rendered container's arguments, parsed by the operator's own command line as the
/// binary would parse them.
fn parsed_args(name: &str, container: &serde_json::Value) -> sample_operator::cli::Args {
    let args = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned());
    <sample_operator::cli::Args as clap::Parser>::try_parse_from(
        std::iter::once("sample-operator".to_owned()).chain(args),
    )
    .unwrap_or_else(|e| panic!("{name}: the binary refuses the chart's arguments: {e}"))
}

/// The operator's run arguments as the chart renders them, parsed by the operator's own
/// command line.
fn rendered_run_args(name: &str, objects: &[serde_json::Value]) -> sample_operator::cli::RunArgs {
    use sample_operator::cli::Command;
    let deployment = find(objects, "Deployment").expect("a Deployment");
    let parsed = parsed_args(name, &deployment["spec"]["template"]["spec"]["containers"][0]);
    let Command::Run(run) = parsed.command else {
        panic!("{name}: the chart runs `run`")
    };
    *run
}

/// Each value a combination sets reaches what it is for: the operator's option, as the
/// operator parses the rendered arguments, or the field of the Pod it stands for.
fn assert_values_reach_the_operator(name: &str, sets: &[String], objects: &[serde_json::Value]) {
    use sample_operator::cli::RunArgs;
    type Read = fn(&RunArgs) -> String;
    const OPTIONS: &[(&str, Read)] = &[
        ("concurrency", |r| r.concurrency.to_string()),
        ("workerThreads", |r| r.worker_threads.to_string()),
        ("initialList", |r| format!("{:?}", r.initial_list).to_lowercase()),
        ("apiserverHttp2", |r| {
            (r.apiserver_http == sample_operator::runtime::transport::HttpVersion::Http2).to_string()
        }),
        ("log.level", |r| r.log_level.clone()),
        ("log.format", |r| format!("{:?}", r.log_format).to_lowercase()),
        ("events", |r| format!("{:?}", r.events).to_lowercase()),
        ("leaderElection.leaseDurationSeconds", |r| {
            r.leader_election.lease_duration_seconds.to_string()
        }),
        ("leaderElection.leaseGraceSeconds", |r| {
            r.leader_election.lease_grace_seconds.to_string()
        }),
        ("sharding.enabled", |r| r.sharding.sharding.to_string()),
        ("metrics.port", |r| r.metrics_address.port().to_string()),
        ("probePort", |r| r.probe_address.port().to_string()),
        ("networkAddressPolicy.allowedPrefixes[0]", |r| {
            r.address_policy.network_allowed_prefixes[0].to_string()
        }),
        ("networkAddressPolicy.minPrefixLengthV4", |r| {
            r.address_policy.network_min_prefix_length_v4.to_string()
        }),
        ("networkAddressPolicy.minPrefixLengthV6", |r| {
            r.address_policy.network_min_prefix_length_v6.to_string()
        }),
        ("networkAddressPolicy.clusterAddresses", |r| {
            r.address_policy.network_cluster_addresses.to_string()
        }),
        ("networkAddressPolicy.overlapAcrossNamespaces", |r| {
            r.address_policy.network_overlap_across_namespaces.to_string()
        }),
        ("networkAddressPolicy.serviceCIDRs[0]", |r| {
            r.address_policy.network_service_cidrs[0].to_string()
        }),
        ("neutron.cloud", |r| {
            r.network_backend.os_cloud.clone().unwrap_or_default()
        }),
        ("neutron.region", |r| {
            r.network_backend.os_region_name.clone().unwrap_or_default()
        }),
        ("neutron.interface", |r| {
            r.network_backend.os_interface.clone().unwrap_or_default()
        }),
        ("neutron.clusterId", |r| {
            r.network_backend.cluster_id.clone().unwrap_or_default()
        }),
        ("neutron.adoptClusterIds[0]", |r| {
            r.network_backend.adopt_cluster_id[0].clone()
        }),
        ("neutron.maxNetworksPerNamespace", |r| {
            r.address_policy.network_max_per_namespace.to_string()
        }),
        ("neutron.dhcp", |r| r.network_backend.neutron_dhcp.to_string()),
        ("neutron.resyncSeconds", |r| {
            r.network_backend.neutron_resync_seconds.to_string()
        }),
        ("metrics.tokenAudience", |r| {
            r.metrics_token_audience.clone().unwrap_or_default()
        }),
        ("controllers[0]", |r| r.controllers[0].label().to_owned()),
        ("controllers[1]", |r| r.controllers[1].label().to_owned()),
        ("watchNamespace", |r| r.namespace.clone().unwrap_or_default()),
    ];
    /// Values that are a field of the Pod's spec, by JSON pointer.
    const POD_FIELDS: &[(&str, &str)] = &[
        ("image.pullPolicy", "/containers/0/imagePullPolicy"),
        ("resources.requests.cpu", "/containers/0/resources/requests/cpu"),
        ("resources.limits.memory", "/containers/0/resources/limits/memory"),
        ("podSecurityContext.fsGroup", "/securityContext/fsGroup"),
        (
            "securityContext.runAsNonRoot",
            "/containers/0/securityContext/runAsNonRoot",
        ),
        (
            "nodeSelector.kubernetes\\.io/os",
            "/nodeSelector/kubernetes.io~1os",
        ),
        ("tolerations[0].key", "/tolerations/0/key"),
        (
            "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
            "/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution/0/weight",
        ),
        ("hostAliases[0].ip", "/hostAliases/0/ip"),
        ("hostAliases[0].hostnames[0]", "/hostAliases/0/hostnames/0"),
        ("priorityClassName", "/priorityClassName"),
    ];
    let run = rendered_run_args(name, objects);
    let pod = &find(objects, "Deployment").unwrap()["spec"]["template"]["spec"];
    for set in sets {
        let (path, value) = set.split_once('=').unwrap();
        if let Some((_, read)) = OPTIONS.iter().find(|(p, _)| *p == path) {
            assert_eq!(read(&run), value, "{name}: {path} reaches the operator");
        }
        if let Some((_, pointer)) = POD_FIELDS.iter().find(|(p, _)| *p == path) {
            let field = pod
                .pointer(pointer)
                .unwrap_or_else(|| panic!("{name}: {path} at {pointer}"));
            let field = field.as_str().map_or_else(|| field.to_string(), str::to_owned);
            assert_eq!(field, value, "{name}: {path} in the Pod");
        }
    }
    let has = |set: &str| sets.iter().any(|s| s == set);
    // Sharded replicas hold Leases of their own, and delete theirs when they stop; elected
    // ones compete for one.
    let sharded = has("sharding.enabled=true");
    assert_eq!(run.sharding.sharding, sharded, "{name}");
    assert_eq!(
        run.leader_election.leader_elect,
        !sharded && !has("leaderElection.enabled=false"),
        "{name}"
    );
    let lease_verbs: Vec<&str> = objects
        .iter()
        .filter(|o| o["kind"] == "Role")
        .flat_map(|o| o["rules"].as_array().unwrap())
        .filter(|rule| rule["resources"] == serde_json::json!(["leases"]))
        .flat_map(|rule| rule["verbs"].as_array().unwrap())
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        lease_verbs.contains(&"delete"),
        sharded,
        "{name}: {lease_verbs:?}"
    );
    assert_eq!(
        lease_verbs.is_empty(),
        !sharded && has("leaderElection.enabled=false"),
        "{name}: Leases may be used when needed"
    );
    let image = pod["containers"][0]["image"].as_str().unwrap();
    if has("image.tag=1.2.3") {
        assert_eq!(image, "registry.example.com/sample-operator:1.2.3", "{name}");
    }
    let policy = |suffix: &str| {
        objects.iter().any(|o| {
            o["kind"] == "ValidatingAdmissionPolicy"
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(suffix))
        })
    };
    let cluster_wide = !has("rbac.clusterWide=false");
    assert_eq!(
        policy("-workloads"),
        cluster_wide && !has("workloadPolicy.enabled=false"),
        "{name}: the workload policy"
    );
    assert_eq!(
        policy("-network-addresses"),
        cluster_wide && !has("networkAddressPolicy.admission=false"),
        "{name}: the address policy at admission"
    );
    let cluster_addresses = cluster_wide && !has("networkAddressPolicy.clusterAddresses=false");
    assert_eq!(
        policy("-network-cluster-addresses"),
        cluster_addresses && !has("networkAddressPolicy.admission=false"),
        "{name}: the cluster's addresses at admission"
    );
    let run = rendered_run_args(name, objects);
    assert_eq!(
        run.address_policy.network_cluster_addresses, cluster_addresses,
        "{name}: the operator watches the cluster's addresses where it may"
    );
    let params = run.address_policy.network_admission_params.clone();
    assert_eq!(
        params.is_some(),
        cluster_addresses && !has("networkAddressPolicy.admission=false"),
        "{name}: the admission policy's parameters"
    );
    if let Some(params) = params {
        // The one object the operator may write is the one the binding reads.
        let binding = objects
            .iter()
            .find(|o| {
                o["kind"] == "ValidatingAdmissionPolicyBinding"
                    && o["spec"]["policyName"]
                        .as_str()
                        .is_some_and(|n| n.ends_with("-network-cluster-addresses"))
            })
            .unwrap();
        assert_eq!(binding["spec"]["paramRef"]["name"], params.as_str(), "{name}");
        let writes: Vec<&serde_json::Value> = objects
            .iter()
            .filter(|o| o["kind"] == "ClusterRole")
            .flat_map(|o| o["rules"].as_array().unwrap())
            .filter(|rule| rule["resources"] == serde_json::json!(["clusteraddresses"]))
            .collect();
        assert_eq!(writes.len(), 1, "{name}: one rule for the parameters");
        assert_eq!(writes[0]["resourceNames"], serde_json::json!([params]), "{name}");
    }
    if let Some(budget) = find(objects, "PodDisruptionBudget") {
        let wanted = if has("podDisruptionBudget.minAvailable=2") {
            2
        } else {
            1
        };
        assert_eq!(budget["spec"]["minAvailable"], wanted, "{name}");
    }
    assert_eq!(
        find(objects, "PodDisruptionBudget").is_none(),
        has("podDisruptionBudget.enabled=false") || has("replicaCount=1"),
        "{name}: a PodDisruptionBudget unless disabled or alone"
    );
}

/// The node clean-up's DaemonSet, when asked for: its values reach the `node-cleanup` command
/// as the operator parses them, it runs with NET_ADMIN alone in the host's network, on the
/// nodes asked for, under a ServiceAccount of its own that may only read attachment
/// definitions and record Events, and no Service, budget or policy of the operator selects it.
fn assert_node_cleanup(name: &str, sets: &[String], objects: &[serde_json::Value]) {
    use sample_operator::cli::Command;
    let has = |set: &str| sets.iter().any(|s| s == set);
    let daemon_set = find(objects, "DaemonSet");
    assert_eq!(daemon_set.is_some(), has("nodeCleanup.enabled=true"), "{name}");
    let Some(daemon_set) = daemon_set else { return };
    let pod = &daemon_set["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let parsed = parsed_args(name, container);
    let Command::NodeCleanup(cleanup) = parsed.command else {
        panic!("{name}: the DaemonSet runs `node-cleanup`")
    };
    let settings = cleanup.settings();
    assert_eq!(
        settings.cni_conf_dir.to_str(),
        Some("/etc/kubernetes/cni/net.d"),
        "{name}"
    );
    assert_eq!(
        settings.ipam_dir.as_deref().and_then(|d| d.to_str()),
        Some("/var/lib/cni/pools"),
        "{name}"
    );
    assert_eq!(settings.interval.as_secs(), 10, "{name}");
    assert_eq!(settings.grace.as_secs(), 120, "{name}");
    // What is mounted is what the command reads; the configuration read-only.
    let mounts = container["volumeMounts"].as_array().unwrap();
    let volumes = pod["volumes"].as_array().unwrap();
    for (dir, read_only) in [("/etc/kubernetes/cni/net.d", true), ("/var/lib/cni/pools", false)] {
        let mount = mounts
            .iter()
            .find(|m| m["mountPath"] == dir)
            .unwrap_or_else(|| panic!("{name}: {dir} mounted"));
        assert_eq!(
            mount["readOnly"].as_bool().unwrap_or(false),
            read_only,
            "{name}: {dir}"
        );
        let volume = volumes.iter().find(|v| v["name"] == mount["name"]).unwrap();
        assert_eq!(volume["hostPath"]["path"], dir, "{name}");
    }
    assert_eq!(volumes.len(), 2, "{name}: no other host folder");
    assert_eq!(pod["hostNetwork"], true, "{name}");
    assert_eq!(pod["nodeSelector"]["multus"], "attached", "{name}");
    assert_eq!(pod["tolerations"][0]["key"], "dedicated", "{name}");
    assert_eq!(container["resources"]["limits"]["memory"], "128Mi", "{name}");
    let env = container["env"].as_array().unwrap();
    assert_eq!(env[0]["name"], "SAMPLE_OPERATOR_NODE_NAME", "{name}");
    assert_eq!(
        env[0]["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName",
        "{name}"
    );
    let context = &container["securityContext"];
    assert_eq!(
        context["capabilities"]["drop"],
        serde_json::json!(["ALL"]),
        "{name}"
    );
    assert_eq!(
        context["capabilities"]["add"],
        serde_json::json!(["NET_ADMIN"]),
        "{name}"
    );
    assert_eq!(context["readOnlyRootFilesystem"], true, "{name}");
    assert_eq!(context["allowPrivilegeEscalation"], false, "{name}");
    assert!(context.get("privileged").is_none(), "{name}");
    // Its own account, allowed to read the definitions and record Events, nothing else.
    let account = pod["serviceAccountName"].as_str().unwrap();
    let operator =
        find(objects, "Deployment").unwrap()["spec"]["template"]["spec"]["serviceAccountName"].clone();
    assert_ne!(operator, account, "{name}");
    let binding = objects
        .iter()
        .find(|o| o["kind"] == "ClusterRoleBinding" && o["subjects"][0]["name"] == account)
        .unwrap_or_else(|| panic!("{name}: the clean-up's binding"));
    let role = objects
        .iter()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == binding["roleRef"]["name"])
        .unwrap();
    assert_eq!(
        role["rules"],
        serde_json::json!([
            {"apiGroups": ["k8s.cni.cncf.io"], "resources": ["network-attachment-definitions"], "verbs": ["list", "watch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
        ]),
        "{name}"
    );
    // Nothing of the operator's selects the clean-up's Pods.
    let labels = &daemon_set["spec"]["template"]["metadata"]["labels"];
    let selects = |selector: &serde_json::Value| {
        selector
            .as_object()
            .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| &labels[k] == v))
    };
    for object in objects {
        let selector = match object["kind"].as_str().unwrap() {
            "Service" => &object["spec"]["selector"],
            "Deployment" | "PodDisruptionBudget" => &object["spec"]["selector"]["matchLabels"],
            "NetworkPolicy" => &object["spec"]["podSelector"]["matchLabels"],
            _ => continue,
        };
        assert!(
            !selects(selector),
            "{name}: {} selects the clean-up",
            object["kind"]
        );
    }
}

/// The operator takes the chart's arguments, and runs Foos' Deployments as the values say: the
/// defaults are the operator's own, the workload policy allows the image it runs, and values
/// set over the defaults keep the rest of them.
fn assert_foo_deployments(name: &str, objects: &[serde_json::Value], restricted: bool, tutorial: bool) {
    use sample_operator::foo::Settings;

    let settings = rendered_run_args(name, objects).foo_workload.settings();
    let defaults = Settings::default();
    if tutorial {
        // Nothing set but the image: kubernetes/sample-controller's template.
        assert_eq!(
            settings,
            Settings {
                resources: Default::default(),
                security_context: Default::default(),
                ..defaults
            },
            "{name}"
        );
    } else if restricted {
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
fn check_metrics_access(name: &str, sets: &[String], objects: &[serde_json::Value], secure: bool) {
    let container = &find(objects, "Deployment").unwrap()["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args.contains(&"--metrics-secure"), secure, "{name}: {args:?}");
    let port = |port: &str| {
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == port)
            .unwrap_or_else(|| panic!("{name}: a container port {port}"))["containerPort"]
            .clone()
    };
    let (metrics, probes) = (port("metrics"), port("probes"));
    assert!(
        args.contains(&format!("--probe-address=0.0.0.0:{probes}").as_str()),
        "{name}: {args:?}"
    );
    assert!(
        args.contains(&format!("--metrics-address=0.0.0.0:{metrics}").as_str()),
        "{name}: {args:?}"
    );
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(container[probe]["httpGet"]["port"], "probes", "{name}: {probe}");
    }
    let ports: Vec<&str> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(ports, ["metrics", "probes"], "{name}");
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
            let token_file = sets
                .iter()
                .find_map(|s| s.strip_prefix("metrics.serviceMonitor.tokenFile="))
                .unwrap_or("/var/run/secrets/kubernetes.io/serviceaccount/token");
            let token = endpoint["bearerTokenFile"] == token_file
                || endpoint["authorization"]["credentials"]["name"] == "metrics-scraper";
            assert!(token, "{name}: the monitor sends a token: {endpoint}");
            // The certificate the operator serves is the one the monitor verifies.
            let tls = &endpoint["tlsConfig"];
            let served = objects.iter().find(|o| o["kind"] == "Deployment").and_then(|d| {
                d["spec"]["template"]["spec"]["volumes"]
                    .as_array()?
                    .iter()
                    .find(|v| v["name"] == "metrics-tls")
                    .map(|v| v["secret"]["secretName"].clone())
            });
            match &served {
                Some(secret) => {
                    assert!(args.contains(&"--metrics-cert-dir=/etc/sample-operator/metrics-tls"));
                    assert_eq!(&tls["ca"]["secret"]["name"], secret, "{name}: {tls}");
                    assert_eq!(
                        tls["serverName"],
                        format!("{RELEASE}-metrics.{RELEASE}.svc"),
                        "{name}"
                    );
                    assert!(tls.get("insecureSkipVerify").is_none(), "{name}: {tls}");
                }
                None => {
                    assert!(
                        sets.iter().any(|s| s == "metrics.insecureSkipVerify=true"),
                        "{name}: {tls}"
                    );
                    assert_eq!(tls["insecureSkipVerify"], true, "{name}: {tls}");
                }
            }
            // cert-manager's Certificate is for the name the monitor checks, kept in the
            // Secret the operator serves.
            if let Some(certificate) = find(objects, "Certificate") {
                assert_eq!(
                    certificate["spec"]["secretName"],
                    served.clone().unwrap(),
                    "{name}"
                );
                assert_eq!(certificate["spec"]["dnsNames"][0], tls["serverName"], "{name}");
            }
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
    crate::network::install_nad_crd(&client).await;
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
        &[
            ControllerName::Foo,
            ControllerName::Network,
            ControllerName::MyCustomResource,
        ],
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
    // A Network gets its attachment definition, and goes with it, through the Role alone.
    let networks = ns.api::<sample_operator_api::Network>();
    networks
        .create(
            &PostParams::default(),
            &crate::support::network("lan", "10.73.0.0/24", "10.73.0.1"),
        )
        .await
        .unwrap();
    testing::wait_for(&networks, "lan", "Ready", Duration::from_secs(60), |n| {
        n.status.as_ref().is_some_and(|s| {
            sample_operator_api::conditions::find(&s.conditions, "Ready").is_some_and(|c| c.status == "True")
        })
    })
    .await
    .expect("the Network is synced through an operator holding only the Role");
    networks
        .delete("lan", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    testing::wait_for_deletion(&networks, "lan", Duration::from_secs(60))
        .await
        .expect("the Network's finalizer is removed through the Role");
    operator.stop().await;
}

/// deploy/operator/ is the chart's defaults rendered (`cargo xtask manifests`), Deployment,
/// RBAC and policies alike: an edit of either alone fails here.
#[test]
fn the_plain_manifests_are_the_charts_defaults_rendered() {
    let root = std::path::Path::new(ROOT);
    let rendered = local_cluster::manifests::plain_manifests(root).expect("the chart renders");
    let mut stale = Vec::new();
    for (name, text) in &rendered {
        let path = root.join(local_cluster::manifests::PLAIN).join(name);
        if std::fs::read_to_string(&path).ok().as_ref() != Some(text) {
            stale.push(name.clone());
        }
    }
    assert!(
        stale.is_empty(),
        "deploy/operator/{stale:?} differ from the chart's defaults; regenerate them with\n  cargo xtask manifests"
    );
    // Every rendered file is installed by the kustomization, and it installs nothing else but
    // the CRDs and the namespace, which the chart does not render.
    let kustomization: serde_yaml::Value =
        serde_yaml::from_str(include_str!("../../../../deploy/operator/kustomization.yaml")).unwrap();
    let mut listed: Vec<&str> = kustomization["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|f| f.as_str())
        .filter(|f| !matches!(*f, "../crds/crds.yaml" | "namespace.yaml"))
        .collect();
    listed.sort();
    let mut names: Vec<&str> = rendered.iter().map(|(n, _)| n.as_str()).collect();
    names.sort();
    assert_eq!(listed, names, "kustomization.yaml's resources");
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
        // Where the NetworkPolicy is on (by default), kube-score checks it covers the Pods.
        if sets.iter().any(|s| s == "networkPolicy.enabled=false") {
            command.arg("--ignore-test=pod-networkpolicy");
        }
        // One replica is a choice the combination makes (no standby), not a default.
        if sets.iter().any(|s| s == "replicaCount=1") {
            command.arg("--ignore-test=deployment-replicas");
        }
        // The node clean-up runs as root (with NET_ADMIN alone) in the host's network, where no
        // NetworkPolicy applies.
        if sets.iter().any(|s| s == "nodeCleanup.enabled=true") {
            command.arg("--ignore-test=container-security-context-user-group-id");
            command.arg("--ignore-test=pod-networkpolicy");
        }
        // So is no PodDisruptionBudget.
        if sets.iter().any(|s| s == "podDisruptionBudget.enabled=false") {
            command.arg("--ignore-test=deployment-has-poddisruptionbudget");
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
