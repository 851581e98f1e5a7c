//! `cargo xtask bench-sharded`: our Foo controller as N replicas with `--sharding`, each under
//! a CPU quota and a memory cap of its own, on an apiserver of its own.
//!
//! Each run starts etcd and kube-apiserver afresh (with `ShardedListAndWatch` on, or off for
//! the client-side filtering rows), creates the Foos, then starts every replica at once and
//! times until every Foo is converged. Once each replica has gone quiet, it reads each one's
//! peak and idle memory, CPU time, the watch events it received and the Foos it owns, and the
//! apiserver's CPU time over the run. Beside the sharded rows, one replica without
//! `--sharding` and without a quota: the operator as it runs unsharded, the reference the
//! sharded throughput is held against.
//!
//! The quota stands for a machine of that many cores per replica. On one machine it cannot
//! stand for more: the replicas share the apiserver's and etcd's cores, so the aggregate
//! throughput levels off where those are saturated, long before N machines would. The memory
//! and event figures per replica do not depend on that.
//!
//! Results go to `sharded.json` in `--out`, the table to the "Sharded replicas" section of its
//! RESULTS.md (the same section the main benchmark's report renders from that file), and the
//! plot to `sharded.png`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use local_cluster::process::free_port;
use local_cluster::{Component, LocalCluster, UpOptions, paths};
use serde::{Deserialize, Serialize};

use super::model::{OperatorBuild, Spread};
use super::tracker::Outcome;
use super::{Preset, apiserver, parse_duration, proc_stats};

/// Options of `cargo xtask bench-sharded`.
#[derive(clap::Args, Debug)]
pub struct ShardedArgs {
    /// `full` (the table in bench/RESULTS.md; hours at 100,000 Foos) or `quick` (minutes).
    #[arg(long, value_enum, default_value = "full")]
    preset: Preset,
    /// Numbers of Foos; 0 measures what a replica holds with none.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,10000,100000",
        default_value_if("preset", "quick", "100")
    )]
    n: Vec<usize>,
    /// Numbers of sharded replicas; the largest also runs with the apiserver's filtering off.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4",
        default_value_if("preset", "quick", "2")
    )]
    replicas: Vec<usize>,
    /// Runs of each row.
    #[arg(long, default_value_t = 3, default_value_if("preset", "quick", "1"))]
    repeats: usize,
    /// The setups to run: all by default; fewer to take the rows a question needs first and
    /// the others later with `--resume`.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "unsharded,server-filtering,client-filtering"
    )]
    setups: Vec<Setup>,
    /// Each sharded replica's CPU quota, in cores.
    #[arg(long, default_value_t = 0.5)]
    cpu_per_replica: f64,
    /// Each sharded replica's memory cap, in MiB.
    #[arg(long, default_value_t = 2048)]
    memory_mib_per_replica: u64,
    /// A run that has not converged after this long is recorded as timed out.
    #[arg(long, default_value = "30m", default_value_if("preset", "quick", "3m"), value_parser = parse_duration)]
    timeout: Duration,
    /// Where sharded.json, sharded.png and RESULTS.md's section go, from the repository root.
    #[arg(long, default_value = "bench")]
    out: PathBuf,
    /// Only render the section and the plot again from sharded.json.
    #[arg(long)]
    report_only: bool,
    /// Measure this sample-operator binary instead of building the image's (release, static, musl).
    #[arg(long)]
    operator_binary: Option<PathBuf>,
    /// Go on with the sharded.json in `--out`: rows it already has enough runs of are skipped.
    #[arg(long)]
    resume: bool,
}

/// How a row's replicas run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Setup {
    /// One replica without `--sharding` and without a quota.
    Unsharded,
    /// Replicas with `--sharding`, the apiserver filtering their lists and watches.
    ServerFiltering,
    /// Replicas with `--sharding` on an apiserver without the feature gate: each receives
    /// every Foo and drops the others' itself.
    ClientFiltering,
}

/// One row: a setup with a number of replicas at a number of Foos.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Row {
    pub n: usize,
    pub setup: Setup,
    pub replicas: usize,
}

impl Row {
    fn label(&self) -> String {
        match self.setup {
            Setup::Unsharded => "1, unsharded, no quota".into(),
            Setup::ServerFiltering => format!("{}, filtered by the apiserver", self.replicas),
            Setup::ClientFiltering => format!("{}, filtered by each replica", self.replicas),
        }
    }
}

/// The runs the options ask for, rows alternating within each repeat (this machine is noisy),
/// of the setups in `only`.
pub fn plan(ns: &[usize], replicas: &[usize], repeats: usize, only: &[Setup]) -> Vec<Row> {
    let mut rows = Vec::new();
    for &n in ns {
        let mut setups = vec![(Setup::Unsharded, 1)];
        setups.extend(replicas.iter().map(|&r| (Setup::ServerFiltering, r)));
        if let Some(&most) = replicas.iter().max() {
            setups.push((Setup::ClientFiltering, most));
        }
        setups.retain(|(setup, _)| only.contains(setup));
        for _ in 0..repeats {
            rows.extend(setups.iter().map(|&(setup, replicas)| Row { n, setup, replicas }));
        }
    }
    rows
}

