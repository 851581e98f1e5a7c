//! One run: one contender in one scenario with N Foos, in a namespace of its own.
//!
//! - backlog: N Foos exist, then the contender starts; time from its start until every Foo is
//!   converged (status written, Deployment there).
//! - burst: the contender starts and goes idle, then the benchmark creates N Foos as fast as
//!   the apiserver takes them; time from the first create until every Foo is converged.
//! - steady: a backlog run, then, once the contender is idle, a window (5 minutes by default) in
//!   which its requests and CPU time are counted; a converged controller should write nothing.
//!   A rate-limited contender starts on Foos the ceiling converged, as in the memory scenario.
//! - restart: a backlog run, then the contender is stopped and started again over the
//!   converged Foos: time until it is ready (caches synced), its peak memory during the
//!   first lists against its memory once idle, and the writes it sends (nothing needs one).
//!   Beside it, the time the apiserver takes to list the same Foos and Deployments.
//! - memory: a backlog run with many Foos (100,000 in the full preset); once the contender has
//!   converged and gone idle, its resident memory is read. A rate-limited contender would take an hour to
//!   converge that many, so it starts instead on Foos that the ceiling converged (its cache
//!   holds the same objects either way).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use kube::Client;
use local_cluster::Component;

use super::apiserver::{self, RequestCounts};
use super::contender::{Contenders, Ready};
use super::event_queue::{self, Sampler};
use super::model::{Contender, RunResult, RunSpec, Scenario};
use super::proc_stats::{self, ProcStats};
use super::tracker::{EventsWritten, Outcome, Tracker};

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub timeout: Duration,
    pub steady_window: Duration,
    pub concurrency: usize,
}

/// What every run needs.
pub struct Env {
    pub client: Client,
    pub kubeconfig: PathBuf,
    pub logs: PathBuf,
    pub contenders: Contenders,
    pub options: RunOptions,
}

impl Env {
    fn start(&self, spec: &RunSpec) -> Result<Running> {
        self.start_at(spec.contender, spec.concurrency)
    }

    fn start_at(&self, contender: Contender, concurrency: usize) -> Result<Running> {
        let (component, ready, metrics) =
            self.contenders
                .start(contender, &self.kubeconfig, concurrency, &self.logs)?;
        Ok(Running(component, ready, metrics))
    }
}

/// A started contender, stopped when dropped, so that no run leaves one behind.
struct Running(Component, Ready, Option<u16>);

impl Running {
    fn pid(&self) -> i32 {
        self.0.pid
    }

    /// For ours, a reader of its Event queue from `start` on.
    fn sample_event_queue(&self, start: Instant) -> Option<Sampler> {
        self.2.map(|port| Sampler::start(port, start))
    }

    /// Waits until it says it is ready, polling every 20 ms.
    async fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            let ready = match self.1 {
                Ready::Http(port) => readyz(port),
                Ready::LogLine { text, from } => logged_since(&self.0.log, from, text),
                Ready::Immediately => true,
            };
            if ready {
                return Ok(());
            }
            if !self.0.is_running() {
                bail!("it exited before it was ready:\n{}", self.0.log_tail(20));
            }
            if start.elapsed() > timeout {
                bail!("not ready after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Whether the log at `path` has `text` past its first `from` bytes (only those are read: a
/// large backlog makes a long log).
fn logged_since(path: &std::path::Path, from: u64, text: &str) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let mut new = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut log| {
            log.seek(SeekFrom::Start(from))?;
            log.read_to_end(&mut new)
        })
        .is_ok_and(|_| String::from_utf8_lossy(&new).contains(text))
}

/// Whether `GET /readyz` on the loopback `port` answers 200.
fn readyz(port: u16) -> bool {
    local_cluster::http::get(&format!("http://127.0.0.1:{port}/readyz"), Duration::from_secs(2))
        .is_ok_and(|answer| answer.status == 200)
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.stop(Duration::from_secs(10));
    }
}

