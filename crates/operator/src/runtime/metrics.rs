//! Prometheus metrics of the operator, served on `/metrics`.
//!
//! The families every controller-runtime operator exports come under their names, labels and
//! meaning, so that the dashboards and alerts written for those work here too:
//! `controller_runtime_*` (reconciles by result, errors, time, workers), the `workqueue_*`
//! families kube-runtime lets us see, client-go's `rest_client_requests_total`,
//! `leader_election_master_status` and the `process_*` figures. Beside them, the domain's own
//! under `sample_operator_*`: errors by reason, objects by their `Ready` condition, objects
//! waiting for a retry, watch restarts, events and requests to a network backend.
//!
//! kube-runtime keeps its queue to itself (kube-rs issue 1917): there is no
//! `workqueue_depth`, `workqueue_adds_total` or `workqueue_queue_duration_seconds`. What stands
//! in for them: `sample_operator_objects_awaiting_retry` (the part of the queue waiting out a
//! backoff) and `controller_runtime_active_workers` against
//! `controller_runtime_max_concurrent_reconciles` (a full pool means a queue is building up).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
#[cfg(test)]
use std::time::SystemTime;

use kube::Resource;
use kube::core::object::HasStatus;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::requests::RequestCounter;
use super::status::{Conditions, READY};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: &'static str,
    result: &'static str,
}

/// controller-runtime labels its queues by controller and by name, which are the same.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    controller: &'static str,
    name: &'static str,
}

impl QueueLabels {
    fn of(controller: &'static str) -> Self {
        Self {
            controller,
            name: controller,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendRequestLabels {
    backend: &'static str,
    method: &'static str,
    resource: &'static str,
    result: &'static str,
}

/// The values of `controller_runtime_reconcile_total`'s `result`, as controller-runtime counts
/// them (kube-runtime has no requeue without a delay, controller-runtime's `requeue`).
const RESULTS: [&str; 3] = ["success", "error", "requeue_after"];

/// How one reconcile ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done; the object waits for a change.
    Success,
    /// Done, and asked to be reconciled again after a while.
    RequeueAfter,
    /// Failed for `reason`; a terminal failure is not retried.
    Error { reason: &'static str, terminal: bool },
    /// Panicked: an error whose reason is `Panic`, retried like any other.
    Panic,
}

/// Every metric of one operator process.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ResultLabels, Counter>,
    errors: Family<ControllerLabels, Counter>,
    terminal_errors: Family<ControllerLabels, Counter>,
    panics: Family<ControllerLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram>,
    max_concurrent: Family<ControllerLabels, Gauge>,
    retries: Family<QueueLabels, Counter>,
    work_duration: Family<QueueLabels, Histogram>,
    running: Arc<Running>,
    leader: Family<LeaseLabels, Gauge>,
    error_reasons: Family<ErrorLabels, Counter>,
    readiness: Arc<Readiness>,
    awaiting_retry: Family<ControllerLabels, Gauge>,
    watch_restarts: Family<ResourceLabels, Counter>,
    watch_errors: Family<ResourceLabels, Counter>,
    events: Family<EventLabels, Counter>,
    backend_requests: Family<BackendRequestLabels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// controller-runtime's buckets for `controller_runtime_reconcile_time_seconds`, so that its
/// dashboards' quantiles read the same here.
const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25,
    1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0,
    50.0, 60.0,
];

fn reconcile_time_histogram() -> Histogram {
    Histogram::new(RECONCILE_TIME_BUCKETS)
}

/// client-go's workqueue buckets: 10 ns to 1000 s by powers of ten.
fn work_duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// Registers `family` under `name` and hands it back, to keep [`Metrics::new`] a list.
fn register<M: Clone + EncodeMetric + std::fmt::Debug + Send + Sync + 'static>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    pub fn new(requests: RequestCounter) -> Self {
        let mut r = Registry::default();
        let running = Arc::new(Running::default());
        let readiness = Arc::new(Readiness::default());
        r.register_collector(Box::new(RunningCollector(running.clone())));
        r.register_collector(Box::new(ReadinessCollector(readiness.clone())));
        r.register_collector(Box::new(ApiRequests(requests)));
        r.register_collector(Box::new(ProcessCollector));
        let metrics = Self {
            reconciles: register(
                &mut r,
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller",
                Family::default(),
            ),
            errors: register(
                &mut r,
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
                Family::default(),
            ),
            terminal_errors: register(
                &mut r,
                "controller_runtime_terminal_reconcile_errors",
                "Total number of terminal reconciliation errors per controller (not retried: the object waits for a change)",
                Family::default(),
            ),
            panics: register(
                &mut r,
                "controller_runtime_reconcile_panics",
                "Total number of reconciliation panics per controller",
                Family::default(),
            ),
            reconcile_time: register(
                &mut r,
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                Family::new_with_constructor(reconcile_time_histogram as fn() -> Histogram),
            ),
            max_concurrent: register(
                &mut r,
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                Family::default(),
            ),
            retries: register(
                &mut r,
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                Family::default(),
            ),
            work_duration: register(
                &mut r,
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                Family::new_with_constructor(work_duration_histogram as fn() -> Histogram),
            ),
            leader: register(
                &mut r,
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master (always 1 when running without leader election); 'name' is the lease",
                Family::default(),
            ),
            error_reasons: register(
                &mut r,
                "sample_operator_reconcile_errors",
                "Failed reconciles by controller and reason",
                Family::default(),
            ),
            awaiting_retry: register(
                &mut r,
                "sample_operator_objects_awaiting_retry",
                "Objects whose last reconcile failed and that wait for a retry with backoff",
                Family::default(),
            ),
            watch_restarts: register(
                &mut r,
                "sample_operator_watch_restarts",
                "Re-lists of a watched resource after its first list",
                Family::default(),
            ),
            watch_errors: register(
                &mut r,
                "sample_operator_watch_errors",
                "Errors of a watch, each followed by a retry with backoff",
                Family::default(),
            ),
            events: register(
                &mut r,
                "sample_operator_events",
                "Events by result: published or failed",
                Family::default(),
            ),
            backend_requests: register(
                &mut r,
                "sample_operator_backend_requests",
                "Requests to an external network backend (Neutron, Keystone) by method, resource and result: ok or the failure's reason",
                Family::default(),
            ),
            running,
            readiness,
            // Last: the families above registered into it as they were built.
            registry: r,
        };
        for result in ["published", "failed"] {
            metrics.events.get_or_create(&EventLabels { result }).inc_by(0);
        }
        metrics
    }

