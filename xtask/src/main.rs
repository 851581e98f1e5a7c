//! Developer commands: `cargo xtask <command>`. See the README for the workflow.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use local_cluster::openstack::{self, OpenStack};
use local_cluster::{LocalCluster, paths, process, toolchain};

mod bench;
mod cargo_build;
mod demo;
mod host_check;
mod image;
mod nextest;
mod phases;

#[derive(Parser)]
#[command(about = "Developer commands of sample-operator")]
struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Manage the local control plane (etcd, apiserver, controller-manager, scheduler, kwok).
    Cluster {
        #[command(subcommand)]
        action: ClusterCmd,
    },
    /// Manage the OpenStack test bed (Keystone and neutron-server from PyPI) beside the cluster.
    Neutron {
        #[command(subcommand)]
        action: NeutronCmd,
    },
    /// Bring up the local cluster, install the CRDs, apply the seeds' samples and show them.
    Demo,
    /// Run every test: formatting, lints, unit tests and integration tests on the local cluster.
    Test {
        /// Run the tests whose subject is scale at their full sizes: 1,000 Networks through
        /// Neutron's pages, 10,000 blocked Foos coming and going, the test bed's own 3-minute
        /// tokens. Far longer than the default sizes.
        #[arg(long)]
        scale: bool,
        /// Extra arguments for `cargo nextest run`, such as a test name filter; formatting, lints
        /// and doc tests are then left out.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        nextest_args: Vec<String>,
    },
    /// Benchmark our Foo controller against its Go peers on an apiserver of its own (see
    /// bench/RESULTS.md); takes long at the default sizes.
    Bench(bench::BenchArgs),
    /// Benchmark our Foo controller as 1, 2 and 4 replicas with `--sharding`, each under a CPU
    /// quota and a memory cap (see bench/RESULTS.md, "Sharded replicas"); hours at the default
    /// sizes.
    BenchSharded(bench::ShardedArgs),
    /// Profile our operator and the apiserver while the operator converges a backlog of Foos
    /// (see bench/PROFILE.md); tens of minutes at the default 100,000.
    BenchProfile(bench::ProfileArgs),
    /// Write the CRD manifests (deploy/crds/ and the chart's copies) from the Rust types.
    Crds,
    /// Write the plain manifests in deploy/operator/ from the Helm chart's defaults.
    Manifests,
    /// Build the operator's container image without Docker (an OCI layout tar in
    /// target/image/) and import it into the real node's containerd when one runs.
    Image(image::ImageArgs),
    /// Run the kubectl built here against the local cluster.
    Kubectl {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand)]
enum ClusterCmd {
    /// Build the binaries if needed and start the cluster; a no-op when it already runs.
    Up {
        /// Also a real node (containerd, runc, kubelet, kube-proxy, Multus) beside the kwok
        /// nodes, added to a running cluster if need be. Needs root.
        #[arg(long)]
        real_node: bool,
    },
    /// Stop every process `up` started (and the OpenStack test bed) and remove the cluster's folder.
    Down,
    /// Show each component's process and whether the apiserver is ready.
    Status,
    /// Only build (or find in the cache) the control-plane binaries.
    Build {
        /// Also the real node's: kubelet, kube-proxy, containerd, runc, the CNI plugins, Multus.
        #[arg(long)]
        real_node: bool,
    },
}

#[derive(Subcommand)]
enum NeutronCmd {
    /// Install the virtualenvs if needed and start Keystone and neutron-server; a no-op when
    /// they already run. Writes clouds.yaml beside the kubeconfig.
    Up,
    /// Stop Keystone and neutron-server and remove their state.
    Down,
    /// Show their processes and whether they answer.
    Status,
}

/// Where the generated CRD manifests go: the default CRDs, and the example.com Foo's, each as
/// plain manifests and as the chart's copy (its `crds/` folder installs the default ones; a
/// template installs the example.com one when asked).
const CRD_FILES: [(&str, bool); 4] = [
    ("deploy/crds/crds.yaml", false),
    ("deploy/helm/sample-operator/crds/crds.yaml", false),
    ("deploy/crds/example.com/foos.yaml", true),
    ("deploy/helm/sample-operator/files/foos.example.com.yaml", true),
];