/// A run's result from what the run saw.
impl RunResult {
    fn with_stats(mut self, stats: ProcStats) -> Self {
        self.cpu_seconds = stats.cpu_seconds;
        self.rss_bytes = stats.rss_bytes;
        self.peak_rss_bytes = stats.peak_rss_bytes;
        self
    }

    fn with_events(mut self, events: Option<(EventsWritten, Instant)>) -> Self {
        if let Some((written, start)) = events {
            self.events = Some(written.about_foos + written.summarised);
            self.events_summarised = (written.summarised > 0).then_some(written.summarised);
            self.last_event_seconds = written
                .last
                .map(|at| at.saturating_duration_since(start).as_secs_f64());
        }
        self
    }

    /// Ours' Event queue over the run, and how many Events it wrote one by one while the Foos
    /// converged. After [`Self::with_outcome`] and once the Events are written.
    fn with_event_queue(mut self, sampler: Option<Sampler>) -> Self {
        if let Some(sampler) = sampler {
            self.event_queue = sampler.finish();
            self.events_while_converging = self
                .seconds
                .and_then(|converged| event_queue::published_by(&self.event_queue, converged));
        }
        self
    }

    fn with_outcome(mut self, outcome: &Outcome, tracker: &Tracker) -> Self {
        self.converged = tracker.converged();
        match outcome {
            Outcome::Converged(took) => self.seconds = Some(took.as_secs_f64()),
            Outcome::TimedOut => {
                self.note = Some(format!(
                    "timed out with {} of {} converged",
                    self.converged, self.n
                ))
            }
            Outcome::Died(log) => self.note = Some(format!("the contender exited:\n{log}")),
        }
        self
    }
}

/// Runs `spec` in a fresh namespace and, when `clean_up`, deletes the namespace afterwards,
/// whatever happened.
pub async fn run(env: &Env, spec: &RunSpec, index: usize, clean_up: bool) -> Result<RunResult> {
    let namespace = format!("bench-{index}");
    apiserver::create_namespace(&env.client, &namespace).await?;
    let result = match spec.scenario {
        Scenario::Backlog => backlog(env, spec, &namespace).await,
        Scenario::Burst => burst(env, spec, &namespace).await,
        Scenario::Steady => steady(env, spec, &namespace).await,
        Scenario::Memory => memory(env, spec, &namespace).await,
        Scenario::Restart => restart(env, spec, &namespace).await,
    };
    // A failed run is reported and the benchmark goes on; a namespace that cannot be cleaned
    // up would spoil every later run, so that stops it.
    if clean_up {
        apiserver::delete_namespace(&env.client, &namespace).await?;
    }
    Ok(result.unwrap_or_else(|e| {
        let mut failed = RunResult::new(spec);
        failed.note = Some(format!("{e:#}"));
        failed
    }))
}

/// Deletes the namespaces an interrupted benchmark left behind, so that no contender finds
/// their Foos.
pub async fn delete_leftovers(client: &Client) -> Result<()> {
    let namespaces = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
    for namespace in namespaces.list_metadata(&Default::default()).await? {
        let name = kube::ResourceExt::name_any(&namespace);
        if name.starts_with("bench-") {
            apiserver::delete_namespace(client, &name).await?;
        }
    }
    Ok(())
}

async fn backlog(env: &Env, spec: &RunSpec, namespace: &str) -> Result<RunResult> {
    let tracker = Tracker::start(&env.client, namespace).await?;
    let backlog = converge_backlog(env, spec, &tracker, namespace).await?;
    settle(&backlog.contender, &backlog.outcome).await?;
    let events = events_written(&tracker, &backlog.outcome, backlog.start).await;
    let stats = read_unless_died(&backlog.contender, &backlog.outcome)?;
    let mut result = RunResult::new(spec)
        .with_outcome(&backlog.outcome, &tracker)
        .with_stats(stats)
        .with_events(events)
        .with_event_queue(backlog.event_queue);
    result.count_requests(&RequestCounts::scrape(&env.client).await?, &backlog.counts_before);
    result.timeline = tracker.timeline(backlog.start);
    Ok(result)
}

