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

mod relay;

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
        let telemetry = Telemetry::new(RequestCounter::default());
        let client = RequestCounter::default()
            .client(operator_config(&testing::client().await).await)
            .expect("operator client");
        let mut config = config(Some(namespace), &[ControllerName::Network]);
        config.network.backend = BackendConfig::Neutron(neutron);
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

#[tokio::test]
async fn the_seed_network_lives_in_neutron_and_follows_its_gateway_until_deleted() {
    let Scene(client, bed, admin, ns, api) = Scene::new("neutron-seed").await;
    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;

    // The seed's own sample, unchanged.
    let sample: Network = serde_yaml::from_str(include_str!("../../../../../samples/network.yaml")).unwrap();
    api.create(&PostParams::default(), &sample).await.unwrap();
    let synced = wait_reason(&api, "example-network", "Synced").await;
    let backend = synced.status.as_ref().unwrap().backend.clone().unwrap();
    assert_eq!(backend.provider, "neutron");
    let subnet_id = backend.subnet_id.clone().expect("the subnet's id in the status");

    // The real openstack command line sees it, named after the Network and tagged as ours.
    let shown = openstack(&bed, &["network", "show", &backend.id, "-f", "json"]).await;
    assert_eq!(shown["name"], format!("{}/example-network", ns.name));
    let tags: Vec<String> = serde_json::from_value(shown["tags"].clone()).unwrap();
    assert!(
        tags.contains(&format!("sample-operator.cluster={}", ns.name)),
        "{tags:?}"
    );
    assert!(
        tags.contains(&format!("sample-operator.network={}", synced.uid().unwrap())),
        "{tags:?}"
    );
    let subnet = openstack(&bed, &["subnet", "show", &subnet_id, "-f", "json"]).await;
    assert_eq!(subnet["cidr"], "192.168.0.0/16");
    assert_eq!(subnet["gateway_ip"], "192.168.0.1");
    assert_eq!(subnet["ip_version"], 4);
    assert_eq!(subnet["network_id"], backend.id.as_str());
    wait_for_event(&client, &ns.name, "example-network", "Synced").await;

    // A new gateway is updated in place: the same subnet.
    api.patch(
        "example-network",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"gateway": "192.168.0.254"}})),
    )
    .await
    .unwrap();
    let updated = wait_reason(&api, "example-network", "Synced").await;
    assert_eq!(
        updated.status.clone().unwrap().backend.unwrap(),
        backend,
        "same network and subnet"
    );
    let (networks, subnets) = in_neutron(&admin, &ns.name, &updated).await;
    assert_eq!(networks.len(), 1);
    assert_eq!(subnets.len(), 1);
    assert_eq!(subnets[0].id, subnet_id);
    assert_eq!(subnets[0].gateway_ip.as_deref(), Some("192.168.0.254"));

    // Deleted: gone from Neutron, then from Kubernetes.
    api.delete("example-network", &DeleteParams::default())
        .await
        .unwrap();
    testing::wait_for_deletion(&api, "example-network", TIMEOUT)
        .await
        .unwrap();
    let (networks, subnets) = in_neutron(&admin, &ns.name, &updated).await;
    assert!(
        networks.is_empty() && subnets.is_empty(),
        "{networks:?} {subnets:?}"
    );
    finish(&api, operator, ns).await;
}

/// Neutron's names are not unique, and a project may be shared by people and by several
/// clusters: a network of the name ours would have, untagged or tagged for another cluster, is
/// neither a reason to refuse nor touched; ours is made beside it and deleted alone.
#[tokio::test]
async fn a_foreign_network_of_the_same_name_never_blocks_and_is_never_touched() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-foreign").await;
    let name = format!("{}/blue", ns.name);
    // Somebody's network in the operator's project, with the name ours would have, and no
    // tags; and another cluster's, tagged for its own Network of that name.
    let person = openstack_as(&bed, PASSWORD_CLOUD, &["network", "create", &name, "-f", "json"]).await;
    let other_cluster = openstack_as(&bed, PASSWORD_CLOUD, &["network", "create", &name, "-f", "json"]).await;
    let foreign_ids = [
        person["id"].as_str().unwrap().to_owned(),
        other_cluster["id"].as_str().unwrap().to_owned(),
    ];
    let other_tags = [
        format!("{}another-cluster", model::CLUSTER_TAG),
        format!("{}0c0ffee0-0000-4000-8000-000000000000", model::NETWORK_TAG),
    ];
    for tag in &other_tags {
        openstack(&bed, &["network", "set", "--tag", tag, &foreign_ids[1]]).await;
    }
    let before = admin.list_networks(&[], Some(&name)).await.unwrap();
    assert_eq!(before.len(), 2);

    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("blue", "10.61.0.0/24", "10.61.0.1"),
    )
    .await
    .unwrap();
    let synced = wait_reason(&api, "blue", "Synced").await;
    let ours = synced.status.unwrap().backend.unwrap().id;
    assert!(!foreign_ids.contains(&ours), "took {ours}, somebody else's");
    let named = admin.list_networks(&[], Some(&name)).await.unwrap();
    assert_eq!(named.len(), 3, "{named:?}");
    for foreign in &before {
        assert!(named.contains(foreign), "changed: {foreign:?}");
    }

    // Deleting the Network deletes its own network only.
    api.delete("blue", &DeleteParams::default()).await.unwrap();
    testing::wait_for_deletion(&api, "blue", TIMEOUT).await.unwrap();
    assert_eq!(admin.list_networks(&[], Some(&name)).await.unwrap(), before);
    for id in &foreign_ids {
        openstack(&bed, &["network", "delete", id]).await;
    }
    finish(&api, operator, ns).await;
}

#[tokio::test]
async fn hand_edits_and_deletions_are_repaired_and_a_steady_resync_writes_nothing() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-drift").await;
    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("blue", "10.62.0.0/24", "10.62.0.1"),
    )
    .await
    .unwrap();
    let synced = wait_reason(&api, "blue", "Synced").await;
    let backend = synced.status.clone().unwrap().backend.unwrap();

    // Steady: several resyncs pass with lists only, no write, and Neutron's revisions stay.
    let (networks, subnets) = in_neutron(&admin, &ns.name, &synced).await;
    let writes = operator.writes();
    let lists = operator.requests(&["GET"]);
    tokio::time::sleep(RESYNC * 3 + Duration::from_secs(1)).await;
    assert_eq!(operator.writes(), writes, "no write while nothing differs");
    let resync_gets = operator.requests(&["GET"]) - lists;
    // At least one resync's two lists; fewer resyncs than three when neutron-server is busy with
    // other tests (a resync comes an interval after the last listing ended).
    assert!(
        (2..=10).contains(&resync_gets),
        "two lists per resync, not a request per Network: {resync_gets} GETs in 3 intervals"
    );
    assert_eq!(in_neutron(&admin, &ns.name, &synced).await, (networks, subnets));

    // A gateway edited by hand is set back.
    let subnet_id = backend.subnet_id.clone().unwrap();
    // Neutron takes a gateway only outside the allocation pools: the pool changes with it.
    openstack(
        &bed,
        &[
            "subnet",
            "set",
            "--no-allocation-pool",
            "--allocation-pool",
            "start=10.62.0.2,end=10.62.0.99",
            "--gateway",
            "10.62.0.100",
            &subnet_id,
        ],
    )
    .await;
    testing::eventually("the gateway set back", TIMEOUT, async || {
        let (_, subnets) = in_neutron(&admin, &ns.name, &synced).await;
        (subnets.len() == 1 && subnets[0].gateway_ip.as_deref() == Some("10.62.0.1")).then_some(())
    })
    .await;

    // The subnet deleted by hand is made again, on the same network.
    openstack(&bed, &["subnet", "delete", &subnet_id]).await;
    let new_subnet = testing::eventually("the subnet made again", TIMEOUT, async || {
        let (_, subnets) = in_neutron(&admin, &ns.name, &synced).await;
        (subnets.len() == 1 && subnets[0].id != subnet_id).then(|| subnets[0].clone())
    })
    .await;
    assert_eq!(new_subnet.network_id, backend.id);
    assert_eq!(new_subnet.cidr, "10.62.0.0/24");

    // The network deleted by hand is made again, and the status follows.
    openstack(&bed, &["network", "delete", &backend.id]).await;
    let remade = testing::eventually("the network made again", TIMEOUT, async || {
        let n = api.get("blue").await.ok()?;
        let b = n.status.as_ref()?.backend.clone()?;
        (b.id != backend.id && current_reason(&n) == Some(("True".into(), "Synced".into()))).then_some(b)
    })
    .await;
    let (networks, subnets) = in_neutron(&admin, &ns.name, &synced).await;
    assert_eq!(networks.iter().map(|n| &n.id).collect::<Vec<_>>(), [&remade.id]);
    assert_eq!(
        subnets.iter().map(|s| &s.id).collect::<Vec<_>>(),
        [remade.subnet_id.as_ref().unwrap()]
    );
    finish(&api, operator, ns).await;
}

