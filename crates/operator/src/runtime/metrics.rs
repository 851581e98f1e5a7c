//! Prometheus metrics of the operator, served on `/metrics`.
//!
//! Reconciles by controller and result, their duration, errors by reason, reconciles in flight
//! and objects waiting for a retry, leadership, watch restarts and errors, the operator's own API
//! requests by method, and process figures (CPU, memory, file descriptors).
//!
//! kube-runtime does not expose the depth of its internal queue (kube-rs issue 1917); objects
//! waiting for a retry after an error are the part of it the operator can see.

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::requests::RequestCounter;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: &'static str,
    result: &'static str,
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

/// Every metric of one operator process.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ResultLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    duration: Family<ControllerLabels, Histogram>,
    in_flight: Family<ControllerLabels, Gauge>,
    awaiting_retry: Family<ControllerLabels, Gauge>,
    leader: Gauge,
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

fn duration_histogram() -> Histogram {
    // 1 ms to about 33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

impl Metrics {
    pub fn new(requests: RequestCounter) -> Self {
        let mut registry = Registry::with_prefix("sample_operator");
        let reconciles = Family::<ResultLabels, Counter>::default();
        registry.register(
            "reconciles",
            "Reconciles by controller and result",
            reconciles.clone(),
        );
        let errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Failed reconciles by controller and reason",
            errors.clone(),
        );
        let duration = Family::<ControllerLabels, Histogram>::new_with_constructor(
            duration_histogram as fn() -> Histogram,
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of reconciles",
            duration.clone(),
        );
        let in_flight = Family::<ControllerLabels, Gauge>::default();
        registry.register(
            "reconciles_in_flight",
            "Reconciles running now",
            in_flight.clone(),
        );
        let awaiting_retry = Family::<ControllerLabels, Gauge>::default();
        registry.register(
            "objects_awaiting_retry",
            "Objects whose last reconcile failed and that wait for a retry with backoff",
            awaiting_retry.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this instance holds the leader lease (or runs without election)",
            leader.clone(),
        );
        let watch_restarts = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "watch_restarts",
            "Re-lists of a watched resource after its first list",
            watch_restarts.clone(),
        );
        let watch_errors = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "watch_errors",
            "Errors of a watch, each followed by a retry with backoff",
            watch_errors.clone(),
        );
        let events = Family::<EventLabels, Counter>::default();
        registry.register("events", "Events by result: published or failed", events.clone());
        let backend_requests = Family::<BackendRequestLabels, Counter>::default();
        registry.register(
            "backend_requests",
            "Requests to an external network backend (Neutron, Keystone) by method, resource and result: ok or the failure's reason",
            backend_requests.clone(),
        );
        registry.register_collector(Box::new(ApiRequests(requests)));
        registry.register_collector(Box::new(ProcessCollector {
            start: Instant::now(),
        }));
        Self {
            registry,
            reconciles,
            errors,
            duration,
            in_flight,
            awaiting_retry,
            leader,
            watch_restarts,
            watch_errors,
            events,
            backend_requests,
        }
    }

    /// The metrics in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "encoding metrics");
        }
        out
    }

    /// Call when a reconcile starts; the guard records its duration and outcome.
    pub fn reconcile(self: &Arc<Self>, controller: &'static str) -> ReconcileTimer {
        self.in_flight
            .get_or_create(&ControllerLabels { controller })
            .inc();
        ReconcileTimer {
            metrics: self.clone(),
            controller,
            start: Instant::now(),
            done: false,
        }
    }

    /// How many objects of `controller` wait for a retry.
    pub fn set_awaiting_retry(&self, controller: &'static str, objects: usize) {
        self.awaiting_retry
            .get_or_create(&ControllerLabels { controller })
            .set(objects as i64);
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// A callback for `.inspect(...)` on a watcher stream that counts its re-lists (every list
    /// after the first) and errors under `resource`.
    pub fn watch_observer<K>(
        self: &Arc<Self>,
        resource: &'static str,
    ) -> impl FnMut(&Result<kube::runtime::watcher::Event<K>, kube::runtime::watcher::Error>) + Send + 'static
    {
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
    done: bool,
}

impl ReconcileTimer {
    /// Records the result: `Ok`, or the error's reason.
    pub fn finish(mut self, outcome: Result<(), &'static str>) {
        let controller = self.controller;
        let result = match outcome {
            Ok(()) => "success",
            Err(reason) => {
                self.metrics
                    .errors
                    .get_or_create(&ErrorLabels { controller, reason })
                    .inc();
                "error"
            }
        };
        self.metrics
            .reconciles
            .get_or_create(&ResultLabels { controller, result })
            .inc();
        self.done = true;
    }
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        let labels = ControllerLabels {
            controller: self.controller,
        };
        self.metrics.in_flight.get_or_create(&labels).dec();
        self.metrics
            .duration
            .get_or_create(&labels)
            .observe(self.start.elapsed().as_secs_f64());
        if !self.done {
            // Dropped mid-way: the controller was stopped with the reconcile in flight.
            let labels = ResultLabels {
                controller: self.controller,
                result: "cancelled",
            };
            self.metrics.reconciles.get_or_create(&labels).inc();
        }
    }
}