/// A contender started on a backlog, once it converged (or failed to).
struct Backlog {
    contender: Running,
    outcome: Outcome,
    /// The request counters just before the contender started.
    counts_before: RequestCounts,
    start: Instant,
    /// Ours' Event queue, read until it is finished.
    event_queue: Option<Sampler>,
}

/// Creates the backlog, starts the contender and waits until it converged.
async fn converge_backlog(env: &Env, spec: &RunSpec, tracker: &Tracker, namespace: &str) -> Result<Backlog> {
    apiserver::create_foos(&env.client, namespace, spec.n).await?;
    tracker.wait_foos(spec.n).await?;
    let counts_before = RequestCounts::scrape(&env.client).await?;
    let start = Instant::now();
    let contender = env.start(spec)?;
    // Only where Events are measured: the other scenarios measure what ours spends alone.
    let event_queue = (spec.scenario == Scenario::Backlog)
        .then(|| contender.sample_event_queue(start))
        .flatten();
    let outcome = tracker
        .wait_converged(spec.n, start, env.options.timeout, &[&contender.0])
        .await;
    Ok(Backlog {
        contender,
        outcome,
        counts_before,
        start,
        event_queue,
    })
}

async fn burst(env: &Env, spec: &RunSpec, namespace: &str) -> Result<RunResult> {
    let tracker = Tracker::start(&env.client, namespace).await?;
    let contender = env.start(spec)?;
    proc_stats::wait_synced(contender.pid()).await?;
    let cpu_before = proc_stats::read(contender.pid())?.cpu_seconds;
    let before = RequestCounts::scrape(&env.client).await?;
    let start = Instant::now();
    let event_queue = contender.sample_event_queue(start);
    apiserver::create_foos(&env.client, namespace, spec.n).await?;
    let outcome = tracker
        .wait_converged(spec.n, start, env.options.timeout, &[&contender.0])
        .await;
    settle(&contender, &outcome).await?;
    let events = events_written(&tracker, &outcome, start).await;
    let mut stats = read_unless_died(&contender, &outcome)?;
    stats.cpu_seconds -= cpu_before;
    let mut result = RunResult::new(spec)
        .with_outcome(&outcome, &tracker)
        .with_stats(stats)
        .with_events(events)
        .with_event_queue(event_queue);
    result.count_requests(&RequestCounts::scrape(&env.client).await?, &before);
    remove_own_creates(&mut result.requests, "POST foos", spec.n);
    remove_own_creates(&mut result.etcd_writes, "create foos", spec.n);
    result.timeline = tracker.timeline(start);
    Ok(result)
}

/// The benchmark's own Foo creates (requests, or etcd writes: `key`) are in the burst's window;
/// no controller creates Foos.
pub(super) fn remove_own_creates(counts: &mut BTreeMap<String, u64>, key: &str, n: usize) {
    if let Some(creates) = counts.get_mut(key) {
        *creates = creates.saturating_sub(n as u64);
        if *creates == 0 {
            counts.remove(key);
        }
    }
}

impl RunResult {
    /// The requests and etcd writes between two scrapes.
    fn count_requests(&mut self, after: &RequestCounts, before: &RequestCounts) {
        self.requests = after.since(before);
        self.etcd_writes = after.etcd_writes_since(before);
    }
}

