//! What the suites share, one of each: the CRDs, the operator harness ([`operator`]), the
//! namespace guard and the poller (`local_cluster::testing::{TestNamespace, poll, eventually,
//! wait_for}`), the Ready condition's reason, and the checks several suites make.

pub mod operator;

pub use operator::{
    Operator, OperatorProcess, create_foo, eventually, free_port, http_get, scratch_dir, wait_foo_available,
};

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::Client;
use kube::api::{Api, ListParams};
use local_cluster::testing;
use sample_operator::runtime::RuntimeConfig;
use sample_operator::runtime::watch::InitialList;
use sample_operator::{ControllerName, RunConfig};
use sample_operator_api::conditions::Condition;

/// A client of the test cluster with the operator's CRDs installed. `cargo xtask test` installs
/// them once, before any test; this installs those a cluster lacks (one that run did not
/// prepare) and leaves installed ones alone, so that no test rewrites a schema another test is
/// using.
pub async fn client_with_crds() -> Client {
    let client = testing::client().await;
    let installed: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut missing = Vec::new();
    for crd in all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match installed.get_opt(&name).await.expect("reading the CRDs") {
            Some(stored) if testing::is_established(&stored) => {}
            _ => missing.push(crd),
        }
    }
    if !missing.is_empty() {
        testing::install_crds(&client, &missing)
            .await
            .expect("CRDs install");
    }
    client
}

/// The CRDs installed by default, and the example.com Foo's: the tests cover both groups.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    let mut crds = sample_operator_api::crds();
    crds.extend(sample_operator_api::example_com_crds());
    crds
}

/// The operator's configuration in a test: `controllers` on `namespace` (all namespaces when
/// `None`), as the instance `integration-test`.
pub fn config(namespace: Option<&str>, controllers: &[ControllerName]) -> RunConfig {
    RunConfig {
        runtime: RuntimeConfig {
            namespace: namespace.map(str::to_owned),
            instance: "integration-test".into(),
            ..RuntimeConfig::default()
        },
        controllers: controllers.to_vec(),
        ..RunConfig::default()
    }
}

/// The objects whose status carries conditions, for [`ready_reason`].
pub trait WithConditions: kube::Resource {
    fn conditions(&self) -> &[Condition];
}

