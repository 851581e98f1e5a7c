//! `cargo xtask bench-profile`: where the CPU goes while our operator (or, with `--contender`,
//! another contender of the main benchmark) converges a backlog of Foos, or with `--scenario
//! burst` a burst, in the operator and in the apiserver, and which requests it made. Below, "the
//! operator" is whichever was profiled.
//!
//! One run, as the main benchmark's backlog scenario runs ours: a fresh etcd and kube-apiserver
//! (`.cluster-bench/`, no controller-manager), the Foos created first (in a burst, once the
//! operator is idle, and the times start at the first create), then the release build
//! started by `perf record` with the benchmark's options, sampling on the `cpu-clock` software
//! event (this machine's virtual CPUs count no cycles). The apiserver built here has no symbol
//! table for perf, so its own CPU profile is read instead (`/debug/pprof/profile`, Go's 100
//! samples a second of CPU, in windows of [`PPROF_WINDOW`]), and `go tool pprof` names the
//! functions. Both cover the operator's start until it has gone quiet after convergence, Events
//! written. Only the function a sample was taken in counts (the release build has no frame
//! pointers, and DWARF unwinding of every sample would cost more than it measures), and each is
//! put in an area by the crate or Go package of its function ([`rust_area`], [`go_area`]); the
//! apiserver's `apiserver_request_total` gives the requests behind its share.
//!
//! Results go to `profile.json` and `PROFILE.md` in `--out`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use local_cluster::{Component, LocalCluster, UpOptions, paths};
use serde::{Deserialize, Serialize};

use super::apiserver::{self, RequestCounts};
use super::contender::Contenders;
use super::model::{self, Contender, Scenario};
use super::tracker::Outcome;
use super::{parse_duration, proc_stats};

/// Options of `cargo xtask bench-profile`.
#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    /// Foos in the backlog, or created in the burst.
    #[arg(long, default_value_t = 100_000)]
    pub n: usize,
    /// What is profiled, as the main benchmark runs it: `backlog` (the Foos exist, then the
    /// operator starts) or `burst` (the operator starts and goes idle, then the Foos are
    /// created as fast as the apiserver takes them).
    #[arg(long, value_enum, default_value = "backlog")]
    pub scenario: Scenario,
    /// Samples a second of the profiled contender's CPU time (the apiserver's own profile takes
    /// Go's 100).
    #[arg(long, default_value_t = 499)]
    pub frequency: u32,
    /// The run fails if the Foos have not converged after this long.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Where profile.json and PROFILE.md go, from the repository root.
    #[arg(long, default_value = "bench")]
    pub out: PathBuf,
    /// Profile this sample-operator binary instead of building the release one.
    #[arg(long)]
    pub operator_binary: Option<PathBuf>,
    /// What converges the backlog: ours (streaming its first lists, as its default `auto` does
    /// on this apiserver) or any other contender of the main benchmark, for example
    /// `ceiling-ours`, the plain client making ours' three writes, to tell what of the
    /// apiserver's time is ours' own doing rather than the work's.
    #[arg(long, value_enum, default_value = "ours-streaming")]
    pub contender: Contender,
    /// Also record each sample's call chain (perf's `--call-graph dwarf`, which copies 16 KiB
    /// of stack a sample: hundreds of MiB over 100,000 Foos), and keep perf's data as
    /// `operator.perf.data` in `--out`, for `perf report --children` to tell who called the
    /// functions the report names. The tables stay flat.
    #[arg(long)]
    pub call_graph: bool,
    /// Only render PROFILE.md again from profile.json.
    #[arg(long)]
    pub report_only: bool,
}

/// What one run found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub date: String,
    pub machine: String,
    pub commit: String,
    pub kubernetes_version: String,
    /// What converged the backlog; its process is [`Profile::operator`]. Profiles written
    /// before `--contender` have none: they were of ours, as the default runs it.
    #[serde(default)]
    pub contender: Contender,
    /// Profiles written before `--scenario` have none: they were of backlogs.
    #[serde(default)]
    pub scenario: Scenario,
    pub n: usize,
    pub frequency: u32,
    /// From the operator's start (in a burst, the first create) until the last Foo converged.
    pub converged_seconds: f64,
    /// Until it went quiet after that (its Events written).
    pub quiet_seconds: f64,
    /// In a burst, the operator's CPU from its start until the first create (its first lists,
    /// of nothing): perf's samples include it, [`Process::cpu_seconds`] does not.
    #[serde(default)]
    pub cpu_before_seconds: f64,
    pub operator: Process,
    pub apiserver: Process,
    /// Requests the apiserver served for the Foo controller's resources, keyed `VERB resource`.
    pub requests: BTreeMap<String, u64>,
    /// Ours' own counters once it went quiet, keyed by metric ([`OPERATOR_COUNTERS`]), summed
    /// over their labels; none for a Go contender.
    #[serde(default)]
    pub operator_counters: BTreeMap<String, u64>,
}

/// The counters of ours' /metrics that tell how much work the requests stood for: reconciles,
/// the triggers that asked for them, and watches started again.
const OPERATOR_COUNTERS: [&str; 3] = [
    "controller_runtime_reconcile_total",
    "workqueue_adds_total",
    "sample_operator_watch_restarts_total",
];

/// The sum over its labels of each of `names` in a Prometheus text exposition, for those it
/// holds.
fn counter_sums(text: &str, names: &[&str]) -> BTreeMap<String, u64> {
    let mut sums = BTreeMap::new();
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split_once('{').map_or(series, |(name, _)| name);
        if names.contains(&name)
            && let Ok(value) = value.parse::<f64>()
        {
            *sums.entry(name.to_owned()).or_default() += value as u64;
        }
    }
    sums
}

/// One profiled process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Process {
    /// CPU time over the profile, from /proc.
    pub cpu_seconds: f64,
    pub samples: u64,
    /// Samples per area, most first.
    pub areas: Vec<(String, u64)>,
    /// Samples per function, the most sampled first (at most [`TOP_FUNCTIONS`]).
    pub functions: Vec<(String, u64)>,
}