    /// The metrics in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "encoding metrics");
        }
        out
    }

    /// Call when a controller starts: its series start at zero, as controller-runtime's do, so
    /// that a rate over them exists before the first reconcile.
    pub fn controller_started(&self, controller: &'static str, max_concurrent: u16) {
        let labels = ControllerLabels { controller };
        self.max_concurrent
            .get_or_create(&labels)
            .set(i64::from(max_concurrent));
        // Adding zero creates the series.
        self.errors.get_or_create(&labels).inc_by(0);
        self.terminal_errors.get_or_create(&labels).inc_by(0);
        self.panics.get_or_create(&labels).inc_by(0);
        self.retries.get_or_create(&QueueLabels::of(controller)).inc_by(0);
        for result in RESULTS {
            self.reconciles
                .get_or_create(&ResultLabels { controller, result })
                .inc_by(0);
        }
        self.running.lock().controllers.insert(controller);
    }

    /// Call when a reconcile starts; the guard records its duration and outcome.
    pub fn reconcile(self: &Arc<Self>, controller: &'static str) -> ReconcileTimer {
        let start = Instant::now();
        let id = self.running.start(controller, start);
        ReconcileTimer {
            metrics: self.clone(),
            controller,
            start,
            id,
        }
    }

    /// Counts a failed reconcile that will be retried (controller-runtime's rate-limited add).
    pub fn retry(&self, controller: &'static str) {
        self.retries.get_or_create(&QueueLabels::of(controller)).inc();
    }

    /// How many objects of `controller` wait for a retry.
    pub fn set_awaiting_retry(&self, controller: &'static str, objects: usize) {
        self.awaiting_retry
            .get_or_create(&ControllerLabels { controller })
            .set(objects as i64);
    }

    /// Whether this instance holds the lease `name`.
    pub fn set_leader(&self, name: &str, leader: bool) {
        self.leader
            .get_or_create(&LeaseLabels {
                name: name.to_owned(),
            })
            .set(i64::from(leader));
    }

    /// Counts the objects in `store` by their `Ready` condition at each scrape, as
    /// `sample_operator_objects{controller, ready}`.
    pub fn observe_readiness<K>(&self, controller: &'static str, store: Store<K>)
    where
        K: Resource<DynamicType = ()> + HasStatus + Clone + Send + Sync + 'static,
        K::Status: Conditions,
    {
        let count = move || {
            let mut counts = ReadyCounts::default();
            for object in store.state() {
                let ready = object
                    .status()
                    .and_then(|s| sample_operator_api::conditions::find(s.conditions(), READY))
                    .map(|c| c.status.as_str());
                match ready {
                    Some("True") => counts.ready += 1,
                    Some("False") => counts.not_ready += 1,
                    _ => counts.unknown += 1,
                }
            }
            counts
        };
        self.readiness.lock().push((controller, Box::new(count)));
    }

    /// A callback for `.inspect(...)` on a watcher stream that counts its re-lists (every list
    /// after the first) and errors under `resource`.
    pub fn watch_observer<K>(
        self: &Arc<Self>,
        resource: &'static str,
    ) -> impl FnMut(&Result<kube::runtime::watcher::Event<K>, kube::runtime::watcher::Error>) + Send + 'static
    {
        // Both series from the start, at zero, so that a rate over them is 0 rather than empty.
        let labels = ResourceLabels { resource };
        self.watch_restarts.get_or_create(&labels).inc_by(0);
        self.watch_errors.get_or_create(&labels).inc_by(0);
        let metrics = self.clone();
        let mut listed = false;
        move |event| match event {
            Ok(kube::runtime::watcher::Event::Init) => {
                if listed {
                    metrics.watch_restarted(resource);
                }
                listed = true;
            }
            Ok(_) => {}
            Err(_) => metrics.watch_failed(resource),
        }
    }

    pub fn watch_restarted(&self, resource: &'static str) {
        self.watch_restarts
            .get_or_create(&ResourceLabels { resource })
            .inc();
    }

    pub fn watch_failed(&self, resource: &'static str) {
        self.watch_errors
            .get_or_create(&ResourceLabels { resource })
            .inc();
    }

    /// Counts a request to an external backend; `result` is `ok` or the failure's reason.
    pub fn backend_request(
        &self,
        backend: &'static str,
        method: &'static str,
        resource: &'static str,
        result: &'static str,
    ) {
        self.backend_requests
            .get_or_create(&BackendRequestLabels {
                backend,
                method,
                resource,
                result,
            })
            .inc();
    }

    /// Counts an event: `published` or `failed`.
    pub fn event(&self, result: &'static str) {
        self.events.get_or_create(&EventLabels { result }).inc();
    }
}

