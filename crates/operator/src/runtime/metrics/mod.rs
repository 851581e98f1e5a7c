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
//!
//! Each file here holds one group of families, registers it, and adds the methods that feed it
//! to [`Metrics`]. A controller that needs a family of its own (the Network backends' requests)
//! asks for it with [`Metrics::family`], next to the code that counts into it.

mod api_requests;
mod events;
mod leader;
mod objects;
mod process;
mod reconciles;
mod sharding;
mod watches;

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric};
use prometheus_client::registry::Registry;

use super::requests::RequestCounter;
pub use process::ProcessStats;
pub use reconciles::{Outcome, ReconcileTimer};
pub use sharding::Filtering;

/// Series labelled by controller alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

/// Every metric of one operator process.
pub struct Metrics {
    registry: Mutex<Registry>,
    /// The families controllers added, by name.
    added: Mutex<HashMap<&'static str, Box<dyn Any + Send + Sync>>>,
    reconciles: reconciles::Reconciles,
    objects: objects::Objects,
    watches: watches::Watches,
    events: events::Events,
    leader: leader::Leader,
    sharding: sharding::Sharding,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// Registers `family` under `name` and hands it back, to keep each group's `register` a list.
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
        let mut registry = Registry::default();
        let metrics = Self {
            reconciles: reconciles::Reconciles::register(&mut registry),
            objects: objects::Objects::register(&mut registry),
            watches: watches::Watches::register(&mut registry),
            events: events::Events::register(&mut registry),
            leader: leader::Leader::register(&mut registry),
            sharding: sharding::Sharding::register(&mut registry),
            added: Mutex::default(),
            registry: Mutex::new(registry),
        };
        api_requests::register(&mut metrics.registry(), requests);
        process::register(&mut metrics.registry());
        metrics
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The metrics in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry()) {
            tracing::warn!(error = %e, "encoding metrics");
        }
        out
    }

    /// A family of a controller's own, registered under `name` (and `help`) on its first use;
    /// later calls with that name get the same family, so that two users of it in one process
    /// (two backends, a restarted controller) count into one series set.
    ///
    /// # Panics
    /// When `name` was registered with another type: two families may not share a name.
    pub fn family<M>(&self, name: &'static str, help: &'static str) -> M
    where
        M: Default + Clone + EncodeMetric + std::fmt::Debug + Send + Sync + 'static,
    {
        let mut added = self.added.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(family) = added.get(name) {
            return family
                .downcast_ref::<M>()
                .unwrap_or_else(|| panic!("metric family {name} registered twice with different types"))
                .clone();
        }
        let family = register(&mut self.registry(), name, help, M::default());
        added.insert(name, Box::new(family.clone()));
        family
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;

    #[test]
    fn a_family_added_twice_is_one_family() {
        type Requests = Family<Vec<(String, String)>, Counter>;
        let metrics = Metrics::new(RequestCounter::default());
        let labels = vec![("backend".to_owned(), "test".to_owned())];
        let first: Requests = metrics.family("sample_operator_test_requests", "Test requests");
        first.get_or_create(&labels).inc();
        let second: Requests = metrics.family("sample_operator_test_requests", "Test requests");
        second.get_or_create(&labels).inc();
        let text = metrics.render();
        assert_eq!(
            text.matches("# TYPE sample_operator_test_requests counter")
                .count(),
            1,
            "{text}"
        );
        assert!(
            text.contains(r#"sample_operator_test_requests_total{backend="test"} 2"#),
            "{text}"
        );
    }
}