const TOP_FUNCTIONS: usize = 25;
const JSON_FILE: &str = "profile.json";
const REPORT_FILE: &str = "PROFILE.md";
/// perf's data, kept with `--call-graph`.
const PERF_DATA_FILE: &str = "operator.perf.data";

pub async fn run(args: ProfileArgs) -> Result<()> {
    let out = paths::repo_root().join(&args.out);
    if !matches!(args.scenario, Scenario::Backlog | Scenario::Burst) {
        bail!(
            "bench-profile runs the backlog or the burst, not {:?}",
            args.scenario
        );
    }
    if args.report_only {
        let text = std::fs::read_to_string(out.join(JSON_FILE))
            .with_context(|| format!("reading {}", out.join(JSON_FILE).display()))?;
        let profile: Profile = serde_json::from_str(&text).context("parsing profile.json")?;
        return write_report(&out, &profile);
    }
    let perf = perf_binary()?;
    let contenders = Contenders::prepare(&[args.contender], args.operator_binary.as_deref())?;
    let cluster = LocalCluster::new(paths::repo_root().join(".cluster-bench"));
    let work = tempdir()?;
    let outcome = profile_run(&cluster, &contenders, &perf, &args, &work).await;
    let down = cluster.down().context("stopping the benchmark cluster");
    let (mut profile, apiserver_profiles) = outcome?;
    down?;
    println!("== reading the samples");
    // On failure the samples stay in the temporary folder, to be read by hand.
    profile.operator.fill(
        &perf,
        &work.join("operator.data"),
        if args.contender.is_ours() {
            rust_area
        } else {
            go_perf_area
        },
    )?;
    profile.apiserver.fill_from_pprof(&apiserver_profiles)?;
    std::fs::create_dir_all(&out)?;
    if args.call_graph {
        let kept = out.join(PERF_DATA_FILE);
        // A rename cannot cross file systems; a copy can.
        std::fs::copy(work.join("operator.data"), &kept)
            .with_context(|| format!("keeping perf's data as {}", kept.display()))?;
        println!(
            "== perf's data with call chains: perf report -i {}",
            kept.display()
        );
    }
    let _ = std::fs::remove_dir_all(&work);
    std::fs::write(
        out.join(JSON_FILE),
        serde_json::to_string_pretty(&profile)? + "\n",
    )?;
    write_report(&out, &profile)?;
    println!("== wrote {}", out.join(REPORT_FILE).display());
    Ok(())
}

/// `perf` (Debian's linux-perf), found on PATH: its full path, because a [`Component`] tells
/// whether it still runs by the binary its process runs.
fn perf_binary() -> Result<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("perf"))
        .find(|path| path.is_file())
        .context("perf is not installed: Debian's linux-perf has it (apt-get install linux-perf)")
}