impl WithConditions for sample_operator_api::Foo {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

impl WithConditions for sample_operator_api::ExampleFoo {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

impl WithConditions for sample_operator_api::Network {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

impl WithConditions for sample_operator_api::MyCustomResource {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

/// The Ready condition of `object`.
pub fn ready_condition<K: WithConditions>(object: &K) -> Option<&Condition> {
    sample_operator_api::conditions::find(object.conditions(), "Ready")
}

/// The status and reason of `object`'s Ready condition, as `("True", "Synced")`.
pub fn ready_reason<K: WithConditions>(object: &K) -> Option<(String, String)> {
    ready_condition(object).map(|c| (c.status.clone(), c.reason.clone()))
}

/// Whether `object`'s Ready condition was written for its current spec.
pub fn ready_is_current<K: WithConditions>(object: &K) -> bool {
    ready_condition(object).is_some_and(|c| c.observed_generation == object.meta().generation)
}

/// The steady state, once every object `operator` reconciles has converged: across five
/// resyncs (its `config` resyncs every second) it sends no write, and an operator restarted
/// over the same objects, once with each way of fetching the first list in `restarts`, lists
/// and writes nothing either. `restarted` runs on each restarted operator before it stops.
pub async fn assert_quiet_across_resyncs_and_restarts(
    operator: Operator,
    config: &RunConfig,
    restarts: &[InitialList],
    mut restarted: impl AsyncFnMut(InitialList),
) {
    // Let the last status writes and their watch events settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = operator.requests();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = operator.requests().since(&before);
    assert_eq!(during.writes(), 0, "writes during five resyncs: {during:?}");
    operator.stop().await;

    for &initial_list in restarts {
        let mut config = config.clone();
        config.runtime.initial_list = initial_list;
        let operator = Operator::start_with(config).await;
        tokio::time::sleep(Duration::from_secs(6)).await;
        let after_restart = operator.requests();
        assert!(
            after_restart.get > 0,
            "{initial_list:?}: the restarted operator did not even list"
        );
        assert_eq!(
            after_restart.writes(),
            0,
            "{initial_list:?}: writes after a restart: {after_restart:?}"
        );
        restarted(initial_list).await;
        operator.stop().await;
    }
}

/// Events (events.k8s.io) about the object `name` in `namespace`.
pub async fn events_about(client: &Client, namespace: &str, name: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().fields(&format!("regarding.name={name}"));
    events.list(&params).await.map(|l| l.items).unwrap_or_default()
}

/// Waits until an event of `reason` about `name` exists, and returns it.
pub async fn wait_for_event(client: &Client, namespace: &str, name: &str, reason: &str) -> Event {
    let mut events = Vec::new();
    let found = testing::poll(Duration::from_secs(30), async || {
        events = events_about(client, namespace, name).await;
        events
            .iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .cloned()
    })
    .await;
    found.unwrap_or_else(|| {
        let seen: Vec<_> = events
            .iter()
            .map(|e| (e.reason.clone(), e.note.clone()))
            .collect();
        panic!("no {reason} event about {name} within 30s; events: {seen:?}")
    })
}

/// The operator's ServiceAccount, as the apiserver names it.
pub const OPERATOR_USER: &str = "system:serviceaccount:sample-operator:sample-operator";

/// Installs the operator's namespace, ServiceAccount and RBAC from `deploy/operator/`.
pub async fn install_operator_rbac(client: &Client) {
    for manifest in [
        include_str!("../../../../../deploy/operator/namespace.yaml"),
        include_str!("../../../../../deploy/operator/serviceaccount.yaml"),
        include_str!("../../../../../deploy/operator/rbac.yaml"),
        include_str!("../../../../../deploy/operator/rbac-cluster-addresses.yaml"),
    ] {
        testing::apply_manifest(client, manifest)
            .await
            .expect("operator RBAC applies");
    }
}

/// A client configuration that acts as the operator's ServiceAccount, so that what the
/// operator does in a test is exactly what deploy/operator/rbac.yaml allows.
pub async fn operator_config(client: &Client) -> kube::Config {
    install_operator_rbac(client).await;
    let mut config = testing::config().await;
    config.auth_info.impersonate = Some(OPERATOR_USER.into());
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".into(),
        "system:serviceaccounts:sample-operator".into(),
        "system:authenticated".into(),
    ]);
    config
}

/// A kubeconfig file for the operator binary that acts as its ServiceAccount.
pub async fn operator_kubeconfig(client: &Client, dir: &std::path::Path) -> std::path::PathBuf {
    install_operator_rbac(client).await;
    let admin = local_cluster::LocalCluster::default().kubeconfig();
    let mut kubeconfig: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&admin).expect("the local cluster's kubeconfig"))
            .expect("YAML");
    let user = &mut kubeconfig["users"][0]["user"];
    user["as"] = OPERATOR_USER.into();
    user["as-groups"] = serde_yaml::to_value([
        "system:serviceaccounts",
        "system:serviceaccounts:sample-operator",
        "system:authenticated",
    ])
    .expect("groups");
    let path = dir.join("operator.kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&kubeconfig).expect("YAML")).expect("write kubeconfig");
    path
}

/// The version through which [`store_despite_schema`] stores what the schema refuses. Not in
/// Kubernetes' version format, so it sorts after every real version: no client prefers it.
const UNVALIDATED: &str = "unvalidated";

/// Stores `object`, which the current schema refuses, as if it had been created before the
/// schema had its rules: the CRD gets a served version of its own, [`UNVALIDATED`], whose
/// schema `relax` loosens, for a moment; the object is created through it (objects of every
/// version are stored alike: the CRD converts none), and the version is removed again. The
/// version that every other test, the operator and admission use keeps its schema throughout,
/// so tests that need admission to refuse run at the same time.
pub async fn store_despite_schema<K>(
    client: &Client,
    namespace: &str,
    object: &K,
    relax: impl FnOnce(&mut JSONSchemaProps),
) where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + kube::CustomResourceExt
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let crd = K::crd();
    let mut unvalidated = crd.spec.versions[0].clone();
    unvalidated.name = UNVALIDATED.into();
    unvalidated.storage = false;
    let spec = unvalidated
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .and_then(|s| s.properties.as_mut())
        .and_then(|p| p.get_mut("spec"))
        .expect("the CRD has a schema of its spec");
    relax(spec);
    let mut with_unvalidated = crd.clone();
    with_unvalidated.spec.versions.push(unvalidated);
    testing::install_crds(client, &[with_unvalidated])
        .await
        .expect("the CRD with an unvalidated version installs");
    let resource = kube::discovery::ApiResource {
        group: K::group(&()).into_owned(),
        version: UNVALIDATED.into(),
        api_version: format!("{}/{UNVALIDATED}", K::group(&())),
        kind: K::kind(&()).into_owned(),
        plural: K::plural(&()).into_owned(),
    };
    let mut value = serde_json::to_value(object).expect("the object serializes");
    value["apiVersion"] = resource.api_version.clone().into();
    let dynamic: kube::api::DynamicObject = serde_json::from_value(value).expect("a Kubernetes object");
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    // The apiserver serves a new version shortly after the update, not with it.
    let start = std::time::Instant::now();
    let stored = loop {
        match api.create(&kube::api::PostParams::default(), &dynamic).await {
            Err(kube::Error::Api(s)) if s.code == 404 && start.elapsed() < Duration::from_secs(15) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => break other,
        }
    };
    // Its managed fields name the version it was created through, which a server-side apply
    // must convert to: they are reset through the real version (which lets an update leave the
    // invalid fields as they are) before that version goes.
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let reset = kube::api::Patch::Merge(serde_json::json!({ "metadata": { "managedFields": [{}] } }));
    let reset = match &stored {
        Ok(created) => {
            let name = created.metadata.name.clone().unwrap_or_default();
            Some(api.patch(&name, &kube::api::PatchParams::default(), &reset).await)
        }
        Err(_) => None,
    };
    // Applied as it was, the CRD loses the version this field manager added, also when the
    // object could not be stored.
    testing::install_crds(client, &[crd])
        .await
        .expect("the CRD is restored");
    stored.expect("the unvalidated version takes the object");
    if let Some(reset) = reset {
        reset.expect("the managed fields reset");
    }
}