#[tokio::test]
async fn a_new_prefix_is_a_new_subnet_on_the_same_network() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-prefix").await;
    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;
    // Host bits in the spec: Neutron keeps 10.63.1.0/24, and that is no drift.
    api.create(
        &PostParams::default(),
        &network("blue", "10.63.1.7/24", "10.63.1.1"),
    )
    .await
    .unwrap();
    let first = wait_reason(&api, "blue", "Synced").await;
    let before = first.status.clone().unwrap().backend.unwrap();
    let writes = operator.writes();
    tokio::time::sleep(RESYNC * 2).await;
    assert_eq!(operator.writes(), writes, "host bits are not drift");

    api.patch(
        "blue",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"cidr": "10.63.2.0/24", "gateway": "10.63.2.1"}})),
    )
    .await
    .unwrap();
    let moved = wait_reason(&api, "blue", "Synced").await;
    let after = moved.status.clone().unwrap().backend.unwrap();
    assert_eq!(after.id, before.id, "the same network");
    assert_ne!(after.subnet_id, before.subnet_id, "a new subnet");
    let (_, subnets) = in_neutron(&admin, &ns.name, &moved).await;
    assert_eq!(subnets.len(), 1, "the old subnet is gone: {subnets:?}");
    assert_eq!(subnets[0].cidr, "10.63.2.0/24");
    assert_eq!(subnets[0].gateway_ip.as_deref(), Some("10.63.2.1"));
    finish(&api, operator, ns).await;
}

#[tokio::test]
async fn while_neutron_is_down_networks_report_it_and_nothing_is_lost() {
    let Scene(client, bed, admin, ns, api) = Scene::new("neutron-down").await;
    let relay = RequestRecorder::start(neutron_address(&bed)).await;
    let clouds = relayed_clouds(&bed, &relay, &ns.name);
    let operator = NeutronOperator::start(&ns.name, source(clouds.clone(), CLOUD)).await;
    for (name, third) in [("a", 1), ("b", 2), ("c", 3)] {
        api.create(
            &PostParams::default(),
            &network(name, &format!("10.64.{third}.0/24"), &format!("10.64.{third}.1")),
        )
        .await
        .unwrap();
    }
    for name in ["a", "b", "c"] {
        wait_reason(&api, name, "Synced").await;
    }
    let b = api.get("b").await.unwrap();

    relay.set(Outage::Down);
    // Meanwhile: a changed, b deleted, d created.
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"gateway": "10.64.1.254"}})),
    )
    .await
    .unwrap();
    api.delete("b", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &network("d", "10.64.4.0/24", "10.64.4.1"))
        .await
        .unwrap();
    let down = wait_reason(&api, "a", "BackendUnavailable").await;
    let message = &down.status.as_ref().unwrap().conditions[0].message;
    assert_tenant_message(message, "cannot be reached", &["neutron", "9696", "5000"]);
    assert!(
        down.status.unwrap().backend.is_some(),
        "the network is still there"
    );
    wait_reason(&api, "d", "BackendUnavailable").await;
    wait_for_event(&client, &ns.name, "a", "BackendUnavailable").await;
    assert!(api.get("b").await.is_ok(), "b waits for Neutron before it goes");

    relay.set(Outage::None);
    let a = wait_reason(&api, "a", "Synced").await;
    let d = wait_reason(&api, "d", "Synced").await;
    testing::wait_for_deletion(&api, "b", TIMEOUT).await.unwrap();
    let (_, subnets) = in_neutron(&admin, &ns.name, &a).await;
    assert_eq!(subnets[0].gateway_ip.as_deref(), Some("10.64.1.254"));
    let (networks, _) = in_neutron(&admin, &ns.name, &b).await;
    assert!(networks.is_empty(), "b is gone from Neutron");
    let (networks, subnets) = in_neutron(&admin, &ns.name, &d).await;
    assert_eq!((networks.len(), subnets.len()), (1, 1));
    // Exactly what the Networks say: a, c and d, nothing more.
    let all = admin
        .list_networks(&[model::cluster_tag(&ns.name)], None)
        .await
        .unwrap();
    assert_eq!(all.len(), 3, "{all:?}");
    finish(&api, operator, ns).await;
    let _ = std::fs::remove_file(clouds);
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

#[tokio::test]
async fn wrong_credentials_then_a_quota_then_a_revoked_token_are_reported_and_recovered() {
    let client = client_with_crds().await;
    let bed = testing::openstack().await;
    let ns = TestNamespace::create(&client, "neutron-auth").await;
    let project = ns.name.clone();
    let dir = std::env::temp_dir().join(&project);
    std::fs::create_dir_all(&dir).unwrap();
    let clouds = own_project(&bed, &project, &dir).await;
    let password = format!("{project}-password");
    // The operator starts with a wrong password.
    write_clouds(&bed, &clouds, &project, "not-the-password").await;
    let api: Api<Network> = ns.api();
    let operator = NeutronOperator::start(&ns.name, source(clouds.clone(), &project)).await;
    api.create(
        &PostParams::default(),
        &network("blue", "10.65.1.0/24", "10.65.1.1"),
    )
    .await
    .unwrap();
    let refused = wait_reason(&api, "blue", "BackendAuthFailed").await;
    let message = &refused.status.as_ref().unwrap().conditions[0].message;
    assert_tenant_message(message, "credentials", &[&project, "clouds.yaml", "Keystone"]);
    let event = wait_for_event(&client, &ns.name, "blue", "BackendAuthFailed").await;
    assert_eq!(event.note.as_ref(), Some(message));

    // Fixed in the file, as a Secret's volume is updated: taken without a restart.
    write_clouds(&bed, &clouds, &project, &password).await;
    wait_reason(&api, "blue", "Synced").await;

    // The project may hold no further network: the next Network reports the quota.
    openstack(&bed, &["quota", "set", "--networks", "1", &project]).await;
    api.create(
        &PostParams::default(),
        &network("green", "10.65.2.0/24", "10.65.2.1"),
    )
    .await
    .unwrap();
    let over = wait_reason(&api, "green", "BackendQuotaExceeded").await;
    let message = &over.status.as_ref().unwrap().conditions[0].message;
    assert_tenant_message(message, "quota is used up", &[&project, "openstack quota"]);
    wait_for_event(&client, &ns.name, "green", "BackendQuotaExceeded").await;
    openstack(&bed, &["quota", "set", "--networks", "10", &project]).await;
    wait_reason(&api, "green", "Synced").await;

    // Disabling the user revokes its tokens; enabled again, the operator's token is still
    // refused (401), and the session authenticates anew without a restart.
    openstack(
        &bed,
        &["user", "set", "--disable", "--domain", "Default", &project],
    )
    .await;
    openstack(
        &bed,
        &["user", "set", "--enable", "--domain", "Default", &project],
    )
    .await;
    // Until then neutron-server would take the token it checked last from its cache.
    tokio::time::sleep(Duration::from_secs(TOKEN_CACHE_SECONDS + 1)).await;
    api.patch(
        "blue",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"gateway": "10.65.1.254"}})),
    )
    .await
    .unwrap();
    wait_reason(&api, "blue", "Synced").await;
    let admin = admin(&bed);
    let (_, subnets) = in_neutron(&admin, &ns.name, &api.get("blue").await.unwrap()).await;
    assert_eq!(subnets[0].gateway_ip.as_deref(), Some("10.65.1.254"));

    finish(&api, operator, ns).await;
    drop_project(&bed, &project).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// More Networks than two of neutron-server's pages hold (it answers at most
