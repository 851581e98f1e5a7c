//! The operator binary as it runs in production: leader election between two processes,
//! the HTTP endpoints, graceful shutdown, and the one-line errors of a misconfiguration. The
//! processes act as the operator's ServiceAccount (impersonated), so they also prove that
//! deploy/operator/rbac.yaml suffices, the leader Lease included.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use kube::api::PostParams;
use local_cluster::testing::{self, TestNamespace};
use nix::sys::signal::Signal;
use sample_operator_api::{Foo, FooSpec};

use crate::support::operator::{BINARY, until};
use crate::support::{
    OperatorProcess, client_with_crds, create_foo, eventually, metric_sum, operator_kubeconfig, scratch_dir,
    wait_foo_available,
};

#[tokio::test]
async fn one_leader_writes_and_hands_over_on_kill_and_on_sigterm() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "leader").await;
    let dir = scratch_dir(&ns.name);
    let kubeconfig = operator_kubeconfig(&client, &dir).await;
    let lease = format!("lease-{}", ns.name);
    let kubeconfig_arg = format!("--kubeconfig={}", kubeconfig.display());
    let namespace_arg = format!("--namespace={}", ns.name);
    let lease_arg = format!("--leader-election-name={lease}");
    let args = [
        kubeconfig_arg.as_str(),
        namespace_arg.as_str(),
        "--controllers=foo",
        "--leader-elect",
        "--leader-election-namespace=sample-operator",
        lease_arg.as_str(),
        // The lease lasts 15 s and is renewed 5 s before it expires, as by default: shorter
        // leases, on a machine busy with other tests, expire between two late renewals.
        "--drain-seconds=5",
    ];
    let a = OperatorProcess::spawn("replica-a", &dir, &args);
    let b = OperatorProcess::spawn("replica-b", &dir, &args);
    until("one replica leads", Duration::from_secs(60), &[&a, &b], || {
        a.is_leader() || b.is_leader()
    })
    .await;
    let (mut leader, standby) = if a.is_leader() { (a, b) } else { (b, a) };
    assert!(!standby.is_leader(), "two leaders");
    // Both are alive and ready: a standby is ready by design.
    for replica in [&leader, &standby] {
        assert_eq!(replica.get("/healthz").map(|r| r.0), Some(200));
        replica.wait_ready().await;
    }

    // (Before the election settled, both may have tried to create or take the Lease.)
    let standby_writes = standby.writes();
    let foos = ns.api::<Foo>();
    create_foo(&foos, "first").await;
    wait_foo_available(&foos, "first").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        leader.writes() > 0.0,
        "the leader wrote nothing:\n{}",
        leader.log()
    );
    assert_eq!(
        standby.writes(),
        standby_writes,
        "the standby wrote:\n{}",
        standby.log()
    );

    // A crashed leader blocks the standby for at most the lease duration.
    leader.signal(Signal::SIGKILL);
    let _ = leader.wait_exit(Duration::from_secs(10));
    let took = until(
        "the standby takes over",
        Duration::from_secs(30),
        &[&standby],
        || standby.is_leader(),
    )
    .await;
    assert!(
        took < Duration::from_secs(15 + 3),
        "handover after SIGKILL took {took:?}"
    );
    create_foo(&foos, "second").await;
    wait_foo_available(&foos, "second").await;

    // A leader that stops gracefully releases the lease, and a standby takes it at once.
    let mut leader = standby;
    let next = OperatorProcess::spawn("replica-c", &dir, &args);
    next.wait_ready().await;
    assert!(!next.is_leader());
    leader.signal(Signal::SIGTERM);
    let status = leader.wait_exit(Duration::from_secs(15));
    assert!(
        status.success(),
        "exit {status:?} after SIGTERM; log:\n{}",
        leader.log()
    );
    assert!(
        leader.log().contains("released the leader lease"),
        "{}",
        leader.log()
    );
    let took = until(
        "the standby takes over",
        Duration::from_secs(15),
        &[&next],
        || next.is_leader(),
    )
    .await;
    assert!(
        took < Duration::from_secs(4),
        "handover after SIGTERM took {took:?}"
    );
    create_foo(&foos, "third").await;
    wait_foo_available(&foos, "third").await;

    let mut next = next;
    next.signal(Signal::SIGINT);
    assert!(
        next.wait_exit(Duration::from_secs(15)).success(),
        "{}",
        next.log()
    );
}