/// The operator's requests to the API server, by HTTP method.
#[derive(Debug)]
struct ApiRequests(RequestCounter);

impl Collector for ApiRequests {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counts = self.0.snapshot();
        let mut family = encoder.encode_descriptor(
            "api_requests",
            "Requests this operator sent to the API server, by method (GET includes lists and watches)",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (method, value) in [
            ("GET", counts.get),
            ("POST", counts.post),
            ("PUT", counts.put),
            ("PATCH", counts.patch),
            ("DELETE", counts.delete),
            ("OTHER", counts.other),
        ] {
            let labels = [("method", method)];
            ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// Process figures from /proc, under the conventional `process_` names.
#[derive(Debug)]
struct ProcessCollector {
    start: Instant,
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(process) = ProcessStats::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(process.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "User and system CPU time",
            None,
            cpu.metric_type(),
        )?)?;
        for (name, help, value) in [
            (
                "process_resident_memory_bytes",
                "Resident memory",
                process.resident_bytes,
            ),
            (
                "process_resident_memory_peak_bytes",
                "Peak resident memory (VmHWM)",
                process.peak_resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory",
                process.virtual_bytes,
            ),
            ("process_open_fds", "Open file descriptors", process.open_fds),
        ] {
            let gauge = ConstGauge::new(value as i64);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        let uptime = ConstGauge::new(self.start.elapsed().as_secs_f64());
        uptime.encode(encoder.encode_descriptor(
            "process_uptime_seconds",
            "Seconds since the metrics started",
            None,
            uptime.metric_type(),
        )?)?;
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
}

impl ProcessStats {
    pub fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .unwrap_or(100) as f64;
        let mut stats = Self::parse(&stat, &status, ticks)?;
        stats.open_fds = std::fs::read_dir("/proc/self/fd")
            .map(|d| d.count() as u64)
            .unwrap_or(0);
        Some(stats)
    }

    /// Parses `/proc/<pid>/stat` and `/proc/<pid>/status`.
    fn parse(stat: &str, status: &str, ticks_per_second: f64) -> Option<Self> {
        // Fields after the parenthesised command name, which may contain spaces.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
        let utime: f64 = fields.get(11)?.parse().ok()?;
        let stime: f64 = fields.get(12)?.parse().ok()?;
        let kib = |key: &str| {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .map(|v| v * 1024)
        };
        Some(Self {
            cpu_seconds: (utime + stime) / ticks_per_second,
            resident_bytes: kib("VmRSS:").unwrap_or(0),
            peak_resident_bytes: kib("VmHWM:").unwrap_or(0),
            virtual_bytes: kib("VmSize:").unwrap_or(0),
            open_fds: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat =
            "1234 (tokio (worker)) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 1000 200";
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nVmSize:\t 4096 kB\n";
        let stats = ProcessStats::parse(stat, status, 100.0).unwrap();
        assert_eq!(stats.cpu_seconds, 3.0);
        assert_eq!(
            (
                stats.resident_bytes,
                stats.peak_resident_bytes,
                stats.virtual_bytes
            ),
            (1 << 20, 2 << 20, 4 << 20)
        );
    }

    #[test]
    fn renders_reconciles_errors_requests_and_process_figures() {
        let requests = RequestCounter::default();
        let metrics = Arc::new(Metrics::new(requests));
        metrics.reconcile("foo").finish(Ok(()));
        metrics.reconcile("foo").finish(Err("ApplyDeployment"));
        drop(metrics.reconcile("foo"));
        metrics.set_leader(true);
        metrics.watch_restarted("foos");
        metrics.event("published");
        let text = metrics.render();
        for line in [
            r#"sample_operator_reconciles_total{controller="foo",result="success"} 1"#,
            r#"sample_operator_reconciles_total{controller="foo",result="error"} 1"#,
            r#"sample_operator_reconciles_total{controller="foo",result="cancelled"} 1"#,
            r#"sample_operator_reconcile_errors_total{controller="foo",reason="ApplyDeployment"} 1"#,
            r#"sample_operator_reconcile_duration_seconds_count{controller="foo"} 3"#,
            r#"sample_operator_reconciles_in_flight{controller="foo"} 0"#,
            "sample_operator_leader 1",
            r#"sample_operator_watch_restarts_total{resource="foos"} 1"#,
            r#"sample_operator_events_total{result="published"} 1"#,
            r#"sample_operator_api_requests_total{method="GET"} 0"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert!(
            text.contains("sample_operator_process_resident_memory_bytes"),
            "{text}"
        );
    }
}
