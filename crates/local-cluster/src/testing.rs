//! Support for integration tests against a real apiserver.
//!
//! Tests share one cluster: the first test of a process starts the local cluster when none runs
//! (building the binaries if needed) and every test builds its own client, since each
//! `#[tokio::test]` has its own runtime. `SAMPLE_OPERATOR_TEST_CLUSTER=existing` makes tests use
//! the current kubeconfig context instead, for example a kind cluster.

use std::fmt::Debug;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::cluster::LocalCluster;
use crate::error::{Error, Result};

/// Field manager of everything tests apply.
pub const TEST_MANAGER: &str = "sample-operator-tests";

/// Whether tests run against the current kubeconfig context rather than the local cluster.
pub fn uses_existing_cluster() -> bool {
    std::env::var("SAMPLE_OPERATOR_TEST_CLUSTER").is_ok_and(|v| v == "existing")
}

/// Files with credentials the tests write (a clouds.yaml of their own) are their owner's alone,
/// as the tooling's are.
pub use crate::pki::write_private;

/// Where tests record what they skip: the file `cargo xtask test` names in this variable, for
/// its summary (libtest shows a passing test's output to no one).
pub const SKIP_LOG_VARIABLE: &str = "SAMPLE_OPERATOR_SKIP_LOG";

/// Says that `test` did not run its checks, and why: on stderr, and as a line `test: why` in
/// the file [`SKIP_LOG_VARIABLE`] names, when it names one.
pub fn skipped(test: &str, why: &str) {
    eprintln!("SKIPPED: {test}: {why}");
    if let Some(path) = std::env::var_os(SKIP_LOG_VARIABLE) {
        use std::io::Write;
        let line = format!("{test}: {}\n", why.replace('\n', " "));
        let written = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(error) = written {
            panic!(
                "recording the skip of {test} in {}: {error}",
                path.to_string_lossy()
            );
        }
    }
}

/// Set to `full` by `cargo xtask test --scale`: the tests whose subject is scale (many
/// Networks through Neutron's pages, thousands of Foos coming and going, tokens living their
/// whole configured lifetime) run at their full sizes instead of the smallest size that still
/// proves the behaviour.
pub const SCALE_VARIABLE: &str = "SAMPLE_OPERATOR_TEST_SCALE";

/// `behaviour`, the size that proves a behaviour, or `full` when the run asks for the full
/// sizes ([`SCALE_VARIABLE`]).
pub fn sized<T>(behaviour: T, full: T) -> T {
    if std::env::var(SCALE_VARIABLE).is_ok_and(|v| v == "full") {
        full
    } else {
        behaviour
    }
}

/// Starts the local cluster once per test process; later calls return the first outcome.
fn ensure_local_cluster() -> std::result::Result<(), String> {
    static STARTED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    STARTED
        .get_or_init(|| {
            // A runtime of its own: the cluster outlives the test that happened to start it.
            std::thread::spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime
                    .block_on(LocalCluster::default().up())
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .join()
            .unwrap_or_else(|_| Err("starting the local cluster panicked".into()))
        })
        .clone()
}

/// A client for the test cluster, starting the local cluster if needed.
pub async fn client() -> Client {
    Client::try_from(config().await).expect("a client for the test cluster")
}

/// The client configuration of the test cluster, starting the local cluster if needed; for
/// tests that build their own client (to run an operator in-process, say).
pub async fn config() -> kube::Config {
    if uses_existing_cluster() {
        return kube::Config::infer()
            .await
            .expect("a configuration for the current kubeconfig context");
    }
    if let Err(e) = tokio::task::spawn_blocking(ensure_local_cluster)
        .await
        .expect("cluster start task")
    {
        panic!("the local cluster did not start: {e}");
    }
    LocalCluster::default()
        .config()
        .await
        .expect("a configuration for the local cluster")
}

/// A namespace of one test's own, and its guard: when the test passes, dropping it deletes the
/// namespace with all it holds; when the test fails (the guard drops while a panic unwinds), the
/// namespace stays, named on stderr, so that its objects and Events can be read to understand
/// why. No test deletes its namespace by hand.
pub struct TestNamespace {
    pub name: String,
    client: Client,
    /// For the deletion on drop, which needs a client of its own (see [`Drop`]).
    config: kube::Config,
}