fn tempdir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("sample-operator-profile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

async fn profile_run(
    cluster: &LocalCluster,
    contenders: &Contenders,
    perf: &Path,
    args: &ProfileArgs,
    work: &Path,
) -> Result<(Profile, Vec<PathBuf>)> {
    let burst = args.scenario == Scenario::Burst;
    const NAMESPACE: &str = "bench-profile";
    println!(
        "== a fresh etcd and kube-apiserver{}",
        if burst {
            String::new()
        } else {
            format!(", and {} Foos", args.n)
        }
    );
    let apiserver::Backlog {
        state,
        apiserver_pid,
        client,
        tracker,
    } = apiserver::backlog(
        cluster,
        NAMESPACE,
        if burst { 0 } else { args.n },
        UpOptions {
            profiling: true,
            ..UpOptions::default()
        },
    )
    .await?;

    // A backlog is measured from the operator's start, a burst from its first create.
    let (mut before, mut apiserver_cpu) = if burst {
        (RequestCounts::default(), 0.0)
    } else {
        (
            RequestCounts::scrape(&client).await?,
            proc_stats::read(apiserver_pid)?.cpu_seconds,
        )
    };
    let logs = cluster.logs_dir().join("profile");
    // As the main benchmark runs it, at ours' default concurrency.
    let invocation =
        contenders.invocation(args.contender, &cluster.kubeconfig(), model::OPERATOR_CONCURRENCY)?;
    println!(
        "== {} with perf recording",
        if burst {
            "starting the operator"
        } else {
            "converging them"
        }
    );
    let date = super::command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let mut start = Instant::now();
    // The operator runs under perf: attached to a process that has only begun, perf missed
    // the threads it went on to start.
    let mut perf_args = vec![
        "record".to_owned(),
        "--quiet".into(),
        "-e".into(),
        "cpu-clock".into(),
        "-F".into(),
        args.frequency.to_string(),
        "-o".into(),
        work.join("operator.data").display().to_string(),
    ];
    if args.call_graph {
        // The release build has no frame pointers: the chains come from copies of the stack,
        // unwound by perf afterwards with the binary's .eh_frame.
        perf_args.extend(["--call-graph".into(), "dwarf,16384".into()]);
    }
    perf_args.push("--".into());
    perf_args.push(invocation.binary.display().to_string());
    perf_args.extend(invocation.args.iter().cloned());
    let perf_operator = Stopped(Component::start("perf-operator", perf, &perf_args, &logs)?);
    let ours = Stopped(child(&perf_operator.0, &invocation.binary, &logs)?);
    let mut cpu_before = 0.0;
    if burst {
        proc_stats::wait_synced(ours.0.pid).await?;
        cpu_before = proc_stats::read(ours.0.pid)?.cpu_seconds;
        before = RequestCounts::scrape(&client).await?;
        apiserver_cpu = proc_stats::read(apiserver_pid)?.cpu_seconds;
        println!("== creating {} Foos", args.n);
        start = Instant::now();
    }
    let apiserver_profile = PprofWindows::start(client.clone(), work.to_owned());
    if burst {
        // The tracker follows the Foos meanwhile, as in the main benchmark's burst.
        apiserver::create_foos(&client, NAMESPACE, args.n).await?;
    }

    let converged = match tracker
        .wait_converged(args.n, start, args.timeout, &[&ours.0])
        .await
    {
        Outcome::Converged(took) => took,
        Outcome::TimedOut => bail!(
            "{} of {} Foos converged in {:?}",
            tracker.converged(),
            args.n,
            args.timeout
        ),
        Outcome::Died(log) => bail!("the operator exited:\n{log}"),
    };
    proc_stats::wait_quiet(
        ours.0.pid,
        Duration::from_secs(3),
        Duration::from_secs(3),
        Duration::from_secs(120),
    )
    .await?;
    let quiet = start.elapsed();
    let after = RequestCounts::scrape(&client).await?;
    let operator_counters = if args.contender.is_ours() {
        let url = format!("http://127.0.0.1:{}/metrics", invocation.metrics_port);
        let answer = local_cluster::http::get(&url, Duration::from_secs(5))
            .with_context(|| format!("reading the operator's {url}"))?;
        counter_sums(&answer.body, &OPERATOR_COUNTERS)
    } else {
        BTreeMap::new()
    };
    let operator_cpu = proc_stats::read(ours.0.pid)?.cpu_seconds;
    let apiserver_cpu = proc_stats::read(apiserver_pid)?.cpu_seconds - apiserver_cpu;
    let mut requests = after.since(&before);
    if burst {
        super::run::remove_own_creates(&mut requests, "POST foos", args.n);
    }
    // perf writes its file when the operator exits.
    drop((ours, perf_operator));
    let apiserver_profiles = apiserver_profile.finish().await?;
    Ok((
        Profile {
            date,
            machine: super::machine(),
            commit: super::operator_commit(),
            kubernetes_version: state.kubernetes_version.clone(),
            contender: args.contender,
            scenario: args.scenario,
            n: args.n,
            frequency: args.frequency,
            converged_seconds: converged.as_secs_f64(),
            quiet_seconds: quiet.as_secs_f64(),
            cpu_before_seconds: cpu_before,
            operator: Process {
                cpu_seconds: operator_cpu - cpu_before,
                ..Process::default()
            },
            apiserver: Process {
                cpu_seconds: apiserver_cpu,
                ..Process::default()
            },
            requests,
            operator_counters,
        },
        apiserver_profiles,
    ))
}

/// How long each of the apiserver's CPU profiles lasts: the last one ends at most this long
/// after the operator went quiet.
const PPROF_WINDOW: Duration = Duration::from_secs(10);

/// The apiserver's CPU profiles, one window after another, each written to a file as it ends.
struct PprofWindows {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<Result<Vec<PathBuf>>>,
}

impl PprofWindows {
    fn start(client: kube::Client, work: PathBuf) -> Self {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut files = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                let path = format!("/debug/pprof/profile?seconds={}", PPROF_WINDOW.as_secs());
                let request = http::Request::get(&path).body(Vec::new().into())?;
                let response = client
                    .send(request)
                    .await
                    .context("asking for the apiserver's profile")?;
                let status = response.status();
                let body = response.into_body().collect_bytes().await?;
                if !status.is_success() {
                    bail!("GET {path}: {status}: {}", String::from_utf8_lossy(&body));
                }
                let file = work.join(format!("apiserver-{}.pb.gz", files.len()));
                std::fs::write(&file, &body).with_context(|| format!("writing {}", file.display()))?;
                files.push(file);
            }
            Ok(files)
        });
        Self { stop, task }
    }

    /// Ends the profiles with the window under way, and returns their files.
    async fn finish(self) -> Result<Vec<PathBuf>> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.context("the apiserver's profiles")?
    }
}

/// The operator that `perf` started, once it runs.
fn child(perf: &Component, operator: &Path, logs: &Path) -> Result<Component> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children =
            std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", perf.pid)).unwrap_or_default();
        for pid in children.split_whitespace().filter_map(|p| p.parse().ok()) {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            if exe == operator || std::fs::canonicalize(operator).is_ok_and(|o| o == exe) {
                return Ok(Component {
                    name: "operator".into(),
                    pid,
                    binary: operator.to_owned(),
                    log: logs.join("perf-operator.log"),
                    args: Vec::new(),
                    env: Vec::new(),
                });
            }
        }
        perf.check()?;
        if Instant::now() > deadline {
            bail!("perf did not start the operator within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process stopped when dropped, on every path out of the run: perf with a minute to write
/// its file.
struct Stopped(Component);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.stop(Duration::from_secs(60));
    }
}

