//! The MyCustomResource controller on a real cluster: the kubebuilder seed's flow, scoped to the
//! resource's own namespace, and what it costs (requests, writes, events, memory).

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use local_cluster::testing::{self, TestNamespace};
use sample_operator::ControllerName;
use sample_operator_api::{MyCustomResource, MyCustomResourceSpec};
use serde_json::json;

use crate::support::{
    Operator, assert_quiet_across_resyncs_and_restarts, client_with_crds, config, ready_condition,
    wait_for_event,
};

const SAMPLES: &str = include_str!("../../../../samples/my-custom-resource.yaml");
/// How long the controller may take to react to a change: seconds, even on a busy machine.
const REACTION: Duration = Duration::from_secs(20);
/// How long anything else may take, such as an operator starting while other suites run.
const TIMEOUT: Duration = Duration::from_secs(60);
/// A finalizer of the tests' own, which keeps a deleted Pod terminating until it is removed.
const HOLD: &str = "sample-operator.dev/test-hold";

fn my_custom_resource(name: &str, pod: &str) -> MyCustomResource {
    MyCustomResource::new(name, MyCustomResourceSpec { name: pod.into() })
}

/// A Pod kwok runs; the image is never pulled.
fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "containers": [{ "name": "app", "image": "busybox:1" }] },
    }))
    .unwrap()
}

/// The Pods of `namespace`, once Pods can be created there: admission refuses Pods until the
/// controller-manager has created the namespace's default ServiceAccount.
async fn pods_in(client: &Client, namespace: &str) -> Api<Pod> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    testing::wait_for(&accounts, "default", "created", TIMEOUT, |_| true)
        .await
        .unwrap();
    Api::namespaced(client.clone(), namespace)
}

async fn create_pod(pods: &Api<Pod>, pod: &Pod) {
    pods.create(&PostParams::default(), pod).await.unwrap();
}

/// Waits until kwok reports the Pod Running, so that its status updates are behind us.
async fn wait_running(pods: &Api<Pod>, name: &str) {
    testing::wait_for(pods, name, "Running", TIMEOUT, |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    })
    .await
    .unwrap();
}

/// Waits until the resource reports `healthy` with the matching `Ready` condition, for its
/// current generation.
async fn wait_healthy(mcrs: &Api<MyCustomResource>, name: &str, healthy: bool) -> MyCustomResource {
    wait_healthy_within(mcrs, name, healthy, TIMEOUT).await
}

/// [`wait_healthy`], for a reaction that must come within `timeout`.
async fn wait_healthy_within(
    mcrs: &Api<MyCustomResource>,
    name: &str,
    healthy: bool,
    timeout: Duration,
) -> MyCustomResource {
    let (status, reason) = if healthy {
        ("True", "FriendFound")
    } else {
        ("False", "FriendMissing")
    };
    testing::wait_for(
        mcrs,
        name,
        &format!("Healthy {healthy}, Ready {status} {reason}"),
        timeout,
        |m| {
            m.status
                .as_ref()
                .is_some_and(|s| s.healthy == healthy && s.observed_generation == m.metadata.generation)
                && ready_condition(m).is_some_and(|r| r.status == status && r.reason == reason)
        },
    )
    .await
    .unwrap()
}

/// `status.Healthy` as stored, not as the Rust type defaults it: `None` when the key is absent.
async fn stored_healthy(client: &Client, namespace: &str, name: &str) -> Option<serde_json::Value> {
    let resource = ApiResource::erase::<MyCustomResource>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let obj = api.get(name).await.unwrap();
    obj.data.get("status")?.get("Healthy").cloned()
}