/// [`PAGE_LIMIT`](local_cluster::openstack::PAGE_LIMIT) items a list): they converge with the
/// writes each needs, a resync pages through all of them with lists only, a restart over them
/// writes nothing, and each goes with one delete. Counted in neutron-server's own access log.
/// 120 Networks (three pages) by default, 1,000 with `cargo xtask test --scale`.
#[tokio::test]
async fn networks_beyond_a_page_converge_resync_by_listing_and_restart_without_writes() {
    let n: usize = testing::sized(120, 1000);
    // Pages of one listing of the cluster's n networks (or subnets): a full last page is
    // followed by an empty one.
    let pages = n / PAGE_LIMIT + 1;
    // Long enough for a listing of all their pages, short enough for the waits below.
    let resync = Duration::from_secs(testing::sized(10, 20));
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-paged").await;
    for i in 0..n {
        let (hi, lo) = (i / 256, i % 256);
        api.create(
            &PostParams::default(),
            &network(
                &format!("n{i}"),
                &format!("10.{}.{lo}.0/24", 100 + hi),
                &format!("10.{}.{lo}.1", 100 + hi),
            ),
        )
        .await
        .unwrap();
    }
    let mut log = AccessLog::from_now(&bed, &ns.name);
    let started = Instant::now();
    let neutron = NeutronConfig {
        resync,
        ..settings(source(bed.clouds_yaml(), CLOUD), &ns.name)
    };
    let operator = NeutronOperator::start_with(&ns.name, neutron.clone()).await;
    while_progressing(&format!("{n} Networks synced"), || async {
        let networks = api.list(&Default::default()).await.unwrap().items;
        let (synced, rest): (Vec<_>, Vec<_>) = networks
            .into_iter()
            .partition(|n| current_reason(n) == Some(("True".into(), "Synced".into())));
        Progress {
            done: synced.len(),
            total: n,
            rest: reasons(&rest),
        }
    })
    .await;
    let converged = started.elapsed();
    let sent = log.take();
    let count = |method: &str, prefix: &str| {
        sent.iter()
            .filter(|r| r.method == method && r.target.starts_with(prefix) && !r.target.contains("/tags/"))
            .count()
    };
    let tag_puts = sent
        .iter()
        .filter(|r| r.method == "PUT" && r.target.contains("/tags/"))
        .count();
    let (lists, report, per_network) =
        sent.iter()
            .filter(|r| r.method == "GET")
            .fold((0, 0, 0), |(l, rep, p), r| match r.kind(&ns.name) {
                Kind::Listing => (l + 1, rep, p),
                Kind::Report => (l, rep + 1, p),
                Kind::PerNetwork => (l, rep, p + 1),
            });
    eprintln!(
        "neutron: {n} Networks converged in {converged:.1?}: {} requests in neutron-server's log, {} writes, {lists} listing pages, {report} for other cluster ids, {per_network} GETs of one Network",
        sent.len(),
        sent.iter().filter(|r| r.method != "GET").count(),
    );
    // Every request succeeded, but where a page of a listing outlasted the token: the session
    // is renewed before a listing only while the token outlives twice the last listing, and
    // on a loaded neutron-server one listing can take three times the one before (seen at the
    // full size, 1,000 Networks: 55 s after 19 s). The refused listing is sent again on a new
    // session, so it costs a 401 and loses nothing.
    let failed: Vec<_> = sent.iter().filter(|r| r.status >= 300).collect();
    assert!(
        failed
            .iter()
            .all(|r| r.status == 401 && r.kind(&ns.name) == Kind::Listing),
        "every request succeeded or was a listing's page that outlasted its token: {failed:?}"
    );
    // The writes a Network needs, and no more: Neutron takes no tags in a create, so each
    // object is created, then tagged twice.
    assert_eq!(count("POST", "/v2.0/networks"), n);
    assert_eq!(count("POST", "/v2.0/subnets"), n);
    assert_eq!(tag_puts, 4 * n);
    assert_eq!(
        sent.iter().filter(|r| r.method != "GET").count(),
        6 * n,
        "nothing else is written"
    );
    // Before a create, one look by name; nothing after it, since a Network that wants what it
    // synced asks nothing until the next listing. A few more only where an attempt failed.
    assert!(
        per_network <= n + n / 10,
        "{per_network} GETs of one Network for {n} creates"
    );
    let listed = admin
        .list_networks(&[model::cluster_tag(&ns.name)], None)
        .await
        .unwrap();
    assert_eq!(listed.len(), n, "the SDK follows every page");

    // A steady resync over them: one paged list per kind, and no write.
    // On a loaded machine the reconciles after the last status writes may still be asking:
    // first a resync interval with nothing but listings.
    let quiet = Instant::now();
    loop {
        tokio::time::sleep(resync + Duration::from_secs(1)).await;
        let window = log.take();
        if window
            .iter()
            .all(|r| r.method == "GET" && r.kind(&ns.name) != Kind::PerNetwork)
        {
            break;
        }
        assert!(
            quiet.elapsed() < Duration::from_secs(300),
            "no quiet resync: {window:?}"
        );
    }
    tokio::time::sleep(resync * 2).await;
    let window = log.take();
    let listing_pages = window
        .iter()
        .filter(|r| r.kind(&ns.name) == Kind::Listing)
        .count();
    eprintln!(
        "neutron: {:?} of steady resyncs over {n} Networks sent {} requests ({listing_pages} listing pages)",
        resync * 2,
        window.len()
    );
    assert!(
        window.iter().all(|r| r.method == "GET"),
        "a steady resync writes nothing"
    );
    assert!(
        window.iter().all(|r| r.kind(&ns.name) != Kind::PerNetwork),
        "no Network asks on its own: {window:?}"
    );
    assert!(
        (2 * pages..=3 * 2 * pages).contains(&listing_pages),
        "{listing_pages} pages: one to three resyncs of two paged lists of {pages} pages each"
    );

    // Restarted: every Network is reconciled again, and nothing is written.
    operator.stop().await;
    let restarted = Instant::now();
    let operator = NeutronOperator::start_with(&ns.name, neutron).await;
    while_progressing("the restarted operator reconciled every Network", || async {
        let metrics = operator.telemetry.metrics.render();
        let reconciles = |labels: &[(&str, &str)]| {
            metric_sum(&metrics, "controller_runtime_reconcile_total", labels) as usize
        };
        let errors = reconciles(&[("result", "error")]);
        Progress {
            done: reconciles(&[("controller", "network")]).saturating_sub(errors),
            total: n,
            rest: format!("{errors} reconciles ended in an error"),
        }
    })
    .await;
    let reconciled = restarted.elapsed();
    let window = log.take();
    eprintln!(
        "neutron: the restart over {n} Networks reconciled them in {reconciled:.1?} with {} requests to neutron-server",
        window.len()
    );
    assert!(
        window.iter().all(|r| r.method == "GET"),
        "a restart over converged Networks writes nothing"
    );
    assert!(
        window
            .iter()
            .filter(|r| r.kind(&ns.name) == Kind::PerNetwork)
            .count()
            <= n / 10,
        "the restart reconciles from the listing, not Network by Network"
    );
    let deleting = Instant::now();
    let cluster_id = ns.name.clone();
    // Reconciles of the Networks while they go: a Network's delete may be reconciled more than
    // once (a resync comes due, or its finalizer's removal is refused), each time reading what
    // is left of it; the reads are bounded by those reconciles, not by one machine's timing.
    let telemetry = operator.telemetry.clone();
    let reconciles = || {
        let metrics = telemetry.metrics.render();
        metric_sum(
            &metrics,
            "controller_runtime_reconcile_total",
            &[("controller", "network")],
        ) as usize
    };
    let reconciled_before = reconciles();
    finish(&api, operator, ns).await;
    let removals = reconciles() - reconciled_before;
    let window = log.take();
    let deletes = window.iter().filter(|r| r.method == "DELETE").count();
    let per_network = window
        .iter()
        .filter(|r| r.method == "GET" && r.kind(&cluster_id) == Kind::PerNetwork)
        .count();
    eprintln!(
        "neutron: {n} Networks deleted in {:.1?} by {removals} reconciles: {deletes} deletes, {per_network} GETs of one Network",
        deleting.elapsed()
    );
    // Each goes with one delete (its subnet with it) after at most three reads: by its marker,
    // by its tags, and the subnets on its network; a reconcile that repeats the delete reads
    // again and finds the network gone.
    assert!(
        window.iter().all(|r| r.method == "GET" || r.method == "DELETE"),
        "deleting writes nothing else"
    );
    let deleted = |r: &&Logged| r.method == "DELETE" && r.target.starts_with("/v2.0/networks/");
    assert_eq!(
        window.iter().filter(deleted).filter(|r| r.status == 204).count(),
        n,
        "each network deleted once"
    );
    assert!(
        !window
            .iter()
            .any(|r| r.method == "DELETE" && r.target.starts_with("/v2.0/subnets/")),
        "no subnet deleted on its own"
    );
    assert!(removals >= n, "{removals} reconciles removed {n} Networks");
    assert!(
        deletes <= removals,
        "{deletes} deletes in {removals} reconciles of {n} Networks going"
    );
    assert!(
        per_network <= 3 * removals,
        "{per_network} GETs of one Network in {removals} reconciles of {n} Networks going"
    );
}

