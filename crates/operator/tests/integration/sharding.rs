//! Sharded replicas (`--sharding`) on a real apiserver: each replica reconciles only the Foos,
//! MyCustomResources and Networks of its buckets, a killed replica's buckets are taken over once
//! its Lease expires, replicas come and go during churn, and at no moment do two replicas
//! reconcile the same object. Run on an apiserver of the test's own (etcd and kube-apiserver
//! only, so no Pod loads the shared cluster) that filters by the shardSelector (KEP-5866's
//! feature gate on), and on one with the gate off, where every replica filters itself.
//!
//! Each replica runs in-process on a client of its own that logs every write it sends
//! (leader.rs's [`WriteLog`]), and each run of its controllers is logged with the buckets it
//! held and when it started and ended; the checks are made on those logs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use local_cluster::testing::{self, TestNamespace};
use sample_operator::ControllerName;
use sample_operator::runtime::leader::Outcome;
use sample_operator::runtime::metrics::Filtering;
use sample_operator::runtime::sharding::layer::Selectors;
use sample_operator::runtime::sharding::membership::{self, HOLDERS_ANNOTATION, ShardConfig};
use sample_operator::runtime::sharding::{BUCKETS, Buckets, assign, bucket_of, fnv1a};
use sample_operator::runtime::{Telemetry, requests::RequestCounter};
use sample_operator_api::Foo;

use crate::foo::new_foo;
use crate::leader::WriteLog;
use crate::support::{ClusterOfItsOwn, all_crds, config, metric_sum};

const RING: &str = "shards";

/// Member Leases of 10 s: a killed replica's buckets wait that long. Renewals every 3 s.
fn shard_config(namespace: &str) -> ShardConfig {
    ShardConfig {
        ring: RING.into(),
        namespace: namespace.to_owned(),
        duration: Duration::from_secs(10),
        grace: Duration::from_secs(4),
        settle: Duration::from_secs(1),
    }
}

/// What the replicas did, with when: each run of a replica's controllers and its buckets, and
/// each write it sent.
#[derive(Clone, Default)]
struct Ledger(Arc<Mutex<LedgerEntries>>);

#[derive(Default)]
struct LedgerEntries {
    /// (replica, buckets, started, ended: `None` while it runs).
    runs: Vec<(String, Buckets, SystemTime, Option<SystemTime>)>,
    /// Each replica's writes.
    writes: BTreeMap<String, WriteLog>,
}

impl Ledger {
    fn run_started(&self, replica: &str, buckets: Buckets) -> usize {
        let mut entries = self.0.lock().unwrap();
        entries
            .runs
            .push((replica.to_owned(), buckets, SystemTime::now(), None));
        entries.runs.len() - 1
    }

    fn run_ended(&self, run: usize) {
        self.0.lock().unwrap().runs[run]
            .3
            .get_or_insert(SystemTime::now());
    }

    /// The log `replica`'s client writes in.
    fn writes_of(&self, replica: &str) -> WriteLog {
        let mut entries = self.0.lock().unwrap();
        entries.writes.entry(replica.to_owned()).or_default().clone()
    }

    /// Every replica's writes but to Leases: (replica, method, path, sent).
    fn writes(&self) -> Vec<(String, String, String, SystemTime)> {
        let entries = self.0.lock().unwrap();
        entries
            .writes
            .iter()
            .flat_map(|(replica, log)| {
                log.controller_writes()
                    .into_iter()
                    .map(|(method, path, sent)| (replica.clone(), method, path, sent))
            })
            .collect()
    }
}

/// Records the end of a run when dropped: a run aborted (its replica killed) ends then too.
struct RunGuard(Ledger, usize);

impl Drop for RunGuard {
    fn drop(&mut self) {
        self.0.run_ended(self.1);
    }
}

/// One sharded replica, running every controller over every namespace.
struct Replica {
    name: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<Outcome, membership::Error>>,
    telemetry: Telemetry,
    leases_cut: Arc<std::sync::atomic::AtomicBool>,
}

