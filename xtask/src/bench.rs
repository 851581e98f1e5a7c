//! `cargo xtask bench`: our Foo controller side by side with its Go peers on one apiserver.
//!
//! The contenders ([`contender`]) take turns against a local etcd and kube-apiserver started
//! without controller-manager, scheduler or kwok, so that nothing but the apiserver and the
//! contender uses the machine's cores (no Pods are made, so `availableReplicas` stays 0). The
//! cluster has a run folder of its own, `.cluster-bench/`, and leaves the test cluster alone.
//! Each run ([`run`]) works in a fresh namespace that is emptied and deleted afterwards; a run
//! of 50,000 Foos or more (`--fresh-cluster-from`) starts on a cluster started for it instead
//! (deleting that many takes minutes). Runs alternate between contenders and repeat, because
//! this machine is shared and noisy; the report ([`report`]) gives medians and spreads, the
//! chart ([`chart`]) converged Foos over time.

mod apiserver;
mod chart;
mod contender;
mod event_queue;
mod machine;
mod model;
mod proc_stats;
mod profile;
mod report;
mod run;
mod sharded;
mod tracker;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use local_cluster::{LocalCluster, State, UpOptions, paths, toolchain};

use contender::Contenders;
use model::{
    Block, Contender, FreshStart, Meta, OperatorBuild, Results, RunResult, RunSpec, Scenario, UNTUNED_MAX_N,
    runs_once,
};
pub use profile::ProfileArgs;
pub use profile::run as run_profile;
use run::RunOptions;
pub use sharded::ShardedArgs;
pub use sharded::run as run_sharded;

/// What `--preset` sets; an option given on the command line wins over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// The whole table (bench/RESULTS.md): 1,000 to 100,000 Foos; most of a day.
    Full,
    /// Every contender and scenario at a small size, once: minutes rather than hours (its time
    /// as the smoke test of `cargo xtask test` is in the README's figures).
    Quick,
}

/// Options of `cargo xtask bench`. The defaults are `--preset full`, the whole benchmark, which
/// takes hours; `--preset quick` takes minutes.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// A set of defaults: `full` (the table in bench/RESULTS.md) or `quick` (minutes).
    #[arg(long, value_enum, default_value = "full")]
    preset: Preset,
    /// Numbers of Foos for the backlog and burst scenarios; steady state takes those up to
    /// 10,000.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000,10000,100000",
        default_value_if("preset", "quick", "100")
    )]
    n: Vec<usize>,
    /// Runs of each contender in the backlog and burst at each size (the steady state, memory
    /// and restart run once).
    #[arg(long, default_value_t = 3, default_value_if("preset", "quick", "1"))]
    repeats: usize,
    /// Contenders to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "ours,ours-streaming,ours-events-off,sample-controller,sample-controller-tuned,controller-runtime,controller-runtime-tuned,ceiling,ceiling-ours-status,ceiling-ours"
    )]
    contenders: Vec<Contender>,
    /// Scenarios to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "backlog,burst,steady,memory,restart"
    )]
    scenarios: Vec<Scenario>,
    /// How long the steady-state scenario counts requests once the Foos are converged: `5m`,
    /// `90s` or seconds.
    #[arg(long, default_value = "5m", default_value_if("preset", "quick", "15s"), value_parser = parse_duration)]
    steady_window: Duration,
    /// Foos in the memory scenario.
    #[arg(long, default_value_t = 100_000, default_value_if("preset", "quick", "500"))]
    memory_foos: usize,
    /// Foos in the restart scenario.
    #[arg(long, default_value_t = 100_000, default_value_if("preset", "quick", "500"))]
    restart_foos: usize,
    /// Largest N for kubernetes/sample-controller in the timed scenarios. Its client-side rate
    /// limit (client-go's default 5 requests/s, burst 10) makes it converge about 5 Foos a
    /// second, so a larger N only makes the run longer.
    #[arg(long, default_value_t = model::RATE_LIMITED_CAP, default_value_if("preset", "quick", "100"))]
    rate_limited_cap: usize,
    /// Concurrent Foos of the tuned peers (workers, concurrent reconciles); keep it equal to our
    /// operator's default.
    #[arg(long, default_value_t = model::OPERATOR_CONCURRENCY)]
    concurrency: usize,
    /// The ceiling's concurrencies: it runs at each, and its row is the fastest, so that no
    /// contender can beat it by a better setting.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "8,16,32,64,128",
        default_value_if("preset", "quick", "16,64")
    )]
    ceiling_concurrencies: Vec<usize>,
    /// Concurrencies at which ours, the tuned peers and the ceiling doing ours' work run in
    /// the backlog and burst, in place of `--concurrency`: each row is then that contender at
    /// its fastest, as its users would tune it. Empty: `--concurrency` only.
    #[arg(long, value_delimiter = ',', conflicts_with = "concurrency_of")]
    sweep: Vec<usize>,
    /// One concurrency for a contender in every scenario, in place of `--concurrency`, as
    /// `CONTENDER=N` (several separated by commas): each at the best a sweep found for it. Only
    /// for contenders that take one (ours, the tuned peers, the ceilings doing ours' work; the
    /// two-write ceiling has `--ceiling-concurrencies`).
    #[arg(long, value_delimiter = ',', value_parser = parse_concurrency_of)]
    concurrency_of: Vec<(Contender, usize)>,
    /// Runs of this many Foos or more start on an etcd and kube-apiserver started for them,
    /// instead of deleting the run before's objects (minutes at 100,000).
    #[arg(long, default_value_t = model::LARGE_N, default_value_if("preset", "quick", "500"))]
    fresh_cluster_from: usize,
    /// A run that has not converged after this long is recorded as timed out.
    #[arg(long, default_value = "30m", default_value_if("preset", "quick", "3m"), value_parser = parse_duration)]
    timeout: Duration,
    /// Where RESULTS.md, converged.png and results.json are written, from the repository root.
    #[arg(long, default_value = "bench")]
    out: PathBuf,
    /// Only render RESULTS.md and converged.png again from the results.json in `--out`.
    #[arg(long)]
    report_only: bool,
    /// Measure this sample-operator binary instead of building the image's (release, static,
    /// musl; a smoke test runs the debug build it already has; its numbers mean nothing then).
    #[arg(long)]
    operator_binary: Option<PathBuf>,
    /// Leave the benchmark's cluster running afterwards (in .cluster-bench/).
    #[arg(long)]
    keep_cluster: bool,
    /// Go on with the results.json in `--out`: runs it already has a result for are skipped.
    /// The full benchmark takes hours, so it may be run in several sittings; the options must
    /// be those it was started with.
    #[arg(long)]
    resume: bool,
    /// Run only the first N blocks of those left (a block: one repeat of one scenario at one
    /// size, whose runs are compared with each other), then stop, so that a sitting that has
    /// time for N blocks ends on a whole one. Unset: every block left.
    #[arg(long, requires = "resume")]
    blocks: Option<usize>,
}