impl TestNamespace {
    /// Creates `<prefix>-<unique suffix>`.
    pub async fn create(client: &Client, prefix: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let suffix = format!(
            "{:x}",
            (u64::from(nanos) ^ (u64::from(std::process::id()) << 20)).wrapping_add(n)
        );
        let name = format!("{}-{}", prefix.chars().take(40).collect::<String>(), suffix);
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "labels": { "sample-operator.dev/test": "true" } }
        }))
        .expect("a valid Namespace");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        eprintln!("test namespace: {name}");
        Self {
            name,
            client: client.clone(),
            config: config().await,
        }
    }

    /// An `Api` for namespaced resources of this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "the test failed: namespace {} is kept for inspection (kubectl get all,events -n {0})",
                self.name
            );
            return;
        }
        // The test's client cannot serve here: its connection tasks run on the test's runtime,
        // which this synchronous drop blocks. A thread with a runtime and a client of its own
        // deletes the namespace, in the background, as the apiserver then does.
        let (name, config) = (self.name.clone(), self.config.clone());
        let deleted = std::thread::spawn(move || -> std::result::Result<(), String> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let client = Client::try_from(config).map_err(|e| e.to_string())?;
                match Api::<Namespace>::all(client.clone())
                    .delete(&name, &DeleteParams::background())
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                    Err(e) => return Err(format!("deleting namespace {name}: {e}")),
                }
                release_operator_finalizers(&client, &name).await
            })
        })
        .join();
        match deleted {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("{e}"),
            Err(_) => eprintln!("deleting namespace {} panicked", self.name),
        }
    }
}

/// The finalizers the operator puts on the objects of a test's namespace, by the plural of their
/// resource: with the test's operator stopped, nothing would remove them, and the namespace
/// would stay Terminating. What they guard is the test's own (a Network's attachment definition
/// goes with the namespace; a Neutron network stays in the test bed until it is stopped).
const OPERATOR_FINALIZERS: [(&str, &str, &str, &str); 1] = [(
    "samplecrd.k8s.io",
    "v1",
    "networks",
    "samplecrd.k8s.io/network-backend",
)];

/// Takes the operator's finalizers off what is left in `namespace`, once it is being deleted.
async fn release_operator_finalizers(client: &Client, namespace: &str) -> std::result::Result<(), String> {
    for (group, version, plural, finalizer) in OPERATOR_FINALIZERS {
        let resource = kube::api::ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: format!("{group}/{version}"),
            kind: String::new(),
            plural: plural.into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        // A cluster without the resource has nothing to release.
        let Ok(objects) = api.list(&Default::default()).await else {
            continue;
        };
        for object in objects {
            let Some(name) = object.metadata.name.as_deref() else {
                continue;
            };
            let kept: Vec<&String> = object
                .metadata
                .finalizers
                .iter()
                .flatten()
                .filter(|f| *f != finalizer)
                .collect();
            let patch = serde_json::json!({ "metadata": { "finalizers": kept } });
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(format!("releasing {plural}/{name} in {namespace}: {e}")),
            }
        }
    }
    Ok(())
}

/// The tests' one poller: runs `check` every 200 ms until it returns a value, for at most
/// `timeout`; `None` when the time ran out first. [`eventually`] and [`wait_for`] are its two
/// faces; a test that waits for something other than these uses it directly.
pub async fn poll<T>(timeout: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if start.elapsed() > timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// [`poll`], ending the test with `what` when `check` returns no value within `timeout`.
pub async fn eventually<T>(what: &str, timeout: Duration, check: impl AsyncFnMut() -> Option<T>) -> T {
    match poll(timeout, check).await {
        Some(value) => value,
        None => panic!("not within {timeout:?}: {what}"),
    }
}

/// Polls `api` for `name` until `done` holds, returning the object. On timeout the error
/// shows the last state seen (or that the object did not exist), which is usually the answer
/// to why the test failed.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&K) -> bool,
) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    wait_for_state(api, name, &format!("{name}: {what}"), timeout, |obj| {
        obj.filter(|obj| done(obj)).cloned()
    })
    .await
}

/// Waits until `name` no longer exists.
pub async fn wait_for_deletion<K>(api: &Api<K>, name: &str, timeout: Duration) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let what = format!("{name} to be deleted");
    wait_for_state(api, name, &what, timeout, |obj| obj.is_none().then_some(())).await
}

/// Polls `api` for `name` (`None` while it does not exist) until `done` returns a value; on
/// timeout, an error with the last state seen.
async fn wait_for_state<K, T>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(Option<&K>) -> Option<T>,
) -> Result<T>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let mut last_seen = String::new();
    let found = poll(timeout, async || match api.get_opt(name).await {
        Ok(obj) => {
            let value = done(obj.as_ref());
            if value.is_none() {
                last_seen = obj.map_or_else(|| format!("{name} does not exist"), |o| describe(&o));
            }
            value
        }
        Err(e) => {
            last_seen = format!("error: {e}");
            None
        }
    })
    .await;
    found.ok_or_else(|| Error::Timeout {
        what: what.to_owned(),
        seconds: timeout.as_secs(),
        last_seen,
    })
}