fn start_replica(cluster: &kube::Config, leases: &str, name: &str, ledger: &Ledger) -> Replica {
    let selectors = Selectors::default();
    // Once switched on, the replica's requests about Leases go to a path the apiserver does not
    // serve (404), as when it can no longer reach or may no longer write them.
    let leases_cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cut = {
        let leases_cut = leases_cut.clone();
        tower::util::MapRequestLayer::new(move |mut request: http::Request<kube::client::Body>| {
            if leases_cut.load(std::sync::atomic::Ordering::SeqCst)
                && request.uri().path().contains("/leases")
            {
                let cut = request.uri().to_string().replace("/leases", "/leases-cut");
                *request.uri_mut() = cut.parse().unwrap();
            }
            request
        })
    };
    let client = kube::client::ClientBuilder::try_from(cluster.clone())
        .unwrap()
        .with_layer(&selectors.layer())
        .with_layer(&ledger.writes_of(name))
        .with_layer(&cut)
        .build();
    let telemetry = Telemetry::new(RequestCounter::default());
    // Over every namespace of the apiserver, which is the test's own.
    let mut run = config(
        None,
        &[
            ControllerName::Foo,
            ControllerName::MyCustomResource,
            ControllerName::Network,
        ],
    );
    run.runtime.instance = name.to_owned();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn({
        let (client, telemetry, name, ledger, shard) = (
            client.clone(),
            telemetry.clone(),
            name.to_owned(),
            ledger.clone(),
            shard_config(leases),
        );
        async move {
            let on_buckets = {
                let mut start =
                    sample_operator::on_buckets(client.clone(), run, telemetry.clone(), selectors);
                let name = name.clone();
                move |buckets, stopped| {
                    let guard = RunGuard(ledger.clone(), ledger.run_started(&name, buckets));
                    start(buckets, stopped).map(move |()| drop(guard))
                }
            };
            membership::run_sharded(
                client,
                &name,
                telemetry,
                shard,
                Duration::from_secs(5),
                async move {
                    let _ = stopped.await;
                },
                on_buckets,
            )
            .await
        }
    });
    Replica {
        name: name.to_owned(),
        stop,
        task,
        telemetry,
        leases_cut,
    }
}

impl Replica {
    /// Stops it as SIGTERM does: its reconciles drain, it gives its buckets up and leaves.
    async fn stop(self) {
        let _ = self.stop.send(());
        let outcome = tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the replica stops")
            .unwrap()
            .unwrap();
        assert_eq!(outcome, Outcome::Stopped, "{}", self.name);
    }

    /// Stops it as SIGKILL does: nothing more is sent, its Lease and its buckets stay.
    async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    fn metric(&self, family: &str, labels: &[(&str, &str)]) -> f64 {
        metric_sum(&self.telemetry.metrics.render(), family, labels)
    }
}

/// The holder map, as the replicas last wrote it.
async fn holders(leases: &Api<Lease>) -> BTreeMap<String, Buckets> {
    let Ok(Some(lease)) = leases.get_opt(&format!("{RING}-holders")).await else {
        return BTreeMap::new();
    };
    let Some(text) = lease.annotations().get(HOLDERS_ANNOTATION) else {
        return BTreeMap::new();
    };
    let raw: BTreeMap<String, String> = serde_json::from_str(text).unwrap();
    raw.into_iter().map(|(m, b)| (m, b.parse().unwrap())).collect()
}

fn members(replicas: &[Replica]) -> BTreeSet<String> {
    let config = shard_config("");
    replicas.iter().map(|r| config.member_lease(&r.name)).collect()
}

/// Waits until every bucket is held by one of `replicas`, and nobody else holds any.
async fn wait_all_held(leases: &Api<Lease>, replicas: &[Replica], timeout: Duration) {
    let members = members(replicas);
    testing::eventually("every bucket held by a live replica", timeout, async || {
        let holders = holders(leases).await;
        let held = holders.values().fold(Buckets::NONE, |all, b| all.union(*b));
        let strangers = holders.keys().any(|m| !members.contains(m));
        (held == Buckets::ALL && !strangers).then_some(())
    })
    .await;
}