#[tokio::test]
async fn the_seeds_flow_a_friend_pod_makes_01_healthy_and_02_stays_unhealthy() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "mcr-seed").await;
    let operator = Operator::start(&ns.name, &[ControllerName::MyCustomResource]).await;
    testing::create_manifest(&client, &ns.name, SAMPLES)
        .await
        .unwrap();
    let mcrs = ns.api::<MyCustomResource>();
    for name in ["my-custom-resource-01", "my-custom-resource-02"] {
        wait_healthy(&mcrs, name, false).await;
        // The seed leaves `Healthy` out when false (omitempty); here it is always written.
        assert_eq!(stored_healthy(&client, &ns.name, name).await, Some(json!(false)));
    }

    // The seed's Pod, named as in -01's spec.name.
    let pods = pods_in(&client, &ns.name).await;
    create_pod(&pods, &pod("funny-joe")).await;
    let started = Instant::now();
    let healthy = wait_healthy_within(&mcrs, "my-custom-resource-01", true, REACTION).await;
    eprintln!(
        "my-custom-resource-01 healthy {:?} after the Pod was created",
        started.elapsed()
    );
    assert_eq!(
        ready_condition(&healthy).unwrap().message,
        format!("Pod \"funny-joe\" exists in namespace {:?}", ns.name)
    );
    assert_eq!(
        stored_healthy(&client, &ns.name, "my-custom-resource-01").await,
        Some(json!(true))
    );
    let lonely = mcrs.get("my-custom-resource-02").await.unwrap();
    assert!(!lonely.status.as_ref().unwrap().healthy);
    assert_eq!(
        ready_condition(&lonely).unwrap().message,
        format!("No Pod \"lonely-jane\" in namespace {:?}", ns.name)
    );

    pods.delete("funny-joe", &DeleteParams::default()).await.unwrap();
    wait_healthy_within(&mcrs, "my-custom-resource-01", false, REACTION).await;
    testing::wait_for_deletion(&pods, "funny-joe", TIMEOUT)
        .await
        .unwrap();
    let gone = testing::wait_for(
        &mcrs,
        "my-custom-resource-01",
        "the Pod reported gone",
        TIMEOUT,
        |m| ready_condition(m).is_some_and(|r| r.message.starts_with("No Pod")),
    )
    .await
    .unwrap();
    assert!(!gone.status.as_ref().unwrap().healthy);
    assert_eq!(
        ready_condition(&gone).unwrap().message,
        format!("No Pod \"funny-joe\" in namespace {:?}", ns.name)
    );
    assert_eq!(
        stored_healthy(&client, &ns.name, "my-custom-resource-01").await,
        Some(json!(false))
    );
    assert!(
        !mcrs
            .get("my-custom-resource-02")
            .await
            .unwrap()
            .status
            .unwrap()
            .healthy
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_terminating_pod_is_not_a_friend() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "mcr-terminating").await;
    let operator = Operator::start(&ns.name, &[ControllerName::MyCustomResource]).await;
    let pods = pods_in(&client, &ns.name).await;
    let mut held = pod("held");
    held.metadata.finalizers = Some(vec![HOLD.into()]);
    create_pod(&pods, &held).await;
    let mcrs = ns.api::<MyCustomResource>();
    mcrs.create(&PostParams::default(), &my_custom_resource("waiting", "held"))
        .await
        .unwrap();
    wait_healthy(&mcrs, "waiting", true).await;

    pods.delete("held", &DeleteParams::default()).await.unwrap();
    let unhealthy = wait_healthy_within(&mcrs, "waiting", false, REACTION).await;
    assert!(
        ready_condition(&unhealthy)
            .unwrap()
            .message
            .contains("is being deleted"),
        "{:?}",
        ready_condition(&unhealthy)
    );
    // The Pod still exists: our finalizer holds it, terminating.
    let terminating = pods.get("held").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());

    let release = json!({ "metadata": { "finalizers": null } });
    pods.patch("held", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    testing::wait_for_deletion(&pods, "held", TIMEOUT).await.unwrap();
    testing::wait_for(&mcrs, "waiting", "the Pod reported gone", REACTION, |m| {
        ready_condition(m).is_some_and(|r| r.message.starts_with("No Pod"))
    })
    .await
    .unwrap();

    // A new Pod of that name is a friend again.
    create_pod(&pods, &pod("held")).await;
    wait_healthy(&mcrs, "waiting", true).await;
    operator.stop().await;
}

#[tokio::test]
async fn a_pod_in_another_namespace_does_not_count() {
    // This test's operator watches every namespace: .config/nextest.toml runs it alone.
    let client = client_with_crds().await;
    let mine = TestNamespace::create(&client, "mcr-scope-mine").await;
    let theirs = TestNamespace::create(&client, "mcr-scope-theirs").await;
    let operator = Operator::start_with(config(None, &[ControllerName::MyCustomResource])).await;
    let my_mcrs = mine.api::<MyCustomResource>();
    let their_mcrs = theirs.api::<MyCustomResource>();
    my_mcrs
        .create(&PostParams::default(), &my_custom_resource("mine", "shared-name"))
        .await
        .unwrap();
    their_mcrs
        .create(
            &PostParams::default(),
            &my_custom_resource("theirs", "shared-name"),
        )
        .await
        .unwrap();
    wait_healthy(&my_mcrs, "mine", false).await;
    wait_healthy(&their_mcrs, "theirs", false).await;

    // A Pod of that name in their namespace: theirs becomes healthy (so the operator saw the
    // Pod), mine does not.
    let their_pods = pods_in(&client, &theirs.name).await;
    create_pod(&their_pods, &pod("shared-name")).await;
    wait_healthy(&their_mcrs, "theirs", true).await;
    wait_running(&their_pods, "shared-name").await;
    // A resource created now, in my namespace, is reconciled with their Pod in the cache.
    my_mcrs
        .create(
            &PostParams::default(),
            &my_custom_resource("mine-too", "shared-name"),
        )
        .await
        .unwrap();
    wait_healthy(&my_mcrs, "mine-too", false).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!my_mcrs.get("mine").await.unwrap().status.unwrap().healthy);

    // The other way round: my Pod makes mine healthy, and deleting theirs leaves mine alone.
    let my_pods = pods_in(&client, &mine.name).await;
    create_pod(&my_pods, &pod("shared-name")).await;
    wait_healthy(&my_mcrs, "mine", true).await;
    their_pods
        .delete("shared-name", &DeleteParams::default())
        .await
        .unwrap();
    wait_healthy(&their_mcrs, "theirs", false).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(my_mcrs.get("mine").await.unwrap().status.unwrap().healthy);
    operator.stop().await;
}

