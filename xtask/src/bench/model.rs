//! What the benchmark is made of: the contenders, the scenarios, a run's spec and result, and
//! the results file. A new scenario is described here (its sizes, its contenders, its name);
//! `run` says how it runs and `report` how its table reads.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::apiserver::by_verb;

/// Concurrent reconciles of our operator by default, which the ceiling copies.
pub const OPERATOR_CONCURRENCY: usize = 16;

/// The largest N for sample-controller in the timed scenarios: its client-side rate limit lets
/// it write about 5 Foo statuses a second, so 1,000 Foos take three to four minutes.
pub const RATE_LIMITED_CAP: usize = 1000;

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Contender {
    /// Our operator: `sample-operator run --initial-list=list`, release build: paged lists, as
    /// it ran before `auto` (which streams on this apiserver, as the next row) was its default.
    Ours,
    /// Ours with `--initial-list=stream`: every watch's first list streamed (WatchList). The
    /// default: what `cargo xtask bench-profile` profiles unless told otherwise, and what it
    /// profiled before it could be told.
    #[default]
    OursStreaming,
    /// Ours with `--events=none`: the same work as the two-write ceiling and the tuned
    /// controller-runtime, which write no Events.
    OursEventsOff,
    /// Ours with `--worker-threads=0`: a tokio worker per core, as it ran before its workers
    /// were bounded (two by default, as many as the benchmark's machine has cores).
    OursThreadPerCore,
    /// Ours with `--apiserver-http=2`: every request multiplexed on one HTTP/2 connection, as
    /// client-go connects, where kube-rs holds an HTTP/1.1 connection per request in flight.
    OursHttp2,
    /// kubernetes/sample-controller at the matching release, with its defaults.
    SampleController,
    /// The Foo controller on controller-runtime in bench/go, with controller-runtime's defaults.
    ControllerRuntime,
    /// sample-controller as its users tune it: as many workers as our `--concurrency`, and no
    /// client-side rate limit (flags patched in at build time, see `SAMPLE_CONTROLLER_TUNING`).
    SampleControllerTuned,
    /// controller-runtime as its users tune it: `MaxConcurrentReconciles` equal to our
    /// `--concurrency`, managedFields stripped from the cache, and only its own Deployments
    /// cached (by label).
    ControllerRuntimeTuned,
    /// bench/go's plain client issuing a controller's writes and nothing else.
    Ceiling,
    /// The same plain client issuing our operator's three writes (the Deployment, the status
    /// by server-side apply with a Ready condition, an Event), at our `--concurrency`.
    CeilingOurs,
    /// The same without the Event: ours' two writes with Events off, to tell the status's cost
    /// from the Event's.
    CeilingOursStatus,
    /// The same status, its condition included, by a JSON merge patch instead of server-side
    /// apply: what the apply costs beyond the condition.
    CeilingOursStatusMerge,
}