/// Waits until `replicas` hold exactly the buckets their assignment gives each.
async fn wait_settled(leases: &Api<Lease>, replicas: &[Replica], timeout: Duration) {
    let members = members(replicas);
    let assigned = assign(members.iter().map(String::as_str));
    let started = Instant::now();
    while holders(leases).await != assigned {
        assert!(
            started.elapsed() < timeout,
            "the replicas do not hold their assignment {assigned:?}: {:?}",
            holders(leases).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates `count` Foos named `prefix-i`, 16 at a time; returns their buckets by name.
async fn create_foos(foos: &Api<Foo>, prefix: &str, count: usize) -> BTreeMap<String, u32> {
    futures::stream::iter(0..count)
        .map(|i| async move {
            let name = format!("{prefix}-{i}");
            let foo: Foo = new_foo(&name, &format!("{name}-d"), Some(1));
            let created = foos
                .create(&PostParams::default(), &foo)
                .await
                .expect("Foo created");
            (name, bucket_of(fnv1a(&created.uid().unwrap())))
        })
        .buffer_unordered(16)
        .collect()
        .await
}

/// Waits until every Foo's status describes its current generation.
async fn wait_converged(foos: &Api<Foo>, count: usize, timeout: Duration) {
    testing::eventually("every Foo converged", timeout, async || {
        let list = foos.list(&Default::default()).await.ok()?;
        let converged = list
            .items
            .iter()
            .filter(|f| f.status.as_ref().and_then(|s| s.observed_generation) == f.metadata.generation)
            .count();
        (list.items.len() == count && converged == count).then_some(())
    })
    .await;
}

/// The checks on the ledger: no bucket was held by two replicas' runs at one moment, and each
/// write about a Foo (its status, its Deployment) was sent by a replica that had been given the
/// Foo's bucket, at a moment no other replica's controllers held it.
fn assert_no_double_work(
    ledger: &Ledger,
    buckets: &BTreeMap<String, u32>,
    networks: &BTreeMap<(String, String), u32>,
) {
    let writes = ledger.writes();
    let entries = ledger.0.lock().unwrap();
    let now = SystemTime::now();
    let runs: Vec<(&str, Buckets, SystemTime, SystemTime)> = entries
        .runs
        .iter()
        .map(|(r, b, start, end)| (r.as_str(), *b, *start, end.unwrap_or(now)))
        .collect();
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            let shared = a.1.intersection(b.1);
            let overlap = a.2 < b.3 && b.2 < a.3;
            assert!(
                a.0 == b.0 || shared.is_empty() || !overlap,
                "buckets {shared} were held by {} and {} at once",
                a.0,
                b.0
            );
        }
    }
    let mut checked = 0;
    for (replica, method, path, sent) in &writes {
        // …/foos/NAME/status and …/deployments/NAME-d by the Foo's UID; a MyCustomResource's,
        // a Network's and an attachment definition's by their namespace.
        let segments: Vec<&str> = path.split('/').collect();
        let namespaced = segments
            .iter()
            .position(|s| *s == "namespaces")
            .and_then(|i| Some((*segments.get(i + 1)?, *segments.get(i + 2)?)));
        let bucket = match (segments.as_slice(), namespaced) {
            ([.., "foos", name, "status"], _) => buckets.get(*name).copied(),
            ([.., "deployments", name], _) => buckets.get(name.trim_end_matches("-d")).copied(),
            (_, Some((ns, "mycustomresources"))) if ns.starts_with(TENANT) => Some(bucket_of(fnv1a(ns))),
            // A Network's writes and its attachment definition's (of its name) by its UID.
            (_, Some((ns, "networks" | "network-attachment-definitions"))) if ns.starts_with(TENANT) => {
                let name = segments
                    .iter()
                    .skip_while(|s| **s != ns)
                    .nth(2)
                    .copied()
                    .unwrap_or_default();
                networks.get(&(ns.to_owned(), name.to_owned())).copied()
            }
            _ => None,
        };
        let Some(bucket) = bucket else {
            continue;
        };
        checked += 1;
        // Sent by a replica that was given the bucket…
        assert!(
            runs.iter()
                .any(|(r, b, start, _)| r == replica && b.contains(bucket) && start <= sent),
            "{replica} sent {method} {path} before it ever held bucket {bucket}"
        );
        // …and while no other replica held it. (A write of a killed replica's reconcile may
        // leave a moment after its run is marked ended, as the runtime cancels tasks one by
        // one; that is no double work until another replica takes the bucket, 10 s later.)
        if let Some((other, ..)) = runs
            .iter()
            .find(|(r, b, start, end)| r != replica && b.contains(bucket) && start <= sent && sent <= end)
        {
            panic!("{replica} sent {method} {path} while {other} held bucket {bucket}");
        }
    }
    assert!(
        checked >= buckets.len() + 2 * TENANTS * PER_TENANT,
        "only {checked} writes about the objects were logged"
    );
}

/// Each replica's share: its buckets, and the Foos whose status it wrote.
fn assert_shares(
    ledger: &Ledger,
    replicas: &[Replica],
    buckets: &BTreeMap<String, u32>,
    held: &BTreeMap<String, Buckets>,
) {
    let config = shard_config("");
    let foos_written = statuses_written(ledger, buckets);
    let writes = ledger.writes();
    for replica in replicas {
        let mine = held[&config.member_lease(&replica.name)];
        let share = f64::from(mine.len()) / f64::from(BUCKETS);
        assert!((0.2..=0.5).contains(&share), "{} holds {mine}", replica.name);
        let written = foos_written.get(&replica.name).copied().unwrap_or_default();
        let share = written as f64 / buckets.len() as f64;
        assert!(
            (0.2..=0.5).contains(&share),
            "{} wrote the status of {written} of {} Foos",
            replica.name,
            buckets.len()
        );
        // MyCustomResources and Networks: the tenants of its buckets, each as many.
        for plural in ["mycustomresources", "networks"] {
            let written: BTreeSet<(&str, &str)> = writes
                .iter()
                .filter(|(r, _, path, _)| r == &replica.name && path.ends_with("/status"))
                .filter_map(
                    |(_, _, path, _)| match path.split('/').collect::<Vec<_>>().as_slice() {
                        [.., "namespaces", ns, p, name, "status"]
                            if *p == plural && ns.starts_with(TENANT) =>
                        {
                            Some((*ns, *name))
                        }
                        _ => None,
                    },
                )
                .collect();
            let share = written.len() as f64 / (TENANTS * PER_TENANT) as f64;
            assert!(
                (0.2..=0.5).contains(&share),
                "{} wrote the status of {} of the {} {plural}",
                replica.name,
                written.len(),
                TENANTS * PER_TENANT
            );
        }
    }
}

/// How many of the Foos in `buckets` each replica wrote the status of.
fn statuses_written(ledger: &Ledger, buckets: &BTreeMap<String, u32>) -> BTreeMap<String, usize> {
    let writes = ledger.writes();
    let mut written: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for (replica, _, path, _) in &writes {
        if let [.., "foos", name, "status"] = path.split('/').collect::<Vec<_>>().as_slice()
            && buckets.contains_key(*name)
        {
            written.entry(replica.clone()).or_default().insert(name);
        }
    }
    written.into_iter().map(|(r, foos)| (r, foos.len())).collect()
}

/// The namespaces of the MyCustomResources (sharded by namespace) and the Networks (by UID),
/// named as teams name them: FNV-1a spreads words, while a numbered family (`tenant-1`,
/// `tenant-2`, …) falls into one or two buckets (`runtime::sharding`'s
/// `numbered_names_fall_together_and_words_spread`).
const TENANT_NAMES: [&str; 30] = [
    "payments",
    "search",
    "checkout",
    "billing",
    "identity",
    "monitoring",
    "logging",
    "ingress",
    "frontend",
    "backend",
    "analytics",
    "auth",
    "cart",
    "catalog",
    "orders",
    "shipping",
    "inventory",
    "notifications",
    "recommendations",
    "reviews",
    "pricing",
    "fraud",
    "support",
    "marketing",
    "media",
    "storage",
    "messaging",
    "gateway",
    "reporting",
    "compliance",
];
/// The tenants' namespaces carry this prefix, so the checks tell their objects from others.
const TENANT: &str = "team-";
const TENANTS: usize = TENANT_NAMES.len();
/// MyCustomResources (each with its Pod) and Networks in each.
const PER_TENANT: usize = 10;

fn tenant(t: usize) -> String {
    format!("{TENANT}{}", TENANT_NAMES[t])
}

/// The tenants' namespaces (with the ServiceAccount a Pod needs, which no controller-manager
/// makes here), each with `PER_TENANT` MyCustomResources, the Pods they name, and Networks of
/// prefixes of their own.
async fn create_tenants(admin: &Client) -> BTreeMap<(String, String), u32> {
    use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
    use sample_operator_api::{MyCustomResource, MyCustomResourceSpec};
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let networks_buckets = Arc::new(Mutex::new(BTreeMap::new()));
    futures::stream::iter(0..TENANTS)
        .for_each_concurrent(4, |t| {
            let networks_buckets = networks_buckets.clone();
            let (admin, namespaces) = (admin.clone(), namespaces.clone());
            async move {
                let ns = tenant(t);
                let namespace: Namespace =
                    serde_json::from_value(serde_json::json!({ "metadata": { "name": ns } })).unwrap();
                namespaces
                    .create(&PostParams::default(), &namespace)
                    .await
                    .unwrap();
                let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), &ns);
                let account: ServiceAccount =
                    serde_json::from_value(serde_json::json!({ "metadata": { "name": "default" } })).unwrap();
                accounts.create(&PostParams::default(), &account).await.unwrap();
                let (pods, resources, networks): (
                    Api<Pod>,
                    Api<MyCustomResource>,
                    Api<sample_operator_api::Network>,
                ) = (
                    Api::namespaced(admin.clone(), &ns),
                    Api::namespaced(admin.clone(), &ns),
                    Api::namespaced(admin.clone(), &ns),
                );
                for i in 0..PER_TENANT {
                    let pod: Pod = serde_json::from_value(serde_json::json!({
                        "metadata": { "name": format!("friend-{i}") },
                        "spec": { "containers": [{ "name": "c", "image": "nginx" }] },
                    }))
                    .unwrap();
                    pods.create(&PostParams::default(), &pod).await.unwrap();
                    let resource = MyCustomResource::new(
                        &format!("mcr-{i}"),
                        MyCustomResourceSpec {
                            name: format!("friend-{i}"),
                        },
                    );
                    resources.create(&PostParams::default(), &resource).await.unwrap();
                    // Prefixes apart across the cluster, as the Multus backend wants them.
                    let j = t * PER_TENANT + i;
                    let (a, b) = (16 + j / 256, j % 256);
                    let network = crate::support::network(
                        &format!("net-{i}"),
                        &format!("172.{a}.{b}.0/24"),
                        &format!("172.{a}.{b}.1"),
                    );
                    let created = networks.create(&PostParams::default(), &network).await.unwrap();
                    let bucket = bucket_of(fnv1a(&created.uid().unwrap()));
                    networks_buckets
                        .lock()
                        .unwrap()
                        .insert((ns.clone(), format!("net-{i}")), bucket);
                }
            }
        })
        .await;
    Arc::try_unwrap(networks_buckets).unwrap().into_inner().unwrap()
}