/// Two binaries with `--sharding` split the Foos, each sent its own by the apiserver (the local
/// cluster's has KEP-5866's gate on); on SIGTERM one gives its buckets up and the other takes
/// them at once. (As the cluster admin: the plain manifests' Role, for leader election, may not
/// delete a Lease; the chart's may with `sharding.enabled`.)
#[tokio::test]
async fn sharded_binaries_split_the_foos_and_one_takes_all_on_sigterm() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "sharded").await;
    let dir = scratch_dir(&ns.name);
    let kubeconfig_arg = format!(
        "--kubeconfig={}",
        local_cluster::LocalCluster::default().kubeconfig().display()
    );
    let namespace_arg = format!("--namespace={}", ns.name);
    let leases_arg = format!("--leader-election-namespace={}", ns.name);
    let args = [
        kubeconfig_arg.as_str(),
        namespace_arg.as_str(),
        leases_arg.as_str(),
        "--controllers=foo",
        "--sharding",
        "--drain-seconds=5",
    ];
    // A Foo whose Deployment an older version made, without the bucket label: a sharded
    // replica finds it by name and labels it.
    let foos = ns.api::<Foo>();
    create_foo(&foos, "older").await;
    let older = foos.get("older").await.unwrap();
    let deployments = ns.api::<k8s_openapi::api::apps::v1::Deployment>();
    let mut made = sample_operator::foo::deployment::desired(&older, &Default::default());
    made.metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(sample_operator::runtime::sharding::BUCKET_LABEL);
    deployments.create(&PostParams::default(), &made).await.unwrap();

    let mut a = OperatorProcess::spawn("sharded-a", &dir, &args);
    let b = OperatorProcess::spawn("sharded-b", &dir, &args);
    let held = |replica: &OperatorProcess| {
        replica
            .metric("sample_operator_shard_buckets", &[("state", "held")])
            .unwrap_or(0.0)
    };
    until(
        "the two replicas share the buckets",
        Duration::from_secs(60),
        &[&a, &b],
        || held(&a) > 0.0 && held(&b) > 0.0 && held(&a) + held(&b) == 64.0,
    )
    .await;
    for i in 0..20 {
        create_foo(&foos, &format!("foo-{i}")).await;
    }
    wait_foo_available(&foos, "older").await;
    let labels = deployments
        .get("older")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default();
    assert_eq!(
        labels.get(sample_operator::runtime::sharding::BUCKET_LABEL),
        Some(&sample_operator::runtime::sharding::bucket_label(
            &older.metadata.uid.clone().unwrap()
        )),
        "{labels:?}"
    );
    for i in 0..20 {
        wait_foo_available(&foos, &format!("foo-{i}")).await;
    }
    for replica in [&a, &b] {
        assert!(
            replica.writes() > 0.0,
            "a replica wrote nothing:\n{}",
            replica.log()
        );
        let server = [("resource", "foos.samplecontroller.k8s.io"), ("mode", "server")];
        until("the filtering told", Duration::from_secs(30), &[replica], || {
            replica.metric("sample_operator_shard_filtering", &server) == Some(1.0)
        })
        .await;
        assert_eq!(
            replica.metric("sample_operator_shard_filtered_events_total", &[]),
            Some(0.0),
            "{}",
            replica.log()
        );
    }

    a.signal(Signal::SIGTERM);
    let status = a.wait_exit(Duration::from_secs(20));
    assert!(
        status.success(),
        "exit {status:?} after SIGTERM; log:\n{}",
        a.log()
    );
    let took = until("b holds every bucket", Duration::from_secs(30), &[&b], || {
        held(&b) == 64.0
    })
    .await;
    // Far less than the Lease's 15 s: a gave its buckets up and deleted its Lease.
    assert!(
        took < Duration::from_secs(10),
        "b took a's buckets after {took:?}:\n{}",
        b.log()
    );
    create_foo(&foos, "after").await;
    wait_foo_available(&foos, "after").await;
    let mut b = b;
    b.signal(Signal::SIGTERM);
    assert!(b.wait_exit(Duration::from_secs(20)).success(), "{}", b.log());
}