/// What one replica did in one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Replica {
    pub peak_rss_bytes: u64,
    /// Once quiet after convergence.
    pub idle_rss_bytes: u64,
    /// Of that, the anonymous memory (`RssAnon`): what it allocated, without the pages of its
    /// own binary that every replica maps whatever it holds. Not recorded before 2026-11-29
    /// 17:30 UTC.
    #[serde(default)]
    pub idle_anon_bytes: Option<u64>,
    pub cpu_seconds: f64,
    /// Foo watch events received (its lists and changes), before it filters any.
    pub watch_events: u64,
    /// Foos it counts as its own.
    pub owned_foos: u64,
    /// `server` or `client`, as the replica found it; `None` unsharded.
    pub filtering: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub row: Row,
    /// From the replicas' start until every Foo converged; `None` when it did not.
    pub seconds: Option<f64>,
    pub replicas: Vec<Replica>,
    pub apiserver_cpu_seconds: f64,
    /// Why a run failed, or what to know about it.
    pub note: Option<String>,
}

impl RunRecord {
    fn succeeded(&self) -> bool {
        self.seconds.is_some()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub date: String,
    /// When its last run ended, for a benchmark resumed after a pause; `None` before it was
    /// recorded (2026-11-30).
    #[serde(default)]
    pub last_run: Option<String>,
    pub machine: String,
    pub kubernetes_version: String,
    pub commits: Vec<String>,
    pub cpu_per_replica: f64,
    pub memory_mib_per_replica: u64,
    /// Whether each size's Foos were created once and every run started from a copy of the
    /// etcd data holding them (from 2026-11-30 on); before, every run created its own.
    #[serde(default)]
    pub kept_foos: bool,
    /// The binaries measured, one per sitting that ran another; empty before they were
    /// recorded (2026-11-30).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operator_builds: Vec<OperatorBuild>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardedResults {
    pub meta: Meta,
    pub runs: Vec<RunRecord>,
}

const RESULTS_FILE: &str = "sharded.json";
const PLOT_FILE: &str = "sharded.png";

pub fn load(out: &Path) -> Option<ShardedResults> {
    let text = std::fs::read_to_string(out.join(RESULTS_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

fn save(out: &Path, results: &ShardedResults) -> Result<()> {
    std::fs::create_dir_all(out)?;
    std::fs::write(
        out.join(RESULTS_FILE),
        serde_json::to_string_pretty(results)? + "\n",
    )?;
    Ok(())
}

pub async fn run(args: ShardedArgs) -> Result<()> {
    let out = paths::repo_root().join(&args.out);
    if args.report_only {
        let results = load(&out).context("no sharded.json to render")?;
        return write_report(&out, &results);
    }
    let mut results = match (args.resume, load(&out)) {
        (true, Some(previous)) => previous,
        (true, None) => bail!(
            "--resume needs the sharded.json of an earlier run in {}",
            out.display()
        ),
        (false, _) => ShardedResults::default(),
    };
    results.runs.retain(RunRecord::succeeded);
    let plan = plan(&args.n, &args.replicas, args.repeats, &args.setups);
    // A row already run as many times as planned is not run again.
    let mut todo = Vec::new();
    for (i, row) in plan.iter().enumerate() {
        let planned_before = plan[..i].iter().filter(|r| *r == row).count();
        let done = results.runs.iter().filter(|r| r.row == *row).count();
        if planned_before >= done {
            todo.push(*row);
        }
    }
    println!("== {} runs planned, {} to run", plan.len(), todo.len());
    let (operator, build) = super::operator_binary(args.operator_binary.as_deref())?;
    let quotas = Quotas::prepare(args.cpu_per_replica, args.memory_mib_per_replica)?;
    // Taken once the binary is built: what is measured is that build, whatever is committed
    // while the runs go on. A resumed benchmark keeps the date it began.
    let now = || super::command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let machine = super::machine();
    if results.runs.is_empty() {
        results.meta.date = now();
        results.meta.kept_foos = true;
    } else {
        resumable(
            &results.meta,
            &machine,
            args.cpu_per_replica,
            args.memory_mib_per_replica,
        )?;
    }
    results.meta.machine = machine;
    results.meta.cpu_per_replica = args.cpu_per_replica;
    results.meta.memory_mib_per_replica = args.memory_mib_per_replica;
    let commit = super::operator_commit();
    if !todo.is_empty() {
        if !results.meta.commits.contains(&commit) {
            results.meta.commits.push(commit);
        }
        OperatorBuild::record(&mut results.meta.operator_builds, &build);
    }
    let cluster = LocalCluster::new(paths::repo_root().join(".cluster-bench"));
    // The Foos of each size are created once, and every run starts from a copy of the etcd
    // data that holds them. Kept only while this command runs: what an interrupted one left
    // is removed (it may hold a half-made size).
    let kept = paths::repo_root().join(KEPT_FOOS);
    remove_kept(&kept)?;
    let runs = super::until_stopped(async {
        for (done, row) in todo.iter().enumerate() {
            let foos = kept.join(row.n.to_string());
            if !foos.exists() {
                println!("== creating {} Foos, kept for every run of that size", row.n);
                apiserver::keep_foos(&cluster, NAMESPACE, row.n, &foos).await?;
            }
            println!(
                "== run {}/{}: {} Foos, {}",
                done + 1,
                todo.len(),
                row.n,
                row.label()
            );
            let outcome = run_one(&cluster, &operator, &quotas, row, &foos, args.timeout).await;
            let down = cluster.down().context("stopping the benchmark cluster");
            let (record, version) = outcome?;
            down?;
            println!("   {}", record.summary());
            results.meta.kubernetes_version = version;
            results.meta.last_run = Some(now());
            results.runs.push(record);
            save(&out, &results)?;
        }
        Ok(())
    })
    .await;
    // Failed or stopped part way: what was running goes, and so do the kept Foos.
    if runs.is_err() {
        let _ = cluster.down();
    }
    remove_kept(&kept)?;
    runs?;
    write_report(&out, &results)?;
    println!(
        "== wrote {} and the Sharded replicas section of RESULTS.md",
        out.join(PLOT_FILE).display()
    );
    Ok(())
}

/// Whether runs with these settings, on this machine, may join the earlier ones in `meta`: rows
/// compare runs only of one machine and one quota.
fn resumable(meta: &Meta, machine: &str, cpu_per_replica: f64, memory_mib_per_replica: u64) -> Result<()> {
    if meta.machine != machine {
        bail!(
            "cannot resume: its runs were made on {}, and this machine is {machine}",
            meta.machine
        );
    }
    if (meta.cpu_per_replica, meta.memory_mib_per_replica) != (cpu_per_replica, memory_mib_per_replica) {
        bail!(
            "cannot resume: its runs had {} cores and {} MiB per replica",
            meta.cpu_per_replica,
            meta.memory_mib_per_replica
        );
    }
    if !meta.kept_foos {
        bail!(
            "cannot resume: each of its runs created its own Foos, and runs now start from Foos \
             created once; start another --out"
        );
    }
    Ok(())
}

/// Where the etcd data holding each size's Foos is kept while the command runs, from the
/// repository root (one folder per size).
const KEPT_FOOS: &str = ".cluster-bench-foos";

/// The namespace of the Foos.
const NAMESPACE: &str = "bench-sharded";

fn remove_kept(kept: &Path) -> Result<()> {
    if kept.exists() {
        std::fs::remove_dir_all(kept).with_context(|| format!("removing {}", kept.display()))?;
    }
    Ok(())
}

/// One run on a cluster started for it from the etcd data holding its Foos (`foos`); the
/// cluster is the caller's to stop.
async fn run_one(
    cluster: &LocalCluster,
    operator: &Path,
    quotas: &Quotas,
    row: &Row,
    foos: &Path,
    timeout: Duration,
) -> Result<(RunRecord, String)> {
    let apiserver::Backlog {
        state,
        apiserver_pid: apiserver,
        client: _,
        tracker,
    } = apiserver::backlog(
        cluster,
        NAMESPACE,
        row.n,
        UpOptions {
            without_sharded_lists: row.setup == Setup::ClientFiltering,
            etcd_data: Some(foos),
            ..UpOptions::default()
        },
    )
    .await?;

    let apiserver_cpu_before = proc_stats::read(apiserver)?.cpu_seconds;
    let logs = cluster.logs_dir().join("contenders");
    let start = Instant::now();
    let mut replicas = Vec::new();
    for index in 0..row.replicas {
        replicas.push(Started::start(
            operator,
            &cluster.kubeconfig(),
            quotas,
            row,
            index,
            &logs,
        )?);
    }
    let processes: Vec<&Component> = replicas.iter().map(|r| &r.component).collect();
    let outcome = tracker.wait_converged(row.n, start, timeout, &processes).await;
    let mut record = RunRecord {
        row: *row,
        seconds: None,
        replicas: Vec::new(),
        apiserver_cpu_seconds: 0.0,
        note: None,
    };
    match outcome {
        Outcome::Converged(took) => record.seconds = Some(took.as_secs_f64()),
        Outcome::TimedOut => {
            record.note = Some(format!(
                "timed out with {} of {} converged",
                tracker.converged(),
                row.n
            ));
        }
        Outcome::Died(log) => record.note = Some(format!("a replica exited:\n{log}")),
    }
    if record.succeeded() {
        for replica in &replicas {
            // Idle: its queue worked off and its Events written.
            let (_, quiet) = proc_stats::wait_quiet(
                replica.component.pid,
                Duration::from_secs(3),
                Duration::from_secs(3),
                Duration::from_secs(120),
            )
            .await?;
            if !quiet {
                record.note =
                    Some("a replica was still busy two minutes after convergence; read then".into());
            }
        }
        for replica in &replicas {
            record.replicas.push(replica.read()?);
        }
        record.apiserver_cpu_seconds = proc_stats::read(apiserver)?.cpu_seconds - apiserver_cpu_before;
    }
    drop(replicas);
    Ok((record, state.kubernetes_version))
}

/// A replica running in its cgroups; stopped, and its cgroups removed, when dropped.
struct Started {
    component: Component,
    metrics_port: u16,
    cgroups: Vec<PathBuf>,
}

impl Started {
    fn start(
        operator: &Path,
        kubeconfig: &Path,
        quotas: &Quotas,
        row: &Row,
        index: usize,
        logs: &Path,
    ) -> Result<Self> {
        let metrics_port = free_port()?;
        let mut args = vec![
            "run".to_owned(),
            format!("--kubeconfig={}", kubeconfig.display()),
            "--controllers=foo".into(),
            format!("--probe-address=127.0.0.1:{}", free_port()?),
            format!("--metrics-address=127.0.0.1:{metrics_port}"),
            // As in the main benchmark: a bare nginx container, like the peers'.
            "--foo-resources={}".into(),
            "--foo-security-context={}".into(),
            // The Leases go where no Foo is.
            "--leader-election-namespace=default".into(),
        ];
        let cgroups = if row.setup == Setup::Unsharded {
            Vec::new()
        } else {
            args.push("--sharding".into());
            quotas.make(&format!("sample-operator-bench-replica-{index}"))?
        };
        let component = Component::start(&format!("sharded-replica-{index}"), operator, &args, logs)?;
        // Moved in as soon as it runs: what it does before that (a few milliseconds of its
        // start) is outside the quota, and its memory is read from /proc, not the cgroup.
        let started = Self {
            component,
            metrics_port,
            cgroups,
        };
        for cgroup in &started.cgroups {
            let procs = cgroup.join("cgroup.procs");
            std::fs::write(&procs, started.component.pid.to_string())
                .with_context(|| format!("moving replica {index} into {}", procs.display()))?;
        }
        Ok(started)
    }
    /// Its numbers from /proc and from its /metrics.
    fn read(&self) -> Result<Replica> {
        let stats = proc_stats::read(self.component.pid)?;
        let anon = procfs::process::Process::new(self.component.pid)
            .and_then(|p| p.status())
            .ok()
            .and_then(|status| status.rssanon)
            .map(|kib| kib * 1024);
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics_port);
        let metrics = local_cluster::http::get(&url, Duration::from_secs(5))
            .with_context(|| format!("reading {url}"))?
            .body;
        Ok(Replica {
            peak_rss_bytes: stats.peak_rss_bytes,
            idle_rss_bytes: stats.rss_bytes,
            idle_anon_bytes: anon,
            cpu_seconds: stats.cpu_seconds,
            watch_events: metric_sum(
                &metrics,
                "sample_operator_watch_events_total",
                &[("resource", FOO_RESOURCE)],
            ) as u64,
            owned_foos: metric_sum(&metrics, "sample_operator_objects", &[("controller", "foo")]) as u64,
            filtering: ["server", "client"]
                .into_iter()
                .find(|mode| {
                    metric_sum(
                        &metrics,
                        "sample_operator_shard_filtering",
                        &[("resource", FOO_RESOURCE), ("mode", mode)],
                    ) == 1.0
                })
                .map(str::to_owned),
        })
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.component.stop(Duration::from_secs(10));
        for cgroup in &self.cgroups {
            // A group empties a moment after its process is reaped.
            let mut tries = 0;
            while let Err(e) = std::fs::remove_dir(cgroup) {
                tries += 1;
                if tries == 40 {
                    eprintln!("   could not remove the cgroup {}: {e}", cgroup.display());
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// How the operator's watch metrics name the Foos: by their CRD's name.
const FOO_RESOURCE: &str = "foos.samplecontroller.k8s.io";

/// The sum of the samples of `name` whose labels include every one of `labels`, in a
/// Prometheus text exposition.
fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            let ok = if rest.is_empty() {
                labels.is_empty()
            } else {
                let inner = rest.strip_prefix('{')?.strip_suffix('}')?;
                labels
                    .iter()
                    .all(|(k, v)| inner.split(',').any(|pair| pair == format!("{k}=\"{v}\"")))
            };
            ok.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// Where and how each sharded replica gets its CPU quota and memory cap: cgroup v2's unified
/// tree, or v1's `cpu` and `memory` hierarchies. Only groups it made, by exact name, are
/// written to and removed.
struct Quotas {
    cpu: f64,
    memory_bytes: u64,
    layout: CgroupLayout,
}

enum CgroupLayout {
    V2(PathBuf),
    V1 { cpu: PathBuf, memory: PathBuf },
}

/// The CFS period the quota is a share of.
const CFS_PERIOD_US: u64 = 100_000;

impl Quotas {
    fn prepare(cpu: f64, memory_mib: u64) -> Result<Self> {
        let root = Path::new("/sys/fs/cgroup");
        let layout = if root.join("cgroup.controllers").is_file() {
            let enabled = std::fs::read_to_string(root.join("cgroup.subtree_control")).unwrap_or_default();
            if !(enabled.contains("cpu") && enabled.contains("memory")) {
                bail!("the cgroup v2 root does not delegate the cpu and memory controllers to its children");
            }
            CgroupLayout::V2(root.to_owned())
        } else if root.join("cpu/cpu.cfs_quota_us").is_file()
            && root.join("memory/memory.limit_in_bytes").is_file()
        {
            CgroupLayout::V1 {
                cpu: root.join("cpu"),
                memory: root.join("memory"),
            }
        } else {
            bail!("no cgroup cpu and memory controllers under /sys/fs/cgroup to give each replica a quota");
        };
        Ok(Self {
            cpu,
            memory_bytes: memory_mib * 1024 * 1024,
            layout,
        })
    }

    /// Makes the group `name` with the quota and the cap; returns its folders.
    fn make(&self, name: &str) -> Result<Vec<PathBuf>> {
        let quota = (self.cpu * CFS_PERIOD_US as f64).round() as u64;
        let write = |dir: &Path, file: &str, value: String| {
            std::fs::write(dir.join(file), &value)
                .with_context(|| format!("writing {value} to {}", dir.join(file).display()))
        };
        let dirs = match &self.layout {
            CgroupLayout::V2(root) => vec![root.join(name)],
            CgroupLayout::V1 { cpu, memory } => vec![cpu.join(name), memory.join(name)],
        };
        for dir in &dirs {
            if dir.exists() {
                // One an interrupted run left: ours by its exact name, and empty once its
                // process is gone.
                std::fs::remove_dir(dir).with_context(|| {
                    format!("{} is left from an earlier run and still in use", dir.display())
                })?;
            }
            std::fs::create_dir(dir).with_context(|| format!("making the cgroup {}", dir.display()))?;
        }
        match &self.layout {
            CgroupLayout::V2(_) => {
                write(&dirs[0], "cpu.max", format!("{quota} {CFS_PERIOD_US}"))?;
                write(&dirs[0], "memory.max", self.memory_bytes.to_string())?;
            }
            CgroupLayout::V1 { .. } => {
                write(&dirs[0], "cpu.cfs_period_us", CFS_PERIOD_US.to_string())?;
                write(&dirs[0], "cpu.cfs_quota_us", quota.to_string())?;
                write(&dirs[1], "memory.limit_in_bytes", self.memory_bytes.to_string())?;
            }
        }
        Ok(dirs)
    }
}

impl RunRecord {
    fn summary(&self) -> String {
        let Some(seconds) = self.seconds else {
            return format!("no result: {}", self.note.as_deref().unwrap_or("?"));
        };
        let owned: Vec<String> = self.replicas.iter().map(|r| r.owned_foos.to_string()).collect();
        let peak = self.replicas.iter().map(|r| r.peak_rss_bytes).max().unwrap_or(0);
        format!(
            "converged in {seconds:.1} s; Foos owned per replica {}; largest peak memory {:.0} MiB",
            owned.join(", "),
            mib(peak)
        )
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The successful runs of one row, and their figures.
struct RowRuns<'a> {
    row: Row,
    runs: Vec<&'a RunRecord>,
}

impl RowRuns<'_> {
    fn spread(&self, value: impl Fn(&RunRecord) -> f64) -> Option<Spread> {
        Spread::of(self.runs.iter().map(|r| value(r)))
    }

    fn seconds(&self) -> Option<Spread> {
        self.spread(|r| r.seconds.unwrap_or(0.0))
    }

    /// The largest replica's figure in each run.
    fn largest(&self, value: impl Fn(&Replica) -> f64) -> Option<Spread> {
        self.spread(|r| r.replicas.iter().map(&value).fold(0.0, f64::max))
    }

    /// Each run's mean over its replicas.
    fn mean(&self, value: impl Fn(&Replica) -> f64) -> Option<Spread> {
        self.spread(|r| r.replicas.iter().map(&value).sum::<f64>() / r.replicas.len().max(1) as f64)
    }
}

fn rows<'a>(results: &'a ShardedResults, n: usize) -> Vec<RowRuns<'a>> {
    let mut by_row: BTreeMap<Row, Vec<&RunRecord>> = BTreeMap::new();
    for run in results.runs.iter().filter(|r| r.succeeded() && r.row.n == n) {
        by_row.entry(run.row).or_default().push(run);
    }
    by_row
        .into_iter()
        .map(|(row, runs)| RowRuns { row, runs })
        .collect()
}

/// The ratio of the largest replica's median memory (`memory` of each replica: its peak or
/// its idle figure) with `replicas` sharded replicas to one sharded replica's, at `n` Foos;
/// `None` until both rows have runs.
pub fn memory_ratio(
    results: &ShardedResults,
    n: usize,
    replicas: usize,
    memory: fn(&Replica) -> u64,
) -> Option<f64> {
    let rows = rows(results, n);
    let largest = |count: usize| {
        rows.iter()
            .find(|r| r.row.setup == Setup::ServerFiltering && r.row.replicas == count)
            .and_then(|r| r.largest(|x| memory(x) as f64))
            .map(|s| s.median)
    };
    Some(largest(replicas)? / largest(1)?)
}

/// The numbers of Foos with a successful run, smallest first.
fn sizes(results: &ShardedResults) -> Vec<usize> {
    let sizes: std::collections::BTreeSet<usize> = results
        .runs
        .iter()
        .filter(|r| r.succeeded())
        .map(|r| r.row.n)
        .collect();
    sizes.into_iter().collect()
}

/// The heading of the section, which is the last of RESULTS.md.
pub const SECTION_HEADING: &str = "## Sharded replicas";

/// The section of RESULTS.md rendered from sharded.json; empty when there is none.
pub fn section(out: &Path) -> String {
    load(out).map_or_else(String::new, |results| markdown(&results))
}

pub fn markdown(results: &ShardedResults) -> String {
    let meta = &results.meta;
    let mut text = format!(
        "{SECTION_HEADING}\n\n\
         Our Foo controller as N replicas with `--sharding` (`cargo xtask bench-sharded`), measured \
         from {}{} on {}, Kubernetes {}, operator at {}{}. Each sharded replica runs in cgroups of its own with a \
         CPU quota of {} cores and a memory cap of {} MiB, standing for a machine of its own; {}, \
         then starts all its replicas at once. \"Filtered by the apiserver\" runs with `ShardedListAndWatch` on (each \
         replica is sent its own Foos), \"filtered by each replica\" with it off (each is sent every \
         Foo and drops the others'). The unsharded row is one replica without `--sharding` and \
         without a quota: the operator as it runs today, the reference the sharded rows are held \
         against. Medians of the runs, with their range.\n\n\
         What a quota on one machine can and cannot show: the replicas share this machine's cores \
         with the apiserver and etcd, which do most of the work of a convergence, so the aggregate \
         throughput stops growing where they are saturated, long before N machines would. The \
         memory, CPU and watch events per replica do not depend on that; the time does.\n",
        meta.date,
        meta.last_run
            .as_ref()
            .filter(|last| **last != meta.date)
            .map_or_else(String::new, |last| format!(" to {last}")),
        meta.machine,
        meta.kubernetes_version,
        meta.commits.join(", "),
        match meta.operator_builds.as_slice() {
            [] => String::new(),
            builds => format!(
                " (its binary by the start of its SHA-256: {})",
                OperatorBuild::describe(builds)
            ),
        },
        meta.cpu_per_replica,
        meta.memory_mib_per_replica,
        if meta.kept_foos {
            "each size's Foos are created once, and every run starts a fresh etcd on a copy of \
             the data holding them and a fresh kube-apiserver"
        } else {
            "every run starts on a fresh etcd and kube-apiserver, creates the Foos"
        },
    );
    let ns = sizes(results);
    for n in ns {
        text.push_str(&format!(
            "\n### N = {n}\n\n\
             | replicas | runs | converged | Foos/s | peak memory, largest replica | idle memory per replica | CPU per replica | Foo watch events per replica (per Foo) | Foos owned per replica | apiserver CPU |\n\
             |---|---|---|---|---|---|---|---|---|---|\n"
        ));
        for row in rows(results, n) {
            let cell = |spread: Option<Spread>, unit: &str, decimals: usize| {
                spread.map_or_else(|| "—".to_owned(), |s| s.show(unit, decimals))
            };
            let owned = row
                .runs
                .iter()
                .map(|r| {
                    let mut owned: Vec<u64> = r.replicas.iter().map(|x| x.owned_foos).collect();
                    owned.sort_unstable();
                    format!("{}–{}", owned.first().unwrap_or(&0), owned.last().unwrap_or(&0))
                })
                .collect::<Vec<_>>()
                .join(", ");
            let events = row.mean(|x| x.watch_events as f64);
            // With no Foo (what a replica costs whatever it holds) there is no rate or share.
            let share = events
                .as_ref()
                .filter(|_| n > 0)
                .map_or(String::new(), |e| format!(" ({:.2})", e.median / n as f64));
            text.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {}{share} | {owned} | {} |\n",
                row.row.label(),
                row.runs.len(),
                cell(row.seconds(), " s", 1),
                cell(
                    row.spread(|r| n as f64 / r.seconds.unwrap_or(f64::INFINITY))
                        .filter(|_| n > 0),
                    "",
                    0
                ),
                cell(row.largest(|x| mib(x.peak_rss_bytes)), " MiB", 0),
                cell(row.mean(|x| mib(x.idle_rss_bytes)), " MiB", 0),
                cell(row.mean(|x| x.cpu_seconds), " s", 1),
                cell(events, "", 0),
                cell(row.spread(|r| r.apiserver_cpu_seconds), " s", 1),
            ));
        }
        let most = results
            .runs
            .iter()
            .filter(|r| r.row.n == n && r.row.setup == Setup::ServerFiltering)
            .map(|r| r.row.replicas)
            .max();
        if let Some(most) = most.filter(|&m| m > 1 && n > 0)
            && let Some(peak) = memory_ratio(results, n, most, |r| r.peak_rss_bytes)
            && let Some(idle) = memory_ratio(results, n, most, |r| r.idle_rss_bytes)
        {
            text.push_str(&format!(
                "\nMemory of the largest of {most} replicas against one sharded replica's: {peak:.3} \
                 at its peak, {idle:.3} once idle"
            ));
            let recorded = results
                .runs
                .iter()
                .filter(|r| r.succeeded() && r.row.n == n && r.row.setup == Setup::ServerFiltering)
                .flat_map(|r| &r.replicas)
                .all(|r| r.idle_anon_bytes.is_some());
            if recorded && let Some(anon) = memory_ratio(results, n, most, |r| r.idle_anon_bytes.unwrap_or(0))
            {
                text.push_str(&format!(
                    ", {anon:.3} in anonymous memory once idle (without the binary's own pages)"
                ));
            }
            text.push_str(".\n");
        }
    }
    text.push_str(&format!("\n![Throughput against replicas]({PLOT_FILE})\n"));
    text
}

/// Writes sharded.png and puts the section in RESULTS.md in place of the one there (or at its
/// end), leaving the rest of the file as the main benchmark wrote it.
fn write_report(out: &Path, results: &ShardedResults) -> Result<()> {
    plot(&out.join(PLOT_FILE), results)?;
    let path = out.join("RESULTS.md");
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    std::fs::write(&path, with_section(&current, &markdown(results)))?;
    Ok(())
}

/// `document` with its sharded section (from its heading to the end) replaced by `section`.
pub fn with_section(document: &str, section: &str) -> String {
    // A RESULTS.md of its own folder (`--out`) holds the section alone, from its first line.
    let before = if document.starts_with(&format!("{SECTION_HEADING}\n")) {
        ""
    } else {
        match document.find(&format!("\n{SECTION_HEADING}\n")) {
            Some(at) => &document[..at + 1],
            None => document,
        }
    };
    let mut text = before.trim_end().to_owned();
    if !text.is_empty() {
        text.push_str("\n\n");
    }
    text.push_str(section);
    text
}

/// Foos per second against replicas, a line per N, each row's median; the unsharded
/// reference as a dashed line at its own throughput.
fn plot(path: &Path, results: &ShardedResults) -> Result<()> {
    use plotters::prelude::*;
    super::chart::register_font();
    let font = super::chart::FONT;
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(super::chart::plot_error)?;
    // No Foo, no throughput.
    let ns: Vec<usize> = sizes(results).into_iter().filter(|&n| n > 0).collect();
    let throughput = |row: &RowRuns| {
        row.spread(|r| row.row.n as f64 / r.seconds.unwrap_or(f64::INFINITY))
            .map(|s| s.median)
    };
    let mut lines = Vec::new();
    let mut references = Vec::new();
    for &n in &ns {
        let rows = rows(results, n);
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.row.setup == Setup::ServerFiltering)
            .filter_map(|r| Some((r.row.replicas as f64, throughput(r)?)))
            .collect();
        lines.push((n, points));
        if let Some(reference) = rows
            .iter()
            .find(|r| r.row.setup == Setup::Unsharded)
            .and_then(&throughput)
        {
            references.push((n, reference));
        }
    }
    let most_replicas = results.runs.iter().map(|r| r.row.replicas).max().unwrap_or(1) as f64;
    let top = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, y)| *y))
        .chain(references.iter().map(|(_, y)| *y))
        .fold(1.0, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption("Sharded replicas: Foos converged per second", (font, 22))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.5..most_replicas + 0.5, 0.0..top)
        .map_err(super::chart::plot_error)?;
    chart
        .configure_mesh()
        .x_desc("replicas, each with its own CPU quota")
        .y_desc("Foos per second")
        .x_labels(most_replicas as usize)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style((font, 15))
        .draw()
        .map_err(super::chart::plot_error)?;
    for (i, (n, points)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(super::chart::plot_error)?
            .label(format!("N = {n}, sharded"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(super::chart::plot_error)?;
        if let Some(&(_, reference)) = references.iter().find(|(m, _)| m == n) {
            let dashes = DashedLineSeries::new(
                vec![(0.5, reference), (most_replicas + 0.5, reference)],
                8,
                6,
                color.stroke_width(1),
            );
            chart
                .draw_series(dashes)
                .map_err(super::chart::plot_error)?
                .label(format!("N = {n}, one unsharded replica without a quota"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(1)));
        }
    }
    chart
        .configure_series_labels()
        .label_font((font, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(super::chart::plot_error)?;
    root.present().map_err(super::chart::plot_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_alternates_rows_and_runs_the_most_replicas_filtered_on_their_side_too() {
        let all = [Setup::Unsharded, Setup::ServerFiltering, Setup::ClientFiltering];
        let rows = plan(&[100], &[1, 2], 2, &all);
        let labels: Vec<String> = rows.iter().map(Row::label).collect();
        assert_eq!(
            labels,
            [
                "1, unsharded, no quota",
                "1, filtered by the apiserver",
                "2, filtered by the apiserver",
                "2, filtered by each replica",
                "1, unsharded, no quota",
                "1, filtered by the apiserver",
                "2, filtered by the apiserver",
                "2, filtered by each replica",
            ]
        );
        // Fewer setups: the same order without the others.
        let sharded = plan(&[100], &[1, 2], 1, &[Setup::ServerFiltering]);
        let labels: Vec<String> = sharded.iter().map(Row::label).collect();
        assert_eq!(
            labels,
            ["1, filtered by the apiserver", "2, filtered by the apiserver"]
        );
    }

    #[test]
    fn metrics_are_summed_over_the_series_with_the_given_labels() {
        let text = "# HELP x\n\
            sample_operator_watch_events_total{resource=\"foos.samplecontroller.k8s.io\"} 120\n\
            sample_operator_watch_events_total{resource=\"deployments\"} 80\n\
            sample_operator_objects{controller=\"foo\",ready=\"True\"} 40\n\
            sample_operator_objects{controller=\"foo\",ready=\"Unknown\"} 2\n\
            sample_operator_objects_awaiting_retry{controller=\"foo\"} 7\n\
            sample_operator_shard_filtering{mode=\"server\",resource=\"foos.samplecontroller.k8s.io\"} 1\n\
            sample_operator_shard_filtering{mode=\"client\",resource=\"foos.samplecontroller.k8s.io\"} 0\n";
        assert_eq!(
            metric_sum(
                text,
                "sample_operator_watch_events_total",
                &[("resource", FOO_RESOURCE)]
            ),
            120.0
        );
        assert_eq!(
            metric_sum(text, "sample_operator_objects", &[("controller", "foo")]),
            42.0
        );
        let filtering = |mode| {
            metric_sum(
                text,
                "sample_operator_shard_filtering",
                &[("resource", FOO_RESOURCE), ("mode", mode)],
            )
        };
        assert_eq!((filtering("server"), filtering("client")), (1.0, 0.0));
        assert_eq!(metric_sum(text, "sample_operator_absent", &[]), 0.0);
    }

    #[test]
    fn a_benchmark_resumes_only_on_the_same_machine_with_the_same_quota_and_method() {
        let meta = Meta {
            machine: "2 × Intel(R) Xeon(R) Processor".into(),
            cpu_per_replica: 0.5,
            memory_mib_per_replica: 2048,
            kept_foos: true,
            ..Meta::default()
        };
        assert!(resumable(&meta, "2 × Intel(R) Xeon(R) Processor", 0.5, 2048).is_ok());
        let other = resumable(&meta, "2 × AMD EPYC", 0.5, 2048)
            .unwrap_err()
            .to_string();
        assert!(other.contains("were made on 2 × Intel"), "{other}");
        assert!(resumable(&meta, "2 × Intel(R) Xeon(R) Processor", 1.0, 2048).is_err());
        // Nor runs that each created their Foos, as every run did before 2026-11-30.
        let created = Meta {
            kept_foos: false,
            ..meta
        };
        let other = resumable(&created, "2 × Intel(R) Xeon(R) Processor", 0.5, 2048)
            .unwrap_err()
            .to_string();
        assert!(other.contains("created its own Foos"), "{other}");
    }

    #[test]
    fn a_resumed_benchmark_gives_the_span_of_its_runs() {
        let mut meta = Meta {
            date: "2026-11-30 00:00 UTC".into(),
            ..Meta::default()
        };
        let results = |meta: &Meta| ShardedResults {
            meta: meta.clone(),
            runs: Vec::new(),
        };
        assert!(markdown(&results(&meta)).contains("measured from 2026-11-30 00:00 UTC on"));
        assert!(
            markdown(&results(&meta))
                .contains("every run starts on a fresh etcd and kube-apiserver, creates the Foos, then")
        );
        meta.kept_foos = true;
        assert!(markdown(&results(&meta)).contains("every run starts a fresh etcd on a copy of the data holding them and a fresh kube-apiserver, then"));
        meta.last_run = Some("2026-12-01 02:00 UTC".into());
        assert!(
            markdown(&results(&meta))
                .contains("measured from 2026-11-30 00:00 UTC to 2026-12-01 02:00 UTC on")
        );
    }

    #[test]
    fn the_section_names_the_binary_measured_when_it_was_recorded() {
        let mut meta = Meta {
            commits: vec!["e7ed945".into()],
            ..Meta::default()
        };
        let text = |meta: &Meta| {
            markdown(&ShardedResults {
                meta: meta.clone(),
                runs: Vec::new(),
            })
        };
        assert!(
            text(&meta).contains("operator at e7ed945. Each"),
            "{}",
            text(&meta)
        );
        let build = OperatorBuild {
            sha256: "0123456789abcdef".into(),
            source: "given: /tmp/sample-operator".into(),
        };
        OperatorBuild::record(&mut meta.operator_builds, &build);
        OperatorBuild::record(&mut meta.operator_builds, &build);
        assert!(
            text(&meta).contains(
                "operator at e7ed945 (its binary by the start of its SHA-256: `0123456789abcdef` \
                 (given: /tmp/sample-operator)). Each"
            ),
            "{}",
            text(&meta)
        );
    }

    fn record(n: usize, setup: Setup, replicas: usize, peak_mib: u64) -> RunRecord {
        RunRecord {
            row: Row { n, setup, replicas },
            seconds: Some(10.0),
            replicas: (0..replicas)
                .map(|i| Replica {
                    peak_rss_bytes: (peak_mib + i as u64) * 1024 * 1024,
                    idle_rss_bytes: peak_mib * 1024 * 1024 / 2,
                    idle_anon_bytes: Some((peak_mib - 20) * 1024 * 1024 / 2),
                    cpu_seconds: 2.0,
                    watch_events: (n / replicas) as u64,
                    owned_foos: (n / replicas) as u64,
                    filtering: Some("server".into()),
                })
                .collect(),
            apiserver_cpu_seconds: 5.0,
            note: None,
        }
    }

    #[test]
    fn the_section_reports_each_row_and_the_memory_ratio_of_the_largest_replica() {
        let results = ShardedResults {
            meta: Meta::default(),
            runs: vec![
                record(1000, Setup::Unsharded, 1, 100),
                record(1000, Setup::ServerFiltering, 1, 100),
                record(1000, Setup::ServerFiltering, 4, 29),
                record(1000, Setup::ClientFiltering, 4, 40),
            ],
        };
        let percent = |memory: fn(&Replica) -> u64| {
            memory_ratio(&results, 1000, 4, memory).map(|r| (r * 100.0).round())
        };
        assert_eq!(percent(|r| r.peak_rss_bytes), Some(32.0));
        assert_eq!(percent(|r| r.idle_rss_bytes), Some(29.0));
        let text = markdown(&results);
        assert!(
            text.contains("| 4, filtered by the apiserver | 1 | 10.0 s | 100 | 32 MiB |"),
            "{text}"
        );
        assert!(text.contains("| 250 (0.25) | 250–250 |"), "{text}");
        assert!(
            text.contains(
                "against one sharded replica's: 0.320 at its peak, 0.290 once idle, 0.113 in \
                 anonymous memory once idle (without the binary's own pages)."
            ),
            "{text}"
        );
    }

    #[test]
    fn with_no_foo_the_section_gives_memory_but_no_rate_share_or_ratio() {
        let results = ShardedResults {
            meta: Meta::default(),
            runs: vec![
                record(0, Setup::ServerFiltering, 1, 22),
                record(0, Setup::ServerFiltering, 4, 22),
            ],
        };
        let text = markdown(&results);
        assert!(
            text.contains(
                "| 4, filtered by the apiserver | 1 | 10.0 s | — | 25 MiB | 11 MiB | 2.0 s | 0 | 0–0 |"
            ),
            "{text}"
        );
        assert!(!text.contains("Memory of the largest"), "{text}");
        assert!(!text.contains("NaN") && !text.contains("inf"), "{text}");
    }

    #[test]
    fn the_section_replaces_its_old_self_and_leaves_the_rest_of_the_report() {
        let main = "# Results\n\nThe main table.\n";
        let once = with_section(main, &format!("{SECTION_HEADING}\n\nfirst\n"));
        assert_eq!(
            once,
            format!("# Results\n\nThe main table.\n\n{SECTION_HEADING}\n\nfirst\n")
        );
        let twice = with_section(&once, &format!("{SECTION_HEADING}\n\nsecond\n"));
        assert_eq!(
            twice,
            format!("# Results\n\nThe main table.\n\n{SECTION_HEADING}\n\nsecond\n")
        );
        // In a folder of its own, the section is the whole file.
        let alone = with_section(
            &format!("{SECTION_HEADING}\n\nfirst\n"),
            &format!("{SECTION_HEADING}\n\nsecond\n"),
        );
        assert_eq!(alone, format!("{SECTION_HEADING}\n\nsecond\n"));
    }
}
