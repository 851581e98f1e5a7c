//! The Network controller on the Neutron backend, against a real Keystone and neutron-server
//! (the test bed of `local_cluster::openstack`, installed from PyPI and run on loopback).
//!
//! Each test runs its own operator on its own namespace, with the namespace's name as the
//! cluster identity, so the tests share one Neutron project without seeing each other's
//! networks. People's edits are made with the real `openstack` command line; what Neutron
//! holds is read through an admin session. Outages (neutron-server down or frozen, requests cut
//! or held, tokens that expire sooner) are played by a relay in front of it for the one test's
//! operator ([`relay`]), so the tests share the running test bed; the one test that changes it
//! for everybody (a policy file of neutron-server's) runs alone, as `.config/nextest.toml` says.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
// The test bed's clouds: the operator's (an application credential of a member of the
// project), that member's password, and the admin, who plays the people editing Neutron.
use local_cluster::openstack::{
    ADMIN_CLOUD, CLOUD, PAGE_LIMIT, PASSWORD_CLOUD, TOKEN_CACHE_SECONDS, TOKEN_LIFETIME_SECONDS,
};
use local_cluster::testing::{self, TestNamespace};
use sample_operator::ControllerName;
use sample_operator::network::BackendConfig;
use sample_operator::network::backend::neutron::NeutronConfig;
use sample_operator::network::backend::neutron::client::{CloudSource, Session};
use sample_operator::network::backend::neutron::model::{self, NeutronNetwork, NeutronSubnet};
use sample_operator::runtime::Telemetry;
use sample_operator::runtime::metrics::Metrics;
use sample_operator::runtime::requests::RequestCounter;
use sample_operator_api::Network;
use serde_json::{Value, json};

mod clusters;
mod credentials;
mod failures;
mod paging;
mod relay;
mod sync;

use relay::{Outage, RequestRecorder};

use crate::support::{
    OperatorProcess, client_with_crds, config, metric_sum, network, operator_config, ready_is_current,
    ready_reason, wait_for_event,
};

const TIMEOUT: Duration = Duration::from_secs(90);
/// The tests' resync interval: short, so that repairs show within seconds.
const RESYNC: Duration = Duration::from_secs(3);