#[tokio::test]
async fn probes_and_metrics_report_what_happens() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "metrics").await;
    let dir = scratch_dir(&ns.name);
    let kubeconfig = operator_kubeconfig(&client, &dir).await;
    let kubeconfig_arg = format!("--kubeconfig={}", kubeconfig.display());
    let namespace_arg = format!("--namespace={}", ns.name);
    let mut operator = OperatorProcess::spawn(
        "metrics",
        &dir,
        &[
            &kubeconfig_arg,
            &namespace_arg,
            "--controllers=foo",
            "--log-format=json",
        ],
    );
    operator.wait_ready().await;
    assert_eq!(operator.get("/healthz"), Some((200, "ok".into())));
    assert_eq!(
        operator.metric("leader_election_master_status", &[("name", "sample-operator")]),
        Some(1.0),
        "without election it leads"
    );
    let reconciles = |operator: &OperatorProcess| {
        let foo = [("controller", "foo")];
        operator
            .metric("controller_runtime_reconcile_total", &foo)
            .unwrap_or(0.0)
    };
    let before = reconciles(&operator);

    let foos = ns.api::<Foo>();
    create_foo(&foos, "measured").await;
    wait_foo_available(&foos, "measured").await;
    eventually("reconciles are counted", Duration::from_secs(10), || {
        reconciles(&operator) > before
    })
    .await;
    eventually("the Foo counted as Ready", Duration::from_secs(10), || {
        operator.metric(
            "sample_operator_objects",
            &[("controller", "foo"), ("ready", "True")],
        ) == Some(1.0)
    })
    .await;
    // The Foo was queued (its creation; its Deployment's events), and nothing waits now.
    let queue = [("controller", "foo"), ("name", "foo")];
    assert!(operator.metric("workqueue_adds_total", &queue).unwrap_or(0.0) >= 1.0);
    eventually("the queue empty", Duration::from_secs(10), || {
        operator.metric("workqueue_depth", &queue) == Some(0.0)
    })
    .await;
    let (_, metrics) = operator.get("/metrics").unwrap();
    for series in [
        r#"controller_runtime_reconcile_time_seconds_count{controller="foo"}"#,
        r#"controller_runtime_active_workers{controller="foo"}"#,
        r#"controller_runtime_max_concurrent_reconciles{controller="foo"} 16"#,
        "process_resident_memory_bytes ",
        "process_cpu_seconds_total ",
    ] {
        assert!(metrics.contains(series), "{series} missing:\n{metrics}");
    }
    let api_request = |method, code| {
        metric_sum(
            &metrics,
            "rest_client_requests_total",
            &[("method", method), ("code", code)],
        )
    };
    assert!(api_request("GET", "200") >= 1.0, "{metrics}");
    assert!(api_request("POST", "201") >= 1.0, "{metrics}");
    // JSON logs, one object a line.
    let log = operator.log();
    let first = log.lines().next().unwrap_or_default();
    assert!(
        serde_json::from_str::<serde_json::Value>(first).is_ok(),
        "not JSON: {first}"
    );
    // `--initial-list=auto`, the default, found that this API server (1.36) streams lists;
    // the probe's watch is allowed to the ServiceAccount too.
    assert!(
        log.lines()
            .any(|l| l.contains("starting; serving") && l.contains(r#""initial_list":"Stream""#)),
        "{log}"
    );

    operator.signal(Signal::SIGTERM);
    assert!(
        operator.wait_exit(Duration::from_secs(15)).success(),
        "{}",
        operator.log()
    );
}

/// Runs the binary to completion and returns its exit status and stderr.
/// A controller that dies (a panic injected into this debug build) takes the process with it,
/// the other controllers too: it exits 1 naming the controller, for Kubernetes to restart it.
/// Its plain log, written to a file, has no terminal colour codes.
/// (`runtime::server`'s tests check that /healthz answers 500 meanwhile.)
#[tokio::test]
async fn a_dead_controller_ends_the_process_with_exit_code_1() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "dead-controller").await;
    let dir = scratch_dir(&ns.name);
    let kubeconfig = operator_kubeconfig(&client, &dir).await;
    let kubeconfig_arg = format!("--kubeconfig={}", kubeconfig.display());
    let namespace_arg = format!("--namespace={}", ns.name);
    let mut operator = OperatorProcess::spawn_with_env(
        "dead-controller",
        &dir,
        &[
            &kubeconfig_arg,
            &namespace_arg,
            "--controllers=foo,my-custom-resource",
        ],
        &[("SAMPLE_OPERATOR_TEST_PANIC", "my-custom-resource")],
    );
    let status = operator.wait_exit(Duration::from_secs(60));
    let log = operator.log();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("a panic injected into controller my-custom-resource"),
        "{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "plain logs written to a file carry no terminal colour codes:\n{log}"
    );
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.contains("my-custom-resource")
            && last.contains("exiting so that Kubernetes restarts the operator"),
        "the last line says which controller died and why the process ends: {last}"
    );
}