/// Measures one reconcile; [`ReconcileTimer::finish`] records the outcome.
pub struct ReconcileTimer {
    metrics: Arc<Metrics>,
    controller: &'static str,
    start: Instant,
    id: u64,
}

impl ReconcileTimer {
    pub fn finish(self, outcome: Outcome) {
        let controller = self.controller;
        let labels = ControllerLabels { controller };
        let m = &self.metrics;
        let (result, failure) = match outcome {
            Outcome::Success => ("success", None),
            Outcome::RequeueAfter => ("requeue_after", None),
            Outcome::Panic => {
                m.panics.get_or_create(&labels).inc();
                ("error", Some(("Panic", false)))
            }
            Outcome::Error { reason, terminal } => ("error", Some((reason, terminal))),
        };
        if let Some((reason, terminal)) = failure {
            if terminal {
                m.terminal_errors.get_or_create(&labels).inc();
            }
            m.errors.get_or_create(&labels).inc();
            m.error_reasons
                .get_or_create(&ErrorLabels { controller, reason })
                .inc();
        }
        m.reconciles
            .get_or_create(&ResultLabels { controller, result })
            .inc();
        let seconds = self.start.elapsed().as_secs_f64();
        m.reconcile_time.get_or_create(&labels).observe(seconds);
        m.work_duration
            .get_or_create(&QueueLabels::of(controller))
            .observe(seconds);
    }
}