/// neutron-server's own access log (gunicorn's), read for the requests of one operator: those
/// whose `User-Agent` names its cluster.
struct AccessLog {
    path: PathBuf,
    agent: String,
    from: u64,
}

/// One request of the access log.
#[derive(Debug)]
struct Logged {
    method: String,
    target: String,
    status: u16,
}

/// What a GET of the operator's is for.
#[derive(Debug, PartialEq, Eq)]
enum Kind {
    /// A page of the resync's listing of the cluster's networks or subnets.
    Listing,
    /// A page of the project's networks, read for other cluster ids.
    Report,
    /// About one Network.
    PerNetwork,
}

impl Logged {
    fn kind(&self, cluster_id: &str) -> Kind {
        let cluster = format!("tags=sample-operator.cluster%3D{cluster_id}");
        let (path, query) = self.target.split_once('?').unwrap_or((&self.target, ""));
        let of_one = query.contains("sample-operator.network")
            || query.contains("name=")
            || query.contains("network_id=");
        if matches!(path, "/v2.0/networks" | "/v2.0/subnets") && query.contains(&cluster) && !of_one {
            Kind::Listing
        } else if path == "/v2.0/networks"
            && !query.contains("tags=")
            && !of_one
            && !query.contains("description=")
        {
            Kind::Report
        } else {
            Kind::PerNetwork
        }
    }
}

impl AccessLog {
    /// The operator of `cluster_id`'s requests from now on.
    fn from_now(bed: &local_cluster::openstack::OpenStack, cluster_id: &str) -> Self {
        let path = bed.logs_dir().join("neutron-server.log");
        let from = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        Self {
            path,
            agent: format!("cluster/{cluster_id}\""),
            from,
        }
    }