#[tokio::test]
async fn changing_spec_name_re_evaluates_at_once() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "mcr-rename").await;
    // No resync: only the change itself can trigger the reconcile.
    let operator = Operator::start(&ns.name, &[ControllerName::MyCustomResource]).await;
    let pods = pods_in(&client, &ns.name).await;
    create_pod(&pods, &pod("alpha")).await;
    wait_running(&pods, "alpha").await;
    let mcrs = ns.api::<MyCustomResource>();
    mcrs.create(&PostParams::default(), &my_custom_resource("fickle", "beta"))
        .await
        .unwrap();
    wait_healthy(&mcrs, "fickle", false).await;

    let rename = |pod: &str| json!({ "spec": { "name": pod } });
    mcrs.patch("fickle", &PatchParams::default(), &Patch::Merge(&rename("alpha")))
        .await
        .unwrap();
    let started = Instant::now();
    let renamed = wait_healthy_within(&mcrs, "fickle", true, REACTION).await;
    eprintln!("healthy {:?} after spec.name changed", started.elapsed());
    assert_eq!(renamed.status.unwrap().observed_generation, Some(2));

    mcrs.patch("fickle", &PatchParams::default(), &Patch::Merge(&rename("beta")))
        .await
        .unwrap();
    let back = wait_healthy(&mcrs, "fickle", false).await;
    assert_eq!(back.status.unwrap().observed_generation, Some(3));
    // The index followed the rename: alpha's events no longer concern this resource, beta's do.
    create_pod(&pods, &pod("beta")).await;
    wait_healthy(&mcrs, "fickle", true).await;
    operator.stop().await;
}

#[tokio::test]
async fn a_pod_event_reaches_exactly_the_resources_naming_it_without_api_reads() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "mcr-mapping").await;
    let operator = Operator::start(&ns.name, &[ControllerName::MyCustomResource]).await;
    let mcrs = ns.api::<MyCustomResource>();
    for (name, pod) in [
        ("first", "popular"),
        ("second", "popular"),
        ("third", "unpopular"),
    ] {
        mcrs.create(&PostParams::default(), &my_custom_resource(name, pod))
            .await
            .unwrap();
    }
    for name in ["first", "second", "third"] {
        wait_healthy(&mcrs, name, false).await;
    }
    let pods = pods_in(&client, &ns.name).await;
    // Let the first status writes and their events settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let third = mcrs.get("third").await.unwrap();

    let before = operator.requests();
    create_pod(&pods, &pod("popular")).await;
    wait_healthy(&mcrs, "first", true).await;
    wait_healthy(&mcrs, "second", true).await;
    // kwok's status updates of the Pod are Pod events too, each mapped the same way.
    wait_running(&pods, "popular").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = operator.requests().since(&before);

    // No GET and no LIST: the Pod event found its resources in the index, and reconcile read
    // the Pod from the cache. (The seed lists every MyCustomResource on each Pod event.)
    assert_eq!(during.get, 0, "reads on a Pod event: {during:?}");
    // One status write per resource naming the Pod, none for the other.
    assert_eq!(during.patch, 2, "{during:?}");
    assert_eq!(
        mcrs.get("third").await.unwrap().resource_version(),
        third.resource_version()
    );
    operator.stop().await;
}