impl Drop for ReconcileTimer {
    /// Also when the reconcile was dropped mid-way (the controller stopped with it in flight):
    /// it then counts in no result, as controller-runtime never sees such a reconcile end.
    fn drop(&mut self) {
        self.metrics.running.finish(self.id);
    }
}

/// The reconciles running now, for the workqueue's gauges of unfinished work.
#[derive(Debug, Default)]
struct Running(Mutex<RunningState>);

#[derive(Debug, Default)]
struct RunningState {
    /// Every controller started, so that idle ones report zero.
    controllers: BTreeSet<&'static str>,
    next_id: u64,
    /// At most the controllers' concurrency: a list is the cheapest set.
    reconciles: Vec<(u64, &'static str, Instant)>,
}

impl Running {
    fn lock(&self) -> MutexGuard<'_, RunningState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn start(&self, controller: &'static str, at: Instant) -> u64 {
        let mut state = self.lock();
        state.next_id += 1;
        let id = state.next_id;
        state.controllers.insert(controller);
        state.reconciles.push((id, controller, at));
        id
    }

    fn finish(&self, id: u64) {
        let mut state = self.lock();
        if let Some(i) = state.reconciles.iter().position(|r| r.0 == id) {
            state.reconciles.swap_remove(i);
        }
    }
}

/// What one controller's running reconciles add up to at a scrape.
struct RunningRow {
    controller: &'static str,
    workers: i64,
    unfinished_seconds: f64,
    longest_seconds: f64,
}

/// Encodes `controller_runtime_active_workers`, `workqueue_unfinished_work_seconds` and
/// `workqueue_longest_running_processor_seconds` from the reconciles running at the scrape.
#[derive(Debug)]
struct RunningCollector(Arc<Running>);

impl RunningCollector {
    fn rows(&self) -> Vec<RunningRow> {
        let now = Instant::now();
        let state = self.0.lock();
        let rows = state.controllers.iter().map(|&controller| {
            let ages = state
                .reconciles
                .iter()
                .filter(|r| r.1 == controller)
                .map(|r| now.duration_since(r.2).as_secs_f64());
            ages.fold(
                RunningRow {
                    controller,
                    workers: 0,
                    unfinished_seconds: 0.0,
                    longest_seconds: 0.0,
                },
                |row, age| RunningRow {
                    workers: row.workers + 1,
                    unfinished_seconds: row.unfinished_seconds + age,
                    longest_seconds: row.longest_seconds.max(age),
                    ..row
                },
            )
        });
        rows.collect()
    }
}

impl Collector for RunningCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows = self.rows();
        let mut workers = encoder.encode_descriptor(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            None,
            MetricType::Gauge,
        )?;
        for row in &rows {
            let labels = ControllerLabels {
                controller: row.controller,
            };
            ConstGauge::new(row.workers).encode(workers.encode_family(&labels)?)?;
        }
        for (name, help, seconds) in [
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads",
                rows.iter().map(|r| r.unfinished_seconds).collect::<Vec<_>>(),
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
                rows.iter().map(|r| r.longest_seconds).collect(),
            ),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (row, value) in rows.iter().zip(seconds) {
                let labels = QueueLabels::of(row.controller);
                ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// Objects of a controller by their `Ready` condition.
#[derive(Debug, Default)]
struct ReadyCounts {
    ready: u64,
    not_ready: u64,
    unknown: u64,
}

type CountReady = Box<dyn Fn() -> ReadyCounts + Send + Sync>;

#[derive(Default)]
struct Readiness(Mutex<Vec<(&'static str, CountReady)>>);

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Readiness")
    }
}

impl Readiness {
    fn lock(&self) -> MutexGuard<'_, Vec<(&'static str, CountReady)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Debug)]