    /// The requests logged since the last take.
    fn take(&mut self) -> Vec<Logged> {
        use std::io::{Read, Seek};
        let mut file = std::fs::File::open(&self.path).unwrap();
        file.seek(std::io::SeekFrom::Start(self.from)).unwrap();
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        // A line still being written waits for the next take.
        let complete = text.rfind('\n').map_or(0, |end| end + 1);
        self.from += complete as u64;
        text[..complete]
            .lines()
            .filter(|line| line.ends_with(&self.agent))
            .filter_map(|line| {
                // host - - [time] "METHOD target HTTP/1.1" status size "referer" "agent"
                let mut quoted = line.split('"');
                let request = quoted.nth(1)?;
                let status = quoted.next()?.split_whitespace().next()?.parse().ok()?;
                let mut request = request.split_whitespace();
                Some(Logged {
                    method: request.next()?.to_owned(),
                    target: request.next()?.to_owned(),
                    status,
                })
            })
            .collect()
    }
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

/// The built binary, configured as a shell with `OS_*` variables and no clouds.yaml would
/// configure it: first with an application credential, then with a token.
#[tokio::test]
async fn the_binary_takes_its_cloud_from_os_variables_with_a_credential_or_a_token() {
    let Scene(client, bed, admin, ns, api) = Scene::new("neutron-env").await;
    let dir = std::env::temp_dir().join(&ns.name);
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = crate::support::operator_kubeconfig(&client, &dir).await;
    let credential = openstack_as(
        &bed,
        PASSWORD_CLOUD,
        &["application", "credential", "create", &ns.name, "-f", "json"],
    )
    .await;
    let token = openstack_as(&bed, PASSWORD_CLOUD, &["token", "issue", "-f", "json"]).await;

    let namespace_arg = format!("--namespace={}", ns.name);
    let cluster_id_arg = format!("--cluster-id={}", ns.name);
    let kubeconfig_arg = format!("--kubeconfig={}", kubeconfig.display());
    let args = [
        "--controllers=network",
        namespace_arg.as_str(),
        cluster_id_arg.as_str(),
        kubeconfig_arg.as_str(),
        "--network-backend=neutron",
    ];
    let run = |auth: Vec<(&str, String)>| {
        OperatorProcess::spawn_with("operator", &dir, &args, |command| {
            command
                .env_remove("OS_CLOUD")
                .env_remove("OS_CLIENT_CONFIG_FILE")
                .env("OS_AUTH_URL", bed.keystone_url())
                .envs(auth)
                .current_dir(&dir);
        })
    };
    let log = || std::fs::read_to_string(dir.join("operator.log")).unwrap_or_default();

    let operator = run(vec![
        ("OS_AUTH_TYPE", "v3applicationcredential".into()),
        (
            "OS_APPLICATION_CREDENTIAL_ID",
            credential["ID"].as_str().unwrap().into(),
        ),
        (
            "OS_APPLICATION_CREDENTIAL_SECRET",
            credential["Secret"].as_str().unwrap().into(),
        ),
    ]);
    api.create(
        &PostParams::default(),
        &network("by-credential", "10.66.1.0/24", "10.66.1.1"),
    )
    .await
    .unwrap();
    let expected = ("True".to_owned(), "Synced".to_owned());
    let what = "by-credential synced";
    let synced = testing::wait_for(&api, "by-credential", what, TIMEOUT, |n| {
        current_reason(n).as_ref() == Some(&expected)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\noperator log:\n{}", log()));
    assert_eq!(in_neutron(&admin, &ns.name, &synced).await.0.len(), 1);
    drop(operator);

    let operator = run(vec![
        ("OS_AUTH_TYPE", "v3token".into()),
        ("OS_TOKEN", token["id"].as_str().unwrap().into()),
        ("OS_PROJECT_ID", token["project_id"].as_str().unwrap().into()),
    ]);
    api.create(
        &PostParams::default(),
        &network("by-token", "10.66.2.0/24", "10.66.2.1"),
    )
    .await
    .unwrap();
    let what = "by-token synced";
    let synced = testing::wait_for(&api, "by-token", what, TIMEOUT, |n| {
        current_reason(n).as_ref() == Some(&expected)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\noperator log:\n{}", log()));
    assert_eq!(in_neutron(&admin, &ns.name, &synced).await.0.len(), 1);
    // The token's operator deletes both from Neutron.
    api.delete_collection(&DeleteParams::default(), &Default::default())
        .await
        .unwrap();
    for name in ["by-credential", "by-token"] {
        testing::wait_for_deletion(&api, name, TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{e}\noperator log:\n{}", log()));
    }
    let left = admin
        .list_networks(&[model::cluster_tag(&ns.name)], None)
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    drop(operator);
    openstack_as(
        &bed,
        PASSWORD_CLOUD,
        &["application", "credential", "delete", &ns.name],
    )
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Neutron refuses to delete a network that ports still use (409 `NetworkInUse`): the deleted
/// Network stays, says why, and goes once the port is gone; the port is never touched.
#[tokio::test]
async fn a_network_in_use_is_not_deleted_until_its_ports_are_gone() {
    let Scene(client, bed, admin, ns, api) = Scene::new("neutron-in-use").await;
    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("busy", "10.67.0.0/24", "10.67.0.1"),
    )
    .await
    .unwrap();
    let synced = wait_reason(&api, "busy", "Synced").await;
    let network_id = synced.status.clone().unwrap().backend.unwrap().id;
    // Somebody's port on our network, as a VM's would be.
    let port = openstack_as(
        &bed,
        PASSWORD_CLOUD,
        &["port", "create", "--network", &network_id, &ns.name, "-f", "json"],
    )
    .await;
    let port_id = port["id"].as_str().unwrap().to_owned();

    api.delete("busy", &DeleteParams::default()).await.unwrap();
    let refused = wait_reason(&api, "busy", "BackendConflict").await;
    let message = &refused.status.as_ref().unwrap().conditions[0].message;
    assert_tenant_message(message, "in use", &[&port_id]);
    let event = wait_for_event(&client, &ns.name, "busy", "BackendConflict").await;
    assert_eq!(event.note.as_ref(), Some(message));
    let (networks, _) = in_neutron(&admin, &ns.name, &synced).await;
    assert_eq!(networks.len(), 1, "the network stays while the port uses it");

    openstack_as(&bed, PASSWORD_CLOUD, &["port", "delete", &port_id]).await;
    testing::wait_for_deletion(&api, "busy", TIMEOUT).await.unwrap();
    assert_eq!(in_neutron(&admin, &ns.name, &synced).await, (vec![], vec![]));
    finish(&api, operator, ns).await;
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

/// A deposed leader stops writing to Neutron as it stops writing to the apiserver: with
/// neutron-server frozen for both replicas (each reaches it through a relay of its own that
/// holds every request) while the leader creates a network, its Lease RBAC revoked, and the
/// standby taking over, no request of the old holder reaches Neutron (timed as it leaves its
/// relay) or the apiserver after its lease could have expired, whether its own in-flight request
/// answers late or its resync comes due.
#[tokio::test]
async fn a_deposed_leader_sends_nothing_to_neutron_after_its_lease_could_have_expired() {
    use crate::leader::{
        WriteLog, deposable_lease, depose_a, grant_leases, holder, outcome_of, replica_client, start_elected,
    };
    use k8s_openapi::api::coordination::v1::Lease;
    use sample_operator::runtime::leader::Outcome;

    let Scene(admin_client, bed, neutron_admin, ns, api) = Scene::new("neutron-deposed").await;
    grant_leases(&admin_client, &ns.name, &["a", "b"]).await;
    let lease = deposable_lease(&ns.name);
    let recorder = RequestRecorder::start(neutron_address(&bed)).await;
    let b_relay = RequestRecorder::start(neutron_address(&bed)).await;
    // Each replica's cloud reaches Neutron through a relay of its own: a's records what a sends.
    let relayed_file = relayed_clouds(&bed, &recorder, &format!("{}-a", ns.name));
    let b_file = relayed_clouds(&bed, &b_relay, &format!("{}-b", ns.name));
    let replica_config = |clouds: PathBuf| {
        let mut run = config(Some(&ns.name), &[ControllerName::Network]);
        run.network.backend = BackendConfig::Neutron(settings(source(clouds, CLOUD), &ns.name));
        run
    };

    let a_writes = WriteLog::default();
    let a_client = replica_client(&admin_client, &ns.name, "a", Some(&a_writes)).await;
    let (_stop_a, a) = start_elected(a_client, replica_config(relayed_file.clone()), "a", lease.clone());
    api.create(
        &PostParams::default(),
        &network("warm", "10.66.1.0/24", "10.66.1.1"),
    )
    .await
    .unwrap();
    wait_reason(&api, "warm", "Synced").await;
    assert!(
        !recorder.since(std::time::UNIX_EPOCH).is_empty(),
        "replica a reached Neutron through the recorder"
    );
    let leases: Api<Lease> = Api::namespaced(admin_client.clone(), &ns.name);
    let (a_identity, _, _) = holder(&leases).await.expect("a holds the lease");
    let b_client = replica_client(&admin_client, &ns.name, "b", None).await;
    let (stop_b, b) = start_elected(b_client, replica_config(b_file.clone()), "b", lease.clone());

    // Frozen, then a Network that a starts to create: its request hangs.
    recorder.set(Outage::Frozen);
    b_relay.set(Outage::Frozen);
    let froze_at = std::time::SystemTime::now();
    api.create(
        &PostParams::default(),
        &network("frozen", "10.66.2.0/24", "10.66.2.1"),
    )
    .await
    .unwrap();
    while_progressing("a's request to the frozen Neutron", || async {
        Progress {
            done: usize::from(!recorder.since(froze_at).is_empty()),
            total: 1,
            rest: "no request yet".into(),
        }
    })
    .await;

    // Replica a may no longer renew; b takes over once the lease expires.
    let (a_last_renewal, _) = depose_a(&admin_client, &ns.name, &a_identity).await;
    let a_expired = a_last_renewal + lease.duration;

    // Neutron answers again: whatever a still had in flight would now get its answer.
    recorder.set(Outage::None);
    b_relay.set(Outage::None);
    wait_reason(&api, "frozen", "Synced").await;
    // A resync of a's would have come due by now, twice.
    tokio::time::sleep(RESYNC * 2 + Duration::from_secs(1)).await;
    let late = recorder.since(a_expired);
    assert!(
        late.is_empty(),
        "the old holder reached Neutron after its lease could have expired: {late:?}"
    );
    let late: Vec<_> = a_writes
        .controller_writes()
        .into_iter()
        .filter(|(_, _, at)| *at >= a_expired)
        .collect();
    assert!(
        late.is_empty(),
        "the old holder wrote to the apiserver after its lease could have expired: {late:?}"
    );
    assert_eq!(outcome_of(a).await, Outcome::RenewalsFailed);
    let _ = stop_b.send(());
    assert_eq!(outcome_of(b).await, Outcome::Stopped);
    let _ = std::fs::remove_file(&relayed_file);
    let _ = std::fs::remove_file(&b_file);
    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;
    let frozen_name = format!("{}/frozen", ns.name);
    finish(&api, operator, ns).await;
    // a's create, sent before its deadline, was answered after the freeze: b found it by its
    // marker and took it, so nothing of the Network is left.
    let left = neutron_admin
        .list_networks(&[], Some(&frozen_name))
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
}

/// A network whose tag request failed after its create carries only the operator's marker: it
/// is still the Network's, and deleting the Network deletes it. The tag requests are cut on the
/// way, as a network failure would, so the network stays half made.
#[tokio::test]
async fn a_half_made_network_is_found_and_removed_with_its_network() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-half").await;
    let recorder = RequestRecorder::refusing(neutron_address(&bed), |line| {
        line.starts_with("PUT ") && line.contains("/tags")
    })
    .await;
    let clouds = relayed_clouds(&bed, &recorder, &ns.name);
    let operator = NeutronOperator::start(&ns.name, source(clouds.clone(), CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("half", "10.67.1.0/24", "10.67.1.1"),
    )
    .await
    .unwrap();
    let name = format!("{}/half", ns.name);
    let half = testing::eventually("the network created, its tags refused", TIMEOUT, async || {
        let named = admin.list_networks(&[], Some(&name)).await.ok()?;
        named.into_iter().next()
    })
    .await;
    assert!(half.tags.is_empty(), "{half:?}");
    assert!(
        half.description
            .as_deref()
            .is_some_and(|d| d.starts_with("Managed by sample-operator")),
        "{half:?}"
    );

    api.delete("half", &DeleteParams::default()).await.unwrap();
    testing::wait_for_deletion(&api, "half", TIMEOUT).await.unwrap();
    let left = admin.list_networks(&[], Some(&name)).await.unwrap();
    assert!(left.is_empty(), "the half-made network was left behind: {left:?}");
    let _ = std::fs::remove_file(&clouds);
    finish(&api, operator, ns).await;
}

/// A policy file of neutron-server's, in force while this lives (oslo.policy reads it again when
/// it changes); removed when dropped, so that a failing test leaves the test bed as it was.
struct NeutronPolicy(PathBuf);

impl NeutronPolicy {
    fn refusing(bed: &local_cluster::openstack::OpenStack, action: &str) -> Self {
        let path = bed.dir().join("policy.yaml");
        std::fs::write(&path, format!("\"{action}\": \"!\"\n")).unwrap();
        Self(path)
    }
}

impl Drop for NeutronPolicy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A 403 is Neutron's policy refusing one action, not a failed login: the Network reports
/// `BackendForbidden`, retries with backoff on the same session (no new token per refusal), and
/// syncs once the policy allows the action.
/// Runs alone (`.config/nextest.toml`): the policy file is neutron-server's, for every test.
#[tokio::test]
async fn a_policy_refusal_is_forbidden_without_a_new_login_and_recovers_when_allowed() {
    let Scene(client, bed, _, ns, api) = Scene::new("neutron-policy").await;
    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("warm", "10.68.1.0/24", "10.68.1.1"),
    )
    .await
    .unwrap();
    wait_reason(&api, "warm", "Synced").await;

    let policy = NeutronPolicy::refusing(&bed, "create_subnet");
    api.create(
        &PostParams::default(),
        &network("refused", "10.68.2.0/24", "10.68.2.1"),
    )
    .await
    .unwrap();
    let refused = wait_reason(&api, "refused", "BackendForbidden").await;
    let message = &refused.status.as_ref().unwrap().conditions[0].message;
    assert_tenant_message(message, "policy does not let the operator", &["create_subnet"]);
    wait_for_event(&client, &ns.name, "refused", "BackendForbidden").await;
    let metrics = || operator.telemetry.metrics.render();
    let tokens = backend_requests_of(&metrics(), "tokens");
    let forbidden = || metric_sum(&metrics(), BACKEND_REQUESTS, &[("result", "BackendForbidden")]);
    let first = forbidden();
    testing::eventually("another refusal, retried with backoff", TIMEOUT, async || {
        (forbidden() > first).then_some(())
    })
    .await;
    assert_eq!(
        backend_requests_of(&metrics(), "tokens"),
        tokens,
        "a refusal made the operator log in again"
    );

    drop(policy);
    wait_reason(&api, "refused", "Synced").await;
    finish(&api, operator, ns).await;
}

/// A failed resync listing is retried alone, with backoff: while neutron-server is down and no
/// Network changes, the outage costs a few listings, not a request per Network per resync.
#[tokio::test]
async fn a_failed_resync_listing_does_not_fan_out_to_every_network() {
    let Scene(_, bed, _, ns, api) = Scene::new("neutron-listing").await;
    let relay = RequestRecorder::start(neutron_address(&bed)).await;
    let clouds = relayed_clouds(&bed, &relay, &ns.name);
    let operator = NeutronOperator::start(&ns.name, source(clouds.clone(), CLOUD)).await;
    const NETWORKS: usize = 20;
    for i in 0..NETWORKS {
        api.create(
            &PostParams::default(),
            &network(
                &format!("n{i}"),
                &format!("10.69.{i}.0/24"),
                &format!("10.69.{i}.1"),
            ),
        )
        .await
        .unwrap();
    }
    for i in 0..NETWORKS {
        wait_reason(&api, &format!("n{i}"), "Synced").await;
    }
    // Until a listing newer than their writes was used, the Networks ask Neutron themselves
    // after a resync; from then on a resync costs the listing only.
    tokio::time::sleep(RESYNC * 2 + Duration::from_secs(1)).await;

    relay.set(Outage::Down);
    let all = ["GET", "POST", "PUT", "DELETE"];
    let before = operator.requests(&all);
    tokio::time::sleep(RESYNC * 4).await;
    let during = operator.requests(&all) - before;
    eprintln!("{during} requests to Neutron in four resync intervals of an outage");
    assert!(
        during <= 10,
        "{during} requests in four resync intervals of an outage, with {NETWORKS} Networks"
    );

    relay.set(Outage::None);
    let resumed = operator.requests(&["GET"]);
    testing::eventually("the resync listing again", TIMEOUT, async || {
        (operator.requests(&["GET"]) >= resumed + 2).then_some(())
    })
    .await;
    for i in 0..NETWORKS {
        wait_reason(&api, &format!("n{i}"), "Synced").await;
    }
    finish(&api, operator, ns).await;
    let _ = std::fs::remove_file(clouds);
}

/// An IPv6 Network is an IPv6 subnet with its gateway, the gateway kept out of the address pools;
/// a new gateway is set on the same subnet and the pools move with it, as for IPv4.
#[tokio::test]
async fn an_ipv6_network_is_an_ipv6_subnet_whose_gateway_moves_in_place() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-ipv6").await;
    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("six", "fd00:66:1::/64", "fd00:66:1::1"),
    )
    .await
    .unwrap();
    let synced = wait_reason(&api, "six", "Synced").await;
    let backend = synced.status.clone().unwrap().backend.unwrap();
    let subnet_id = backend.subnet_id.clone().expect("the subnet's id");
    let shown = openstack(&bed, &["subnet", "show", &subnet_id, "-f", "json"]).await;
    assert_eq!(shown["ip_version"], 6);
    assert_eq!(shown["cidr"], "fd00:66:1::/64");
    assert_eq!(shown["gateway_ip"], "fd00:66:1::1");
    let outside_pools = |subnet: &NeutronSubnet, gateway: &str| {
        let at = |a: &str| u128::from(a.parse::<std::net::Ipv6Addr>().unwrap());
        !subnet.allocation_pools.is_empty()
            && subnet
                .allocation_pools
                .iter()
                .all(|p| !(at(&p.start)..=at(&p.end)).contains(&at(gateway)))
    };
    let (_, subnets) = in_neutron(&admin, &ns.name, &synced).await;
    assert!(outside_pools(&subnets[0], "fd00:66:1::1"), "{subnets:?}");

    api.patch(
        "six",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"gateway": "fd00:66:1::fe"}})),
    )
    .await
    .unwrap();
    let moved = wait_reason(&api, "six", "Synced").await;
    assert_eq!(
        moved.status.clone().unwrap().backend.unwrap(),
        backend,
        "same network and subnet"
    );
    let (networks, subnets) = in_neutron(&admin, &ns.name, &moved).await;
    assert_eq!((networks.len(), subnets.len()), (1, 1));
    assert_eq!(subnets[0].gateway_ip.as_deref(), Some("fd00:66:1::fe"));
    assert!(outside_pools(&subnets[0], "fd00:66:1::fe"), "{subnets:?}");
    finish(&api, operator, ns).await;
}