#[tokio::test]
async fn the_deployed_rbac_is_all_the_controller_needs() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "mcr-rbac").await;
    // The operator acts as its ServiceAccount: whatever deploy/operator/rbac.yaml does not grant
    // (the Pod watch, the status patch, events) fails here.
    let operator = Operator::start(&ns.name, &[ControllerName::MyCustomResource]).await;
    let mcrs = ns.api::<MyCustomResource>();
    mcrs.create(&PostParams::default(), &my_custom_resource("granted", "friend"))
        .await
        .unwrap();
    wait_healthy(&mcrs, "granted", false).await;
    let pods = pods_in(&client, &ns.name).await;
    create_pod(&pods, &pod("friend")).await;
    wait_healthy(&mcrs, "granted", true).await;
    wait_for_event(&client, &ns.name, "granted", "FriendFound").await;
    operator.stop().await;
}

#[tokio::test]
async fn status_is_written_only_when_it_changes() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "mcr-steady").await;
    let mut config = config(Some(&ns.name), &[ControllerName::MyCustomResource]);
    config.runtime.resync = Some(Duration::from_secs(1));
    let operator = Operator::start_with(config.clone()).await;
    let pods = pods_in(&client, &ns.name).await;
    let mcrs = ns.api::<MyCustomResource>();
    for i in 0..10 {
        if i % 2 == 0 {
            create_pod(&pods, &pod(&format!("friend-{i}"))).await;
        }
        mcrs.create(
            &PostParams::default(),
            &my_custom_resource(&format!("steady-{i}"), &format!("friend-{i}")),
        )
        .await
        .unwrap();
    }
    for i in 0..10 {
        wait_healthy(&mcrs, &format!("steady-{i}"), i % 2 == 0).await;
    }
    for i in (0..10).step_by(2) {
        wait_running(&pods, &format!("friend-{i}")).await;
    }
    let restarts = [config.runtime.initial_list];
    assert_quiet_across_resyncs_and_restarts(operator, &config, &restarts, async |_| {}).await;
}

/// Memory of the MyCustomResource controller by how it watches Pods. Not a check but a
/// measurement, kept here so that it can be repeated: it creates 5,000 Pods
/// (`SAMPLE_OPERATOR_MEMORY_PODS` overrides) in a namespace of its own and runs the
/// `pod_watch` example (the controller as the operator runs it, with the operator's allocator;
/// override the path with `SAMPLE_OPERATOR_POD_WATCH_BIN`, for a release build) on it three
/// times: on a namespace with one Pod (the baseline), then with the metadata-only Pod watch the
/// operator ships with, then with a watch of whole Pods. Each run is measured once the Pod cache
/// is filled, from /proc/<pid>/status: VmHWM (peak resident set) and VmRSS.
///
/// The Pods carry a scheduling gate, so they stay Pending without the scheduler or kwok ever
/// touching them: creating them costs the cluster little, and their objects look the same to
/// every run. Run it with:
///
/// `cargo test -p sample-operator --test integration my_custom_resource::pod_watch_memory -- --ignored --nocapture`
#[tokio::test]
#[ignore = "a measurement: creates 5,000 Pods and takes minutes"]
async fn pod_watch_memory() {
    let count: usize = std::env::var("SAMPLE_OPERATOR_MEMORY_PODS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5000);
    let client = client_with_crds().await;
    let crowded = TestNamespace::create(&client, "mcr-memory").await;
    let baseline = TestNamespace::create(&client, "mcr-memory-baseline").await;

    let pods = pods_in(&client, &crowded.name).await;
    let started = Instant::now();
    let creates = futures::stream::iter(0..count)
        .map(|i| {
            let pods = pods.clone();
            async move {
                pods.create(&PostParams::default(), &gated_pod(&format!("pod-{i}")))
                    .await
            }
        })
        .buffer_unordered(32);
    let results: Vec<_> = creates.collect().await;
    for result in results {
        result.unwrap();
    }
    eprintln!("created {count} Pods in {:?}", started.elapsed());
    let baseline_pods = pods_in(&client, &baseline.name).await;
    baseline_pods
        .create(&PostParams::default(), &gated_pod("pod-0"))
        .await
        .unwrap();

    let runs: [(&str, &TestNamespace, &str); 3] = [
        ("baseline, 1 Pod", &baseline, "metadata"),
        ("metadata-only Pod watch", &crowded, "metadata"),
        ("whole-Pod watch", &crowded, "full"),
    ];
    let mut report = Vec::new();
    for (i, (label, ns, watch)) in runs.into_iter().enumerate() {
        // A new resource per run: its first status tells that this run's Pod cache is filled.
        let probe = format!("probe-{i}");
        let mcrs = ns.api::<MyCustomResource>();
        mcrs.create(&PostParams::default(), &my_custom_resource(&probe, "pod-0"))
            .await
            .unwrap();
        let (vm_hwm, vm_rss) = measure_operator(&ns.name, watch, &mcrs, &probe).await;
        eprintln!("{label}: VmHWM {vm_hwm} kB, VmRSS {vm_rss} kB");
        report.push((label, vm_hwm, vm_rss));
    }
    eprintln!("\nsample-operator with {count} Pods in the watched namespace:");
    for (label, vm_hwm, vm_rss) in report {
        eprintln!(
            "  {label:<24} peak RSS {:>6.1} MiB   RSS {:>6.1} MiB",
            vm_hwm as f64 / 1024.0,
            vm_rss as f64 / 1024.0
        );
    }
}

/// A small Pod that stays Pending: the scheduler leaves gated Pods alone.
fn gated_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": "memory-test" } },
        "spec": {
            "schedulingGates": [{ "name": "sample-operator.dev/never" }],
            "containers": [{ "name": "app", "image": "registry.k8s.io/pause:3.10" }],
        },
    }))
    .unwrap()
}