/// Waits until every tenant's MyCustomResources are healthy but those named in `unhealthy`, and
/// its Networks Ready, each for its current generation.
async fn wait_tenants_converged(admin: &Client, unhealthy: &BTreeSet<String>, timeout: Duration) {
    use sample_operator_api::MyCustomResource;
    let (resources, networks): (Api<MyCustomResource>, Api<sample_operator_api::Network>) =
        (Api::all(admin.clone()), Api::all(admin.clone()));
    testing::eventually("every tenant's objects converged", timeout, async || {
        let resources = resources.list(&Default::default()).await.ok()?.items;
        let networks = networks.list(&Default::default()).await.ok()?.items;
        let resources_done = resources.len() == TENANTS * PER_TENANT
            && resources.iter().all(|r| {
                let status = r.status.as_ref();
                status.and_then(|s| s.observed_generation) == r.metadata.generation
                    && status.is_some_and(|s| s.healthy) != unhealthy.contains(&r.name_any())
            });
        let networks_done = networks.len() == TENANTS * PER_TENANT
            && networks.iter().all(|n| {
                crate::support::ready_is_current(n)
                    && crate::support::ready_condition(n).is_some_and(|c| c.status == "True")
            });
        (resources_done && networks_done).then_some(())
    })
    .await;
}