/// A Network of the given prefix and gateway.
pub fn network(name: &str, cidr: &str, gateway: &str) -> sample_operator_api::Network {
    sample_operator_api::Network::new(
        name,
        sample_operator_api::NetworkSpec {
            cidr: cidr.into(),
            gateway: gateway.into(),
        },
    )
}

/// The sum of the series of `family` in a Prometheus text exposition whose labels include
/// every pair of `labels`.
pub fn metric_sum(exposition: &str, family: &str, labels: &[(&str, &str)]) -> f64 {
    exposition
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(family)?;
            let (series_labels, value) = rest.rsplit_once(' ')?;
            if !(series_labels.is_empty() || series_labels.starts_with('{')) {
                return None; // another family that starts with the same name
            }
            labels
                .iter()
                .all(|(k, v)| series_labels.contains(&format!("{k}=\"{v}\"")))
                .then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// A conflict's cost and its end, as both kinds of blocked object see it: once blocked for 16 s
/// the object retries every few seconds at most (at most two writes in the next 4 s); then
/// `remove_blocker` takes the blocking object away, and `taken_over` must be done within 8 s,
/// long before a backoff of that age would retry.
pub async fn assert_conflict_backs_off_and_ends_at_once<R, T>(
    operator: &Operator,
    what: &str,
    remove_blocker: R,
    taken_over: T,
) where
    R: Future<Output = ()>,
    T: Future<Output = ()>,
{
    tokio::time::sleep(std::time::Duration::from_secs(16)).await;
    let before = operator.requests();
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let blocked = operator.requests().since(&before);
    assert!(
        blocked.writes() <= 2,
        "a {what} blocked for 16 s retries every few seconds at most: {blocked:?}"
    );
    remove_blocker.await;
    let removed = std::time::Instant::now();
    taken_over.await;
    let taken = removed.elapsed();
    assert!(
        taken < std::time::Duration::from_secs(8),
        "the {what} took the name {taken:?} after the blocking object was removed"
    );
}

/// A cluster of a test's own in a temporary folder, for what the shared one cannot show (how
/// one starts, an apiserver with other settings): stopped and its folder removed however the
/// test ends.
pub struct ClusterOfItsOwn {
    pub cluster: local_cluster::LocalCluster,
    pub dir: std::path::PathBuf,
}

impl ClusterOfItsOwn {
    /// `None`, said as a skip of `test`, in a run against an existing cluster.
    pub fn new(test: &str, name: &str) -> Option<Self> {
        if testing::uses_existing_cluster() {
            testing::skipped(
                test,
                "it starts an etcd and an apiserver of its own on this machine, which a run against an existing cluster does not",
            );
            return None;
        }
        let dir = std::env::temp_dir().join(format!("sample-operator-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Some(Self {
            cluster: local_cluster::LocalCluster::new(dir.join("cluster")),
            dir,
        })
    }
}

impl Drop for ClusterOfItsOwn {
    fn drop(&mut self) {
        let _ = self.cluster.down();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