impl Contender {
    pub const ALL: [Contender; 13] = [
        Contender::Ours,
        Contender::OursStreaming,
        Contender::OursEventsOff,
        Contender::OursThreadPerCore,
        Contender::OursHttp2,
        Contender::SampleController,
        Contender::SampleControllerTuned,
        Contender::ControllerRuntime,
        Contender::ControllerRuntimeTuned,
        Contender::Ceiling,
        Contender::CeilingOursStatus,
        Contender::CeilingOursStatusMerge,
        Contender::CeilingOurs,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Contender::Ours => "sample-operator (ours)",
            Contender::OursStreaming => "sample-operator, streaming lists (ours)",
            Contender::OursEventsOff => "sample-operator, Events off (ours)",
            Contender::OursThreadPerCore => "sample-operator, a worker thread per core (ours)",
            Contender::OursHttp2 => "sample-operator, HTTP/2 (ours)",
            Contender::SampleController => "sample-controller (Go)",
            Contender::ControllerRuntime => "controller-runtime (Go)",
            Contender::SampleControllerTuned => "sample-controller tuned (Go)",
            Contender::ControllerRuntimeTuned => "controller-runtime tuned (Go)",
            Contender::Ceiling => "ceiling (plain client)",
            Contender::CeilingOurs => "ceiling, ours' three writes (plain client)",
            Contender::CeilingOursStatus => "ceiling, ours' writes without the Event (plain client)",
            Contender::CeilingOursStatusMerge => {
                "ceiling, ours' writes without the Event, the status by merge patch (plain client)"
            }
        }
    }

    /// Whether a client-side rate limit, not the apiserver, sets this contender's pace.
    pub fn is_rate_limited(self) -> bool {
        self == Contender::SampleController
    }

    /// Our operator, however it fetches its lists.
    pub fn is_ours(self) -> bool {
        matches!(
            self,
            Contender::Ours
                | Contender::OursStreaming
                | Contender::OursEventsOff
                | Contender::OursThreadPerCore
                | Contender::OursHttp2
        )
    }

    /// Whether it takes a concurrency a user would tune (ours' `--concurrency`, the tuned
    /// peers' workers) or that stands for ours' (the ceiling doing ours' work), so that
    /// `--sweep` runs it at each.
    pub fn takes_concurrency(self) -> bool {
        self.is_ours()
            || self.is_tuned_peer()
            || matches!(
                self,
                Contender::CeilingOurs | Contender::CeilingOursStatus | Contender::CeilingOursStatusMerge
            )
    }

    /// A plain client issuing writes, not a controller: it keeps no cache and, once done,
    /// sends nothing.
    pub fn is_ceiling(self) -> bool {
        matches!(
            self,
            Contender::Ceiling
                | Contender::CeilingOurs
                | Contender::CeilingOursStatus
                | Contender::CeilingOursStatusMerge
        )
    }

    /// A peer at its defaults where a tuned one exists beside it.
    pub fn is_untuned_peer(self) -> bool {
        matches!(self, Contender::SampleController | Contender::ControllerRuntime)
    }

    /// A peer tuned as its users tune it.
    pub fn is_tuned_peer(self) -> bool {
        matches!(
            self,
            Contender::SampleControllerTuned | Contender::ControllerRuntimeTuned
        )
    }

    /// One of the Go controllers (not ours, not the ceiling).
    pub fn is_go_peer(self) -> bool {
        matches!(
            self,
            Contender::SampleController
                | Contender::SampleControllerTuned
                | Contender::ControllerRuntime
                | Contender::ControllerRuntimeTuned
        )
    }

    /// The N this contender runs at: sample-controller's client-side rate limit would make
    /// large timed runs take tens of minutes, so those are capped. Steady-state and memory runs
    /// are not timed: it starts those on Foos the ceiling converged.
    pub fn cap(self, scenario: Scenario, n: usize, rate_limited_cap: usize) -> usize {
        if self.is_rate_limited() && matches!(scenario, Scenario::Backlog | Scenario::Burst) {
            n.min(rate_limited_cap)
        } else {
            n
        }
    }
}

/// Runs from this size up start on a fresh etcd and apiserver (`--fresh-cluster-from`) instead
/// of cleaning up after the run before: deleting 100,000 Foos, Deployments and Events takes the
/// apiserver minutes, and a fresh etcd gives every large run the same database to start from.
pub const LARGE_N: usize = 50_000;

/// Whether a scenario is taken once, whatever `--repeats` says: the steady state's writes and
/// CPU in a quiet window and the memory held once idle do not vary from run to run the way
/// converge times do, and a restart over 100,000 Foos takes a quarter of an hour. The converge
/// rows (backlog, burst) run every repeat at every size.
pub fn runs_once(scenario: Scenario) -> bool {
    matches!(scenario, Scenario::Steady | Scenario::Memory | Scenario::Restart)
}

/// The peers at their defaults stop at this size (the tuned ones go on): their single worker,
/// or rate limit, would take hours over 100,000 Foos.
pub const UNTUNED_MAX_N: usize = 10_000;

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    #[default]
    Backlog,
    Burst,
    Steady,
    Memory,
    Restart,
}

