//! How the controllers' reconciles go, under controller-runtime's names: `controller_runtime_*`
//! and the `workqueue_*` families kube-runtime lets us see, beside our own errors by reason and
//! objects awaiting a retry.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::{ControllerLabels, Metrics, register};

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
struct ErrorLabels {
    controller: &'static str,
    reason: &'static str,
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

/// The families of this group.
pub(super) struct Reconciles {
    reconciles: Family<ResultLabels, Counter>,
    errors: Family<ControllerLabels, Counter>,
    terminal_errors: Family<ControllerLabels, Counter>,
    panics: Family<ControllerLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram>,
    max_concurrent: Family<ControllerLabels, Gauge>,
    retries: Family<QueueLabels, Counter>,
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    work_duration: Family<QueueLabels, Histogram>,
    error_reasons: Family<ErrorLabels, Counter>,
    awaiting_retry: Family<ControllerLabels, Gauge>,
    running: Arc<Running>,
}

impl Reconciles {
    pub(super) fn register(r: &mut Registry) -> Self {
        let running = Arc::new(Running::default());
        r.register_collector(Box::new(RunningCollector(running.clone())));
        Self {
            reconciles: register(
                r,
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller",
                Family::default(),
            ),
            errors: register(
                r,
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
                Family::default(),
            ),
            terminal_errors: register(
                r,
                "controller_runtime_terminal_reconcile_errors",
                "Total number of terminal reconciliation errors per controller (not retried: the object waits for a change)",
                Family::default(),
            ),
            panics: register(
                r,
                "controller_runtime_reconcile_panics",
                "Total number of reconciliation panics per controller",
                Family::default(),
            ),
            reconcile_time: register(
                r,
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                Family::new_with_constructor(reconcile_time_histogram as fn() -> Histogram),
            ),
            max_concurrent: register(
                r,
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                Family::default(),
            ),
            retries: register(
                r,
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                Family::default(),
            ),
            depth: register(
                r,
                "workqueue_depth",
                "Current depth of workqueue",
                Family::default(),
            ),
            adds: register(
                r,
                "workqueue_adds",
                "Total number of adds handled by workqueue",
                Family::default(),
            ),
            work_duration: register(
                r,
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                Family::new_with_constructor(work_duration_histogram as fn() -> Histogram),
            ),
            error_reasons: register(
                r,
                "sample_operator_reconcile_errors",
                "Failed reconciles by controller and reason",
                Family::default(),
            ),
            awaiting_retry: register(
                r,
                "sample_operator_objects_awaiting_retry",
                "Objects whose last reconcile failed and that wait for a retry with backoff",
                Family::default(),
            ),
            running,
        }
    }
}

impl Metrics {
    /// An object was queued for a reconcile (not one already waiting).
    pub fn queue_added(&self, controller: &'static str) {
        self.reconciles
            .adds
            .get_or_create(&QueueLabels::of(controller))
            .inc();
    }

    /// Objects waiting in the controller's queue now.
    pub fn set_queue_depth(&self, controller: &'static str, depth: usize) {
        self.reconciles
            .depth
            .get_or_create(&QueueLabels::of(controller))
            .set(depth as i64);
        self.reconciles.running.lock().waiting.insert(controller, depth);
    }

    /// Call when a controller starts: its series start at zero, as controller-runtime's do, so
    /// that a rate over them exists before the first reconcile.
    pub fn controller_started(&self, controller: &'static str, max_concurrent: u16) {
        let labels = ControllerLabels { controller };
        self.reconciles
            .max_concurrent
            .get_or_create(&labels)
            .set(i64::from(max_concurrent));
        // Adding zero creates the series.
        self.reconciles.errors.get_or_create(&labels).inc_by(0);
        self.reconciles
            .adds
            .get_or_create(&QueueLabels::of(controller))
            .inc_by(0);
        self.set_queue_depth(controller, 0);
        self.reconciles.terminal_errors.get_or_create(&labels).inc_by(0);
        self.reconciles.panics.get_or_create(&labels).inc_by(0);
        self.reconciles
            .retries
            .get_or_create(&QueueLabels::of(controller))
            .inc_by(0);
        for result in RESULTS {
            self.reconciles
                .reconciles
                .get_or_create(&ResultLabels { controller, result })
                .inc_by(0);
        }
        self.reconciles.running.lock().controllers.insert(controller);
    }

    /// Call when a reconcile starts; the guard records its duration and outcome.
    pub fn reconcile(self: &Arc<Self>, controller: &'static str) -> ReconcileTimer {
        let start = Instant::now();
        let id = self.reconciles.running.start(controller, start);
        ReconcileTimer {
            metrics: self.clone(),
            controller,
            start,
            id,
        }
    }

    /// Counts a failed reconcile that will be retried (controller-runtime's rate-limited add).
    pub fn retry(&self, controller: &'static str) {
        self.reconciles
            .retries
            .get_or_create(&QueueLabels::of(controller))
            .inc();
    }

    /// Reconciles running now, in every controller: while any runs, the controllers are writing
    /// what converges objects, and events wait their turn ([`super::super::events`]).
    pub fn reconciles_running(&self) -> usize {
        self.reconciles.running.lock().reconciles.len()
    }

    /// Objects waiting in every controller's work queue for a reconcile slot: while any wait,
    /// the controllers are behind, and Normal outcome events wait for them ([`super::super::events`]).
    pub fn work_waiting(&self) -> usize {
        self.reconciles.running.lock().waiting.values().sum()
    }

    /// How many objects of `controller` wait for a retry.
    pub fn set_awaiting_retry(&self, controller: &'static str, objects: usize) {
        self.reconciles
            .awaiting_retry
            .get_or_create(&ControllerLabels { controller })
            .set(objects as i64);
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
        let m = &self.metrics.reconciles;
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
        self.metrics.reconciles.running.finish(self.id);
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
    /// Objects waiting in each controller's work queue.
    waiting: HashMap<&'static str, usize>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::requests::RequestCounter;

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
}