/// The whole story on one apiserver: three replicas split a burst of Foos; one is killed
/// during a second burst and its buckets are taken over within the Lease duration and 5 s;
/// two more join and three leave while the Foos change; every Foo converges, and the ledger
/// shows no double work.
async fn sharded_replicas_converge_and_hand_over(
    cluster: kube::Config,
    filtering: Filtering,
    foos_per_burst: usize,
) {
    // The replicas' own account of their moves, shown when the test fails.
    let _ = tracing_subscriber::fmt()
        .with_env_filter("sample_operator::runtime::sharding=info")
        .with_test_writer()
        .try_init();
    let admin = Client::try_from(cluster.clone()).unwrap();
    let ns = TestNamespace::create(&admin, "sharding").await;
    let foos: Api<Foo> = Api::namespaced(admin.clone(), &ns.name);
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns.name);
    crate::network::install_nad_crd(&admin).await;
    let ledger = Ledger::default();
    // As a rollout starts them: within moments, not at once.
    let mut replicas = Vec::new();
    for name in ["a", "b", "c"] {
        replicas.push(start_replica(&cluster, &ns.name, name, &ledger));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    wait_settled(&leases, &replicas, Duration::from_secs(60)).await;
    // They saw one another before taking any bucket: none took more than its share first (and
    // listed every object, to hand most over a moment later).
    for (replica, held, ..) in ledger.0.lock().unwrap().runs.iter() {
        assert!(
            held.len() <= BUCKETS.div_ceil(3),
            "{replica} first ran with buckets {held}, more than a third"
        );
    }

    // Three replicas split a burst, and the tenants' objects.
    let networks = create_tenants(&admin).await;
    let mut buckets = create_foos(&foos, "first", foos_per_burst).await;
    wait_converged(&foos, buckets.len(), Duration::from_secs(180)).await;
    wait_tenants_converged(&admin, &BTreeSet::new(), Duration::from_secs(180)).await;
    let held = holders(&leases).await;
    assert_shares(&ledger, &replicas, &buckets, &held);
    let mode = match filtering {
        Filtering::Server => "server",
        Filtering::Client => "client",
    };
    for replica in &replicas {
        // What the dashboard's sharding row shows.
        let mine = held[&shard_config("").member_lease(&replica.name)];
        assert_eq!(
            replica.metric("sample_operator_shard_buckets", &[("state", "held")]),
            f64::from(mine.len()),
            "{}",
            replica.name
        );
        assert_eq!(
            replica.metric("sample_operator_shard_buckets", &[("state", "unheld")]),
            0.0
        );
        assert_eq!(replica.metric("sample_operator_shard_members", &[]), 3.0);
        // (More when a replica that started early took buckets it gave up as others joined.)
        assert!(
            replica.metric(
                "sample_operator_shard_handovers_total",
                &[("direction", "acquired")]
            ) >= f64::from(mine.len())
        );
        let resource = "foos.samplecontroller.k8s.io";
        // Told by a check in the background, within 5 s of the first Foo.
        let labels = [("resource", resource), ("mode", mode)];
        testing::eventually(
            &format!("{}'s filtering told", replica.name),
            Duration::from_secs(30),
            async || (replica.metric("sample_operator_shard_filtering", &labels) == 1.0).then_some(()),
        )
        .await;
        let dropped = replica.metric(
            "sample_operator_shard_filtered_events_total",
            &[("resource", resource)],
        );
        match filtering {
            // The API server sent each replica its own Foos only.
            Filtering::Server => assert_eq!(dropped, 0.0, "{}", replica.name),
            Filtering::Client => assert!(dropped > 0.0, "{}", replica.name),
        }
    }
    // Each replica counts the objects it reconciles, once: the counts add up to every object.
    for (controller, count) in [
        ("foo", buckets.len()),
        ("my-custom-resource", TENANTS * PER_TENANT),
        ("network", TENANTS * PER_TENANT),
    ] {
        let counted: f64 = replicas
            .iter()
            .map(|r| r.metric("sample_operator_objects", &[("controller", controller)]))
            .sum();
        assert_eq!(counted, count as f64, "{controller}");
    }
    // The events each replica received, against its share of the Foos: its share where the
    // API server filters, every Foo's where it does not.
    let received: Vec<f64> = replicas
        .iter()
        .map(|r| {
            r.metric(
                "sample_operator_watch_events_total",
                &[("resource", "foos.samplecontroller.k8s.io")],
            )
        })
        .collect();
    let total: f64 = received.iter().sum();
    let statuses = statuses_written(&ledger, &buckets);
    for (replica, received) in replicas.iter().zip(&received) {
        let share = statuses.get(&replica.name).copied().unwrap_or_default() as f64 / buckets.len() as f64;
        match filtering {
            Filtering::Server => assert!(
                (received / total - share).abs() <= 0.1,
                "{} received {received} of {total} Foo events, and holds {share:.2} of the Foos",
                replica.name
            ),
            Filtering::Client => assert!(
                *received >= buckets.len() as f64,
                "{} received {received} Foo events for {} Foos",
                replica.name,
                buckets.len()
            ),
        }
    }

    // One is killed halfway through a second burst.
    let half = foos_per_burst / 2;
    buckets.extend(create_foos(&foos, "second", half).await);
    let killed = replicas.remove(0);
    killed.kill().await;
    let killed_at = Instant::now();
    buckets.extend(create_foos(&foos, "third", foos_per_burst - half).await);
    wait_all_held(&leases, &replicas, Duration::from_secs(60)).await;
    let taken_over = killed_at.elapsed();
    assert!(
        taken_over <= shard_config("").duration + Duration::from_secs(5),
        "the killed replica's buckets were held again after {taken_over:?}"
    );
    wait_settled(&leases, &replicas, Duration::from_secs(60)).await;
    wait_converged(&foos, buckets.len(), Duration::from_secs(180)).await;

    // From two to five, then to two, while every Foo changes and each tenant's first Pod goes.
    let pods_go = {
        let admin = admin.clone();
        tokio::spawn(async move {
            for t in 0..TENANTS {
                let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(admin.clone(), &tenant(t));
                // No kubelet here: deleted at once, without a grace period.
                pods.delete("friend-0", &kube::api::DeleteParams::default().grace_period(0))
                    .await
                    .expect("Pod deleted");
            }
        })
    };
    let churn = {
        let foos = foos.clone();
        let names: Vec<String> = buckets.keys().cloned().collect();
        tokio::spawn(async move {
            futures::stream::iter(names)
                .for_each_concurrent(8, |name| {
                    let foos = foos.clone();
                    async move {
                        let patch = serde_json::json!({ "spec": { "replicas": 2 } });
                        foos.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                            .await
                            .expect("Foo scaled");
                    }
                })
                .await
        })
    };
    for joining in ["d", "e", "f"] {
        replicas.push(start_replica(&cluster, &ns.name, joining, &ledger));
    }
    wait_settled(&leases, &replicas, Duration::from_secs(60)).await;
    for leaving in replicas.drain(..3).collect::<Vec<_>>() {
        leaving.stop().await;
    }
    wait_settled(&leases, &replicas, Duration::from_secs(60)).await;
    churn.await.unwrap();
    pods_go.await.unwrap();
    wait_converged(&foos, buckets.len(), Duration::from_secs(180)).await;
    wait_tenants_converged(
        &admin,
        &BTreeSet::from(["mcr-0".to_owned()]),
        Duration::from_secs(180),
    )
    .await;
    testing::eventually("every Foo at 2 replicas", Duration::from_secs(120), async || {
        let list = foos.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .all(|f| {
                f.spec.replicas == Some(2)
                    && f.status.as_ref().and_then(|s| s.observed_generation) == f.metadata.generation
            })
            .then_some(())
    })
    .await;
    // One that can no longer renew its Lease stops its controllers before the Lease could
    // expire and the other takes its buckets (the ledger below shows the order).
    let cut = replicas.pop().unwrap();
    cut.leases_cut.store(true, std::sync::atomic::Ordering::SeqCst);
    let outcome = tokio::time::timeout(Duration::from_secs(30), cut.task)
        .await
        .expect("the replica without its Lease stops")
        .unwrap()
        .unwrap();
    assert_eq!(outcome, Outcome::RenewalsFailed);
    wait_all_held(&leases, &replicas, Duration::from_secs(30)).await;
    let foos_now = buckets.len();
    buckets.extend(create_foos(&foos, "fourth", 10).await);
    wait_converged(&foos, foos_now + 10, Duration::from_secs(60)).await;
    for replica in replicas {
        replica.stop().await;
    }
    assert!(
        holders(&leases).await.is_empty(),
        "the last replicas gave their buckets up"
    );
    assert_no_double_work(&ledger, &buckets, &networks);
}