/// An object as YAML without its managed fields, for error messages.
fn describe<K: Serialize>(obj: &K) -> String {
    let mut value = serde_json::to_value(obj).unwrap_or_default();
    if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("managedFields");
    }
    format!("\n{}", serde_yaml::to_string(&value).unwrap_or_default())
}

/// Server-side applies CRDs and waits until each is Established.
pub async fn install_crds(client: &Client, crds: &[CustomResourceDefinition]) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(TEST_MANAGER).force();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(crd)).await?;
    }
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        wait_for(
            &api,
            &name,
            "Established",
            Duration::from_secs(30),
            is_established,
        )
        .await?;
    }
    Ok(())
}

pub fn is_established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"))
}

/// The objects of a multi-document YAML manifest. A manifest that is not valid YAML is a bug
/// in the test: it panics.
pub fn manifest_objects(yaml: &str) -> Vec<DynamicObject> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| serde_json::Value::deserialize(doc).expect("a valid YAML document"))
        .filter(|value| !value.is_null())
        .map(|value| serde_json::from_value(value).expect("a Kubernetes object"))
        .collect()
}

/// An `Api` for `obj`'s kind, found by discovery: in the namespace it names, else in
/// `default_namespace`, or cluster-wide for a cluster-scoped kind.
pub async fn api_for(
    client: &Client,
    obj: &DynamicObject,
    default_namespace: &str,
) -> std::result::Result<Api<DynamicObject>, kube::Error> {
    let types = obj.types.clone().expect("apiVersion and kind");
    let (group, version) = match types.api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", types.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &types.kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
    let namespace = obj.metadata.namespace.as_deref().unwrap_or(default_namespace);
    Ok(match caps.scope {
        kube::discovery::Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
    })
}

/// Creates every object of a multi-document YAML manifest in `namespace`, as `kubectl create`
/// would, and returns them as stored. Errors come back as the apiserver's status, so tests can
/// check what admission said.
pub async fn create_manifest(
    client: &Client,
    namespace: &str,
    yaml: &str,
) -> std::result::Result<Vec<DynamicObject>, kube::Error> {
    let mut created = Vec::new();
    for obj in manifest_objects(yaml) {
        // `kubectl create -n` puts everything in that namespace.
        let mut obj = obj;
        obj.metadata.namespace = Some(namespace.to_owned());
        let api = api_for(client, &obj, namespace).await?;
        created.push(api.create(&PostParams::default(), &obj).await?);
    }
    Ok(created)
}

/// Runs the kubectl built here against the test cluster and returns its output; fails the test
/// when kubectl fails.
pub async fn kubectl(args: &[&str]) -> String {
    let binaries = tokio::task::spawn_blocking(crate::toolchain::ensure)
        .await
        .expect("toolchain task")
        .expect("kubectl is built");
    let mut cmd = tokio::process::Command::new(binaries.kubectl);
    if !uses_existing_cluster() {
        cmd.env("KUBECONFIG", LocalCluster::default().kubeconfig());
    }
    let output = cmd.args(args).output().await.expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Server-side applies every object of a multi-document YAML manifest (forcing conflicts, as
/// the tests own what they apply), each in the namespace it names. Returns them as stored.
pub async fn apply_manifest(
    client: &Client,
    yaml: &str,
) -> std::result::Result<Vec<DynamicObject>, kube::Error> {
    let params = PatchParams::apply(TEST_MANAGER).force();
    let mut applied = Vec::new();
    for obj in manifest_objects(yaml) {
        let api = api_for(client, &obj, "default").await?;
        let name = obj.metadata.name.clone().expect("a named object");
        applied.push(api.patch(&name, &params, &Patch::Apply(&obj)).await?);
    }
    Ok(applied)
}

/// Starts the OpenStack test bed (Keystone and neutron-server) once per test process, beside
/// the local cluster, and returns its handle; later calls return the first outcome.
pub async fn openstack() -> crate::openstack::OpenStack {
    static STARTED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    let started = tokio::task::spawn_blocking(|| {
        STARTED
            .get_or_init(|| {
                // A runtime of its own, as for the cluster: the test bed outlives this test.
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime
                    .block_on(crate::openstack::OpenStack::default().up())
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .clone()
    })
    .await
    .expect("test bed start task");
    if let Err(e) = started {
        panic!("the OpenStack test bed did not start: {e}");
    }
    crate::openstack::OpenStack::default()
}