struct ReadinessCollector(Arc<Readiness>);

impl Collector for ReadinessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows: Vec<(&'static str, ReadyCounts)> = self
            .0
            .lock()
            .iter()
            .map(|(controller, count)| (*controller, count()))
            .collect();
        let mut family = encoder.encode_descriptor(
            "sample_operator_objects",
            "Objects of each controller's kind by the status of their Ready condition (Unknown: no status yet)",
            None,
            MetricType::Gauge,
        )?;
        for (controller, counts) in rows {
            for (ready, value) in [
                ("True", counts.ready),
                ("False", counts.not_ready),
                ("Unknown", counts.unknown),
            ] {
                let labels = [("controller", controller), ("ready", ready)];
                ConstGauge::new(value as i64).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// The operator's requests to the API server: client-go's `rest_client_requests_total`.
#[derive(Debug)]
struct ApiRequests(RequestCounter);

impl Collector for ApiRequests {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            None,
            MetricType::Counter,
        )?;
        for (key, value) in self.0.series() {
            let labels = [
                ("code", key.code.as_str()),
                ("host", key.host.as_str()),
                ("method", key.method.as_str()),
            ];
            ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// Process figures from /proc, under the names of Prometheus' process collector.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(process) = ProcessStats::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(process.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            MetricType::Counter,
        )?)?;
        for (name, help, value) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                process.resident_bytes as f64,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                process.virtual_bytes as f64,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                process.open_fds as f64,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                process.max_fds as f64,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                process.start_time_seconds,
            ),
            (
                "sample_operator_resident_memory_peak_bytes",
                "Peak resident memory size in bytes since the process started (VmHWM)",
                process.peak_resident_bytes as f64,
            ),
        ] {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        Ok(())
    }
}

/// What /proc says about this process.
#[derive(Debug, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub peak_resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
    pub max_fds: u64,
    pub start_time_seconds: f64,
}

/// The /proc files [`ProcessStats`] is read from.
struct ProcFiles<'a> {
    /// `/proc/self/stat`
    stat: &'a str,
    /// `/proc/self/status`
    status: &'a str,
    /// `/proc/self/limits`
    limits: &'a str,
    /// `/proc/stat`, for the boot time
    system_stat: &'a str,
}

impl ProcessStats {
    pub fn read() -> Option<Self> {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let (stat, status) = (read("/proc/self/stat")?, read("/proc/self/status")?);
        let (limits, system_stat) = (read("/proc/self/limits")?, read("/proc/stat")?);
        let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .unwrap_or(100) as f64;
        let files = ProcFiles {
            stat: &stat,
            status: &status,
            limits: &limits,
            system_stat: &system_stat,
        };
        let mut stats = Self::parse(&files, ticks)?;
        stats.open_fds = std::fs::read_dir("/proc/self/fd")
            .map(|d| d.count() as u64)
            .unwrap_or(0);
        Some(stats)
    }