fn write_crds() -> Result<()> {
    let root = paths::repo_root();
    for (path, example_com) in CRD_FILES {
        let crds = if example_com {
            sample_operator_api::example_com_crds()
        } else {
            sample_operator_api::crds()
        };
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().context("a folder")?)?;
        std::fs::write(&path, sample_operator_api::crds_yaml(&crds)?)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn write_manifests() -> Result<()> {
    let root = paths::repo_root();
    for (name, text) in local_cluster::manifests::plain_manifests(&root)? {
        let path = root.join(local_cluster::manifests::PLAIN).join(name);
        std::fs::write(&path, text)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    let cluster = LocalCluster::default();
    match args.command {
        Cmd::Cluster {
            action: ClusterCmd::Up { real_node },
        } => {
            let options = local_cluster::UpOptions {
                real_node,
                ..Default::default()
            };
            let state = runtime.block_on(cluster.up_with(options))?;
            println!(
                "local cluster ready: Kubernetes {} at {}",
                state.kubernetes_version, state.server
            );
            println!("  export KUBECONFIG={}", cluster.kubeconfig().display());
            println!("  logs: {}", cluster.logs_dir().display());
            if real_node {
                println!(
                    "  real node {} at {} (logs: {})",
                    local_cluster::node::NODE_NAME,
                    local_cluster::node::NODE_IP,
                    cluster.node().logs_dir().display()
                );
            }
        }
        Cmd::Cluster {
            action: ClusterCmd::Down,
        } => {
            cluster.down()?;
            println!("local cluster stopped");
        }
        Cmd::Cluster {
            action: ClusterCmd::Status,
        } => return runtime.block_on(status(&cluster)),
        Cmd::Cluster {
            action: ClusterCmd::Build { real_node },
        } => {
            let bin = toolchain::ensure()?;
            if real_node {
                toolchain::node()?;
            }
            println!(
                "binaries of Kubernetes {} in {}",
                bin.kubernetes_version,
                paths::cache_dir().join("bin").display()
            );
        }
        Cmd::Neutron { action } => return neutron(&runtime, &cluster, action),
        Cmd::Demo => runtime.block_on(demo::run(&cluster))?,
        Cmd::Crds => write_crds()?,
        Cmd::Manifests => write_manifests()?,
        Cmd::Image(args) => {
            image::run(&cluster, &args)?;
        }
        Cmd::Test { scale, nextest_args } => return test(&runtime, &cluster, scale, &nextest_args),
        Cmd::Kubectl { args } => return kubectl(&cluster, &args),
        Cmd::Bench(args) => runtime.block_on(bench::run(args))?,
        Cmd::BenchSharded(args) => runtime.block_on(bench::run_sharded(args))?,
        Cmd::BenchProfile(args) => runtime.block_on(bench::run_profile(args))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn neutron(
    runtime: &tokio::runtime::Runtime,
    cluster: &LocalCluster,
    action: NeutronCmd,
) -> Result<ExitCode> {
    let bed = OpenStack::new(cluster.dir().to_owned());
    match action {
        NeutronCmd::Up => {
            let state = runtime.block_on(bed.up())?;
            println!("Keystone at {}", state.keystone_url);
            println!("neutron-server at {}", state.neutron_url);
            println!(
                "  export OS_CLIENT_CONFIG_FILE={} OS_CLOUD={}",
                bed.clouds_yaml().display(),
                openstack::CLOUD
            );
            println!("  openstack command line: {}", state.openstack.display());
            println!("  logs: {}", bed.logs_dir().display());
        }
        NeutronCmd::Down => {
            bed.down()?;
            println!("OpenStack test bed stopped");
        }
        NeutronCmd::Status => {
            let Some(state) = bed.state() else {
                println!("no OpenStack test bed in {}", bed.dir().display());
                return Ok(ExitCode::FAILURE);
            };
            println!(
                "Keystone at {}, neutron-server at {}",
                state.keystone_url, state.neutron_url
            );
            print_components(&state.components);
            let healthy = bed.is_healthy();
            println!("healthy: {healthy}");
            if !healthy {
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per process: name, pid, whether it runs, its log.
fn print_components(components: &[local_cluster::Component]) {
    for c in components {
        let running = if c.is_running() { "running" } else { "NOT RUNNING" };
        println!(
            "  {:<24} pid {:<8} {running}  log {}",
            c.name,
            c.pid,
            c.log.display()
        );
    }
}

async fn status(cluster: &LocalCluster) -> Result<ExitCode> {
    let Some(state) = cluster.state() else {
        println!("no local cluster in {}", cluster.dir().display());
        return Ok(ExitCode::FAILURE);
    };
    println!("Kubernetes {} at {}", state.kubernetes_version, state.server);
    print_components(&state.components);
    if let Some(node) = cluster.node().state() {
        println!("real node {}:", local_cluster::node::NODE_NAME);
        print_components(&node.components);
    }
    let healthy = cluster.is_healthy().await;
    println!("healthy: {healthy}");
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn kubectl_command(cluster: &LocalCluster) -> Result<Command> {
    let bin = toolchain::ensure()?;
    let mut cmd = Command::new(bin.kubectl);
    cmd.env("KUBECONFIG", cluster.kubeconfig());
    Ok(cmd)
}

fn kubectl(cluster: &LocalCluster, args: &[String]) -> Result<ExitCode> {
    let status = kubectl_command(cluster)?.args(args).status()?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Every check CI runs, in the order that fails fastest, ending with where the time went.
fn test(
    runtime: &tokio::runtime::Runtime,
    cluster: &LocalCluster,
    scale: bool,
    extra: &[String],
) -> Result<ExitCode> {
    let mut phases = phases::Phases::default();
    let result = run_tests(runtime, cluster, scale, extra, &mut phases);
    phases.print(&junit_report(if scale { "scale" } else { "default" }));
    result
}

/// Where nextest writes `profile`'s JUnit report: under the store of .config/nextest.toml,
/// which is relative to the workspace, not to `CARGO_TARGET_DIR` (with one set elsewhere, the
/// target folder's copy would be another checkout's, or an earlier run's).
fn junit_report(profile: &str) -> PathBuf {
    paths::repo_root()
        .join(NEXTEST_STORE)
        .join(profile)
        .join("junit.xml")
}

/// `[store] dir` of .config/nextest.toml.
const NEXTEST_STORE: &str = "target/nextest";

fn run_tests(
    runtime: &tokio::runtime::Runtime,
    cluster: &LocalCluster,
    scale: bool,
    extra: &[String],
    phases: &mut phases::Phases,
) -> Result<ExitCode> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = paths::repo_root();
    let run = |program: &std::ffi::OsStr, args: &[&str], env: &[(&str, &str)]| -> Result<()> {
        process::run(
            Command::new(program)
                .args(args)
                .envs(env.iter().copied())
                .current_dir(&root),
        )?;
        Ok(())
    };
    let cargo_step = |name: &str, args: &[&str]| -> Result<()> {
        println!("== {name}: cargo {}", args.join(" "));
        run(cargo.as_ref(), args, &[]).with_context(|| format!("{name} failed"))
    };
    // The whole suite, rather than a filter of some tests.
    let whole = extra.is_empty();
    if whole {
        phases.time("formatting", || {
            cargo_step("formatting", &["fmt", "--all", "--check"])
        })?;
        phases.time("lints", || {
            cargo_step(
                "lints",
                &[
                    "clippy",
                    "--workspace",
                    "--all-targets",
                    "--locked",
                    "--",
                    "-D",
                    "warnings",
                ],
            )
        })?;
    }
    println!("== cargo-nextest {}", nextest::VERSION);
    let nextest = phases.time("cargo-nextest", nextest::ensure)?;
    // Built here, once and with progress, rather than by the first test that needs each.
    println!(
        "== the tests' tools: helm, Prometheus and promtool, kube-score, the Prometheus Operator's and cert-manager's CRDs, kubernetes/sample-controller"
    );
    phases.time("the tests' tools", || -> Result<()> {
        toolchain::helm()?;
        toolchain::prometheus()?;
        toolchain::kube_score()?;
        toolchain::prometheus_operator_crds()?;
        toolchain::cert_manager_crds()?;
        toolchain::sample_controller()?;
        Ok(())
    })?;
    println!("== local cluster");
    // The real node's tests need root and a few kernel features; where they are missing the
    // tests say so and skip, and this says why up front.
    let problems = local_cluster::node::preflight(cluster.dir());
    let real_node = problems.is_empty();
    let node_was_running = cluster.node().is_running();
    if !real_node {
        println!(
            "no real node: this machine cannot run one, so its tests will skip:\n  - {}",
            problems.join("\n  - ")
        );
    }
    let options = local_cluster::UpOptions {
        real_node,
        ..Default::default()
    };
    // The host before this run's node, to compare with the host after its last `down`. A node
    // whose run was killed (here or in another checkout) is cleared first, as `up` would clear
    // it: otherwise the check would count what it left as the host's own, and its clearing as
    // this run's doing.
    let host_before = if real_node && !node_was_running {
        if let Some(dir) = local_cluster::node::clear_stale().context("clearing a killed real node")? {
            println!(
                "cleared the real node that {} left behind, before looking at the host",
                dir.display()
            );
        }
        Some(local_cluster::node::HostSnapshot::take().context("the host before the real node")?)
    } else {
        None
    };
    let state = phases.time("local cluster", || runtime.block_on(cluster.up_with(options)))?;
    println!("Kubernetes {} at {}", state.kubernetes_version, state.server);
    // The whole suite builds the image also without a node, and builds it again elsewhere.
    if real_node || whole {
        // The dev build the tests compile anyway, without its debug information: a release
        // build would add some 15 minutes to a cold run.
        println!(
            "== the operator's image{}",
            if real_node { ", into the real node" } else { "" }
        );
        let args = image::ImageArgs {
            profile: "dev".into(),
            binary: None,
            no_import: !real_node,
            compare_elsewhere: false,
        };
        phases.time("the operator's image", || image::run(cluster, &args))?;
        if whole {
            println!("== the image's binary built again from a copy of the checkout elsewhere");
            let built = image::stripped_binary(&image::out_dir());
            phases.time("the image's second build, elsewhere", || {
                image::check_built_elsewhere(&built, "dev")
            })?;
            println!("the same bytes: the binary depends on the source, not on where it was built");
        }
    }
    // The Neutron backend's tests need it; started here, its first install shows its progress.
    println!("== OpenStack test bed");
    let bed = phases.time("OpenStack test bed", || {
        runtime.block_on(OpenStack::new(cluster.dir().to_owned()).up())
    })?;
    println!(
        "Keystone at {}, neutron-server at {}",
        bed.keystone_url, bed.neutron_url
    );
    // Once, before any test: the tests then find them and leave them as they are.
    println!("== the CRDs");
    phases.time("CRDs", || {
        runtime.block_on(async {
            let mut crds = sample_operator_api::crds();
            crds.extend(sample_operator_api::example_com_crds());
            let client = cluster.client().await?;
            local_cluster::testing::install_crds(&client, &crds).await?;
            anyhow::Ok(())
        })
    })?;
    let profile = if scale { "scale" } else { "default" };
    let mut args = vec![
        "nextest",
        "run",
        "--workspace",
        "--all-targets",
        "--locked",
        "--profile",
        profile,
    ];
    args.extend(extra.iter().map(String::as_str));
    // Tests record what they skip here, for the summary below.
    let skip_log = cargo_build::target_dir().join("skipped-tests.log");
    let _ = std::fs::remove_file(&skip_log);
    let skip_log_text = skip_log.display().to_string();
    let mut env = vec![(local_cluster::testing::SKIP_LOG_VARIABLE, skip_log_text.as_str())];
    // Where a real node runs, its tests must not skip.
    if real_node {
        env.push(("SAMPLE_OPERATOR_REAL_NODE", "required"));
    }
    if scale {
        env.push((local_cluster::testing::SCALE_VARIABLE, "full"));
    }
    if whole {
        // nextest runs no doc tests; they run first, being quick.
        phases.time("doc tests", || {
            cargo_step("doc tests", &["test", "--workspace", "--doc", "--locked"])
        })?;
    }
    println!("== tests: cargo {}", args.join(" "));
    let tested = phases.time("tests (nextest: build and run)", || {
        run(nextest.as_os_str(), &args, &env).context("tests failed")
    });
    let skips = skipped_tests(&skip_log);
    // A test's own `up` replaces a cluster it finds unhealthy; here, where this run started it,
    // that would hide a crash and take the real node and the test bed with it.
    // (The disruption test restarts the apiserver, never etcd.)
    let etcd = |state: &local_cluster::State| {
        let etcd = state.components.iter().find(|c| c.name == "etcd");
        etcd.map(|c| c.pid)
    };
    let replaced = cluster.state().as_ref().map(etcd) != Some(etcd(&state));
    tested?;
    if replaced {
        anyhow::bail!(
            "the local cluster was replaced during the tests (its etcd is another process): a \
             test's `up` found it unhealthy; its logs are in {}",
            cluster.dir().join("logs").display()
        );
    }
    // On this local cluster every test can run, but the real node's where the machine cannot
    // run one: any other skip is a failure, not a note.
    let unexpected: Vec<&String> = skips
        .iter()
        .filter(|line| real_node || !line.starts_with("real_node::"))
        .collect();
    if !unexpected.is_empty() {
        anyhow::bail!(
            "tests skipped what this machine can run:\n  {}",
            unexpected
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    }
    if let Some(before) = host_before {
        println!(
            "== the real node's down leaves nothing behind, also after its processes were killed \
             and it is cleared as a killed run's node; it joins a running cluster again, and leaves a Docker-like bridge and a foreign KUBE- \
             chain made while it ran"
        );
        phases.time("the real node's host check", || {
            runtime.block_on(async {
                let own = std::fs::canonicalize(cluster.dir().join("node"))?;
                kill_real_node(cluster)?;
                // What the start of a run does with a killed node, here on this run's own.
                let cleared = local_cluster::node::clear_stale()?;
                anyhow::ensure!(
                    cleared.as_ref() == Some(&own),
                    "clearing the killed node found {cleared:?}, not {}",
                    own.display()
                );
                remove_real_node(cluster).await?;
                cluster.up_with(options).await?;
                let foreign = host_check::Foreign::make()?;
                host_check::Foreign::check_not_guarded()?;
                let removed = remove_real_node(cluster).await;
                let survived = foreign.check_survived_and_remove();
                removed.and(survived)
            })
        })?;
        let differences = before.differences(&local_cluster::node::HostSnapshot::take()?);
        if !differences.is_empty() {
            anyhow::bail!(
                "the host is not as it was before the real node:\n  {}",
                differences.join("\n  ")
            );
        }
        println!(
            "the host is as before the real node: sysctls, links, iptables and ip6tables rules, mounts, \
             netfilter accounting objects"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints what the tests recorded as skipped (`local_cluster::testing::skipped`), and returns
/// those lines.
fn skipped_tests(log: &std::path::Path) -> Vec<String> {
    let skips: Vec<String> = std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    if skips.is_empty() {
        // libtest lists `#[ignore]`d tests (measurements, run by hand) in its own summary.
        println!("== no test skipped its checks (besides any marked #[ignore], counted by libtest above)");
    } else {
        println!("== tests that did not run their checks, and why:");
        for skip in &skips {
            println!("  - {skip}");
        }
    }
    skips
}

/// Kills the real node's processes as a killed run or a crashed machine leaves them: no
/// chance to clean up, the containers' shims and processes still running.
fn kill_real_node(cluster: &LocalCluster) -> Result<()> {
    let state = cluster.node().state().context("the real node's record")?;
    let running: Vec<_> = state.components.iter().filter(|c| c.is_running()).collect();
    for component in &running {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(component.pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .with_context(|| format!("killing {}", component.name))?;
    }
    // A signal is delivered, and a process gone, a moment after `kill` returns.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while let Some(alive) = running.iter().find(|c| c.is_running()) {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{} still runs 10 s after SIGKILL",
            alive.name
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    println!("killed the node's {} running processes", running.len());
    Ok(())
}

/// Stops the real node this run started, twice (the second must find nothing to do), and
/// removes its Node; fails with whatever `down` left behind.
async fn remove_real_node(cluster: &LocalCluster) -> Result<()> {
    let node = cluster.node();
    node.down().context("stopping the real node")?;
    node.down().context("stopping the real node a second time")?;
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(cluster.client().await?);
    nodes
        .delete(local_cluster::node::NODE_NAME, &Default::default())
        .await
        .context("deleting the real node's Node")?;
    println!("stopped; no process, mount, cgroup, link, iptables chain or host path left");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_junit_report_is_read_from_the_store_nextest_writes_it_to() {
        let config = include_str!("../../.config/nextest.toml");
        let store = config
            .split_once("[store]")
            .and_then(|(_, rest)| rest.lines().find_map(|l| l.trim().strip_prefix("dir = ")))
            .expect("the [store] dir of .config/nextest.toml");
        assert_eq!(store.trim_matches('"'), NEXTEST_STORE);
        assert_eq!(
            junit_report("default"),
            paths::repo_root().join("target/nextest/default/junit.xml")
        );
    }

    #[test]
    fn the_local_cluster_page_lists_every_command_and_nothing_else() {
        let page = include_str!("../../docs/local-cluster.md");
        let table = page
            .split_once("<!-- xtask-table")
            .expect("the command table of docs/local-cluster.md")
            .1;
        let documented: std::collections::BTreeSet<String> = table
            .lines()
            .skip(3)
            .take_while(|line| line.starts_with('|'))
            .map(|line| line.split('`').nth(1).unwrap_or_default().to_owned())
            .collect();
        let mut commands = std::collections::BTreeSet::new();
        let root = <Args as clap::CommandFactory>::command();
        for command in root.get_subcommands() {
            let mut nested = command.get_subcommands().peekable();
            if nested.peek().is_none() {
                commands.insert(format!("cargo xtask {}", command.get_name()));
            }
            for sub in nested {
                commands.insert(format!("cargo xtask {} {}", command.get_name(), sub.get_name()));
            }
        }
        assert_eq!(
            commands, documented,
            "the commands (left) and the table in docs/local-cluster.md (right) differ"
        );
    }
}