/// The test bed keeps its secrets private: its configuration files and clouds.yaml are its
/// owner's alone (in a folder that is too), and neither the application credential's secret nor
/// a password is in its logs or in any running process's arguments.
#[tokio::test]
async fn the_test_beds_secrets_are_private_files_never_logs_or_arguments() {
    use std::os::unix::fs::PermissionsExt;

    let bed = testing::openstack().await;
    let mode = |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&bed.dir()), 0o700, "{}", bed.dir().display());
    for file in [
        bed.clouds_yaml(),
        bed.dir().join("keystone.conf"),
        bed.dir().join("neutron.conf"),
    ] {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    let clouds: Value = serde_yaml::from_str(&std::fs::read_to_string(bed.clouds_yaml()).unwrap()).unwrap();
    let mut secrets = vec![
        clouds["clouds"][CLOUD]["auth"]["application_credential_secret"].clone(),
        clouds["clouds"][PASSWORD_CLOUD]["auth"]["password"].clone(),
        clouds["clouds"][ADMIN_CLOUD]["auth"]["password"].clone(),
    ]
    .into_iter()
    .map(|s| s.as_str().expect("a secret in clouds.yaml").to_owned())
    .collect::<Vec<_>>();
    let neutron_conf = std::fs::read_to_string(bed.dir().join("neutron.conf")).unwrap();
    let neutron_password = neutron_conf
        .lines()
        .find_map(|l| l.strip_prefix("password = "))
        .expect("neutron-server's password");
    secrets.push(neutron_password.to_owned());
    for entry in std::fs::read_dir(bed.logs_dir()).unwrap() {
        let path = entry.unwrap().path();
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        for secret in &secrets {
            assert!(!text.contains(secret.as_str()), "a secret in {}", path.display());
        }
    }
    for process in procfs::process::all_processes().unwrap().flatten() {
        let Ok(arguments) = process.cmdline() else {
            continue;
        };
        let arguments = arguments.join(" ");
        for secret in &secrets {
            assert!(
                !arguments.contains(secret.as_str()),
                "a secret in the arguments of process {}",
                process.pid
            );
        }
    }
}