async fn steady(env: &Env, spec: &RunSpec, namespace: &str) -> Result<RunResult> {
    let tracker = Tracker::start(&env.client, namespace).await?;
    let contender = if spec.contender.is_rate_limited() {
        prepare_with_ceiling(env, spec, &tracker, namespace).await?;
        env.start(spec)?
    } else {
        let Backlog {
            contender, outcome, ..
        } = converge_backlog(env, spec, &tracker, namespace).await?;
        if !matches!(outcome, Outcome::Converged(_)) {
            return Ok(RunResult::new(spec).with_outcome(&outcome, &tracker));
        }
        contender
    };
    let (_, idle) = proc_stats::wait_quiet(contender.pid(), secs(5), secs(3), secs(60)).await?;
    let cpu_before = proc_stats::read(contender.pid())?.cpu_seconds;
    let before = RequestCounts::scrape(&env.client).await?;
    tokio::time::sleep(env.options.steady_window).await;
    if !contender.0.is_running() {
        bail!(
            "{} exited during the window:\n{}",
            spec.contender.label(),
            contender.0.log_tail(20)
        );
    }
    let mut stats = proc_stats::read(contender.pid())?;
    stats.cpu_seconds -= cpu_before;
    let mut result = RunResult::new(spec).with_stats(stats);
    result.converged = tracker.converged();
    result.seconds = Some(env.options.steady_window.as_secs_f64());
    result.count_requests(&RequestCounts::scrape(&env.client).await?, &before);
    result.note = match (spec.contender.is_rate_limited(), idle) {
        (true, _) => Some(ceiling_prepared(spec.n)),
        (false, false) => Some("still busy a minute after converging; the window began anyway".into()),
        (false, true) => None,
    };
    Ok(result)
}

/// The note of a rate-limited contender's untimed run.
fn ceiling_prepared(n: usize) -> String {
    format!(
        "started on Foos the ceiling converged: at 5 a second, its rate limit would take {} minutes",
        n.div_ceil(5 * 60)
    )
}

async fn memory(env: &Env, spec: &RunSpec, namespace: &str) -> Result<RunResult> {
    let tracker = Tracker::start(&env.client, namespace).await?;
    let (contender, start, counts_before) = if spec.contender.is_rate_limited() {
        prepare_with_ceiling(env, spec, &tracker, namespace).await?;
        let counts_before = RequestCounts::scrape(&env.client).await?;
        (env.start(spec)?, Instant::now(), counts_before)
    } else {
        let backlog = converge_backlog(env, spec, &tracker, namespace).await?;
        if !matches!(backlog.outcome, Outcome::Converged(_)) {
            return Ok(RunResult::new(spec).with_outcome(&backlog.outcome, &tracker));
        }
        (backlog.contender, backlog.start, backlog.counts_before)
    };
    let (_, idle) = proc_stats::wait_quiet(contender.pid(), secs(10), secs(5), MEMORY_IDLE_MAX).await?;
    if !contender.0.is_running() {
        bail!("{} exited:\n{}", spec.contender.label(), contender.0.log_tail(20));
    }
    let mut result = RunResult::new(spec).with_stats(proc_stats::read(contender.pid())?);
    result.converged = tracker.converged();
    result.seconds = Some(start.elapsed().as_secs_f64());
    result.count_requests(&RequestCounts::scrape(&env.client).await?, &counts_before);
    result.note = match (spec.contender.is_rate_limited(), idle) {
        (true, _) => Some(ceiling_prepared(spec.n)),
        (false, false) => Some("still busy two minutes after converging; memory read then".into()),
        (false, true) => None,
    };
    Ok(result)
}

async fn restart(env: &Env, spec: &RunSpec, namespace: &str) -> Result<RunResult> {
    let tracker = Tracker::start(&env.client, namespace).await?;
    let first = converge_backlog(env, spec, &tracker, namespace).await?;
    if !matches!(first.outcome, Outcome::Converged(_)) {
        return Ok(RunResult::new(spec).with_outcome(&first.outcome, &tracker));
    }
    settle(&first.contender, &first.outcome).await?;
    drop(first.contender);
    let list = apiserver::time_lists(&env.client, namespace).await?;

    let before = RequestCounts::scrape(&env.client).await?;
    let start = Instant::now();
    let contender = env.start(spec)?;
    contender.wait_ready(env.options.timeout).await?;
    let ready = start.elapsed();
    let (_, idle) = proc_stats::wait_quiet(contender.pid(), secs(5), secs(3), secs(60)).await?;
    let mut result = RunResult::new(spec).with_stats(proc_stats::read(contender.pid())?);
    result.converged = tracker.converged();
    result.seconds = Some(ready.as_secs_f64());
    result.list_seconds = Some(list.as_secs_f64());
    result.count_requests(&RequestCounts::scrape(&env.client).await?, &before);
    if !idle {
        result.note = Some("still busy a minute after it was ready; memory read then".into());
    }
    Ok(result)
}