#[tokio::test]
async fn sharded_replicas_split_the_foos_and_hand_over_without_double_work() {
    // The local cluster's apiserver, etcd and kube-apiserver only: no Pod of the Foos'
    // Deployments loads the shared cluster's scheduler and kwok.
    let Some(cluster) = ApiserverOfItsOwn::start("sharded-replicas", Default::default()).await else {
        return;
    };
    sharded_replicas_converge_and_hand_over(
        cluster.config.clone(),
        Filtering::Server,
        testing::sized(300, 3_000),
    )
    .await;
}

/// The same on an apiserver with KEP-5866's gate off: the replicas' selectors are ignored, and
/// they filter their Foos themselves.
#[tokio::test]
async fn without_the_feature_gate_sharded_replicas_filter_on_their_side() {
    let options = local_cluster::UpOptions {
        without_sharded_lists: true,
        ..Default::default()
    };
    let Some(cluster) = ApiserverOfItsOwn::start("no-sharded-lists", options).await else {
        return;
    };
    sharded_replicas_converge_and_hand_over(
        cluster.config.clone(),
        Filtering::Client,
        testing::sized(150, 3_000),
    )
    .await;
}

/// etcd and kube-apiserver of a test's own, with the CRDs installed; stopped and removed,
/// folder and lock file, however the test ends.
struct ApiserverOfItsOwn {
    config: kube::Config,
    _own: ClusterOfItsOwn,
}

impl ApiserverOfItsOwn {
    /// `None` (the test skipped, and said why) against an existing cluster.
    async fn start(name: &str, options: local_cluster::UpOptions<'_>) -> Option<Self> {
        let own = ClusterOfItsOwn::new(name, name)?;
        own.cluster
            .up_with(local_cluster::UpOptions {
                apiserver_only: true,
                ..options
            })
            .await
            .expect("an apiserver of the test's own starts");
        let config = own.cluster.config().await.unwrap();
        let admin = Client::try_from(config.clone()).unwrap();
        testing::install_crds(&admin, &all_crds())
            .await
            .expect("CRDs install");
        Some(Self { config, _own: own })
    }
}
