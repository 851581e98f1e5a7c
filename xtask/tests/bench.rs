//! `cargo xtask bench --preset quick` runs from start to end: every contender it is given and
//! every scenario produce a result and a table, and the converging runs count their etcd
//! writes and the Events they left; the large runs (here: 100 Foos) start on a cluster of
//! their own, and say how the wait for that apiserver to go quiet ended. A smoke test: no
//! timing is asserted, and it measures the debug build the test run already has, so that CI
//! needs no release build. `cargo xtask bench-sharded --preset quick` likewise, below.

use std::path::Path;
use std::process::Command;

#[test]
fn the_quick_benchmark_runs_every_scenario() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), Into::into);
    let operator = Path::new(&target).join("debug/sample-operator");
    assert!(
        operator.is_file(),
        "{} is built with the workspace",
        operator.display()
    );
    let out = Path::new(&target).join("bench-smoke");
    let _ = std::fs::remove_dir_all(&out);
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "bench",
            "--preset",
            "quick",
            "--n",
            "50",
            "--contenders",
            "ours,ours-streaming,ours-events-off,sample-controller-tuned,controller-runtime-tuned,ceiling,ceiling-ours-status,ceiling-ours-status-merge,ceiling-ours",
            "--scenarios",
            "backlog,burst,memory,restart",
            "--memory-foos",
            "100",
            "--restart-foos",
            "100",
            "--fresh-cluster-from",
            "100",
            "--out",
        ])
        .arg(&out)
        .arg("--operator-binary")
        .arg(&operator)
        .current_dir(&root)
        .output()
        .expect("the benchmark starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the benchmark failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!stdout.contains("no result"), "a run without a result:\n{stdout}");
    // The memory and restart runs (100 Foos, four contenders each) each had a cluster of their
    // own, and every run after a restarted cluster still found the CRDs and its contender.
    assert_eq!(
        stdout.matches("on a fresh etcd and kube-apiserver").count(),
        8,
        "{stdout}"
    );
    let report = std::fs::read_to_string(out.join("RESULTS.md")).unwrap();
    for table in [
        "## Backlog, N = 50",
        "## Burst, N = 50",
        "## Memory, N = 100",
        "## Restart, N = 100",
        "| sample-operator, streaming lists (ours) |",
        "| controller-runtime tuned (Go) |",
        "| sample-controller tuned (Go) |",
        "| sample-operator, Events off (ours) |",
        "| ceiling, ours' three writes (plain client) |",
        "| ceiling, ours' writes without the Event (plain client) |",
        "| ceiling, ours' writes without the Event, the status by merge patch (plain client) |",
    ] {
        assert!(
            report.contains(table),
            "{table} missing from RESULTS.md:\n{report}"
        );
    }
    assert!(out.join("converged.png").is_file());
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    // The first run and each run after a restart began on a fresh apiserver, and say how the wait
    // for it to go quiet ended; the others ran on a cluster that had run before.
    let fresh: Vec<&serde_json::Value> = results["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|run| run.get("fresh_start"))
        .collect();
    assert_eq!(fresh.len(), 9, "{results}");
    for start in fresh {
        assert!(start["waited_seconds"].as_f64().unwrap() >= 2.0, "{start}");
        assert!(start["quiet"].is_boolean(), "{start}");
        assert!(
            start["cpu_share"].as_f64().is_some_and(|share| share >= 0.0),
            "{start}"
        );
    }
    // Each run timed the machine's reference workload before it began.
    for run in results["runs"].as_array().unwrap() {
        assert!(
            run["machine_seconds"].as_f64().is_some_and(|s| s > 0.0),
            "the machine's reference before a run: {run}"
        );
    }
    // Every contender writes Deployments: each backlog and burst run counted its etcd writes.
    for run in results["runs"].as_array().unwrap() {
        if matches!(run["scenario"].as_str(), Some("backlog" | "burst")) {
            let creates = run["etcd_writes"]["create deployments"].as_u64().unwrap_or(0);
            assert!(creates >= 50, "etcd writes of a run: {run}");
            // Every converging run counted the Events about Foos; ours keeps one per Foo.
            let events = run["events"].as_u64();
            assert!(events.is_some(), "Events of a run: {run}");
            match run["contender"].as_str() {
                Some("ours-events-off" | "ceiling-ours-status" | "ceiling-ours-status-merge") => {
                    assert_eq!(events, Some(0), "no Events: {run}");
                }
                // Ours and the ceiling doing ours' work write one per Foo (ours: or count it
                // in a summary).
                Some("ours" | "ours-streaming" | "ceiling-ours") => {
                    assert!(events >= Some(50), "Events missing: {run}");
                    assert!(run["last_event_seconds"].as_f64().is_some(), "{run}");
                }
                _ => {}
            }
            // Ours' Event queue was read from its /metrics over the run.
            match run["contender"].as_str() {
                Some(c) if c.starts_with("ours") => {
                    let samples = run["event_queue"].as_array().map_or(0, Vec::len);
                    assert!(samples > 0, "no Event queue samples: {run}");
                }
                _ => {}
            }
        }
    }
}

/// `cargo xtask bench-sharded --preset quick` runs its three rows at 100 Foos: one unsharded
/// replica, two sharded replicas filtered by the apiserver, and two on an apiserver without the
/// feature gate, which each receive every Foo. The sharded replicas split the Foos between them,
/// say how they are filtered, and leave no cgroup behind. Also a smoke test: nothing is timed.
#[test]
fn the_quick_sharded_benchmark_splits_the_foos_and_reports_each_row() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), Into::into);
    let operator = Path::new(&target).join("debug/sample-operator");
    let out = Path::new(&target).join("bench-sharded-smoke");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["bench-sharded", "--preset", "quick", "--out"])
        .arg(&out)
        .arg("--operator-binary")
        .arg(&operator)
        .current_dir(&root)
        .output()
        .expect("the sharded benchmark starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the sharded benchmark failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("sharded.json")).unwrap()).unwrap();
    let runs = results["runs"].as_array().unwrap();
    let setups: Vec<(&str, u64)> = runs
        .iter()
        .map(|run| {
            (
                run["row"]["setup"].as_str().unwrap(),
                run["row"]["replicas"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        setups,
        [("unsharded", 1), ("server-filtering", 2), ("client-filtering", 2)]
    );
    for run in runs {
        assert!(run["seconds"].as_f64().is_some(), "a run without a result: {run}");
        let replicas = run["replicas"].as_array().unwrap();
        let owned: u64 = replicas.iter().map(|r| r["owned_foos"].as_u64().unwrap()).sum();
        assert_eq!(owned, 100, "each Foo owned by exactly one replica: {run}");
        let filtering = match run["row"]["setup"].as_str() {
            Some("server-filtering") => Some("server"),
            Some("client-filtering") => Some("client"),
            _ => None,
        };
        for replica in replicas {
            assert_eq!(replica["filtering"].as_str(), filtering, "{run}");
            assert!(replica["peak_rss_bytes"].as_u64() > Some(0), "{run}");
            let (rss, anon) = (
                replica["idle_rss_bytes"].as_u64(),
                replica["idle_anon_bytes"].as_u64(),
            );
            assert!(
                anon > Some(0) && anon < rss,
                "anonymous memory, part of the resident: {run}"
            );
            let events = replica["watch_events"].as_u64().unwrap();
            if filtering == Some("client") {
                // Sent every Foo, its own or not.
                assert!(events >= 100, "{run}");
            } else {
                assert!(events > 0, "{run}");
            }
        }
        if filtering.is_some() {
            // Each of the two owns some, so the split happened.
            assert!(
                replicas.iter().all(|r| r["owned_foos"].as_u64() > Some(0)),
                "{run}"
            );
        }
    }
    let report = std::fs::read_to_string(out.join("RESULTS.md")).unwrap();
    for line in [
        "## Sharded replicas",
        "### N = 100",
        "| 1, unsharded, no quota | 1 |",
        "| 2, filtered by the apiserver | 1 |",
        "| 2, filtered by each replica | 1 |",
    ] {
        assert!(report.contains(line), "{line} missing from RESULTS.md:\n{report}");
    }
    assert!(out.join("sharded.png").is_file());
    for hierarchy in ["cpu", "memory", "."] {
        for replica in 0..2 {
            let cgroup = Path::new("/sys/fs/cgroup")
                .join(hierarchy)
                .join(format!("sample-operator-bench-replica-{replica}"));
            assert!(!cgroup.exists(), "{} left behind", cgroup.display());
        }
    }
}