impl Scenario {
    /// The sizes it runs at, from the options: `n` for the timed ones (steady state up to
    /// [`UNTUNED_MAX_N`]), one size of their own for memory and restart.
    pub fn sizes(self, n: &[usize], memory_foos: usize, restart_foos: usize) -> Vec<usize> {
        match self {
            Scenario::Memory => vec![memory_foos],
            Scenario::Restart => vec![restart_foos],
            Scenario::Steady => n.iter().copied().filter(|&n| n <= UNTUNED_MAX_N).collect(),
            Scenario::Backlog | Scenario::Burst => n.to_vec(),
        }
    }

    /// The ceiling only has a meaning where something is timed: it keeps no cache and, once
    /// done, sends nothing. A restart is measured for the controllers that converge the
    /// backlog in minutes: not sample-controller at its rate limit.
    pub fn includes(self, contender: Contender) -> bool {
        match self {
            Scenario::Backlog | Scenario::Burst => true,
            // Events off is a comparison of converging work: what ours holds and reads is
            // the same with Events on.
            _ if contender == Contender::OursEventsOff => false,
            Scenario::Steady | Scenario::Memory => !contender.is_ceiling(),
            Scenario::Restart => !contender.is_ceiling() && contender != Contender::SampleController,
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Scenario::Backlog => "backlog",
            Scenario::Burst => "burst",
            Scenario::Steady => "steady state",
            Scenario::Memory => "memory",
            Scenario::Restart => "restart",
        };
        f.write_str(name)
    }
}

#[derive(Clone, Debug)]
pub struct RunSpec {
    pub scenario: Scenario,
    pub contender: Contender,
    /// N as planned for this scenario.
    pub planned_n: usize,
    /// N this contender runs at (lower when capped).
    pub n: usize,
    pub repeat: usize,
    /// Foos handled at once: `--concurrency` for the controllers, one value of the sweep for
    /// the ceiling.
    pub concurrency: usize,
}

/// One repeat of one scenario and size: every contender's run of it, taken one after another.
/// Contenders are compared within a block only, so a block is taken whole on one machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Block {
    pub repeat: usize,
    pub scenario: Scenario,
    pub planned_n: usize,
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, N = {}, repeat {}",
            self.scenario,
            self.planned_n,
            self.repeat + 1
        )
    }
}

impl RunSpec {
    pub fn block(&self) -> Block {
        Block {
            repeat: self.repeat,
            scenario: self.scenario,
            planned_n: self.planned_n,
        }
    }
}

impl fmt::Display for RunSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, {} Foos, {}",
            self.scenario,
            self.n,
            self.contender.label()
        )?;
        // The ceiling always says it; another contender when a sweep moved it off the default.
        if self.contender == Contender::Ceiling || self.concurrency != OPERATOR_CONCURRENCY {
            write!(f, ", {} at once", self.concurrency)?;
        }
        if self.n != self.planned_n {
            write!(f, " (capped from {})", self.planned_n)?;
        }
        write!(f, ", repeat {}", self.repeat + 1)
    }
}