    fn parse(files: &ProcFiles<'_>, ticks_per_second: f64) -> Option<Self> {
        // Fields after the parenthesised command name, which may contain spaces.
        let fields: Vec<&str> = files.stat.rsplit_once(')')?.1.split_whitespace().collect();
        let field = |n: usize| -> Option<f64> { fields.get(n)?.parse().ok() };
        // utime, stime and starttime are fields 14, 15 and 22 of the whole line: 12, 13 and
        // 20 after the name, counted from 1.
        let (utime, stime, started) = (field(11)?, field(12)?, field(19)?);
        let kib = |key: &str| {
            files
                .status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .map(|v| v * 1024)
        };
        let boot_time: f64 = files
            .system_stat
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()?;
        // "Max open files  <soft>  <hard>  files": the soft limit is the one that bites.
        let max_fds = files
            .limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|soft| soft.parse().ok())
            .unwrap_or(0);
        Some(Self {
            cpu_seconds: (utime + stime) / ticks_per_second,
            resident_bytes: kib("VmRSS:").unwrap_or(0),
            peak_resident_bytes: kib("VmHWM:").unwrap_or(0),
            virtual_bytes: kib("VmSize:").unwrap_or(0),
            open_fds: 0,
            max_fds,
            start_time_seconds: boot_time + started / ticks_per_second,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let files = ProcFiles {
            stat: "1234 (tokio (worker)) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 1500 1000 200",
            status: "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nVmSize:\t 4096 kB\n",
            limits: "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n",
            system_stat: "cpu  1 2 3\nbtime 1700000000\nprocesses 10\n",
        };
        let stats = ProcessStats::parse(&files, 100.0).unwrap();
        assert_eq!(stats.cpu_seconds, 3.0);
        assert_eq!(
            (
                stats.resident_bytes,
                stats.peak_resident_bytes,
                stats.virtual_bytes
            ),
            (1 << 20, 2 << 20, 4 << 20)
        );
        assert_eq!(stats.max_fds, 1024);
        assert_eq!(stats.start_time_seconds, 1_700_000_015.0);
    }

    #[test]
    fn reads_this_process() {
        let stats = ProcessStats::read().unwrap();
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(stats.start_time_seconds <= now && stats.start_time_seconds > now - 3600.0);
        assert!(stats.open_fds > 0 && stats.max_fds >= stats.open_fds);
        assert!(stats.resident_bytes > 0);
    }

    #[test]
    fn counts_reconciles_as_controller_runtime_does() {
        let metrics = Arc::new(Metrics::new(RequestCounter::default()));
        metrics.controller_started("foo", 16);
        metrics.reconcile("foo").finish(Outcome::Success);
        metrics.reconcile("foo").finish(Outcome::RequeueAfter);
        metrics.reconcile("foo").finish(Outcome::Error {
            reason: "ApplyDeployment",
            terminal: false,
        });
        metrics.reconcile("foo").finish(Outcome::Error {
            reason: "InvalidSpec",
            terminal: true,
        });
        metrics.retry("foo");
        let running = metrics.reconcile("foo");
        // Stopped mid-way: no result, and no longer running.
        drop(metrics.reconcile("foo"));
        metrics.set_leader("sample-operator", true);
        metrics.watch_restarted("foos");
        metrics.event("published");
        let text = metrics.render();
        for line in [
            r#"controller_runtime_reconcile_total{controller="foo",result="success"} 1"#,
            r#"controller_runtime_reconcile_total{controller="foo",result="requeue_after"} 1"#,
            r#"controller_runtime_reconcile_total{controller="foo",result="error"} 2"#,
            r#"controller_runtime_reconcile_errors_total{controller="foo"} 2"#,
            r#"controller_runtime_terminal_reconcile_errors_total{controller="foo"} 1"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="foo"} 4"#,
            r#"controller_runtime_reconcile_time_seconds_bucket{le="60.0",controller="foo"} 4"#,
            r#"controller_runtime_max_concurrent_reconciles{controller="foo"} 16"#,
            r#"controller_runtime_active_workers{controller="foo"} 1"#,
            r#"workqueue_retries_total{controller="foo",name="foo"} 1"#,
            r#"workqueue_work_duration_seconds_count{controller="foo",name="foo"} 4"#,
            r#"sample_operator_reconcile_errors_total{controller="foo",reason="ApplyDeployment"} 1"#,
            r#"leader_election_master_status{name="sample-operator"} 1"#,
            r#"sample_operator_watch_restarts_total{resource="foos"} 1"#,
            r#"sample_operator_events_total{result="published"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        for family in [
            "workqueue_unfinished_work_seconds{controller=\"foo\",name=\"foo\"}",
            "workqueue_longest_running_processor_seconds{controller=\"foo\",name=\"foo\"}",
            "process_resident_memory_bytes",
            "process_cpu_seconds_total",
            "process_start_time_seconds",
        ] {
            assert!(text.contains(family), "missing {family} in\n{text}");
        }
        drop(running);
        let text = metrics.render();
        assert!(
            text.contains(r#"workqueue_longest_running_processor_seconds{controller="foo",name="foo"} 0.0"#),
            "{text}"
        );
        assert!(text.contains(r#"controller_runtime_active_workers{controller="foo"} 0"#));
    }

    #[tokio::test]
    async fn counts_objects_by_their_ready_condition() {
        use kube::runtime::reflector::store;
        use kube::runtime::watcher::Event;
        use sample_operator_api::{Foo, FooSpec, FooStatus};

        let (reader, mut writer) = store::<Foo>();
        let foo = |name: &str, ready: Option<&str>| {
            let spec = FooSpec {
                deployment_name: name.into(),
                replicas: None,
            };
            let mut foo = Foo::new(name, spec);
            foo.metadata.namespace = Some("default".into());
            foo.status = ready.map(|status| FooStatus {
                conditions: vec![super::super::status::ready(
                    status == "True",
                    "Reason",
                    String::new(),
                    None,
                    &[],
                )],
                ..FooStatus::default()
            });
            foo
        };
        for object in [
            foo("a", Some("True")),
            foo("b", Some("True")),
            foo("c", Some("False")),
            foo("d", None),
        ] {
            writer.apply_watcher_event(&Event::Apply(object));
        }
        let metrics = Metrics::new(RequestCounter::default());
        metrics.observe_readiness("foo", reader);
        let text = metrics.render();
        for line in [
            r#"sample_operator_objects{controller="foo",ready="True"} 2"#,
            r#"sample_operator_objects{controller="foo",ready="False"} 1"#,
            r#"sample_operator_objects{controller="foo",ready="Unknown"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn requests_are_encoded_by_code_host_and_method() {
        let requests = RequestCounter::default();
        let metrics = Metrics::new(requests.clone());
        requests.count("127.0.0.1:6443", &http::Method::PATCH, "409".into());
        requests.count("127.0.0.1:6443", &http::Method::PATCH, "409".into());
        requests.count(
            "127.0.0.1:6443",
            &http::Method::GET,
            super::super::requests::NO_RESPONSE.into(),
        );
        let text = metrics.render();
        for line in [
            r#"rest_client_requests_total{code="409",host="127.0.0.1:6443",method="PATCH"} 2"#,
            r#"rest_client_requests_total{code="<error>",host="127.0.0.1:6443",method="GET"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    /// The table of metrics in docs/operating.md, as (name, type) pairs.
    fn readme_table() -> Vec<(String, String)> {
        let readme = include_str!("../../../../docs/operating.md");
        let table = readme
            .split_once("<!-- metrics-table")
            .expect("the README's metrics table")
            .1;
        table
            .lines()
            .skip(3) // the marker's line, the header, the separator
            .take_while(|line| line.starts_with('|'))
            .map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                (cells[1].trim_matches('`').to_owned(), cells[2].to_owned())
            })
            .collect()
    }

    #[test]
    fn the_readme_lists_every_exported_metric_and_nothing_else() {
        // Families with labels appear with their first series: give each one.
        let metrics = Arc::new(Metrics::new(RequestCounter::default()));
        metrics.controller_started("foo", 1);
        metrics.reconcile("foo").finish(Outcome::Success);
        metrics.reconcile("foo").finish(Outcome::Panic);
        metrics.set_awaiting_retry("foo", 0);
        metrics.set_leader("sample-operator", true);
        metrics.watch_restarted("foos");
        metrics.watch_failed("foos");
        metrics.backend_request("neutron", "GET", "networks", "ok");
        let text = metrics.render();
        let mut exported: Vec<(String, String)> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .map(|line| {
                let (name, type_) = line.split_once(' ').unwrap();
                // OpenMetrics names a counter's family without the `_total` of its samples.
                let name = match type_ {
                    "counter" => format!("{name}_total"),
                    _ => name.to_owned(),
                };
                (name, type_.to_owned())
            })
            .collect();
        exported.sort();
        let mut documented = readme_table();
        documented.sort();
        assert_eq!(
            exported, documented,
            "/metrics (left) and the README's table (right) differ"
        );
    }
}