/// A person edits the subnet while the operator's update of it is on its way: Neutron refuses
/// the update (412: it was conditional on the revision the operator read), the operator reads
/// the subnet again and sends the update again, and the person's edit stays. Tags go one at a
/// time, never as a whole list.
#[tokio::test]
async fn a_concurrent_edit_refuses_the_conditional_update_which_reads_again_and_keeps_the_edit() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-if-match").await;
    let recorder = RequestRecorder::holding(neutron_address(&bed), |line| {
        line.starts_with("PUT /v2.0/subnets/") && !line.contains("/tags")
    })
    .await;
    let clouds = relayed_clouds(&bed, &recorder, &ns.name);
    let operator = NeutronOperator::start(&ns.name, source(clouds, CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("edited", "10.69.1.0/24", "10.69.1.1"),
    )
    .await
    .unwrap();
    let synced = wait_reason(&api, "edited", "Synced").await;
    let reference = synced.status.unwrap().backend.unwrap();
    let (network_id, subnet_id) = (reference.id, reference.subnet_id.unwrap());
    let sent = recorder.since(std::time::UNIX_EPOCH);
    let tag_puts: Vec<&String> = sent
        .iter()
        .filter(|l| l.starts_with("PUT ") && l.contains("/tags"))
        .collect();
    assert_eq!(tag_puts.len(), 4, "two tags on each of two objects: {tag_puts:?}");
    assert!(
        tag_puts.iter().all(|l| l.contains("/tags/sample-operator.")),
        "one tag a request, never the list replaced: {tag_puts:?}"
    );

    api.patch(
        "edited",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"gateway": "10.69.1.254"}})),
    )
    .await
    .unwrap();
    recorder.held().await;
    openstack(
        &bed,
        &["subnet", "set", "--description", "edited by hand", &subnet_id],
    )
    .await;
    recorder.release();
    let subnet = testing::eventually("the gateway moved", TIMEOUT, async || {
        let subnets = admin.list_subnets_on(&network_id).await.unwrap();
        let subnet = subnets.into_iter().find(|s| s.id == subnet_id)?;
        (subnet.gateway_ip.as_deref() == Some("10.69.1.254")).then_some(subnet)
    })
    .await;
    assert_eq!(
        subnet.description.as_deref(),
        Some("edited by hand"),
        "the person's edit stays"
    );
    wait_reason(&api, "edited", "Synced").await;
    let updates: Vec<String> = recorder
        .since(std::time::UNIX_EPOCH)
        .into_iter()
        .filter(|l| l.starts_with(&format!("PUT /v2.0/subnets/{subnet_id}")) && !l.contains("/tags"))
        .collect();
    assert_eq!(updates.len(), 2, "refused once, then sent again: {updates:?}");
    let revision = |line: &str| -> i64 {
        let (_, number) = line
            .to_ascii_lowercase()
            .split_once("if-match: revision_number=")
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .unwrap_or_else(|| panic!("not conditional: {line}"));
        number.trim().parse().unwrap()
    };
    assert!(
        revision(&updates[1]) > revision(&updates[0]),
        "the second update is conditional on the revision read again: {updates:?}"
    );
    let log = std::fs::read_to_string(bed.logs_dir().join("neutron-server.log")).unwrap();
    assert!(
        log.contains(&format!("\"PUT /v2.0/subnets/{subnet_id}? HTTP/1.1\" 412")),
        "neutron-server refused the first update as stale"
    );
    finish(&api, operator, ns).await;
}

/// A rebuilt cluster (a new cluster id, new Network UIDs) started with --adopt-cluster-id
/// takes over the networks of the old id by namespace and name, retagging them without
/// creating anything; a network of the old id that no Network claims is reported, not touched.
#[tokio::test]
async fn a_rebuilt_cluster_adopts_its_old_networks_without_creating_them_again() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-adopt").await;
    let (old_id, new_id) = (format!("{}-old", ns.name), format!("{}-new", ns.name));
    let old =
        NeutronOperator::start_with(&ns.name, settings(source(bed.clouds_yaml(), CLOUD), &old_id)).await;
    for (name, third) in [("kept", 1), ("orphan", 2)] {
        api.create(
            &PostParams::default(),
            &network(name, &format!("10.70.{third}.0/24"), &format!("10.70.{third}.1")),
        )
        .await
        .unwrap();
    }
    let mut before = Vec::new();
    for name in ["kept", "orphan"] {
        before.push(
            wait_reason(&api, name, "Synced")
                .await
                .status
                .unwrap()
                .backend
                .unwrap(),
        );
    }
    old.stop().await;
    // The old cluster is gone: its Networks with it, their Neutron networks left behind.
    for name in ["kept", "orphan"] {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
        api.delete(name, &DeleteParams::default()).await.unwrap();
        testing::wait_for_deletion(&api, name, TIMEOUT).await.unwrap();
    }
    let old_networks = admin
        .list_networks(&[model::cluster_tag(&old_id)], None)
        .await
        .unwrap();
    let orphan_before = old_networks
        .iter()
        .find(|n| n.id == before[1].id)
        .unwrap()
        .clone();
    api.create(
        &PostParams::default(),
        &network("kept", "10.70.1.0/24", "10.70.1.1"),
    )
    .await
    .unwrap();

    let new = NeutronOperator::start_with(
        &ns.name,
        NeutronConfig {
            adopt_cluster_ids: vec![old_id.clone()],
            ..settings(source(bed.clouds_yaml(), CLOUD), &new_id)
        },
    )
    .await;
    let adopted = wait_reason(&api, "kept", "Synced").await;
    let reference = adopted.status.as_ref().unwrap().backend.clone().unwrap();
    assert_eq!(reference.id, before[0].id, "the same network, not a new one");
    assert_eq!(reference.subnet_id, before[0].subnet_id, "the same subnet");
    assert_eq!(
        new.requests(&["POST"]) - backend_requests_of(&new.telemetry.metrics.render(), "tokens"),
        0,
        "nothing created"
    );
    let (networks, subnets) = in_neutron(&admin, &new_id, &adopted).await;
    assert_eq!(networks.len(), 1);
    assert_eq!(subnets.len(), 1);
    for tags in [&networks[0].tags, &subnets[0].tags] {
        assert!(
            !tags.iter().any(|t| t.contains(&old_id)),
            "the old cluster's tags are gone: {tags:?}"
        );
        assert_eq!(tags.len(), 2, "{tags:?}");
    }
    // The orphan: reported by its old id, left as it was.
    new.wait_for_other_cluster_networks(&old_id, 1).await;
    let orphan = admin
        .list_networks(&[model::cluster_tag(&old_id)], None)
        .await
        .unwrap();
    assert_eq!(orphan, [orphan_before], "the orphan is untouched");

    finish(&api, new, ns).await;
    admin.delete_network(&before[1].id).await.unwrap();
}