pub fn capitalised(scenario: Scenario) -> String {
    let name = scenario.to_string();
    let mut chars = name.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// What one run measured. Field meanings differ a little by scenario; see `seconds`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunResult {
    pub scenario: Option<Scenario>,
    pub contender: Option<Contender>,
    pub planned_n: usize,
    pub n: usize,
    pub repeat: usize,
    /// Backlog and burst: seconds to converge. Steady state: the window's length. Memory: how
    /// long the contender took to go idle. `None` when the run failed.
    pub seconds: Option<f64>,
    /// Foos converged when the run ended.
    pub converged: usize,
    /// CPU seconds: from start (backlog, memory) or the first create (burst) until the
    /// contender is quiet after converging; within the window (steady state).
    pub cpu_seconds: f64,
    pub rss_bytes: u64,
    pub peak_rss_bytes: u64,
    /// Requests while measured, keyed `VERB resource`, from the apiserver's metrics.
    pub requests: BTreeMap<String, u64>,
    /// The apiserver's writes to etcd while measured, keyed `operation resource` (none in
    /// results from before they were counted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub etcd_writes: BTreeMap<String, u64>,
    /// Backlog and burst: the Events about Foos in the namespace once the contender settled (a
    /// series counts once), plus the Foo outcomes counted in summaries of the namespace
    /// (`events_summarised`); `None` in results from before they were counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<u64>,
    /// Backlog and burst: of `events`, the outcomes our operator counted in summaries rather
    /// than wrote one by one; `None` where there were none, or in results from before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_summarised: Option<u64>,
    /// Backlog and burst: when the last Event about a Foo was written, in seconds since the
    /// run's start (as `seconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event_seconds: Option<f64>,
    /// Backlog and burst, ours: its Event queue over the run, read from its /metrics.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub event_queue: Vec<super::event_queue::Sample>,
    /// Backlog and burst, ours: the Events it wrote one by one before the last Foo converged
    /// (from `event_queue`), competing with the writes that converge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_while_converging: Option<u64>,
    /// Converged Foos over time (seconds, count), for the chart.
    pub timeline: Vec<(f64, usize)>,
    /// Runs that began on a freshly started apiserver: how the wait for it to go quiet ended.
    /// `None` for runs on a cluster that had run before, and in results from before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_start: Option<FreshStart>,
    /// Seconds the machine took for a fixed workload just before the run (see
    /// [`machine`](crate::bench::machine)); `None` in results from before it was timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_seconds: Option<f64>,
    /// Why the run has no result, or what to know about it.
    pub note: Option<String>,
    /// Restart: how long the apiserver took to list the same Foos and Deployments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_seconds: Option<f64>,
    /// Foos handled at once (see [`RunSpec::concurrency`]); results from before it was
    /// recorded get the run's `--concurrency` when loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    /// The machine the run was taken on; `None` in results from before it was recorded
    /// (2026-11-30), which were all taken on their `meta.machine`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

impl RunResult {
    pub fn new(spec: &RunSpec) -> Self {
        Self {
            scenario: Some(spec.scenario),
            contender: Some(spec.contender),
            planned_n: spec.planned_n,
            n: spec.n,
            repeat: spec.repeat,
            concurrency: Some(spec.concurrency),
            ..Self::default()
        }
    }

    pub fn succeeded(&self) -> bool {
        self.seconds.is_some()
    }

    /// Where this run was taken: its own record, or else the machine of the results it is in.
    pub fn machine<'a>(&'a self, meta: &'a Meta) -> &'a str {
        self.machine.as_deref().unwrap_or(&meta.machine)
    }

    /// The block this run belongs to (see [`RunSpec::block`]).
    pub fn block(&self) -> Option<Block> {
        Some(Block {
            repeat: self.repeat,
            scenario: self.scenario?,
            planned_n: self.planned_n,
        })
    }

    /// Whether this run did what `spec` asks, though planned for another N (a capped run).
    pub fn is_same_run(&self, spec: &RunSpec) -> bool {
        self.scenario == Some(spec.scenario)
            && self.contender == Some(spec.contender)
            && (self.n, self.repeat) == (spec.n, spec.repeat)
            && self.concurrency == Some(spec.concurrency)
            && self.planned_n != spec.planned_n
    }

    /// This run's result, reported again for `spec`'s planned N.
    pub fn reused_for(mut self, spec: &RunSpec) -> Self {
        self.note = Some(format!(
            "the same run as for N = {}, since it is capped at {} Foos",
            self.planned_n, self.n
        ));
        self.planned_n = spec.planned_n;
        self
    }

    /// Whether this is a result of the run `spec` describes.
    pub fn is_of(&self, spec: &RunSpec) -> bool {
        self.scenario == Some(spec.scenario)
            && self.contender == Some(spec.contender)
            && (self.planned_n, self.n, self.repeat) == (spec.planned_n, spec.n, spec.repeat)
            && self.concurrency == Some(spec.concurrency)
    }

    /// One line for the console.
    pub fn summary(&self) -> String {
        let Some(seconds) = self.seconds else {
            return format!("no result: {}", self.note.as_deref().unwrap_or("unknown"));
        };
        let verbs = by_verb(&self.requests);
        let requests: Vec<String> = verbs.iter().map(|(verb, n)| format!("{verb} {n}")).collect();
        format!(
            "{seconds:.1} s, CPU {:.2} s, RSS {:.0} MiB (peak {:.0} MiB), requests: {}{}",
            self.cpu_seconds,
            mib(self.rss_bytes),
            mib(self.peak_rss_bytes),
            if requests.is_empty() {
                "none".into()
            } else {
                requests.join(", ")
            },
            self.note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default(),
        )
    }
}

/// The concurrency at which `contender` converged `scenario` at `planned_n` fastest (lowest
/// median), among those with a successful run: the one its row stands for when it was swept
/// (the ceiling always is).
pub fn fastest_concurrency(
    runs: &[RunResult],
    contender: Contender,
    scenario: Scenario,
    planned_n: usize,
) -> Option<usize> {
    let mut by_concurrency: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for run in runs.iter().filter(|r| {
        r.contender == Some(contender) && r.scenario == Some(scenario) && r.planned_n == planned_n
    }) {
        if let (Some(c), Some(seconds)) = (run.concurrency, run.seconds) {
            by_concurrency.entry(c).or_default().push(seconds);
        }
    }
    by_concurrency
        .into_iter()
        .filter_map(|(c, seconds)| Some((c, Spread::of(seconds)?.median)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(c, _)| c)
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// How long the benchmark waited for a freshly started apiserver's CPU to go quiet, and whether
/// it did: a run that began on a busy one shared the cores with whatever the apiserver was still
/// doing (its start-up, or an idle floor above the wait's threshold, as seen on this machine).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct FreshStart {
    pub waited_seconds: f64,
    pub quiet: bool,
    /// The share of one core the apiserver used in the seconds after the wait.
    pub cpu_share: f64,
}

/// What the report says about where and how the numbers were taken.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Meta {
    pub date: String,
    pub machine: String,
    pub kubernetes_version: String,
    pub go_version: String,
    pub repeats: usize,
    pub concurrency: usize,
    /// `--sweep`: the concurrencies ours and the tuned peers ran at (empty: `concurrency`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sweep: Vec<usize>,
    /// `--concurrency-of`: contenders run at a concurrency of their own in every scenario.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub concurrency_of: BTreeMap<Contender, usize>,
    /// The ceiling's sweep; empty in results from before it swept (it ran at `concurrency`).
    #[serde(default)]
    pub ceiling_concurrencies: Vec<usize>,
    pub rate_limited_cap: usize,
    /// Runs of this many Foos or more started on a fresh cluster; 0 in results from before.
    #[serde(default)]
    pub fresh_cluster_from: usize,
    pub steady_window_seconds: u64,
    /// Whether the test cluster (.cluster/) was running beside the benchmark's.
    pub other_cluster_running: bool,
    /// `git describe` of the operator measured, one per sitting of a resumed benchmark.
    #[serde(default)]
    pub commits: Vec<String>,
    /// The binaries of ours measured, one per sitting that ran another; empty before they were
    /// recorded (2026-11-30), when only the checkout's commit was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operator_builds: Vec<OperatorBuild>,
}

/// Which binary of our operator a benchmark measured: the checkout's commit says what the
/// benchmark's code was, not what `--operator-binary` ran.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorBuild {
    /// The first 16 hexadecimal digits of the binary's SHA-256.
    pub sha256: String,
    /// How it came: built by the benchmark (and from which commit), or given by its path.
    pub source: String,
}