/// What the operator keeps about an object goes with it: 1,000 Foos (10,000 with `cargo xtask
/// test --scale`), each blocked by a Deployment it does not own (so each gets a status, an event
/// and a retry with backoff), created and deleted, leave no retry pending and the resident
/// memory where the first tenth left it. `SAMPLE_OPERATOR_CHURN_CYCLES` sets another number of
/// cycles.
#[tokio::test]
async fn blocked_foos_created_and_deleted_leave_nothing_behind() {
    use futures::StreamExt;
    use kube::api::DeleteParams;

    let cycles: usize = std::env::var("SAMPLE_OPERATOR_CHURN_CYCLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| testing::sized(1_000, 10_000));
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "churn").await;
    let dir = scratch_dir(&ns.name);
    let deployments = ns.api::<k8s_openapi::api::apps::v1::Deployment>();
    deployments
        .create(&PostParams::default(), &crate::foo::plain_deployment("blocking"))
        .await
        .unwrap();
    let kubeconfig = operator_kubeconfig(&client, &dir).await;
    let kubeconfig_arg = format!("--kubeconfig={}", kubeconfig.display());
    let namespace_arg = format!("--namespace={}", ns.name);
    let operator = OperatorProcess::spawn(
        "churn",
        &dir,
        &[
            &kubeconfig_arg,
            &namespace_arg,
            "--controllers=foo",
            "--log-level=warn",
        ],
    );
    operator.wait_ready().await;
    let foos = ns.api::<Foo>();
    let cycle = |i: usize| {
        let foos = foos.clone();
        async move {
            let name = format!("churn-{i}");
            let foo = Foo::new(
                &name,
                FooSpec {
                    deployment_name: "blocking".into(),
                    replicas: Some(1),
                },
            );
            foos.create(&PostParams::default(), &foo).await.unwrap();
            // Long enough for most to be reconciled, blocked and scheduled for a retry.
            tokio::time::sleep(Duration::from_millis(200)).await;
            foos.delete(&name, &DeleteParams::default()).await.unwrap();
        }
    };
    let resident = |operator: &OperatorProcess| {
        operator
            .metric("process_resident_memory_bytes", &[])
            .expect("/metrics answers")
    };
    let warm_up = cycles / 10;
    futures::stream::iter(0..warm_up)
        .map(cycle)
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    let early = resident(&operator);
    let retries = |operator: &OperatorProcess| {
        operator
            .metric("sample_operator_objects_awaiting_retry", &[("controller", "foo")])
            .unwrap_or(f64::NAN)
    };
    // While the Foos come and go, some wait out a backoff: the gauge below means something.
    let mut most_waiting: f64 = 0.0;
    let mut churn = std::pin::pin!(
        futures::stream::iter(warm_up..cycles)
            .map(cycle)
            .buffer_unordered(32)
            .collect::<Vec<()>>()
    );
    loop {
        tokio::select! {
            _ = &mut churn => break,
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                most_waiting = most_waiting.max(retries(&operator));
            }
        }
    }
    assert!(most_waiting > 0.0, "no blocked Foo ever waited for a retry");
    eventually(
        "no retry pending once every Foo is gone",
        Duration::from_secs(60),
        || retries(&operator) == 0.0,
    )
    .await;
    let late = resident(&operator);
    let grown = (late - early) / (1024.0 * 1024.0);
    eprintln!(
        "churn: {cycles} cycles; resident {:.1} MiB after {warm_up}, {:.1} MiB after all",
        early / (1024.0 * 1024.0),
        late / (1024.0 * 1024.0)
    );
    assert!(
        grown < 8.0,
        "the operator grew by {grown:.1} MiB over {} cycles after the first {warm_up}",
        cycles - warm_up
    );
    drop(operator);
}