/// The operator on one namespace, on the Neutron backend, with its metrics at hand.
struct NeutronOperator {
    telemetry: Telemetry,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl NeutronOperator {
    /// On `namespace`, whose name is also the cluster id.
    async fn start(namespace: &str, source: CloudSource) -> Self {
        Self::start_with(namespace, settings(source, namespace)).await
    }

    async fn start_with(namespace: &str, neutron: NeutronConfig) -> Self {
        let mut config = config(Some(namespace), &[ControllerName::Network]);
        config.network.backend = BackendConfig::Neutron(neutron);
        Self::run(config).await
    }

    /// Runs `config`, as the operator's ServiceAccount.
    async fn run(config: sample_operator::RunConfig) -> Self {
        let telemetry = Telemetry::new(RequestCounter::default());
        let client = RequestCounter::default()
            .client(operator_config(&testing::client().await).await)
            .expect("operator client");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(sample_operator::run_with(
            client,
            config,
            telemetry.clone(),
            async move {
                let _ = stopped.await;
            },
        ));
        Self {
            telemetry,
            stop,
            task,
        }
    }

    /// Requests to Neutron and Keystone so far whose method is one of `methods`.
    fn requests(&self, methods: &[&str]) -> u64 {
        backend_requests(&self.telemetry.metrics.render(), methods)
    }

    /// Writes to Neutron so far (a Keystone authentication is not one).
    fn writes(&self) -> u64 {
        let metrics = self.telemetry.metrics.render();
        backend_requests(&metrics, &["POST", "PUT", "DELETE"]) - backend_requests_of(&metrics, "tokens")
    }

    /// Waits until the operator counts `networks` of the project's networks for `cluster_id`.
    async fn wait_for_other_cluster_networks(&self, cluster_id: &str, networks: usize) {
        let what = format!("{networks} networks counted for cluster id {cluster_id}");
        testing::eventually(&what, TIMEOUT, async || {
            let metrics = self.telemetry.metrics.render();
            let value = metric_sum(
                &metrics,
                "sample_operator_neutron_other_cluster_networks",
                &[("cluster_id", cluster_id)],
            );
            (value == networks as f64).then_some(())
        })
        .await;
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the operator stops within 30s")
            .expect("the operator task does not panic");
    }
}

/// The backend's settings in tests: the cluster `cluster_id`, resyncing every [`RESYNC`].
fn settings(source: CloudSource, cluster_id: &str) -> NeutronConfig {
    NeutronConfig {
        source,
        cluster_id: cluster_id.to_owned(),
        adopt_cluster_ids: Vec::new(),
        resync: RESYNC,
        dhcp: false,
    }
}

const BACKEND_REQUESTS: &str = "sample_operator_backend_requests_total";

fn backend_requests(metrics: &str, methods: &[&str]) -> u64 {
    methods
        .iter()
        .map(|m| metric_sum(metrics, BACKEND_REQUESTS, &[("method", m)]))
        .sum::<f64>() as u64
}

fn backend_requests_of(metrics: &str, resource: &str) -> u64 {
    metric_sum(metrics, BACKEND_REQUESTS, &[("resource", resource)]) as u64
}

/// Where most tests start: a client of the cluster with the CRDs, the test bed, an admin
/// session to read Neutron with, and a namespace of the test's own with its Networks. A tuple,
/// so that a test names what it uses in one line.
struct Scene(
    kube::Client,
    local_cluster::openstack::OpenStack,
    Session,
    TestNamespace,
    Api<Network>,
);

impl Scene {
    async fn new(namespace_prefix: &str) -> Self {
        let client = client_with_crds().await;
        let bed = testing::openstack().await;
        let admin = admin(&bed);
        let ns = TestNamespace::create(&client, namespace_prefix).await;
        let api = ns.api();
        Self(client, bed, admin, ns, api)
    }
}

fn source(clouds: PathBuf, cloud: &str) -> CloudSource {
    CloudSource {
        cloud: Some(cloud.into()),
        config_file: Some(clouds),
        ..CloudSource::default()
    }
}

/// An admin session, for reading what Neutron holds.
fn admin(bed: &local_cluster::openstack::OpenStack) -> Session {
    Session::new(
        source(bed.clouds_yaml(), ADMIN_CLOUD),
        Arc::new(Metrics::new(RequestCounter::default())),
    )
}

/// Runs the real `openstack` command line as the admin; JSON output when it has any.
async fn openstack(bed: &local_cluster::openstack::OpenStack, args: &[&str]) -> Value {
    openstack_as(bed, ADMIN_CLOUD, args).await
}

/// Runs `commands`, one a line, in one `openstack` process as the admin, read from its
/// standard input as the test bed's own set-up does. Its interactive mode exits 1 whatever
/// happened, so the caller checks the outcome.
async fn openstack_stdin(bed: &local_cluster::openstack::OpenStack, commands: &str) {
    use tokio::io::AsyncWriteExt;
    let mut command = tokio::process::Command::from(bed.openstack_as(ADMIN_CLOUD, &[]));
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = command.spawn().expect("the openstack command runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(commands.as_bytes()).await.unwrap();
    drop(stdin);
    child.wait().await.unwrap();
}

/// Runs the real `openstack` command line as `cloud` of the test bed's clouds.yaml.
async fn openstack_as(bed: &local_cluster::openstack::OpenStack, cloud: &str, args: &[&str]) -> Value {
    let mut command = tokio::process::Command::from(bed.openstack_as(cloud, args));
    let output = command.output().await.expect("the openstack command runs");
    assert!(
        output.status.success(),
        "openstack {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
}

/// What Neutron holds for the Network `name` of the namespace (by its tags).
async fn in_neutron(
    admin: &Session,
    namespace: &str,
    network: &Network,
) -> (Vec<NeutronNetwork>, Vec<NeutronSubnet>) {
    let owner = model::Owner::new(namespace, &network.uid().unwrap());
    let networks = admin.list_networks(&owner.tags(), None).await.unwrap();
    let subnets = admin.list_subnets(&owner.tags()).await.unwrap();
    (networks, subnets)
}

/// The status and reason of the Network's Ready condition, when written for its current spec.
fn current_reason(network: &Network) -> Option<(String, String)> {
    ready_reason(network).filter(|_| ready_is_current(network))
}

/// Waits until the Network's Ready condition, for its current generation, has `reason`.
async fn wait_reason(api: &Api<Network>, name: &str, reason: &str) -> Network {
    let expected = (if reason == "Synced" { "True" } else { "False" }).to_owned();
    let what = format!("Ready reason {reason}");
    testing::wait_for(api, name, &what, TIMEOUT, |n| {
        current_reason(n) == Some((expected.clone(), reason.to_owned()))
    })
    .await
    .unwrap_or_else(|e| panic!("{name} never reached {reason}: {e}"))
}

/// Deletes the Networks while the operator runs (so it lets go of them in Neutron), then
/// stops it; the namespace goes last, with its guard.
async fn finish(api: &Api<Network>, operator: NeutronOperator, ns: TestNamespace) {
    let total = api.list(&Default::default()).await.unwrap().items.len();
    api.delete_collection(&DeleteParams::default(), &Default::default())
        .await
        .unwrap();
    while_progressing("every Network let go", || async {
        let left = api.list(&Default::default()).await.unwrap().items;
        Progress {
            done: total.saturating_sub(left.len()),
            total,
            rest: reasons(&left),
        }
    })
    .await;
    operator.stop().await;
    drop(ns);
}

/// A project of its own with a member user, and a clouds.yaml naming it `cloud`, for the tests
/// that lower a quota or disable the user: they must not disturb the other tests' project.
async fn own_project(
    bed: &local_cluster::openstack::OpenStack,
    name: &str,
    dir: &std::path::Path,
) -> PathBuf {
    let password = format!("{name}-password");
    openstack(
        bed,
        &["project", "create", "--domain", "Default", name, "-f", "json"],
    )
    .await;
    // The password goes in on standard input, never in a process's arguments.
    openstack_stdin(
        bed,
        &format!("user create --domain Default --project {name} --password {password} {name}\n"),
    )
    .await;
    let user = openstack(bed, &["user", "show", "--domain", "Default", name, "-f", "json"]).await;
    assert_eq!(user["name"], name, "the user was made: {user}");
    openstack(bed, &["role", "add", "--project", name, "--user", name, "member"]).await;
    let clouds = dir.join("clouds.yaml");
    write_clouds(bed, &clouds, name, &password).await;
    clouds
}

async fn write_clouds(
    bed: &local_cluster::openstack::OpenStack,
    path: &std::path::Path,
    name: &str,
    password: &str,
) {
    let yaml = format!(
        "clouds:\n  {name}:\n    auth_type: password\n    auth:\n      auth_url: {}\n      username: {name}\n      password: {password}\n      project_name: {name}\n      user_domain_name: Default\n      project_domain_name: Default\n    region_name: RegionOne\n    interface: public\n    identity_api_version: 3\n",
        bed.keystone_url()
    );
    testing::write_private(path, &yaml).unwrap();
}

async fn drop_project(bed: &local_cluster::openstack::OpenStack, name: &str) {
    openstack(bed, &["user", "delete", "--domain", "Default", name]).await;
    openstack(bed, &["project", "delete", "--domain", "Default", name]).await;
}

/// How a long wait stands: how many of its items are done, and what holds the rest.
struct Progress {
    done: usize,
    total: usize,
    rest: String,
}

/// Waits until all items are done, for as long as more keep getting done. One neutron-server
/// worker creates or deletes 1,000 Networks in about 6 minutes on an idle machine, and in more
/// than two and a half times that beside the other tests on a slower one: the wait fails when
/// nothing more is done for `STALL`, saying what holds the rest, not on how long the whole
/// takes (speed is the benchmark's business); `CAP` bounds it for CI all the same.
async fn while_progressing<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Progress>,
{
    const STALL: Duration = Duration::from_secs(300);
    const CAP: Duration = Duration::from_secs(45 * 60);
    let start = Instant::now();
    let (mut most, mut since) = (0, Instant::now());
    loop {
        let now = check().await;
        if now.done >= now.total {
            return;
        }
        if now.done > most {
            (most, since) = (now.done, Instant::now());
        }
        assert!(
            since.elapsed() < STALL && start.elapsed() < CAP,
            "{what}: {} of {} after {:.0?}, none more in the last {:.0?}; the rest: {}",
            now.done,
            now.total,
            start.elapsed(),
            since.elapsed(),
            now.rest
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// How many of `networks` stand at each Ready status and reason ("none" before their first
/// status of the current generation), the first of each named.
fn reasons(networks: &[Network]) -> String {
    let mut by_reason = std::collections::BTreeMap::<String, (usize, String)>::new();
    for n in networks {
        let reason = current_reason(n).map_or_else(|| "none".to_owned(), |(s, r)| format!("{s} {r}"));
        by_reason.entry(reason).or_insert((0, n.name_any())).0 += 1;
    }
    let rows: Vec<_> = by_reason
        .iter()
        .map(|(reason, (count, first))| format!("{count} at {reason} (such as {first})"))
        .collect();
    if rows.is_empty() {
        "none".into()
    } else {
        rows.join(", ")
    }
}

/// A failure as the Network's namespace reads it: what happened (`says`), a reference to the
/// operator's log, and none of `hidden` (URLs, other tenants' objects) or any address.
fn assert_tenant_message(message: &str, says: &str, hidden: &[&str]) {
    assert!(message.contains(says), "says {says:?}: {message}");
    assert!(
        message.contains("(reference ") && message.contains("in the operator's log)"),
        "{message}"
    );
    for detail in hidden.iter().chain(&["http", "127.0.0.1"]) {
        assert!(!message.contains(detail), "shows {detail:?}: {message}");
    }
}

/// neutron-server's address on loopback.
fn neutron_address(bed: &local_cluster::openstack::OpenStack) -> std::net::SocketAddr {
    let url = bed.state().expect("the test bed runs").neutron_url;
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap_or_else(|e| panic!("neutron-server's address in {url}: {e}"))
}

/// A clouds.yaml whose operator's cloud reaches Neutron through `recorder`, written for the
/// test `name`.
fn relayed_clouds(
    bed: &local_cluster::openstack::OpenStack,
    recorder: &RequestRecorder,
    name: &str,
) -> PathBuf {
    let mut clouds: Value =
        serde_yaml::from_str(&std::fs::read_to_string(bed.clouds_yaml()).unwrap()).unwrap();
    clouds["clouds"][CLOUD]["network_endpoint_override"] =
        format!("http://127.0.0.1:{}/v2.0/", recorder.port).into();
    let path = std::env::temp_dir().join(format!("{name}-clouds.yaml"));
    testing::write_private(&path, &serde_yaml::to_string(&clouds).unwrap()).unwrap();
    path
}