impl OperatorBuild {
    /// Adds `build` to `builds` unless the same binary is there.
    pub fn record(builds: &mut Vec<OperatorBuild>, build: &OperatorBuild) {
        if !builds.iter().any(|b| b.sha256 == build.sha256) {
            builds.push(build.clone());
        }
    }

    /// For a report: `` `0123…` (how it came) ``, joined with "; ".
    pub fn describe(builds: &[OperatorBuild]) -> String {
        let each: Vec<String> = builds
            .iter()
            .map(|b| format!("`{}` ({})", b.sha256, b.source))
            .collect();
        each.join("; ")
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Results {
    pub meta: Meta,
    pub runs: Vec<RunResult>,
}

/// `--concurrency-of` as given on the command line: `ours=128,controller-runtime-tuned=16`.
pub fn concurrency_of_text(concurrency_of: &BTreeMap<Contender, usize>) -> String {
    use clap::ValueEnum;
    concurrency_of
        .iter()
        .map(|(contender, n)| {
            let name = contender
                .to_possible_value()
                .map_or_else(|| contender.label().to_owned(), |v| v.get_name().to_owned());
            format!("{name}={n}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A median with the smallest and largest value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let mut values: Vec<f64> = values.into_iter().collect();
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let mid = values.len() / 2;
        let median = if values.len().is_multiple_of(2) {
            (values[mid - 1] + values[mid]) / 2.0
        } else {
            values[mid]
        };
        Some(Self {
            median,
            min: values[0],
            max: values[values.len() - 1],
        })
    }

    /// `12.3 s (11.9–13.0)`, or just the value for one run.
    /// The spread is left out when it does not show at this precision.
    pub fn show(&self, unit: &str, decimals: usize) -> String {
        let [median, min, max] = [self.median, self.min, self.max].map(|v| format!("{v:.decimals$}"));
        if min == max {
            format!("{median}{unit}")
        } else {
            format!("{median}{unit} ({min}–{max})")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sample_controller_is_capped_and_only_in_timed_scenarios() {
        let capped = Contender::SampleController.cap(Scenario::Backlog, 5000, 300);
        assert_eq!(capped, 300);
        assert_eq!(
            Contender::SampleController.cap(Scenario::Memory, 10_000, 300),
            10_000
        );
        assert_eq!(Contender::Ours.cap(Scenario::Burst, 5000, 300), 5000);
        assert_eq!(Contender::SampleController.cap(Scenario::Steady, 100, 300), 100);
    }

    #[test]
    fn a_capped_run_is_reported_again_for_a_larger_planned_n() {
        let spec = |planned_n| RunSpec {
            scenario: Scenario::Backlog,
            contender: Contender::SampleController,
            planned_n,
            n: 1000,
            repeat: 0,
            concurrency: 16,
        };
        let mut ran = RunResult::new(&spec(1000));
        ran.seconds = Some(200.0);
        assert!(ran.is_of(&spec(1000)) && !ran.is_same_run(&spec(1000)));
        assert!(ran.is_same_run(&spec(5000)));
        let reused = ran.reused_for(&spec(5000));
        assert!(reused.is_of(&spec(5000)));
        assert_eq!(reused.seconds, Some(200.0));
        assert!(reused.note.unwrap().contains("N = 1000"));
    }

    #[test]
    fn the_ceiling_stands_for_its_fastest_concurrency_by_median() {
        let run = |concurrency, seconds: Option<f64>| RunResult {
            scenario: Some(Scenario::Backlog),
            contender: Some(Contender::Ceiling),
            planned_n: 1000,
            n: 1000,
            concurrency: Some(concurrency),
            seconds,
            ..RunResult::default()
        };
        let runs = [
            run(16, Some(10.0)),
            run(16, Some(12.0)),
            run(64, Some(9.0)),
            run(64, Some(10.5)),
            run(64, Some(10.0)),
            // A failed run counts for nothing.
            run(128, None),
        ];
        assert_eq!(
            fastest_concurrency(&runs, Contender::Ceiling, Scenario::Backlog, 1000),
            Some(64)
        );
        assert_eq!(
            fastest_concurrency(&runs, Contender::Ceiling, Scenario::Burst, 1000),
            None
        );
        // The same run at another concurrency is another run.
        let spec = RunSpec {
            scenario: Scenario::Backlog,
            contender: Contender::Ceiling,
            planned_n: 1000,
            n: 1000,
            repeat: 0,
            concurrency: 16,
        };
        assert!(runs[0].is_of(&spec) && !runs[2].is_of(&spec));
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(Spread::of([3.0, 1.0, 2.0]).unwrap().median, 2.0);
        let even = Spread::of([4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!((even.median, even.min, even.max), (2.5, 1.0, 4.0));
        assert_eq!(Spread::of([]), None);
    }

    #[test]
    fn a_spread_too_small_to_show_is_left_out() {
        let spread = Spread::of([19.1, 19.2, 19.3]).unwrap();
        assert_eq!(spread.show(" MiB", 0), "19 MiB");
        assert_eq!(spread.show(" s", 1), "19.2 s (19.1–19.3)");
    }
}