/// Runs the `pod_watch` example on `namespace` with Pods watched as `watch` says until `probe`
/// is healthy, lets it settle, and returns its VmHWM and VmRSS in kB.
async fn measure_operator(
    namespace: &str,
    watch: &str,
    mcrs: &Api<MyCustomResource>,
    probe: &str,
) -> (u64, u64) {
    // Cargo builds the examples beside the test binaries: target/<profile>/examples/.
    let binary = std::env::var("SAMPLE_OPERATOR_POD_WATCH_BIN").unwrap_or_else(|_| {
        let test_binary = std::env::current_exe().expect("the test binary's path");
        let profile_dir = test_binary
            .parent()
            .and_then(|deps| deps.parent())
            .expect("target/<profile>");
        profile_dir.join("examples/pod_watch").display().to_string()
    });
    let mut command = tokio::process::Command::new(&binary);
    command
        .args(["--namespace", namespace, "--watch", watch])
        .kill_on_drop(true);
    if !testing::uses_existing_cluster() {
        command.env("KUBECONFIG", local_cluster::LocalCluster::default().kubeconfig());
    }
    let mut child = command.spawn().unwrap_or_else(|e| panic!("{binary}: {e}"));
    let pid = child.id().expect("the operator runs");
    testing::wait_for(mcrs, probe, "healthy", Duration::from_secs(300), |m| {
        m.status.as_ref().is_some_and(|s| s.healthy)
    })
    .await
    .unwrap();
    // Let the allocator and the watches settle after the initial list.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
    };
    let measured = (kb("VmHWM:"), kb("VmRSS:"));
    let _ = child.start_kill();
    let _ = child.wait().await;
    measured
}

#[tokio::test]
async fn one_namespaces_thousand_resources_do_not_hold_back_anothers_one() {
    // This test's operator watches every namespace: .config/nextest.toml runs it alone.
    let client = client_with_crds().await;
    let burst = TestNamespace::create(&client, "mcr-fair-burst").await;
    let quiet = TestNamespace::create(&client, "mcr-fair-quiet").await;
    let (burst_mcrs, quiet_mcrs) = (burst.api::<MyCustomResource>(), quiet.api::<MyCustomResource>());
    // A thousand waiting when the operator starts: its first list queues them all at once.
    const BURST: usize = 1_000;
    futures::stream::iter(0..BURST)
        .map(|i| {
            let mcrs = burst_mcrs.clone();
            async move {
                mcrs.create(
                    &PostParams::default(),
                    &my_custom_resource(&format!("b{i}"), "absent"),
                )
                .await
                .unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    // One reconcile at a time, so that the queue's order is the order of the work.
    let mut run = config(None, &[ControllerName::MyCustomResource]);
    run.runtime.concurrency = 1;
    let operator = Operator::start_with(run).await;
    quiet_mcrs
        .create(&PostParams::default(), &my_custom_resource("one", "absent"))
        .await
        .unwrap();
    let reported = testing::poll(TIMEOUT, async || {
        let one = quiet_mcrs.get("one").await.unwrap();
        one.status.is_some().then_some(())
    })
    .await;
    assert!(reported.is_some(), "the quiet namespace's resource got no status");
    let waiting = burst_mcrs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|m| m.status.is_none())
        .count();
    // In turns, the quiet namespace's one ran next after the burst's current one; in the
    // order asked, it would have run after all of them.
    assert!(
        waiting >= BURST / 2,
        "only {waiting} of the burst's {BURST} were still waiting when the other namespace's one was reconciled"
    );
    operator.stop().await;
}