/// How long the memory scenario waits for a converged contender to go idle.
const MEMORY_IDLE_MAX: Duration = Duration::from_secs(120);

/// N Foos, each with its Deployment and its status, written by the ceiling.
async fn prepare_with_ceiling(env: &Env, spec: &RunSpec, tracker: &Tracker, namespace: &str) -> Result<()> {
    apiserver::create_foos(&env.client, namespace, spec.n).await?;
    let ceiling = env.start_at(Contender::Ceiling, env.options.concurrency)?;
    match tracker
        .wait_converged(spec.n, Instant::now(), env.options.timeout, &[&ceiling.0])
        .await
    {
        Outcome::Converged(_) => Ok(()),
        other => bail!("the ceiling did not prepare {} converged Foos: {other:?}", spec.n),
    }
}

/// Waits, after convergence, until the contender has finished the work that trails it (ours and
/// sample-controller publish events in the background), at most `SETTLE_MAX`, so that its CPU
/// time and requests include that work.
async fn settle(contender: &Running, outcome: &Outcome) -> Result<()> {
    if matches!(outcome, Outcome::Converged(_)) {
        proc_stats::wait_quiet(contender.pid(), Duration::ZERO, secs(2), SETTLE_MAX).await?;
    }
    Ok(())
}

/// Once converged: the Events about Foos, and when the last was written (seconds since
/// `start`), once none was written for a while. A contender may write its Events after its
/// other writes, so they are waited for, and its CPU time and requests include them.
async fn events_written(
    tracker: &Tracker,
    outcome: &Outcome,
    start: Instant,
) -> Option<(EventsWritten, Instant)> {
    if !matches!(outcome, Outcome::Converged(_)) {
        return None;
    }
    Some((tracker.wait_events_written(secs(3), EVENTS_MAX).await, start))
}

/// How long a converged contender's Events are waited for, at most.
const EVENTS_MAX: Duration = Duration::from_secs(600);

/// A rate-limited contender never goes quiet (its resyncs queue more writes than it may send).
const SETTLE_MAX: Duration = Duration::from_secs(20);

/// The contender's numbers, unless it exited (then there are none to read).
fn read_unless_died(contender: &Running, outcome: &Outcome) -> Result<ProcStats> {
    match outcome {
        Outcome::Died(_) => Ok(ProcStats::default()),
        _ => proc_stats::read(contender.pid()),
    }
}

fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_is_ready_only_on_what_it_logged_itself() {
        let log = std::env::temp_dir().join(format!("bench-ready-{}.log", std::process::id()));
        std::fs::write(&log, "I Starting workers\n").unwrap();
        let from = std::fs::metadata(&log).unwrap().len();
        assert!(logged_since(&log, 0, "Starting workers"));
        assert!(
            !logged_since(&log, from, "Starting workers"),
            "the first start's line"
        );
        std::fs::write(
            &log,
            "I Starting workers\nI Waiting for caches\nI Starting workers\n",
        )
        .unwrap();
        assert!(logged_since(&log, from, "Starting workers"));
        let _ = std::fs::remove_file(log);
    }

    #[test]
    fn the_bursts_own_creates_are_not_counted() {
        let mut requests = BTreeMap::from([
            ("POST foos".to_string(), 50),
            ("POST deployments".to_string(), 50),
        ]);
        remove_own_creates(&mut requests, "POST foos", 50);
        assert_eq!(requests, BTreeMap::from([("POST deployments".to_string(), 50)]));
    }
}