impl BenchArgs {
    /// `--concurrency-of` by contender; the last given for one wins.
    fn concurrency_of(&self) -> BTreeMap<Contender, usize> {
        self.concurrency_of.iter().copied().collect()
    }
}

pub async fn run(args: BenchArgs) -> Result<()> {
    let out = paths::repo_root().join(&args.out);
    if args.report_only {
        let results = report::load(&out)?;
        return report::write(&out, &results, &plan(&args));
    }
    let plan = plan(&args);
    let previous = if args.resume {
        let mut previous = report::load(&out).context("--resume needs the results.json of an earlier run")?;
        check_resumable(&args, &previous.meta)?;
        let here = machine();
        let dropped = keep_comparable(&mut previous, &plan, &here);
        if !dropped.is_empty() {
            println!(
                "== this machine is not the one that began {}; they run again here, whole",
                dropped
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        Some(previous)
    } else {
        None
    };
    let done = |spec: &RunSpec| {
        previous
            .as_ref()
            .is_some_and(|p| p.runs.iter().any(|r| r.succeeded() && r.is_of(spec)))
    };
    let todo: Vec<(usize, RunSpec)> = plan
        .iter()
        .cloned()
        .enumerate()
        .filter(|(_, s)| !done(s))
        .collect();
    let todo = first_blocks(todo, args.blocks);
    println!("== {} runs planned, {} to run", plan.len(), todo.len());

    let ours = (args.contenders.iter().any(|c| c.is_ours()))
        .then(|| operator_binary(args.operator_binary.as_deref()))
        .transpose()?;
    let contenders = Contenders::prepare(&args.contenders, ours.as_ref().map(|(path, _)| path.as_path()))?;
    let build = ours.map(|(_, build)| build);
    let cluster = LocalCluster::new(paths::repo_root().join(".cluster-bench"));
    let outcome = until_stopped(run_plan(
        &cluster,
        &contenders,
        &args,
        build,
        &todo,
        previous,
        &out,
    ))
    .await;
    if !args.keep_cluster {
        cluster.down().context("stopping the benchmark cluster")?;
    }
    outcome
}

/// `work`, unless the benchmark is asked to stop first (SIGINT or SIGTERM): `work` is then
/// dropped, which stops the contender it runs, and the caller stops the cluster, so that an
/// interrupted benchmark leaves nothing running. What ended before is saved as it ended.
pub(crate) async fn until_stopped<T>(work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let stopped_by = tokio::select! {
        outcome = work => return outcome,
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    };
    println!("== stopped by {stopped_by}: stopping what runs; the runs that ended are saved");
    bail!("stopped by {stopped_by}")
}

/// How long a fresh apiserver's CPU use is sampled, after the wait for it to go quiet.
const CPU_SAMPLE: Duration = Duration::from_secs(5);

/// Starts the benchmark's cluster, etcd and kube-apiserver only, with the CRDs installed, and
/// waits up to a minute for the apiserver's CPU to go quiet, so that no run shares the cores with
/// its start-up. Returns how that wait ended, for the next run's record.
async fn start_cluster(
    cluster: &LocalCluster,
    contenders: &Contenders,
    options: &RunOptions,
) -> Result<(run::Env, State, Option<FreshStart>)> {
    println!(
        "== starting etcd and kube-apiserver only, in {}",
        cluster.dir().display()
    );
    let state = cluster
        .up_with(UpOptions {
            apiserver_only: true,
            large: true,
            ..UpOptions::default()
        })
        .await?;
    println!("Kubernetes {} at {}", state.kubernetes_version, state.server);
    let kubectl = toolchain::ensure()?.kubectl;
    apiserver::install_crds(&kubectl, &cluster.kubeconfig())?;
    let mut fresh_start = None;
    if let Some(apiserver) = state.components.iter().find(|c| c.name == "kube-apiserver") {
        let second = Duration::from_secs(1);
        let (waited, quiet) =
            proc_stats::wait_quiet(apiserver.pid, 2 * second, 2 * second, 60 * second).await?;
        // How busy it still is: an idle apiserver here has been seen to stay at 14-24% of a core
        // for minutes, or to drop below the 2% the wait takes for quiet.
        let before = proc_stats::read(apiserver.pid)?.cpu_seconds;
        tokio::time::sleep(CPU_SAMPLE).await;
        let cpu_share = (proc_stats::read(apiserver.pid)?.cpu_seconds - before) / CPU_SAMPLE.as_secs_f64();
        if !quiet {
            println!(
                "   kube-apiserver still busy after {waited:.0?} ({:.0}% of a core); the first run may share its start-up",
                cpu_share * 100.0
            );
        }
        fresh_start = Some(FreshStart {
            waited_seconds: waited.as_secs_f64(),
            quiet,
            cpu_share,
        });
    }
    let env = run::Env {
        client: cluster.client().await?,
        kubeconfig: cluster.kubeconfig(),
        logs: cluster.logs_dir().join("contenders"),
        contenders: contenders.clone(),
        options: options.clone(),
    };
    Ok((env, state, fresh_start))
}

async fn run_plan(
    cluster: &LocalCluster,
    contenders: &Contenders,
    args: &BenchArgs,
    build: Option<OperatorBuild>,
    plan: &[(usize, RunSpec)],
    previous: Option<Results>,
    out: &Path,
) -> Result<()> {
    let options = RunOptions {
        timeout: args.timeout,
        steady_window: args.steady_window,
        concurrency: args.concurrency,
    };
    let (mut env, state, mut fresh_start) = start_cluster(cluster, contenders, &options).await?;
    run::delete_leftovers(&env.client).await?;
    let meta = describe(args, &state.kubernetes_version, build).await;
    let here = meta.machine.clone();
    let mut results = match previous {
        Some(mut previous) => {
            if previous.meta.kubernetes_version != meta.kubernetes_version {
                bail!(
                    "cannot resume: the results were taken on Kubernetes {}, this cluster is {}",
                    previous.meta.kubernetes_version,
                    meta.kubernetes_version
                );
            }
            // Failed runs are run again; their records make way for the new ones.
            previous.runs.retain(RunResult::succeeded);
            for commit in meta.commits {
                if !previous.meta.commits.contains(&commit) {
                    previous.meta.commits.push(commit);
                }
            }
            for build in &meta.operator_builds {
                OperatorBuild::record(&mut previous.meta.operator_builds, build);
            }
            previous.meta.other_cluster_running |= meta.other_cluster_running;
            previous
        }
        None => Results {
            meta,
            runs: Vec::new(),
        },
    };
    // Whether the cluster has taken no run since it started, and whether the last run left its
    // objects behind (a large one does: the next run starts on a fresh cluster).
    let mut pristine = true;
    let mut leftovers = false;
    for (done, (index, spec)) in plan.iter().enumerate() {
        println!("== run {}/{}: {spec}", done + 1, plan.len());
        // A capped run is the same at every planned N above the cap: it runs once (on each
        // machine, as blocks compare runs of one machine).
        let same = results
            .runs
            .iter()
            .find(|r| r.succeeded() && r.is_same_run(spec) && r.machine(&results.meta) == here)
            .cloned();
        let result = match same {
            Some(same) => same.reused_for(spec),
            None => {
                let fresh = spec.n >= args.fresh_cluster_from;
                if (fresh || leftovers) && !pristine {
                    println!("   on a fresh etcd and kube-apiserver");
                    cluster.down().context("stopping the benchmark cluster")?;
                    (env, _, fresh_start) = start_cluster(cluster, contenders, &options).await?;
                }
                pristine = false;
                leftovers = fresh;
                let machine_seconds = tokio::task::spawn_blocking(machine::reference_seconds).await?;
                let mut result = run::run(&env, spec, *index, !fresh).await?;
                // Only the first run on a cluster began on a fresh apiserver.
                result.fresh_start = fresh_start.take();
                result.machine_seconds = Some(machine_seconds);
                result.machine = Some(here.clone());
                result
            }
        };
        println!("   {}", result.summary());
        results.runs.push(result);
        // Saved after every run, so that an interrupted benchmark keeps what it measured.
        report::save(out, &results)?;
    }
    report::write(out, &results, &self::plan(args))?;
    println!("== wrote {} and converged.png", out.join("RESULTS.md").display());
    Ok(())
}

/// Where and how this benchmark runs, for the report's notes.
async fn describe(args: &BenchArgs, kubernetes_version: &str, build: Option<OperatorBuild>) -> Meta {
    Meta {
        date: command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        machine: machine(),
        kubernetes_version: kubernetes_version.to_owned(),
        go_version: command_output("go", &["env", "GOVERSION"]),
        repeats: args.repeats,
        concurrency: args.concurrency,
        ceiling_concurrencies: args.ceiling_concurrencies.clone(),
        sweep: args.sweep.clone(),
        concurrency_of: args.concurrency_of(),
        rate_limited_cap: args.rate_limited_cap,
        fresh_cluster_from: args.fresh_cluster_from,
        steady_window_seconds: args.steady_window.as_secs(),
        other_cluster_running: LocalCluster::default().is_healthy().await,
        commits: vec![operator_commit()],
        operator_builds: build.into_iter().collect(),
    }
}

/// The binary of ours a benchmark measures and what it is: the one given, or else this
/// checkout's as the image ships it (release, linked statically against musl), because that is
/// the build production runs, and the host's glibc build holds more memory (docs/benchmark.md,
/// "What every replica pays").
fn operator_binary(given: Option<&Path>) -> Result<(PathBuf, OperatorBuild)> {
    let (path, source) = match given {
        Some(path) => (path.to_owned(), format!("given: {}", path.display())),
        None => {
            println!("== building sample-operator as the image does (release, static, musl)");
            let path = crate::cargo_build::operator_static("release", true)?;
            let source = format!("the image's build of {}", operator_commit());
            (path, source)
        }
    };
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok((
        path,
        OperatorBuild {
            sha256: sha256_prefix(&bytes),
            source,
        },
    ))
}

/// The first 16 hexadecimal digits of `bytes`' SHA-256: enough to tell builds apart.
fn sha256_prefix(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The commit of the operator being measured, `-dirty` when its sources have uncommitted
/// changes. Changes elsewhere (this benchmark's own results, the docs) do not count.
fn operator_commit() -> String {
    let commit = command_output("git", &["describe", "--always", "--abbrev=10"]);
    let changed = command_output(
        "git",
        &[
            "status",
            "--porcelain",
            "--",
            ":/crates",
            ":/Cargo.toml",
            ":/Cargo.lock",
        ],
    );
    if changed.is_empty() {
        commit
    } else {
        format!("{commit}-dirty")
    }
}

/// Of a resumed benchmark's runs, keeps those that can still be compared with what runs on this
/// machine (`here`): runs are compared within their block only, so a block begun on another
/// machine counts only when it is whole. The runs of one that is not are dropped, to be taken
/// again here in one go; returns the blocks that were.
fn keep_comparable(results: &mut Results, plan: &[RunSpec], here: &str) -> Vec<Block> {
    let whole = |block: Block| {
        plan.iter()
            .filter(|spec| spec.block() == block)
            .all(|spec| results.runs.iter().any(|r| r.succeeded() && r.is_of(spec)))
    };
    let mut dropped: Vec<Block> = results
        .runs
        .iter()
        .filter(|r| r.machine(&results.meta) != here)
        .filter_map(RunResult::block)
        .filter(|&block| !whole(block))
        .collect();
    dropped.sort_unstable();
    dropped.dedup();
    let meta = &results.meta;
    results
        .runs
        .retain(|r| r.machine(meta) == here || r.block().is_none_or(|block| !dropped.contains(&block)));
    dropped
}

/// Resumed runs must be the same benchmark as the ones they join. They may be taken on another
/// machine ([`keep_comparable`] says which runs then count).
fn check_resumable(args: &BenchArgs, meta: &Meta) -> Result<()> {
    // Results from before the sweep ran the ceiling at `--concurrency`.
    let swept = if meta.ceiling_concurrencies.is_empty() {
        vec![meta.concurrency]
    } else {
        meta.ceiling_concurrencies.clone()
    };
    let now = (
        args.repeats,
        args.concurrency,
        args.rate_limited_cap,
        args.steady_window.as_secs(),
        &args.ceiling_concurrencies,
        args.fresh_cluster_from,
        &args.sweep,
        &args.concurrency_of(),
    );
    let then = (
        meta.repeats,
        meta.concurrency,
        meta.rate_limited_cap,
        meta.steady_window_seconds,
        &swept,
        meta.fresh_cluster_from,
        &meta.sweep,
        &meta.concurrency_of,
    );
    // A sitting that started fresh clusters at another size would measure large runs differently.
    if now != then {
        bail!(
            "cannot resume: results.json was taken with --repeats {} --concurrency {} --rate-limited-cap {} \
             --steady-window {}s --ceiling-concurrencies {} --fresh-cluster-from {} --sweep {} --concurrency-of {}; \
             give the same options",
            then.0,
            then.1,
            then.2,
            then.3,
            swept.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
            then.5,
            then.6.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
            model::concurrency_of_text(then.7),
        );
    }
    Ok(())
}

/// The runs of `todo`'s first `blocks` blocks, in plan order; all of them when `blocks` is unset.
fn first_blocks(todo: Vec<(usize, RunSpec)>, blocks: Option<usize>) -> Vec<(usize, RunSpec)> {
    let Some(blocks) = blocks else { return todo };
    let mut taken: Vec<Block> = Vec::new();
    todo.into_iter()
        .filter(|(_, spec)| {
            let block = spec.block();
            if !taken.contains(&block) {
                if taken.len() == blocks {
                    return false;
                }
                taken.push(block);
            }
            true
        })
        .collect()
}

/// `Intel(R) Xeon(R) ..., 2 cores, 23.5 GiB, Linux 6.1.0`.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_kib: f64 = meminfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("MemTotal:")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpu}, {cores} cores, {:.1} GiB, Linux {}",
        memory_kib / (1024.0 * 1024.0),
        kernel.trim()
    )
}

fn command_output(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Every run, in the order they happen: each repeat goes through every scenario and size, and
/// within those through every contender, starting one further along each repeat so that no
/// contender always runs first (on a fresh apiserver) or last.
fn plan(args: &BenchArgs) -> Vec<RunSpec> {
    let mut plan = Vec::new();
    for repeat in 0..args.repeats {
        for &scenario in &args.scenarios {
            let sizes = scenario.sizes(&args.n, args.memory_foos, args.restart_foos);
            let contenders: Vec<Contender> = args
                .contenders
                .iter()
                .copied()
                .filter(|c| scenario.includes(*c))
                .collect();
            for &n in &sizes {
                if repeat > 0 && runs_once(scenario) {
                    continue;
                }
                let k = contenders.len();
                for offset in 0..k {
                    // Who goes first moves by one each repeat; the others follow forwards in
                    // even repeats and backwards in odd ones, so that a contender does not
                    // run after the same one every time (a run may still pay for the one
                    // before it: its deletions, etcd's compaction).
                    let contender = if repeat % 2 == 0 {
                        contenders[(repeat + offset) % k]
                    } else {
                        contenders[(repeat + k - offset) % k]
                    };
                    // A capped contender's run stands for the larger sizes; an untuned one
                    // that is not capped stops at UNTUNED_MAX_N.
                    if contender.is_untuned_peer()
                        && n > UNTUNED_MAX_N
                        && contender.cap(scenario, n, args.rate_limited_cap) == n
                    {
                        continue;
                    }
                    let timed = matches!(scenario, Scenario::Backlog | Scenario::Burst);
                    let concurrencies = if contender == Contender::Ceiling {
                        args.ceiling_concurrencies.clone()
                    } else if let Some(&concurrency) = args.concurrency_of().get(&contender) {
                        vec![concurrency]
                    } else if timed && contender.takes_concurrency() && !args.sweep.is_empty() {
                        args.sweep.clone()
                    } else {
                        vec![args.concurrency]
                    };
                    for concurrency in concurrencies {
                        plan.push(RunSpec {
                            scenario,
                            contender,
                            planned_n: n,
                            n: contender.cap(scenario, n, args.rate_limited_cap),
                            repeat,
                            concurrency,
                        });
                    }
                }
            }
        }
    }
    plan
}

/// `CONTENDER=N`, for a contender that takes a concurrency a user would tune.
fn parse_concurrency_of(text: &str) -> Result<(Contender, usize), String> {
    use clap::ValueEnum;
    let (name, number) = text
        .split_once('=')
        .ok_or_else(|| format!("not CONTENDER=N: {text}"))?;
    let contender = Contender::from_str(name.trim(), false)?;
    if !contender.takes_concurrency() {
        return Err(format!(
            "{name} does not take a concurrency of its own (the two-write ceiling has --ceiling-concurrencies)"
        ));
    }
    match number.trim().parse() {
        Ok(n) if n > 0 => Ok((contender, n)),
        _ => Err(format!("not a concurrency above 0: {number}")),
    }
}

/// `5m`, `90s`, `2h` or plain seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let number: u64 = number.parse().map_err(|_| format!("not a duration: {text}"))?;
    let seconds = match unit {
        "s" => number,
        "m" => number * 60,
        "h" => number * 3600,
        _ => return Err(format!("unknown unit {unit:?} in {text}; use s, m or h")),
    };
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn args(line: &str) -> BenchArgs {
        Cli::parse_from(std::iter::once("bench").chain(line.split_whitespace())).bench
    }

    #[test]
    fn a_resumed_run_must_start_fresh_clusters_at_the_same_size() {
        let taken = args("--preset quick");
        let meta = Meta {
            date: String::new(),
            machine: "here".into(),
            kubernetes_version: String::new(),
            go_version: String::new(),
            repeats: taken.repeats,
            concurrency: taken.concurrency,
            ceiling_concurrencies: taken.ceiling_concurrencies.clone(),
            sweep: vec![],
            concurrency_of: BTreeMap::new(),
            rate_limited_cap: taken.rate_limited_cap,
            fresh_cluster_from: taken.fresh_cluster_from,
            steady_window_seconds: taken.steady_window.as_secs(),
            other_cluster_running: false,
            commits: vec![],
            operator_builds: vec![],
        };
        assert!(check_resumable(&args("--preset quick"), &meta).is_ok());
        let error = check_resumable(&args("--preset quick --fresh-cluster-from 100"), &meta).unwrap_err();
        assert!(error.to_string().contains("--fresh-cluster-from 500"), "{error}");
        // Nor join a sweep to runs that were not swept.
        assert!(check_resumable(&args("--preset quick --sweep 16,64"), &meta).is_err());
    }

    #[test]
    fn a_block_begun_on_another_machine_runs_again_whole_and_a_whole_one_is_kept() {
        let plan = plan(&args(
            "--n 10,20 --repeats 2 --scenarios backlog --contenders ours,ceiling --ceiling-concurrencies 16",
        ));
        assert_eq!(plan.len(), 8);
        let ran = |spec: &RunSpec, machine: Option<&str>| RunResult {
            seconds: Some(1.0),
            machine: machine.map(str::to_owned),
            ..RunResult::new(spec)
        };
        // Repeat 1 of N = 10 whole, repeat 1 of N = 20 half, all on the first machine (whose
        // early results did not record it); a run of repeat 2 of N = 10 here.
        let mut results = Results {
            meta: Meta {
                machine: "there".into(),
                ..Meta::default()
            },
            runs: vec![
                ran(&plan[0], None),
                ran(&plan[1], Some("there")),
                ran(&plan[2], Some("there")),
                ran(&plan[4], Some("here")),
            ],
        };
        let dropped = keep_comparable(&mut results, &plan, "here");
        assert_eq!(
            dropped.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["backlog, N = 20, repeat 1"]
        );
        let kept: Vec<String> = results
            .runs
            .iter()
            .map(|r| r.block().unwrap().to_string())
            .collect();
        assert_eq!(
            kept,
            [
                "backlog, N = 10, repeat 1",
                "backlog, N = 10, repeat 1",
                "backlog, N = 10, repeat 2"
            ]
        );
        // On the machine that began it, a half block is simply finished.
        let mut results = Results {
            meta: Meta {
                machine: "there".into(),
                ..Meta::default()
            },
            runs: vec![ran(&plan[2], None)],
        };
        assert!(keep_comparable(&mut results, &plan, "there").is_empty());
        assert_eq!(results.runs.len(), 1);
    }

    #[test]
    fn blocks_runs_only_the_first_blocks_left_whole_then_stops() {
        let plan = plan(&args(
            "--n 10,20 --repeats 2 --scenarios backlog --contenders ours,ceiling --ceiling-concurrencies 16",
        ));
        // The first run of the first block is done: what is left of it counts as one block.
        let todo: Vec<(usize, RunSpec)> = plan.iter().cloned().enumerate().skip(1).collect();
        let blocks = |runs: &[(usize, RunSpec)]| {
            runs.iter()
                .map(|(index, spec)| (*index, spec.repeat, spec.planned_n))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            blocks(&first_blocks(todo.clone(), Some(2))),
            [(1, 0, 10), (2, 0, 20), (3, 0, 20)]
        );
        assert_eq!(first_blocks(todo.clone(), Some(0)).len(), 0);
        assert_eq!(first_blocks(todo.clone(), None).len(), todo.len());
        assert!(
            Cli::try_parse_from(["bench", "--blocks", "1"]).is_err(),
            "--blocks without --resume"
        );
    }

    #[test]
    fn durations_take_a_unit_or_seconds() {
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("5 weeks").is_err());
    }

    #[test]
    fn the_plan_alternates_contenders_and_rotates_who_goes_first() {
        let plan = plan(&args(
            "--n 10 --repeats 2 --scenarios backlog --contenders ours,ceiling --ceiling-concurrencies 16,64",
        ));
        let order: Vec<(Contender, usize)> = plan.iter().map(|r| (r.contender, r.concurrency)).collect();
        assert_eq!(
            order,
            [
                (Contender::Ours, 16),
                (Contender::Ceiling, 16),
                (Contender::Ceiling, 64),
                (Contender::Ceiling, 16),
                (Contender::Ceiling, 64),
                (Contender::Ours, 16),
            ]
        );
    }

    #[test]
    fn odd_repeats_run_the_contenders_backwards_so_each_follows_another_one_each_time() {
        let plan = plan(&args(
            "--n 10 --repeats 3 --scenarios backlog --contenders ours,sample-controller-tuned,ceiling --ceiling-concurrencies 16",
        ));
        let order: Vec<Vec<Contender>> = (0..3)
            .map(|repeat| {
                plan.iter()
                    .filter(|r| r.repeat == repeat)
                    .map(|r| r.contender)
                    .collect()
            })
            .collect();
        use Contender::{Ceiling, Ours, SampleControllerTuned as Tuned};
        assert_eq!(
            order,
            [
                vec![Ours, Tuned, Ceiling],
                vec![Tuned, Ours, Ceiling],
                vec![Ceiling, Ours, Tuned]
            ]
        );
    }

    #[tokio::test]
    async fn a_signal_stops_the_work_and_drops_it_so_that_what_it_ran_is_stopped() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        /// Stands for a running contender, which is stopped when dropped.
        struct Running(Arc<AtomicBool>);
        impl Drop for Running {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let stopped = Arc::new(AtomicBool::new(false));
        let running = Running(stopped.clone());
        let work = async move {
            let _running = running;
            std::future::pending::<Result<()>>().await
        };
        let waiting = tokio::spawn(until_stopped(work));
        // Once its handlers are in place (this test's process only: nextest runs each apart).
        tokio::time::sleep(Duration::from_millis(200)).await;
        nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGTERM).unwrap();
        let outcome = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("still running after SIGTERM")
            .unwrap();
        assert_eq!(outcome.unwrap_err().to_string(), "stopped by SIGTERM");
        assert!(stopped.load(Ordering::SeqCst), "the work was not dropped");
    }

    /// The first repeat of the plan of `line`: each run's scenario, contender and concurrency.
    fn first_repeat(line: &str) -> Vec<(Scenario, Contender, usize)> {
        plan(&args(line))
            .iter()
            .filter(|r| r.repeat == 0)
            .map(|r| (r.scenario, r.contender, r.concurrency))
            .collect()
    }

    #[test]
    fn a_sweep_runs_the_tunable_contenders_at_each_concurrency_in_the_timed_scenarios_only() {
        assert_eq!(
            first_repeat(
                "--n 10 --scenarios backlog,memory --contenders ours,sample-controller,controller-runtime-tuned,ceiling,ceiling-ours \
                 --ceiling-concurrencies 8 --sweep 16,64"
            ),
            [
                (Scenario::Backlog, Contender::Ours, 16),
                (Scenario::Backlog, Contender::Ours, 64),
                // At its defaults: one worker, not a setting its users tune here.
                (Scenario::Backlog, Contender::SampleController, 16),
                (Scenario::Backlog, Contender::ControllerRuntimeTuned, 16),
                (Scenario::Backlog, Contender::ControllerRuntimeTuned, 64),
                (Scenario::Backlog, Contender::Ceiling, 8),
                (Scenario::Backlog, Contender::CeilingOurs, 16),
                (Scenario::Backlog, Contender::CeilingOurs, 64),
                // (Memory at 100,000 Foos: past where the peers at their defaults stop.)
                (Scenario::Memory, Contender::Ours, 16),
                (Scenario::Memory, Contender::ControllerRuntimeTuned, 16),
            ]
        );
    }

    #[test]
    fn a_contender_given_its_own_concurrency_runs_at_it_in_every_scenario() {
        assert_eq!(
            first_repeat(
                "--n 10 --scenarios backlog,memory --contenders ours,controller-runtime-tuned,ceiling,ceiling-ours \
                 --ceiling-concurrencies 8,128 --concurrency-of ours=128,ceiling-ours=64,ours=96"
            ),
            [
                // The last given for a contender wins.
                (Scenario::Backlog, Contender::Ours, 96),
                (Scenario::Backlog, Contender::ControllerRuntimeTuned, 16),
                (Scenario::Backlog, Contender::Ceiling, 8),
                (Scenario::Backlog, Contender::Ceiling, 128),
                (Scenario::Backlog, Contender::CeilingOurs, 64),
                (Scenario::Memory, Contender::Ours, 96),
                (Scenario::Memory, Contender::ControllerRuntimeTuned, 16),
            ]
        );
    }

    #[test]
    fn a_concurrency_of_its_own_is_refused_where_it_means_nothing() {
        let parse = |line: &str| Cli::try_parse_from(std::iter::once("bench").chain(line.split_whitespace()));
        for (line, says) in [
            ("--concurrency-of ceiling=64", "--ceiling-concurrencies"),
            (
                "--concurrency-of sample-controller=64",
                "does not take a concurrency",
            ),
            ("--concurrency-of ours=0", "above 0"),
            ("--concurrency-of ours", "CONTENDER=N"),
            ("--concurrency-of nobody=16", "nobody"),
            ("--concurrency-of ours=64 --sweep 16,64", "cannot be used with"),
        ] {
            let error = parse(line)
                .err()
                .unwrap_or_else(|| panic!("{line} was taken"))
                .to_string();
            assert!(error.contains(says), "{line}: {error}");
        }
        // Nor may a resumed run change it.
        let taken = args("--preset quick --concurrency-of ours=128");
        let meta = Meta {
            machine: "here".into(),
            repeats: taken.repeats,
            concurrency: taken.concurrency,
            ceiling_concurrencies: taken.ceiling_concurrencies.clone(),
            concurrency_of: taken.concurrency_of(),
            rate_limited_cap: taken.rate_limited_cap,
            fresh_cluster_from: taken.fresh_cluster_from,
            steady_window_seconds: taken.steady_window.as_secs(),
            ..Meta::default()
        };
        assert!(check_resumable(&taken, &meta).is_ok());
        let error = check_resumable(&args("--preset quick --concurrency-of ours=64"), &meta).unwrap_err();
        assert!(
            error.to_string().contains("--concurrency-of ours=128;"),
            "{error}"
        );
    }

    #[test]
    fn a_binary_is_told_by_the_start_of_its_sha256() {
        // FIPS 180-2's first example.
        assert_eq!(sha256_prefix(b"abc"), "ba7816bf8f01cfea");
        let path = std::env::temp_dir().join(format!("operator-binary-{}", std::process::id()));
        std::fs::write(&path, b"abc").unwrap();
        let (given, build) = operator_binary(Some(&path)).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(given, path);
        assert_eq!(build.sha256, "ba7816bf8f01cfea");
        assert_eq!(build.source, format!("given: {}", path.display()));
    }

    #[test]
    fn the_ceiling_is_swept_by_default_and_briefly_in_the_quick_preset() {
        assert_eq!(args("").ceiling_concurrencies, [8, 16, 32, 64, 128]);
        assert_eq!(args("--preset quick").ceiling_concurrencies, [16, 64]);
        assert_eq!(
            args("--preset quick --ceiling-concurrencies 32").ceiling_concurrencies,
            [32]
        );
    }

    #[test]
    fn presets_set_defaults_that_options_override() {
        let quick = args("--preset quick");
        assert_eq!(
            (quick.n.clone(), quick.repeats, quick.memory_foos),
            (vec![100], 1, 500)
        );
        assert_eq!(args("--preset quick --n 1000").n, [1000]);
        let full = args("");
        assert_eq!(full.n, [1000, 10_000, 100_000]);
        assert_eq!((full.restart_foos, full.repeats), (100_000, 3));
    }

    #[test]
    fn the_full_plan_repeats_converge_rows_at_every_size_and_stops_untuned_peers_at_ten_thousand() {
        let plan = plan(&args(""));
        let at = |n: usize| plan.iter().filter(move |r| r.planned_n == n);
        // Every converge row three times, at 100,000 as below; memory and restart once.
        for scenario in [Scenario::Backlog, Scenario::Burst] {
            let ours = at(100_000).filter(|r| r.scenario == scenario && r.contender == Contender::Ours);
            assert_eq!(ours.map(|r| r.repeat).collect::<Vec<_>>(), [0, 1, 2]);
        }
        assert!(
            at(100_000)
                .filter(|r| matches!(r.scenario, Scenario::Memory | Scenario::Restart))
                .all(|r| r.repeat == 0)
        );
        // Backlog and burst three times each, the steady state once.
        assert_eq!(
            at(10_000).filter(|r| r.contender == Contender::Ours).count(),
            2 * 3 + 1
        );
        assert!(!at(100_000).any(|r| r.contender == Contender::ControllerRuntime));
        assert!(at(100_000).any(|r| r.contender == Contender::ControllerRuntimeTuned));
        // Capped, sample-controller's 1,000-Foo run stands for 100,000 in the timed scenarios.
        assert!(at(100_000).any(|r| r.contender == Contender::SampleController && r.n == 1000));
        assert!(
            !plan
                .iter()
                .any(|r| r.scenario == Scenario::Steady && r.planned_n > 10_000)
        );
        assert!(
            plan.iter()
                .any(|r| r.scenario == Scenario::Restart && r.contender == Contender::OursStreaming)
        );
    }

    #[test]
    fn the_plan_caps_the_rate_limited_contender_and_keeps_the_ceiling_to_timed_scenarios() {
        let plan = plan(&args("--n 1000 --repeats 1 --rate-limited-cap 300"));
        let sample = plan
            .iter()
            .find(|r| r.contender == Contender::SampleController && r.scenario == Scenario::Backlog)
            .unwrap();
        assert_eq!((sample.planned_n, sample.n), (1000, 300));
        assert!(
            !plan
                .iter()
                .any(|r| r.contender == Contender::Ceiling && r.scenario == Scenario::Steady)
        );
        // Untimed: the rate-limited contender starts on Foos the ceiling converged.
        let untimed: Vec<&RunSpec> = plan
            .iter()
            .filter(|r| matches!(r.scenario, Scenario::Steady | Scenario::Memory))
            .collect();
        assert!(untimed.iter().all(|r| r.n == r.planned_n));
    }
}