fn run_to_end(args: &[&str]) -> (ExitStatus, String) {
    let output = Command::new(BINARY)
        .arg("run")
        .args(args)
        .args(["--metrics-address=127.0.0.1:0", "--probe-address=127.0.0.1:0"])
        .output()
        .unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn assert_one_clear_line(status: ExitStatus, stderr: &str, expected: &str) {
    assert_eq!(status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line:\n{stderr}");
    assert!(lines[0].contains(expected), "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_misconfiguration_ends_with_one_clear_line() {
    let (status, stderr) = run_to_end(&["--kubeconfig=/nonexistent/kubeconfig"]);
    assert_one_clear_line(status, &stderr, "cannot read kubeconfig /nonexistent/kubeconfig");

    // The rest needs the local cluster's kubeconfig: start the cluster if it is not running.
    testing::config().await;
    let kubeconfig = local_cluster::LocalCluster::default().kubeconfig();
    let kubeconfig_arg = format!("--kubeconfig={}", kubeconfig.display());
    // Nothing listens on port 1.
    let (status, stderr) = run_to_end(&[&kubeconfig_arg, "--master=https://127.0.0.1:1"]);
    assert_one_clear_line(
        status,
        &stderr,
        "cannot reach the API server at https://127.0.0.1:1/",
    );

    // An API server without the CRDs: a stub that knows /version and nothing else.
    let port = serve_without_crds();
    let master = format!("--master=http://127.0.0.1:{port}");
    let (status, stderr) = run_to_end(&[&kubeconfig_arg, &master, "--controllers=foo"]);
    assert_one_clear_line(
        status,
        &stderr,
        "the foos.samplecontroller.k8s.io CRD is not installed",
    );
    assert!(
        stderr.contains("kubectl apply --server-side -f deploy/crds/"),
        "{stderr}"
    );
}

/// A stub API server on loopback: `/version` answers, every other path is 404 as for a
/// resource the server does not know.
fn serve_without_crds() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(20) {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let n = stream.read(&mut buf).unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]);
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let (status, body) = if path == "/version" {
                (
                    "200 OK",
                    r#"{"major":"1","minor":"36","gitVersion":"v1.36.3","platform":"linux/amd64"}"#
                        .to_owned(),
                )
            } else {
                (
                    "404 Not Found",
                    r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}"#
                        .to_owned(),
                )
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// The operator's resident anonymous memory (its heap and stacks, not the pages of its binary
/// that the code paths it runs load), from /proc, in bytes.
fn rss(operator: &OperatorProcess) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", operator.pid())).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .expect("RssAnon in /proc/<pid>/status");
    kib * 1024
}

/// Labels cost the operator nothing: the apiserver caps no object's labels in total (a megabyte
/// fits), and a tenant's 150 Foos with 300 KB of labels each (45 MB) grow the binary's resident
/// memory by less than 20 MiB, since the watch drops them before anything is cached.
#[tokio::test]
async fn foos_with_300_kb_of_labels_each_cost_the_operator_almost_nothing() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "labels").await;
    let dir = scratch_dir(&ns.name);
    let kubeconfig = operator_kubeconfig(&client, &dir).await;
    let kubeconfig_arg = format!("--kubeconfig={}", kubeconfig.display());
    let namespace_arg = format!("--namespace={}", ns.name);
    let operator = OperatorProcess::spawn(
        "labels",
        &dir,
        &[&kubeconfig_arg, &namespace_arg, "--controllers=foo"],
    );
    operator.wait_ready().await;
    let foos = ns.api::<Foo>();
    // A few plain Foos first, so that the baseline has every watch, pool and buffer warm.
    for i in 0..5 {
        create_foo(&foos, &format!("warm-{i}")).await;
    }
    for i in 0..5 {
        wait_foo_available(&foos, &format!("warm-{i}")).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rss(&operator);

    // 4,000 labels of 63-character values: some 300 KB a Foo.
    let value = "v".repeat(63);
    let labels: std::collections::BTreeMap<String, String> = (0..4_000)
        .map(|i| (format!("tenant.example.com/l{i:04}"), value.clone()))
        .collect();
    const FOOS: usize = 150;
    // A few at a time: each is a large write for the API server.
    use futures::StreamExt;
    futures::stream::iter(0..FOOS)
        .map(|i| {
            let (foos, labels) = (foos.clone(), labels.clone());
            async move {
                let mut foo = Foo::new(
                    &format!("heavy-{i}"),
                    FooSpec {
                        deployment_name: format!("heavy-{i}"),
                        replicas: Some(1),
                    },
                );
                foo.metadata.labels = Some(labels);
                foos.create(&PostParams::default(), &foo).await.unwrap();
            }
        })
        .buffer_unordered(4)
        .collect::<Vec<()>>()
        .await;
    let size = serde_json::to_vec(&foos.get("heavy-0").await.unwrap())
        .unwrap()
        .len();
    assert!(size > 300_000, "a Foo of {size} bytes");
    // Every one reconciled: its Deployment made (counted on the small Deployments: a list of
    // the Foos is 75 MB), its status written in the same reconcile.
    let deployments = ns.api::<k8s_openapi::api::apps::v1::Deployment>();
    testing::eventually(
        "every heavy Foo reconciled",
        Duration::from_secs(180),
        async || {
            let made = deployments.list(&Default::default()).await.unwrap().items.len();
            (made == FOOS + 5).then_some(())
        },
    )
    .await;
    // jemalloc gives back the pages the big objects passed through after some 10 s.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let grown = rss(&operator).saturating_sub(before);
    assert!(
        grown < 20 * 1024 * 1024,
        "150 Foos of {size} bytes grew the operator by {} MiB",
        grown / 1024 / 1024
    );
    eprintln!(
        "150 Foos of {size} bytes grew the operator's RSS by {:.1} MiB",
        grown as f64 / 1024.0 / 1024.0
    );
}