/// Tokens that expire 36 s after they are issued, as the operator reads them from its relay in
/// front of Keystone (the test bed's own [`TOKEN_LIFETIME_SECONDS`] with `cargo xtask test
/// --scale`): an operator running past one and a half of their lifetimes (listing Neutron every
/// few seconds, and syncing a Network at the end) renews each token before it expires, on its
/// own: no restart, no failed request or reconcile, and about one token a lifetime, counted as
/// they leave for Keystone.
#[tokio::test]
async fn tokens_are_renewed_before_they_expire_without_a_failed_request() {
    let Scene(_, bed, _, ns, api) = Scene::new("neutron-tokens").await;
    let keystone_url = bed.keystone_url();
    let keystone_address = keystone_url
        .trim_start_matches("http://")
        .trim_end_matches("/v3")
        .parse()
        .unwrap();
    let lifetime = Duration::from_secs(testing::sized(36, TOKEN_LIFETIME_SECONDS));
    let keystone = if lifetime.as_secs() < TOKEN_LIFETIME_SECONDS {
        RequestRecorder::with_token_lifetime(keystone_address, lifetime).await
    } else {
        RequestRecorder::start(keystone_address).await
    };
    let mut clouds: Value =
        serde_yaml::from_str(&std::fs::read_to_string(bed.clouds_yaml()).unwrap()).unwrap();
    clouds["clouds"][CLOUD]["auth"]["auth_url"] = format!("http://127.0.0.1:{}/v3", keystone.port).into();
    let clouds_file = std::env::temp_dir().join(format!("{}-clouds.yaml", ns.name));
    testing::write_private(&clouds_file, &serde_yaml::to_string(&clouds).unwrap()).unwrap();

    let started = std::time::SystemTime::now();
    let operator = NeutronOperator::start(&ns.name, source(clouds_file.clone(), CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("early", "10.71.1.0/24", "10.71.1.1"),
    )
    .await
    .unwrap();
    wait_reason(&api, "early", "Synced").await;
    tokio::time::sleep(lifetime * 3 / 2 + Duration::from_secs(15)).await;
    api.create(
        &PostParams::default(),
        &network("late", "10.71.2.0/24", "10.71.2.1"),
    )
    .await
    .unwrap();
    wait_reason(&api, "late", "Synced").await;
    let elapsed = started.elapsed().unwrap();

    let tokens = keystone
        .since(started)
        .iter()
        .filter(|line| line.starts_with("POST /v3/auth/tokens"))
        .count();
    // One token to start, then one each time three quarters of a lifetime have passed: at
    // least one a lifetime (none used past its expiry), and no more than renewals need.
    let at_least = (elapsed.as_secs_f64() / lifetime.as_secs_f64()).ceil() as usize;
    let at_most = (elapsed.as_secs_f64() / (lifetime.as_secs_f64() * 0.75)) as usize + 1;
    eprintln!("neutron: {tokens} tokens in {elapsed:.0?} of {lifetime:?} tokens");
    assert!(
        (at_least..=at_most).contains(&tokens),
        "{tokens} tokens in {elapsed:?}: between {at_least} and {at_most}"
    );
    let metrics = operator.telemetry.metrics.render();
    let requests = metric_sum(&metrics, BACKEND_REQUESTS, &[]);
    let ok = metric_sum(&metrics, BACKEND_REQUESTS, &[("result", "ok")]);
    assert!(requests > 20.0, "the operator kept asking Neutron: {requests}");
    assert_eq!(requests, ok, "every request succeeded:\n{metrics}");
    let errors = metric_sum(
        &metrics,
        "controller_runtime_reconcile_total",
        &[("result", "error")],
    );
    assert_eq!(errors, 0.0, "no reconcile failed");
    finish(&api, operator, ns).await;
    let _ = std::fs::remove_file(clouds_file);
}

/// Two clusters sharing the project, with different ids, on one Network object (the first
/// cluster's operator stopped, the second's taking over): the second makes a network of its own
/// beside the first's, which it neither touches nor deletes, and reports under the first's id.
#[tokio::test]
async fn a_second_cluster_id_on_the_same_network_makes_its_own_and_leaves_the_firsts() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-two-ids").await;
    let (first_id, second_id) = (format!("{}-a", ns.name), format!("{}-b", ns.name));
    let first =
        NeutronOperator::start_with(&ns.name, settings(source(bed.clouds_yaml(), CLOUD), &first_id)).await;
    api.create(
        &PostParams::default(),
        &network("shared", "10.72.1.0/24", "10.72.1.1"),
    )
    .await
    .unwrap();
    let firsts = wait_reason(&api, "shared", "Synced")
        .await
        .status
        .unwrap()
        .backend
        .unwrap()
        .id;
    first.stop().await;
    let before = admin
        .list_networks(&[model::cluster_tag(&first_id)], None)
        .await
        .unwrap();
    assert_eq!(before.len(), 1);

    let second =
        NeutronOperator::start_with(&ns.name, settings(source(bed.clouds_yaml(), CLOUD), &second_id)).await;
    let taken = testing::wait_for(&api, "shared", "a network of the second cluster", TIMEOUT, |n| {
        n.status
            .as_ref()
            .and_then(|s| s.backend.as_ref())
            .is_some_and(|b| b.id != firsts)
    })
    .await
    .unwrap();
    let seconds = taken.status.unwrap().backend.unwrap().id;
    let named = admin
        .list_networks(&[], Some(&format!("{}/shared", ns.name)))
        .await
        .unwrap();
    assert_eq!(named.len(), 2, "one network each: {named:?}");
    assert!(named.iter().any(|n| n.id == seconds));
    second.wait_for_other_cluster_networks(&first_id, 1).await;

    // Deleting the Network deletes the second cluster's network only.
    finish(&api, second, ns).await;
    let after = admin
        .list_networks(&[model::cluster_tag(&first_id)], None)
        .await
        .unwrap();
    assert_eq!(after, before, "the first cluster's network is untouched");
    assert!(
        admin
            .list_networks(&[model::cluster_tag(&second_id)], None)
            .await
            .unwrap()
            .is_empty()
    );
    admin.delete_network(&firsts).await.unwrap();
}