impl Process {
    /// Counts the samples in `data` by area and by function.
    fn fill(&mut self, perf: &Path, data: &Path, area: fn(&str, &str) -> &'static str) -> Result<()> {
        let output = Command::new(perf)
            // perf prints no function without its address; a sample's call chain, when
            // recorded, would print a line per caller.
            .args([
                "script",
                "--no-inline",
                "--hide-call-graph",
                "-F",
                "ip,sym,dso",
                "-i",
            ])
            .arg(data)
            .output()
            .with_context(|| format!("running perf script on {}", data.display()))?;
        if !output.status.success() {
            bail!(
                "perf script on {} failed: {}",
                data.display(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let (areas, functions) = count(&String::from_utf8_lossy(&output.stdout), area);
        self.set(areas, functions)
            .with_context(|| format!("perf recorded no sample in {}", data.display()))
    }

    /// Counts the samples of Go CPU profiles (`/debug/pprof/profile`) by area and by function,
    /// with `go tool pprof`, which merges them.
    fn fill_from_pprof(&mut self, profiles: &[PathBuf]) -> Result<()> {
        let output = Command::new("go")
            // Every function: by default pprof leaves out those under 0.5% of the samples,
            // which were 42% of them all in a run of 5,000 Foos.
            .args([
                "tool",
                "pprof",
                "-top",
                "-nodecount=1000000",
                "-nodefraction=0",
                "-sample_index=samples",
            ])
            .args(profiles)
            .output()
            .context("running go tool pprof (Go is on PATH where the toolchain builds)")?;
        if !output.status.success() {
            bail!(
                "go tool pprof failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let (areas, functions, total) = count_pprof(&String::from_utf8_lossy(&output.stdout));
        let counted: u64 = areas.values().sum();
        if counted * 100 < total * 99 {
            bail!("go tool pprof showed {counted} of the profiles' {total} samples");
        }
        self.set(areas, functions)
            .with_context(|| format!("no sample in the apiserver's {} profiles", profiles.len()))
    }

    fn set(&mut self, areas: BTreeMap<String, u64>, functions: BTreeMap<String, u64>) -> Result<()> {
        self.samples = areas.values().sum();
        if self.samples == 0 {
            bail!("no sample");
        }
        self.areas = most_first(areas);
        self.functions = most_first(functions);
        self.functions.truncate(TOP_FUNCTIONS);
        Ok(())
    }
}

/// Samples by area and by function, and the profiles' total, from `go tool pprof -top
/// -sample_index=samples`: a header with `Total samples = N`, then lines of `flat flat% sum%
/// cum cum% function`, where `flat` counts the samples taken in the function itself.
fn count_pprof(top: &str) -> (BTreeMap<String, u64>, BTreeMap<String, u64>, u64) {
    let mut areas = BTreeMap::new();
    let mut functions = BTreeMap::new();
    let total = top
        .lines()
        .find_map(|line| line.split_once("Total samples = "))
        .and_then(|(_, n)| n.trim().parse().ok())
        .unwrap_or(0);
    let rows = top
        .lines()
        .skip_while(|line| !line.trim_start().starts_with("flat"))
        .skip(1);
    for line in rows {
        let mut fields = line.split_whitespace();
        let Some(Ok(flat)) = fields.next().map(str::parse::<u64>) else {
            continue;
        };
        let function = fields.skip(4).collect::<Vec<_>>().join(" ");
        if flat == 0 || function.is_empty() {
            continue;
        }
        *areas.entry(go_area(&function).to_owned()).or_insert(0) += flat;
        *functions.entry(function).or_insert(0) += flat;
    }
    (areas, functions, total)
}

/// Samples by area and by function, from `perf script -F ip,sym,dso` lines
/// (`  7f03b0e4c13e function (dso)`).
fn count(
    script: &str,
    area: fn(&str, &str) -> &'static str,
) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let mut areas = BTreeMap::new();
    let mut functions = BTreeMap::new();
    for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let line = match line.split_once(' ') {
            Some((ip, rest)) if ip.chars().all(|c| c.is_ascii_hexdigit()) => rest.trim(),
            _ => line,
        };
        let (function, dso) = match line.rsplit_once(" (") {
            Some((function, dso)) => (function.trim(), dso.trim_end_matches(')')),
            None => (line, ""),
        };
        let function = if function == "[unknown]" || function.is_empty() {
            format!("[unknown in {}]", file_name(dso))
        } else {
            without_hash(function).to_owned()
        };
        *areas.entry(area(&function, dso).to_owned()).or_insert(0) += 1;
        *functions.entry(function).or_insert(0) += 1;
    }
    (areas, functions)
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A Rust symbol without the `::h0123456789abcdef` its legacy mangling ends with.
fn without_hash(function: &str) -> &str {
    match function.rsplit_once("::h") {
        Some((head, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => head,
        _ => function,
    }
}

fn most_first(counts: BTreeMap<String, u64>) -> Vec<(String, u64)> {
    let mut list: Vec<_> = counts.into_iter().collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    list
}

/// The kernel's part of a sample, whichever process.
fn kernel(dso: &str) -> bool {
    dso.starts_with("[kernel") || dso == "[vdso]"
}

/// The crate a demangled Rust function belongs to: the first path segment, looking through
/// `<`, `&`, `impl` and `dyn` (`<serde_json::Value as ...>::fmt` is serde_json's). Where the
/// type has no path (`<&mut T as kube_runtime::...>`, `<u8 as ...>`), the trait's crate.
fn crate_of(function: &str) -> &str {
    let first = first_segment(function);
    let bare = first.starts_with(|c: char| c.is_ascii_uppercase())
        || matches!(
            first,
            "u8" | "u16" | "u32" | "u64" | "usize" | "i32" | "i64" | "str" | "bool"
        );
    match function.split_once(" as ") {
        Some((_, trait_path)) if bare => first_segment(trait_path),
        _ => first,
    }
}

fn first_segment(function: &str) -> &str {
    let mut rest = function;
    loop {
        let trimmed = rest
            .trim_start_matches(['<', '&', '*', ' ', '('])
            .trim_start_matches("mut ")
            .trim_start_matches("const ")
            .trim_start_matches("impl ")
            .trim_start_matches("dyn ");
        if trimmed.len() == rest.len() {
            break;
        }
        rest = trimmed;
    }
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// jemalloc's functions: the exported ones carry tikv-jemalloc-sys's `_rjem_` prefix, its
/// internal ones jemalloc's own module prefixes.
fn jemalloc(function: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "_rjem_",
        "je_",
        "arena_",
        "tcache_",
        "extent_",
        "extents_",
        "emap_",
        "edata_",
        "pac_",
        "pa_",
        "sz_",
        "bin_",
        "large_",
        "base_",
        "ecache_",
        "eset_",
        "hpa_",
        "sec_",
        "san_",
        "decay_",
        "imalloc",
        "ifree",
        "isfree",
        "malloc_",
        "free_default",
        "rtree_",
        "witness_",
        "prof_",
        "psset_",
        "ehooks_",
        "tsd_",
    ];
    PREFIXES.iter().any(|p| function.starts_with(p))
}

/// Our operator's areas, by the crate of each sampled function.
pub fn rust_area(function: &str, dso: &str) -> &'static str {
    if let Some(area) = outside_the_binary(dso) {
        return area;
    }
    if jemalloc(function) {
        return "allocator (jemalloc)";
    }
    match crate_of(function) {
        "serde" | "serde_core" | "serde_json" | "k8s_openapi" | "serde_path_to_error" | "ryu" | "itoa" => {
            "JSON decoding and encoding (serde_json, k8s-openapi)"
        }
        "rustls" | "tokio_rustls" | "ring" | "webpki" | "rustls_webpki" => "TLS (rustls)",
        c if c.starts_with("aws_lc") => "TLS (rustls)",
        "hyper" | "hyper_util" | "h2" | "http" | "http_body" | "http_body_util" | "tower" | "tower_http"
        | "httparse" | "bytes" => "HTTP (hyper, tower)",
        "kube" | "kube_client" | "kube_runtime" | "kube_core" | "kube_lease_manager" => {
            "kube-rs (client, watcher, reflector, applier)"
        }
        "tokio" | "futures" | "futures_util" | "futures_core" | "futures_channel" | "futures_task"
        | "async_broadcast" | "parking_lot" | "parking_lot_core" => "async runtime (tokio, futures)",
        "sample_operator" | "sample_operator_api" => "sample-operator's own code",
        "tracing" | "tracing_core" | "tracing_subscriber" | "prometheus_client" => "logging and metrics",
        "core" | "alloc" | "std" | "hashbrown" | "indexmap" | "smallvec" => {
            "Rust's standard library (collections, copies, drops)"
        }
        _ if function.starts_with("[unknown") => "unresolved",
        _ => "other",
    }
}

/// A Go contender's areas, from perf's samples: the kernel's and the C library's by where they
/// ran, the rest as [`go_area`] places them.
pub fn go_perf_area(function: &str, dso: &str) -> &'static str {
    if let Some(area) = outside_the_binary(dso) {
        return area;
    }
    if function.starts_with("[unknown") {
        return "unresolved";
    }
    go_area(function)
}

/// The area of a perf sample taken in the kernel or the C library, whatever the binary.
fn outside_the_binary(dso: &str) -> Option<&'static str> {
    if kernel(dso) {
        return Some("kernel (system calls, loopback TCP, page faults)");
    }
    if dso.contains("libc.so") || dso.contains("ld-linux") || dso.contains("libm.so") {
        return Some("C library (memcpy, memmove)");
    }
    None
}

/// The apiserver's areas, by the Go package of each function its own profile sampled. The first
/// match wins, so the narrower packages come before the wider ones.
pub fn go_area(function: &str) -> &'static str {
    // Go's profile counts the kernel's time in a system call to the function that made it.
    const SYSTEM_CALLS: [&str; 3] = ["syscall.", "internal/runtime/syscall", "internal/syscall"];
    if SYSTEM_CALLS.iter().any(|p| function.starts_with(p)) {
        return "kernel (system calls, loopback TCP, page faults)";
    }
    const AREAS: &[(&str, &[&str])] = &[
        (
            "server-side apply (structured-merge-diff, managed fields)",
            &[
                "sigs.k8s.io/structured-merge-diff",
                "k8s.io/apimachinery/pkg/util/managedfields",
                "k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager",
            ],
        ),
        (
            "CEL and schema validation",
            &[
                "github.com/google/cel-go",
                "k8s.io/apiserver/pkg/cel",
                "k8s.io/apiextensions-apiserver/pkg/apiserver/schema",
                "k8s.io/apiextensions-apiserver/pkg/apiserver/validation",
                "k8s.io/kube-openapi/pkg/validation",
                "k8s.io/apiserver/pkg/admission",
            ],
        ),
        (
            "watch cache and watches",
            &["k8s.io/apiserver/pkg/storage/cacher"],
        ),
        (
            "etcd client and storage",
            &[
                "go.etcd.io",
                "k8s.io/apiserver/pkg/storage",
                "google.golang.org/grpc",
                "k8s.io/apiserver/pkg/registry",
            ],
        ),
        (
            "JSON and protobuf encoding",
            &[
                "encoding/json",
                "sigs.k8s.io/json",
                "github.com/json-iterator",
                "k8s.io/apimachinery/pkg/runtime",
                "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured",
                "k8s.io/apimachinery/pkg/conversion",
                "google.golang.org/protobuf",
                "github.com/gogo/protobuf",
                "k8s.io/api/",
                "k8s.io/kubernetes/pkg/apis",
                "reflect.",
                "strconv.",
                "unicode/",
            ],
        ),
        (
            "TLS and HTTP",
            &[
                "crypto/",
                "vendor/golang.org/x/crypto",
                "golang.org/x/crypto",
                "net/http",
                "golang.org/x/net/http2",
                "net.",
                "internal/poll",
                "bufio.",
                // The P-256 arithmetic of TLS handshakes, in assembly without a package name.
                "p256",
            ],
        ),
        (
            "metrics and tracing",
            &[
                "github.com/prometheus",
                "k8s.io/component-base/metrics",
                "k8s.io/component-base/tracing",
                "go.opentelemetry.io",
            ],
        ),
        (
            "request handling (filters, authn/z, flow control)",
            &[
                "k8s.io/apiserver/pkg/endpoints",
                "k8s.io/apiserver/pkg/server",
                "k8s.io/apiserver/pkg/authentication",
                "k8s.io/apiserver/pkg/authorization",
                "k8s.io/apiserver/pkg/util/flowcontrol",
                "k8s.io/apiextensions-apiserver/pkg/apiserver",
            ],
        ),
        (
            "client-go and controller-runtime (a Go contender's client)",
            &["k8s.io/client-go", "sigs.k8s.io/controller-runtime"],
        ),
        (
            "Go runtime (garbage collector, allocation, scheduler)",
            &[
                "runtime.",
                "internal/runtime",
                "sync.",
                "sync/atomic",
                "internal/sync",
                "internal/abi",
                "internal/bytealg",
                "internal/stringslite",
                "context.",
                "time.",
                // The runtime's assembly: map hashing, comparisons, the write barrier.
                "aeshashbody",
                "memeqbody",
                "indexbytebody",
                "cmpbody",
                "gcWriteBarrier",
            ],
        ),
    ];
    for (area, packages) in AREAS {
        if packages.iter().any(|p| function.starts_with(p)) {
            return area;
        }
    }
    "other"
}

fn write_report(out: &Path, profile: &Profile) -> Result<()> {
    std::fs::create_dir_all(out)?;
    let path = out.join(REPORT_FILE);
    let method = method_link(&paths::repo_root(), out);
    std::fs::write(&path, markdown(profile, &method)).with_context(|| format!("writing {}", path.display()))
}

/// The link from PROFILE.md in `folder` to the method in bench/README.md of the repository at
/// `root`, relative so that it resolves wherever the report is written (bench/ itself, or a
/// sitting's folder below it).
fn method_link(root: &Path, folder: &Path) -> String {
    let inside: Vec<_> = match folder.strip_prefix(root) {
        Ok(inside) => inside.components().collect(),
        // Outside the repository: named from its root.
        Err(_) => return format!("{}/bench/README.md#profile", root.display()),
    };
    match inside.split_first() {
        Some((first, below)) if first.as_os_str() == "bench" => {
            format!("{}README.md#profile", "../".repeat(below.len()))
        }
        _ => format!("{}bench/README.md#profile", "../".repeat(inside.len())),
    }
}

/// PROFILE.md, whose link to the method is `method`.
pub fn markdown(p: &Profile, method: &str) -> String {
    let mut md = String::new();
    let (title, name) = if p.contender.is_ours() {
        ("our operator".to_owned(), "sample-operator")
    } else {
        (format!("`{}`", p.contender.label()), "contender")
    };
    let burst = p.scenario == Scenario::Burst;
    md.push_str(&format!(
        "# Where the CPU goes: {title} converging {}\n\n",
        if burst { "a burst" } else { "a backlog" }
    ));
    let value =
        |v: Option<clap::builder::PossibleValue>| v.map_or_else(String::new, |v| v.get_name().to_owned());
    md.push_str(&format!(
        "Written by `cargo xtask bench-profile --contender {}{}` ([the method]({method})); \
         measured {} on {}, Kubernetes {}, operator at {}.\n\n",
        value(p.contender.to_possible_value()),
        if burst { " --scenario burst" } else { "" },
        p.date,
        p.machine,
        p.kubernetes_version,
        p.commit
    ));
    if burst {
        md.push_str(&format!(
            "{} Foos created as fast as the apiserver took them once the {name} had started and \
             gone idle (the burst scenario); converged {:.1} s after the first create, quiet (its \
             Events written) after {:.1} s. `perf record -e cpu-clock -F {}` sampled the {name} \
             from its start, which took {:.2} s of its CPU before the first create (in its \
             samples, not in its CPU below), and the apiserver's own CPU profile \
             (`/debug/pprof/profile`, 100 samples a second of CPU, read by `go tool pprof`) the \
             apiserver, in windows of {} s from the first create until the one under way when \
             the {name} went quiet; a function's share is its own samples, not its callees'. \
             The benchmark's own creates are left out of the requests, not of the apiserver's \
             CPU.\n\n",
            p.n,
            p.converged_seconds,
            p.quiet_seconds,
            p.frequency,
            p.cpu_before_seconds,
            PPROF_WINDOW.as_secs()
        ));
    } else {
        md.push_str(&format!(
            "{} Foos created before the {name} started (the backlog scenario); converged {:.1} s \
             after its start, quiet (its Events written) after {:.1} s. `perf record -e cpu-clock \
             -F {}` sampled the {name} over that time, and the apiserver's own CPU profile \
             (`/debug/pprof/profile`, 100 samples a second of CPU, read by `go tool pprof`) the \
             apiserver, in windows of {} s from the {name}'s start until the one under way when \
             it went quiet; a function's share is its own samples, not its callees'.\n\n",
            p.n,
            p.converged_seconds,
            p.quiet_seconds,
            p.frequency,
            PPROF_WINDOW.as_secs()
        ));
    }
    md.push_str("| process | CPU | CPU per Foo | samples |\n|---|--:|--:|--:|\n");
    for (name, process) in [(name, &p.operator), ("kube-apiserver", &p.apiserver)] {
        md.push_str(&format!(
            "| {name} | {:.1} s | {:.0} µs | {} |\n",
            process.cpu_seconds,
            process.cpu_seconds / p.n.max(1) as f64 * 1e6,
            process.samples
        ));
    }
    md.push_str(&format!(
        "\n## Requests\n\nWhat the apiserver served on the Foo controller's resources from the {} \
         until the {name} went quiet (`apiserver_request_total`, which counts a watch once it \
         ends), in all and per Foo:\n\n| request | count | per Foo |\n|---|--:|--:|\n",
        if burst {
            "first create".to_owned()
        } else {
            format!("{name}'s start")
        }
    ));
    for (request, count) in &p.requests {
        md.push_str(&format!(
            "| {request} | {count} | {:.2} |\n",
            *count as f64 / p.n.max(1) as f64
        ));
    }
    if !p.operator_counters.is_empty() {
        md.push_str(&format!(
            "\nThe {name}'s own counters once it went quiet (its /metrics, summed over their \
             labels), in all and per Foo:\n\n| counter | count | per Foo |\n|---|--:|--:|\n"
        ));
        for (counter, count) in &p.operator_counters {
            md.push_str(&format!(
                "| `{counter}` | {count} | {:.2} |\n",
                *count as f64 / p.n.max(1) as f64
            ));
        }
    }
    for (title, process) in [(name, &p.operator), ("kube-apiserver", &p.apiserver)] {
        md.push_str(&format!("\n## {title}\n\n"));
        let unresolved = process
            .areas
            .iter()
            .find(|(area, _)| area == "unresolved")
            .map_or(0, |(_, samples)| *samples);
        if unresolved * 2 > process.samples {
            // An operator binary given with --operator-binary, or a Go contender, may be stripped.
            md.push_str(&format!(
                "{:.0}% of its samples name no function: its binary has no symbol table, so only \
                 the kernel's part resolves.\n",
                unresolved as f64 / process.samples as f64 * 100.0
            ));
            continue;
        }
        md.push_str("| area | share of samples | CPU |\n|---|--:|--:|\n");
        for (area, samples) in &process.areas {
            let share = *samples as f64 / process.samples.max(1) as f64;
            md.push_str(&format!(
                "| {area} | {:.1}% | {:.1} s |\n",
                share * 100.0,
                share * process.cpu_seconds
            ));
        }
        md.push_str(&format!(
            "\nThe {} most sampled functions:\n\n| function | share of samples |\n|---|--:|\n",
            process.functions.len()
        ));
        for (function, samples) in &process.functions {
            md.push_str(&format!(
                "| `{}` | {:.1}% |\n",
                function.replace('|', "\\|"),
                *samples as f64 / process.samples.max(1) as f64 * 100.0
            ));
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_functions_go_to_the_area_of_their_crate() {
        let dso = "/x/sample-operator";
        assert_eq!(
            rust_area("serde_json::de::Deserializer<R>::parse_whitespace", dso),
            "JSON decoding and encoding (serde_json, k8s-openapi)"
        );
        assert_eq!(
            rust_area(
                "<k8s_openapi::api::apps::v1::Deployment as serde_core::de::Deserialize>::deserialize",
                dso
            ),
            "JSON decoding and encoding (serde_json, k8s-openapi)"
        );
        assert_eq!(
            rust_area("aws_lc_0_47_0_aes_gcm_decrypt_avx512", dso),
            "TLS (rustls)"
        );
        assert_eq!(
            rust_area("_rjem_je_tcache_bin_flush_small", dso),
            "allocator (jemalloc)"
        );
        assert_eq!(
            rust_area("<&mut T as kube_runtime::reflector::Lookup>::to_object_ref", dso),
            "kube-rs (client, watcher, reflector, applier)"
        );
        assert_eq!(
            rust_area("sample_operator::controllers::foo::reconcile::{{closure}}", dso),
            "sample-operator's own code"
        );
        assert_eq!(
            rust_area(
                "__memmove_avx_unaligned_erms",
                "/usr/lib/x86_64-linux-gnu/libc.so.6"
            ),
            "C library (memcpy, memmove)"
        );
        assert_eq!(
            rust_area("tcp_sendmsg", "[kernel.kallsyms]"),
            "kernel (system calls, loopback TCP, page faults)"
        );
        assert_eq!(rust_area("[unknown in sample-operator]", dso), "unresolved");
    }

    #[test]
    fn go_functions_go_to_the_narrowest_package_listed() {
        assert_eq!(
            go_area("sigs.k8s.io/structured-merge-diff/v6/typed.(*TypedValue).Merge"),
            "server-side apply (structured-merge-diff, managed fields)"
        );
        // The cacher is storage too, but its own area.
        assert_eq!(
            go_area("k8s.io/apiserver/pkg/storage/cacher.(*watchCache).processEvent"),
            "watch cache and watches"
        );
        assert_eq!(
            go_area("k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate"),
            "etcd client and storage"
        );
        assert_eq!(
            go_area("runtime.mallocgc"),
            "Go runtime (garbage collector, allocation, scheduler)"
        );
        assert_eq!(
            go_area("crypto/internal/fips140/aes/gcm.gcmAesEnc"),
            "TLS and HTTP"
        );
        assert_eq!(
            go_area("github.com/google/cel-go/interpreter.(*evalAnd).Eval"),
            "CEL and schema validation"
        );
        assert_eq!(go_area("p256MulInternal"), "TLS and HTTP");
        assert_eq!(
            go_area("github.com/prometheus/client_golang/prometheus.(*histogram).findBucket"),
            "metrics and tracing"
        );
        assert_eq!(
            go_area("aeshashbody"),
            "Go runtime (garbage collector, allocation, scheduler)"
        );
        assert_eq!(go_area("main.main"), "other");
    }

    #[test]
    fn samples_are_counted_by_function_without_the_hash_and_by_area() {
        let script = "    55d0c3a1f2b4 serde_json::de::from_slice::h0123456789abcdef (/x/sample-operator)\n\
                      \x20   55d0c3a1f2c0 serde_json::de::from_slice::h0123456789abcdef (/x/sample-operator)\n\
                      \x20   ffffffff81a2b3c4 tcp_sendmsg ([kernel.kallsyms])\n\
                      \x20   55d0c3a1f2d0 [unknown] (/x/sample-operator)\n";
        let (areas, functions) = count(script, rust_area);
        assert_eq!(functions["serde_json::de::from_slice"], 2);
        assert_eq!(functions["[unknown in sample-operator]"], 1);
        assert_eq!(areas["JSON decoding and encoding (serde_json, k8s-openapi)"], 2);
        assert_eq!(areas["kernel (system calls, loopback TCP, page faults)"], 1);
        assert_eq!(areas.values().sum::<u64>(), 4);
    }

    /// `go tool pprof -top -sample_index=samples` of a Go program, shortened, with a function
    /// of no samples of its own and a system call.
    #[test]
    fn go_profiles_are_counted_by_their_own_samples_per_function_and_by_area() {
        let top = "File: kube-apiserver\n\
                   Type: samples\n\
                   Duration: 10.01s, Total samples = 94 \n\
                   Showing nodes accounting for 94, 100% of 94 total\n\
                   \x20     flat  flat%   sum%        cum   cum%\n\
                   \x20       18 19.15% 19.15%         68 72.34%  encoding/json.(*decodeState).object\n\
                   \x20       18 19.15% 38.30%         18 19.15%  crypto/internal/fips140/aes/gcm.gcmAesEnc\n\
                   \x20        8  8.51% 46.81%          8  8.51%  runtime.memmove\n\
                   \x20        6  6.38% 53.19%          6  6.38%  internal/runtime/syscall.Syscall6\n\
                   \x20        0     0%   100%          1  2.13%  runtime.systemstack\n";
        let (areas, functions, total) = count_pprof(top);
        assert_eq!(total, 94);
        assert_eq!(functions["encoding/json.(*decodeState).object"], 18);
        assert!(!functions.contains_key("runtime.systemstack"));
        assert_eq!(areas["JSON and protobuf encoding"], 18);
        assert_eq!(areas["TLS and HTTP"], 18);
        assert_eq!(areas["Go runtime (garbage collector, allocation, scheduler)"], 8);
        assert_eq!(areas["kernel (system calls, loopback TCP, page faults)"], 6);
        assert_eq!(areas.values().sum::<u64>(), 50);
    }

    #[test]
    fn the_link_to_the_method_resolves_from_where_the_report_is_written() {
        let root = Path::new("/repo");
        assert_eq!(method_link(root, Path::new("/repo/bench")), "README.md#profile");
        assert_eq!(
            method_link(root, Path::new("/repo/bench/sittings/2026-11-30-profile-10k")),
            "../../README.md#profile"
        );
        assert_eq!(
            method_link(root, Path::new("/repo/profiles")),
            "../bench/README.md#profile"
        );
        assert_eq!(
            method_link(root, Path::new("/elsewhere")),
            "/repo/bench/README.md#profile"
        );
    }

    #[test]
    fn the_report_gives_each_area_its_share_and_cpu_and_the_requests_per_foo() {
        let profile = Profile {
            n: 1000,
            operator: Process {
                cpu_seconds: 10.0,
                samples: 200,
                areas: vec![("allocator (jemalloc)".into(), 50), ("other".into(), 150)],
                functions: vec![("a|b".into(), 20)],
            },
            requests: BTreeMap::from([("POST deployments".into(), 1000)]),
            ..Profile::default()
        };
        let md = markdown(&profile, "README.md#profile");
        assert!(md.contains("| allocator (jemalloc) | 25.0% | 2.5 s |"), "{md}");
        assert!(md.contains("| POST deployments | 1000 | 1.00 |"), "{md}");
        assert!(
            md.contains("| sample-operator | 10.0 s | 10000 µs | 200 |"),
            "{md}"
        );
        assert!(md.contains("| `a\\|b` | 10.0% |"), "{md}");
        let stripped = Profile {
            apiserver: Process {
                cpu_seconds: 60.0,
                samples: 100,
                areas: vec![("unresolved".into(), 94), ("other".into(), 6)],
                functions: vec![],
            },
            ..profile
        };
        let md = markdown(&stripped, "README.md#profile");
        assert!(md.contains("94% of its samples name no function"), "{md}");
        assert!(md.contains("| allocator (jemalloc) | 25.0% | 2.5 s |"), "{md}");
        let ceiling = Profile {
            contender: Contender::CeilingOurs,
            ..stripped
        };
        let md = markdown(&ceiling, "README.md#profile");
        assert!(
            md.starts_with("# Where the CPU goes: `ceiling, ours' three writes (plain client)`"),
            "{md}"
        );
        assert!(
            md.contains("`cargo xtask bench-profile --contender ceiling-ours`"),
            "{md}"
        );
        assert!(md.contains("| contender | 10.0 s | 10000 µs | 200 |"), "{md}");
        assert!(!md.contains("sample-operator"), "{md}");
        let burst = Profile {
            scenario: Scenario::Burst,
            cpu_before_seconds: 0.25,
            ..ceiling
        };
        let md = markdown(&burst, "README.md#profile");
        assert!(md.contains("converging a burst"), "{md}");
        assert!(md.contains("--contender ceiling-ours --scenario burst`"), "{md}");
        assert!(
            md.contains("took 0.25 s of its CPU before the first create"),
            "{md}"
        );
        assert!(md.contains("resources from the first create until"), "{md}");
    }

    #[test]
    fn counters_are_summed_over_their_labels() {
        let text = "# HELP controller_runtime_reconcile_total Total\n\
                    # TYPE controller_runtime_reconcile_total counter\n\
                    controller_runtime_reconcile_total{controller=\"foo\",result=\"success\"} 1500\n\
                    controller_runtime_reconcile_total{controller=\"foo\",result=\"error\"} 2\n\
                    controller_runtime_reconcile_time_seconds_count{controller=\"foo\"} 9\n\
                    workqueue_adds_total{controller=\"foo\",name=\"foo\"} 3000\n\
                    process_cpu_seconds_total 1.5\n";
        let sums = counter_sums(text, &OPERATOR_COUNTERS);
        assert_eq!(
            sums,
            BTreeMap::from([
                ("controller_runtime_reconcile_total".to_owned(), 1502),
                ("workqueue_adds_total".to_owned(), 3000),
            ])
        );
        let profile = Profile {
            n: 1000,
            operator_counters: sums,
            ..Profile::default()
        };
        let md = markdown(&profile, "README.md#profile");
        assert!(
            md.contains("| `controller_runtime_reconcile_total` | 1502 | 1.50 |"),
            "{md}"
        );
    }

    /// Profiles written before `--scenario` were all of backlogs.
    #[test]
    fn a_profile_without_a_scenario_was_of_a_backlog() {
        let mut json = serde_json::to_value(Profile::default()).unwrap();
        let fields = json.as_object_mut().unwrap();
        fields.remove("scenario");
        fields.remove("cpu_before_seconds");
        let profile: Profile = serde_json::from_value(json).unwrap();
        assert_eq!(profile.scenario, Scenario::Backlog);
        let md = markdown(&profile, "README.md#profile");
        assert!(md.contains("converging a backlog"), "{md}");
        assert!(
            md.contains("resources from the sample-operator's start until"),
            "{md}"
        );
    }

    /// A Go contender's samples: the kernel's and the C library's by where they ran, its own by
    /// package, client-go's apart from the runtime's.
    #[test]
    fn a_go_contenders_samples_go_to_their_package_area() {
        let binary = "/x/bin/ceiling";
        assert_eq!(
            go_perf_area("k8s.io/client-go/rest.(*Request).Do", binary),
            "client-go and controller-runtime (a Go contender's client)"
        );
        assert_eq!(
            go_perf_area("runtime.mallocgc", binary),
            "Go runtime (garbage collector, allocation, scheduler)"
        );
        assert_eq!(
            go_perf_area("tcp_sendmsg", "[kernel.kallsyms]"),
            "kernel (system calls, loopback TCP, page faults)"
        );
        assert_eq!(go_perf_area("crypto/aes.gcmAesEnc", binary), "TLS and HTTP");
        // A stripped binary's samples are counted as such, for the report's note.
        assert_eq!(go_perf_area("[unknown in ceiling]", binary), "unresolved");
    }
}
